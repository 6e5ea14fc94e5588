import CourierCore
import CourierPKI
import Crypto
import Foundation
import Synchronization

/// A virtual token as a dictionary key: its environment, its app's number
/// and its 32 bytes in four words (no array of its own), 40 bytes. Hashed
/// whole: a provider chooses the bytes of tokens its app accepts on first
/// use, so no part of them may decide a bucket alone.
struct VirtualTokenKey: Hashable {
    var word0: UInt64
    var word1: UInt64
    var word2: UInt64
    var word3: UInt64
    var app: AppNumber
    var environment: Environment

    /// Nil for a token that is not of Apple's length.
    init?(environment: Environment, app: AppNumber, token: some Collection<UInt8>) {
        guard token.count == VirtualToken.length else { return nil }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { raw in
            if token.withContiguousStorageIfAvailable({ raw.copyMemory(from: UnsafeRawBufferPointer($0)) }) == nil {
                for (index, byte) in token.enumerated() { raw[index] = byte }
            }
        }
        (word0, word1, word2, word3) = words
        self.app = app
        self.environment = environment
    }
}

/// What is kept of a virtual token, 24 bytes beside its key (pinned by
/// `VirtualDevicesTests`); its rate window, while one is open, is kept
/// apart (`VirtualDevices.State.windows`), so that a million tokens
/// registered and never pushed to hold no window.
struct VirtualEntry {
    /// The virtual device's id (`VirtualDevices.deviceID`): what a held
    /// notification is stored under, and a silent budget kept by.
    var deviceID: UInt64
    /// When it was uninstalled, in milliseconds; `Int64.min` while it is installed.
    var uninstalledMillis: Int64
    var offline: Bool

    init(_ token: VirtualToken, deviceID: UInt64) {
        self.deviceID = deviceID
        uninstalledMillis = token.uninstalledAt.map { Int64($0.storeMillis) } ?? .min
        offline = token.offline
    }

    var uninstalledAt: Date? { uninstalledMillis == .min ? nil : Date(storeMillis: Int(uninstalledMillis)) }
}

/// Every virtual token (docs/virtual-devices.md), kept in memory: loaded
/// from the store at start, and again for an app whenever its tokens
/// change here or on another node. A push to a token that did not open
/// is looked up here without waiting; only a token an app accepts on
/// first use (`acceptAnyToken`) waits, once, for its row.
final class VirtualDevices: Sendable {
    /// An app in an environment.
    struct AppKey: Hashable, Sendable {
        var environment: Environment
        var bundleID: String
    }

    /// An app in an environment, by number.
    private struct AppSlot: Hashable {
        var app: AppNumber
        var environment: Environment
    }

    private struct State {
        private(set) var entries: [VirtualTokenKey: VirtualEntry] = [:]
        /// Open rate windows of virtual tokens, pruned once ended.
        var windows: [VirtualTokenKey: RateWindow] = [:]
        /// How many virtual tokens each app has in each environment.
        private(set) var counts: [AppSlot: Int] = [:]

        func count(of slot: AppSlot) -> Int { counts[slot] ?? 0 }

        /// Keeps one token's entry (nil: forgets it).
        mutating func set(_ key: VirtualTokenKey, _ entry: VirtualEntry?) {
            let slot = AppSlot(app: key.app, environment: key.environment)
            if let entry {
                if entries.updateValue(entry, forKey: key) == nil { counts[slot, default: 0] += 1 }
            } else if entries.removeValue(forKey: key) != nil {
                counts[slot, default: 1] -= 1
            }
        }

        /// Every entry, from the store.
        mutating func replaceAll(_ all: [VirtualTokenKey: VirtualEntry]) {
            entries = all
            counts = all.keys.reduce(into: [:]) { $0[AppSlot(app: $1.app, environment: $1.environment), default: 0] += 1 }
        }

        /// One app's entries in one environment, from the store.
        mutating func replace(_ slot: AppSlot, with loaded: [(VirtualTokenKey, VirtualEntry)]) {
            entries = entries.filter { !($0.key.app == slot.app && $0.key.environment == slot.environment) }
            for (key, entry) in loaded { entries[key] = entry }
            counts[slot] = loaded.count
        }
    }

    private let state = Mutex(State())
    /// Whether any virtual token is kept: without one, and without an app
    /// that takes any token, a push looks nothing up here (one load).
    private let anyKept = Atomic<Bool>(false)
    private let store: any VirtualTokenStore & ProvisioningStore
    private let rules: DeliveryRules
    /// The apps that take any token of Apple's format on first use.
    let acceptAnyToken: Set<AppKey>
    /// Tokens an app takes on first use, at most, per environment: the
    /// providers of an app so configured choose how many tokens it meets,
    /// and memory is every team's.
    let firstUseLimit: Int

    static let defaultFirstUseLimit = 1_000_000

    init(store: any VirtualTokenStore & ProvisioningStore, rules: DeliveryRules, acceptAnyToken: Set<AppKey>, firstUseLimit: Int = VirtualDevices.defaultFirstUseLimit) {
        self.store = store
        self.rules = rules
        self.acceptAnyToken = acceptAnyToken
        self.firstUseLimit = firstUseLimit
    }

    /// A virtual device's id: 64 bits of SHA-256 over its environment,
    /// app and token. The same on every node and after a restart, so a
    /// held notification finds its device again; a real device's id is
    /// random, so the two meet with probability 2^-64 per pair.
    static func deviceID(environment: Environment, bundleID: String, token: [UInt8]) -> UInt64 {
        var hasher = SHA256()
        hasher.update(data: Array("courier.virtual:\(environment.rawValue):\(bundleID):".utf8))
        hasher.update(data: token)
        return hasher.finalize().withUnsafeBytes { raw in raw.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
    }

    // MARK: Loading

    /// Tokens read from the store at a time: a start with a million holds
    /// no more than this many rows beside the entries.
    static let page = 100_000

    /// Reads every virtual token from the store (at start, and when
    /// messages from other nodes may have been lost), app by app, a page
    /// at a time.
    func load() async throws {
        var entries: [VirtualTokenKey: VirtualEntry] = [:]
        for team in try await store.teams() {
            for app in try await store.apps(teamID: team.id) {
                for environment in Environment.allCases {
                    try await read(AppKey(environment: environment, bundleID: app.bundleID)) { entries[$0] = $1 }
                }
            }
        }
        let count = entries.count
        change { $0.replaceAll(entries) }
        // The rows read are gone: what they took goes back to the system, not kept beside the entries.
        if count >= Self.page / 10 { MemoryReturn.giveBack() }
    }

    /// Hands each of an app's virtual tokens in an environment to `take`, a page at a time.
    private func read(_ app: AppKey, _ take: (VirtualTokenKey, VirtualEntry) -> Void) async throws {
        let number = AppNumber(app.bundleID)
        var after: [UInt8]?
        while true {
            let page = try await store.virtualTokens(environment: app.environment, bundleID: app.bundleID, after: after, limit: Self.page)
            for token in page {
                guard let key = VirtualTokenKey(environment: app.environment, app: number, token: token.token) else { continue }
                take(key, VirtualEntry(token, deviceID: Self.deviceID(environment: app.environment, bundleID: app.bundleID, token: token.token)))
            }
            guard page.count == Self.page else { return }
            after = page.last?.token
        }
    }

    /// Reads one app's virtual tokens again (they changed here, or on another node).
    func reload(_ app: AppKey) async throws {
        var loaded: [(VirtualTokenKey, VirtualEntry)] = []
        try await read(app) { loaded.append(($0, $1)) }
        change { $0.replace(AppSlot(app: AppNumber(app.bundleID), environment: app.environment), with: loaded) }
        if loaded.count >= Self.page / 10 { MemoryReturn.giveBack() }
    }

    /// Reads one token of an app again: kept as the store has it, or forgotten.
    func reload(_ app: AppKey, token: [UInt8]) async throws {
        let stored = try await store.virtualToken(environment: app.environment, bundleID: app.bundleID, token: token)
        guard let stored else { return forget([token], of: app) }
        keep([stored])
    }

    /// Keeps tokens as the store has them now (registered, changed):
    /// what this node wrote itself, taken in without reading it back.
    func keep(_ tokens: [VirtualToken]) {
        let entries = tokens.compactMap { token in
            VirtualTokenKey(environment: token.environment, app: AppNumber(token.bundleID), token: token.token).map {
                ($0, VirtualEntry(token, deviceID: Self.deviceID(environment: token.environment, bundleID: token.bundleID, token: token.token)))
            }
        }
        change { state in
            for (key, entry) in entries { state.set(key, entry) }
        }
    }

    /// Forgets an app's tokens that were removed (nil: every one of the app in the environment).
    func forget(_ tokens: [[UInt8]]?, of app: AppKey) {
        let number = AppNumber(app.bundleID)
        change { state in
            guard let tokens else { return state.replace(AppSlot(app: number, environment: app.environment), with: []) }
            for token in tokens {
                if let key = VirtualTokenKey(environment: app.environment, app: number, token: token) { state.set(key, nil) }
            }
        }
    }

    /// Changes the tokens kept, and records whether any is kept
    /// (`anyKept`) under the same lock, so that of two changes at once
    /// the later one's answer is the one left.
    private func change(_ body: (inout State) -> Void) {
        state.withLock { state in
            body(&state)
            anyKept.store(!state.entries.isEmpty, ordering: .relaxed)
        }
    }

    /// Nothing virtual to look up: no token kept and no app that takes any.
    private var nothingToLookUp: Bool { acceptAnyToken.isEmpty && !anyKept.load(ordering: .relaxed) }

    /// Virtual tokens known now.
    var count: Int { state.withLock { $0.entries.count } }

    // MARK: Pushes

    /// What a push to a token that did not open finds here.
    enum Lookup {
        /// Not a virtual token of the app (BadDeviceToken).
        case none
        /// Not registered, and the app takes any token on first use: it is
        /// registered (`registerOnFirstUse`), then looked up again.
        case firstUse
        /// One of the app's virtual tokens.
        case found(Found)
    }

    struct Found {
        var deviceID: UInt64
        /// Uninstalled (then nothing was counted), or over its rate limit.
        var refusal: DeliveryRules.Refusal?
        /// What is refused is logged with this problem: a feedback entry
        /// when it is an uninstall.
        var problem: TokenProblem?
        var offline: Bool
    }

    /// Looks a token up for a push to `app` in `environment` and, when it
    /// is installed, counts the push in its rate window (check 6).
    func take(_ token: [UInt8], environment: Environment, app: AppNumber, bundleID: String, now: Date) -> Lookup {
        guard !nothingToLookUp, let key = VirtualTokenKey(environment: environment, app: app, token: token) else { return .none }
        enum Answer {
            case found(Found)
            case absent(count: Int)
        }
        let answer: Answer = state.withLock { state in
            guard let entry = state.entries[key] else { return .absent(count: state.count(of: AppSlot(app: app, environment: environment))) }
            if let at = entry.uninstalledAt {
                let problem = TokenProblem.removed(at: at)
                return .found(Found(deviceID: entry.deviceID, refusal: rules.refusal(problem), problem: problem, offline: entry.offline))
            }
            let refusal = rules.refusal(takingFrom: &state.windows[key, default: .unopened], now: now)
            return .found(Found(deviceID: entry.deviceID, refusal: refusal, problem: nil, offline: entry.offline))
        }
        switch answer {
        case .found(let found): return .found(found)
        case .absent(let count):
            // Past the limit an app so configured takes no more: BadDeviceToken, as for any other app.
            guard count < firstUseLimit, acceptAnyToken.contains(AppKey(environment: environment, bundleID: bundleID)) else { return .none }
            return .firstUse
        }
    }

    /// Whether a token that did not open is the app's (registered, or
    /// taken on first use): a fault rule may match its push.
    func belongs(_ token: [UInt8], environment: Environment, app: AppNumber, bundleID: String) -> Bool {
        guard !nothingToLookUp, let key = VirtualTokenKey(environment: environment, app: app, token: token) else { return false }
        let (known, count) = state.withLock { ($0.entries[key] != nil, $0.count(of: AppSlot(app: app, environment: environment))) }
        return known || (count < firstUseLimit && acceptAnyToken.contains(AppKey(environment: environment, bundleID: bundleID)))
    }

    /// Registers a token of an app that takes any token on first use
    /// (a token registered meanwhile, here or on another node, keeps its
    /// state), and keeps it as the store has it.
    func registerOnFirstUse(_ token: [UInt8], environment: Environment, bundleID: String, now: Date) async throws {
        let added = VirtualToken(environment: environment, bundleID: bundleID, token: token, registeredAt: now)
        if !(try await store.addVirtualTokens([added])).isEmpty {
            keep([added])
        } else if let stored = try await store.virtualToken(environment: environment, bundleID: bundleID, token: token) {
            // Registered meanwhile (another node's first push): kept as that one left it.
            keep([stored])
        }
    }

    /// The virtual device of a token, when it is one of the app's.
    func device(of token: [UInt8], environment: Environment, bundleID: String) -> UInt64? {
        guard let key = VirtualTokenKey(environment: environment, app: AppNumber(bundleID), token: token) else { return nil }
        return state.withLock { $0.entries[key]?.deviceID }
    }

    /// Forgets rate windows that ended.
    func pruneIdle(at now: Date) {
        state.withLock { state in state.windows = state.windows.filter { !$0.value.hasEnded(at: now, length: rules.qos.tokenRateWindow) } }
    }
}
