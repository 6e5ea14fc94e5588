import CourierCore
import CourierPKI
import Foundation
import Synchronization

struct RegistrationKey: Hashable, Sendable {
    var deviceID: UInt64
    var bundleID: String
    var environment: Environment
}

/// A device token (with its environment) as a dictionary key.
///
/// Hashed by its first eight bytes only: a token is an AES block's output
/// (DeviceTokens.swift), so those bytes are already spread evenly, and
/// only tokens that opened — which only the server's key can make — are
/// kept. Equality still compares every byte.
struct TokenKey: Hashable, Sendable {
    var environment: Environment
    var bytes: [UInt8]

    static func == (left: TokenKey, right: TokenKey) -> Bool {
        left.environment == right.environment && left.bytes.count == right.bytes.count
            && left.bytes.withUnsafeBytes { l in right.bytes.withUnsafeBytes { r in l.isEmpty || memcmp(l.baseAddress!, r.baseAddress!, l.count) == 0 } }
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(environment)
        bytes.withUnsafeBytes { raw in
            if raw.count >= 8 {
                hasher.combine(raw.loadUnaligned(as: UInt64.self))
            } else {
                hasher.combine(bytes: raw)
            }
        }
    }
}

/// A registration as the cache keeps it: what its key does not say
/// already, in 24 bytes beside a 16-byte key (`CacheKey`), not
/// `AppRegistration`'s 72 beside a 32-byte one.
///
/// Its token is kept as its generation: the token the codec issues to
/// the key's device and app in that generation (a token and its contents
/// determine each other, DeviceTokens.swift), so an idle device's cached
/// registration holds no array of its own. A stored token the codec did
/// not issue so (one issued under another secret) is kept as it is, beside
/// (`State.otherTokens`).
struct CachedRegistration {
    var registeredAt: Date
    var unregisteredAt: Date?
    var active: Bool
    /// The token is the codec's of `generation`; false: it is in `otherTokens`.
    var issued: Bool
    var generation: UInt32

    /// The registration's token in contents, when the codec issued it to
    /// the key's device and app: its generation.
    static func generation(of token: [UInt8], _ key: RegistrationKey, codec: DeviceTokenCodec, appHash: UInt64) -> UInt32? {
        guard case .success(let contents) = codec.open(token), contents.deviceID == key.deviceID, contents.appHash == appHash, !contents.isLiveActivity
        else { return nil }
        return contents.generation
    }

    /// Whether the registration holds the app's device token of the
    /// generation of `contents` (which opened with the key's device and
    /// app, as a checked token's did): a token the codec issued, of the
    /// same generation, or, for a token kept as it is, the same bytes as
    /// `deviceToken` (made only then: for a Live Activity token, an issue).
    func holdsDeviceToken(of contents: DeviceTokenContents, other: [UInt8]?, deviceToken: () -> [UInt8]) -> Bool {
        issued ? contents.generation == generation : other == deviceToken()
    }

    /// What the registration says of a checked token of its key, in the
    /// order both `Registrations.cached(_:now:)` and `problem(of:now:)`
    /// ask: held, active, and for a Live Activity's update token, its
    /// activity's end (`activityEnd`).
    func answer(for token: CheckedToken, other: [UInt8]?, now: Date, deviceToken: () -> [UInt8]) -> RegistrationAnswer {
        // A token the device no longer holds (an older generation) is not a device token any more.
        guard holdsDeviceToken(of: token.contents, other: other, deviceToken: deviceToken) else { return .answered(.notHeld) }
        guard active else { return .answered(.removed(at: unregisteredAt ?? now)) }
        guard token.contents.isLiveActivity, token.contents.activity != DeviceTokenContents.pushToStart else { return .answered(nil) }
        return .activityEnd
    }
}

/// What a registration says of a token (`CachedRegistration.answer`).
enum RegistrationAnswer {
    /// What keeps the token from its device, nil when nothing does.
    case answered(TokenProblem?)
    /// A Live Activity's update token of an active registration that holds
    /// it: the activity's end decides.
    case activityEnd
}

/// What the store said of a Live Activity: when it ended, nil while it has not.
struct ActivityEnd {
    var endedAt: Date?

    /// What keeps an update token of the activity from its device.
    var problem: TokenProblem? { endedAt.map { .expired(at: $0) } }
}

/// A registration's key as the cache keeps it: the app by its number
/// (`State.apps`), not its bundle id's string.
struct CacheKey: Hashable {
    var deviceID: UInt64
    var app: UInt32
    var environment: Environment
}

/// A token that opened and belongs to the notification's topic.
struct CheckedToken {
    var contents: DeviceTokenContents
    var key: RegistrationKey
    var tokenKey: TokenKey
}

/// What is known of a token that opened. A token's contents depend only on
/// its bytes and the environment's key, so it is opened once (four AES
/// blocks); the app it belongs to and whether it is that app's active
/// registration are kept beside them, with its rate window, so that a
/// notification to a known token costs one dictionary lookup.
struct TokenEntry {
    var contents: DeviceTokenContents
    /// The app the token was found to belong to.
    var bundleID: String?
    /// The registration epoch (`Registrations`) in which the token was
    /// found to be its app's active registration: a later change of any
    /// registration makes the mark stale.
    var registeredEpoch: Int?
    /// Its rate window; one never opened reads as ended.
    var window = RateWindow.unopened

    init(contents: DeviceTokenContents) {
        self.contents = contents
    }

    /// True when the window has ended (or was never opened): the entry
    /// holds nothing that cannot be found again.
    func isIdle(at now: Date, window length: TimeInterval) -> Bool {
        window.hasEnded(at: now, length: length)
    }

    /// For a token marked as `bundleID`'s active registration in `epoch`:
    /// its contents, and the refusal if its rate window did not take one
    /// more (`DeliveryRules`). Nil (and nothing counted) otherwise.
    mutating func take(ifRegisteredIn epoch: Int, for bundleID: String, rules: DeliveryRules, now: Date) -> (DeviceTokenContents, DeliveryRules.Refusal?)? {
        // A Live Activity token is never taken as its app's registration.
        guard registeredEpoch == epoch, self.bundleID == bundleID, !contents.isLiveActivity else { return nil }
        return (contents, rules.refusal(takingFrom: &window, now: now))
    }

    /// Counts one more in the rate window (the refusal when it is full),
    /// and marks the token as `bundleID`'s active registration in `epoch`
    /// (unmarked when nil).
    mutating func take(markedRegisteredIn epoch: Int?, for bundleID: String, rules: DeliveryRules, now: Date) -> DeliveryRules.Refusal? {
        self.bundleID = bundleID
        registeredEpoch = epoch
        return rules.refusal(takingFrom: &window, now: now)
    }
}

/// Which token is which device's app: the apps' registrations (the store's,
/// cached), the tokens that opened with their rate windows, the apps'
/// token hashes. One lock: a notification to a token already known as its
/// app's active registration costs one lookup here, which takes its rate
/// window too.
final class Registrations: Sendable {
    /// Token entries kept before idle ones are pruned; entries with an open
    /// rate window are never pruned, so the table may hold more (it is
    /// pruned again at twice what was left).
    static let tokenCapacity = 100_000

    private struct State {
        var registrations: [CacheKey: CachedRegistration] = [:]
        /// The tokens of cached registrations that the codec did not issue
        /// as their keys' (see `CachedRegistration`).
        var otherTokens: [CacheKey: [UInt8]] = [:]
        /// The apps of cached registrations, numbered for `CacheKey`.
        var apps: [String: UInt32] = [:]
        /// Tokens that opened (see `TokenEntry`).
        var tokens: [TokenKey: TokenEntry] = [:]
        /// Prune `tokens` of idle entries when it reaches this many.
        var tokensPruneAt = Registrations.tokenCapacity
        /// Apps' token hashes (`DeviceTokenContents.appHash(of:)`), by bundle id.
        var appHashes: [String: UInt64] = [:]
        /// What the store said of cached registrations' Live Activities, by
        /// activity: when it ended, nil while it has not. A registration
        /// forgotten or cached again loses them.
        var activities: [CacheKey: [UInt32: ActivityEnd]] = [:]
        /// Entries in `activities`; it is emptied when this reaches `tokenCapacity`.
        var activitiesCount = 0
        /// Counts changes of `registrations` and of activities' ends (see
        /// `TokenEntry.registeredEpoch`, `activityEnd(of:)`).
        var epoch = 0

        /// The cache's key for `key`; nil when no registration of its app is cached.
        func cacheKey(_ key: RegistrationKey) -> CacheKey? {
            apps[key.bundleID].map { CacheKey(deviceID: key.deviceID, app: $0, environment: key.environment) }
        }

        /// The registration cached under `key`, with its token when it is kept as it is.
        func cached(_ key: RegistrationKey) -> (registration: CachedRegistration, other: [UInt8]?)? {
            guard let key = cacheKey(key), let cached = registrations[key] else { return nil }
            return (cached, cached.issued ? nil : otherTokens[key])
        }

        /// Caches `registration` (nil: forgets it) under `key`; `generation`
        /// is its token's, when the codec issued it as the key's
        /// (`CachedRegistration.generation(of:)`). A full table of apps
        /// is emptied first, with the registrations that name them.
        mutating func cache(_ registration: AppRegistration?, generation: UInt32?, _ key: RegistrationKey) {
            guard let registration else {
                if let key = cacheKey(key) { forget(key) }
                return
            }
            let app: UInt32
            if let known = apps[key.bundleID] {
                app = known
            } else {
                if apps.count >= Registrations.tokenCapacity {
                    apps = [:]
                    registrations = [:]
                    otherTokens = [:]
                    forgetActivities()
                }
                app = UInt32(apps.count)
                apps[key.bundleID] = app
            }
            let cacheKey = CacheKey(deviceID: key.deviceID, app: app, environment: key.environment)
            registrations[cacheKey] = CachedRegistration(
                registeredAt: registration.registeredAt, unregisteredAt: registration.unregisteredAt, active: registration.active,
                issued: generation != nil, generation: generation ?? 0)
            otherTokens[cacheKey] = generation == nil ? registration.token : nil
            forgetActivities(of: cacheKey)
        }

        mutating func forget(_ key: CacheKey) {
            registrations[key] = nil
            otherTokens[key] = nil
            forgetActivities(of: key)
        }

        /// The end of an activity of a cached registration, as the store said it.
        func activityEnd(_ key: RegistrationKey, _ activity: UInt32) -> ActivityEnd? {
            cacheKey(key).flatMap { activities[$0]?[activity] }
        }

        /// Keeps what the store said of an activity, when its registration
        /// is cached. A full table is emptied first.
        mutating func remember(_ end: ActivityEnd, _ key: RegistrationKey, _ activity: UInt32) {
            guard let key = cacheKey(key), registrations[key] != nil else { return }
            if activitiesCount >= Registrations.tokenCapacity { forgetActivities() }
            if activities[key, default: [:]].updateValue(end, forKey: activity) == nil { activitiesCount += 1 }
        }

        mutating func forgetActivities(of key: CacheKey) {
            if let forgotten = activities.removeValue(forKey: key) { activitiesCount -= forgotten.count }
        }

        mutating func forgetActivities() {
            activities = [:]
            activitiesCount = 0
        }

        /// Keeps a token that opened, and the app it belongs to when known.
        /// A full table first loses its idle entries.
        mutating func remember(_ key: TokenKey, _ contents: DeviceTokenContents, bundleID: String?, now: Date, window: TimeInterval) {
            if tokens[key] == nil, tokens.count >= tokensPruneAt {
                tokens = tokens.filter { !$0.value.isIdle(at: now, window: window) }
                tokensPruneAt = max(Registrations.tokenCapacity, 2 * tokens.count)
            }
            if let bundleID {
                tokens[key, default: TokenEntry(contents: contents)].bundleID = bundleID
            } else if tokens[key] == nil {
                tokens[key] = TokenEntry(contents: contents)
            }
        }
    }

    private let state = Mutex(State())
    private let store: any RegistrationStore & ProvisioningStore
    private let codecs: [Environment: DeviceTokenCodec]
    private let rules: DeliveryRules
    private let clock: any WallClock

    init(store: any RegistrationStore & ProvisioningStore, codecs: [Environment: DeviceTokenCodec], rules: DeliveryRules, clock: any WallClock) {
        self.store = store
        self.codecs = codecs
        self.rules = rules
        self.clock = clock
    }

    func codec(_ environment: Environment) -> DeviceTokenCodec { codecs[environment]! }

    // MARK: Tokens

    /// A token already found to be `bundleID`'s active registration (no
    /// registration changed since): it, with the refusal if its rate
    /// window is full. Nil when it is not known so.
    func takeKnown(_ key: TokenKey, bundleID: String, now: Date) -> (CheckedToken, DeliveryRules.Refusal?)? {
        let known = state.withLock { state in
            state.tokens[key]?.take(ifRegisteredIn: state.epoch, for: bundleID, rules: rules, now: now)
        }
        guard let (contents, refusal) = known else { return nil }
        let registrationKey = RegistrationKey(deviceID: contents.deviceID, bundleID: bundleID, environment: key.environment)
        return (CheckedToken(contents: contents, key: registrationKey, tokenKey: key), refusal)
    }

    /// The checks of the token itself: it opens in its environment, and
    /// is `bundleID`'s (the topic's app), a Live Activity token exactly
    /// when the topic is the app's Live Activities one (`liveActivity`).
    func check(_ key: TokenKey, bundleID: String, liveActivity: Bool = false, now: Date) -> Result<CheckedToken, TokenCheckFailure> {
        let known = state.withLock { $0.tokens[key].map { (contents: $0.contents, ofTheApp: $0.bundleID == bundleID) } }
        let contents: DeviceTokenContents
        if let known {
            contents = known.contents
        } else {
            guard case .success(let opened) = codec(key.environment).open(key.bytes) else { return .failure(TokenCheckFailure(problem: .unopened)) }
            contents = opened
        }
        let belongs = known?.ofTheApp ?? false || appHash(of: bundleID) == contents.appHash
        if known?.ofTheApp != true {
            state.withLock { $0.remember(key, contents, bundleID: belongs ? bundleID : nil, now: now, window: rules.qos.tokenRateWindow) }
        }
        guard belongs, contents.isLiveActivity == liveActivity else { return .failure(TokenCheckFailure(problem: .ofAnotherApp)) }
        return .success(
            CheckedToken(contents: contents, key: RegistrationKey(deviceID: contents.deviceID, bundleID: bundleID, environment: key.environment), tokenKey: key))
    }

    /// `DeviceTokenContents.appHash(of:)`, computed once per app.
    private func appHash(of bundleID: String) -> UInt64 {
        if let hash = state.withLock({ $0.appHashes[bundleID] }) { return hash }
        let hash = DeviceTokenContents.appHash(of: bundleID)
        state.withLock { state in
            if state.appHashes.count >= Self.tokenCapacity { state.appHashes.removeAll() }
            state.appHashes[bundleID] = hash
        }
        return hash
    }

    /// Counts the notification in its token's rate window (the refusal
    /// when it is full), and marks the token as its app's active
    /// registration (as of `epoch`, when no registration changed since).
    func takeRate(_ token: CheckedToken, registeredIn epoch: Int, now: Date) -> DeliveryRules.Refusal? {
        state.withLock { state in
            let current = state.epoch
            // Found (or made again, if pruned since the check) and updated in place: the token is hashed once.
            return state.tokens[token.tokenKey, default: TokenEntry(contents: token.contents)].take(
                markedRegisteredIn: epoch == current ? epoch : nil, for: token.key.bundleID, rules: rules, now: now)
        }
    }

    /// The tokens known now (tests).
    var knownTokens: Int { state.withLock { $0.tokens.count } }

    /// Forgets tokens whose rate window ended (they are found again).
    func pruneIdle(at now: Date) {
        state.withLock { state in state.tokens = state.tokens.filter { !$0.value.isIdle(at: now, window: rules.qos.tokenRateWindow) } }
    }

    // MARK: Registrations

    /// `problem(of:now:)` when the cache can say it: the token's app's
    /// registration on its device is cached and, for a Live Activity's
    /// update token of an active one, what the store said of its activity
    /// is kept. With the epoch it was read in. Nil otherwise (the store
    /// decides).
    func cached(_ token: CheckedToken, now: Date) -> (problem: TokenProblem?, epoch: Int)? {
        state.withLock { state in
            guard let (cached, other) = state.cached(token.key) else { return nil }
            switch cached.answer(for: token, other: other, now: now, deviceToken: { deviceToken(of: token) }) {
            case .answered(let problem): return (problem, state.epoch)
            case .activityEnd: return state.activityEnd(token.key, token.contents.activity).map { ($0.problem, state.epoch) }
            }
        }
    }

    /// A cached registration as the store has it: its token issued again
    /// from its generation (or kept as it is).
    private func appRegistration(_ cached: (registration: CachedRegistration, other: [UInt8]?), _ key: RegistrationKey) -> AppRegistration {
        let registration = cached.registration
        let token =
            registration.issued
            ? codec(key.environment).issue(DeviceTokenContents(deviceID: key.deviceID, generation: registration.generation, appHash: appHash(of: key.bundleID)))
            : cached.other ?? []
        return AppRegistration(
            deviceID: key.deviceID, bundleID: key.bundleID, environment: key.environment, token: token, active: registration.active,
            registeredAt: registration.registeredAt, unregisteredAt: registration.unregisteredAt)
    }

    /// The generation of a stored registration's token, when the codec
    /// issued it as the key's (`CachedRegistration`).
    private func issuedGeneration(of registration: AppRegistration?, _ key: RegistrationKey) -> UInt32? {
        registration.flatMap { CachedRegistration.generation(of: $0.token, key, codec: codec(key.environment), appHash: appHash(of: key.bundleID)) }
    }

    /// The current epoch: read before a registration is loaded, a change
    /// while it is loaded makes the token's mark stale.
    var epoch: Int { state.withLock { $0.epoch } }

    /// The registration as the cache keeps it, from the cache or (cached
    /// then) the store.
    private func cachedOrLoaded(_ key: RegistrationKey) async throws -> (registration: CachedRegistration, other: [UInt8]?)? {
        if let cached = state.withLock({ $0.cached(key) }) { return cached }
        let loaded = try await store.registration(deviceID: key.deviceID, bundleID: key.bundleID, environment: key.environment)
        guard let loaded else { return nil }
        let generation = issuedGeneration(of: loaded, key)
        return state.withLock { state in
            // A registration cached meanwhile (by `register`) is newer.
            if let newer = state.cached(key) { return newer }
            state.cache(loaded, generation: generation, key)
            return state.cached(key)
        }
    }

    /// The registration, from the cache or the store.
    func registration(_ key: RegistrationKey) async throws -> AppRegistration? {
        try await cachedOrLoaded(key).map { appRegistration($0, key) }
    }

    /// What keeps a checked token from its device, by its app's
    /// registration there (from the cache or the store): nil when the
    /// registration holds the token and is active. A Live Activity token
    /// is held when the app's device token of its generation is, and an
    /// update token's activity must not have ended (the store says).
    func problem(of token: CheckedToken, now: Date) async throws -> TokenProblem? {
        guard let (registration, other) = try await cachedOrLoaded(token.key) else { return .notHeld }
        switch registration.answer(for: token, other: other, now: now, deviceToken: { self.deviceToken(of: token) }) {
        case .answered(let problem): return problem
        case .activityEnd: return try await activityEnd(of: token).problem
        }
    }

    /// When a Live Activity update token's activity ended, as the store
    /// says: read once, then kept with the registration until an activity
    /// of it ends here (`activityEnded`) or on another node, or the
    /// registration changes (both forget the registration).
    private func activityEnd(of token: CheckedToken) async throws -> ActivityEnd {
        let key = token.key
        let activity = token.contents.activity
        let (known, epoch) = state.withLock { ($0.activityEnd(key, activity), $0.epoch) }
        if let known { return known }
        let end = ActivityEnd(
            endedAt: try await store.activityEnd(deviceID: key.deviceID, bundleID: key.bundleID, environment: key.environment, activity: activity))
        state.withLock { state in
            // Not kept when something changed while it was read: it may be older than that.
            if state.epoch == epoch { state.remember(end, key, activity) }
        }
        return end
    }

    /// An activity of the registration ended (in the store): read again
    /// when next asked.
    func activityEnded(_ key: RegistrationKey, _ activity: UInt32) {
        state.withLock { state in
            if let key = state.cacheKey(key), state.activities[key]?.removeValue(forKey: activity) != nil { state.activitiesCount -= 1 }
            state.epoch += 1
        }
    }

    /// The app's device token of a checked token's generation: the token
    /// itself, or issued for a Live Activity token.
    private func deviceToken(of token: CheckedToken) -> [UInt8] {
        guard token.contents.isLiveActivity else { return token.tokenKey.bytes }
        var device = token.contents
        device.activity = 0
        return codec(token.key.environment).issue(device)
    }

    /// Issues a Live Activity token of an app on a device — its
    /// push-to-start token, or the update token of a new activity
    /// (`DeviceTokenContents.activity`) — registering the app on the device
    /// first if it is not. Nil when there is no such app.
    func issueLiveActivityToken(
        deviceID: UInt64, generation: UInt32, bundleID: String, environment: Environment, pushToStart: Bool
    ) async throws -> (token: [UInt8], activity: UInt32)? {
        // `register` checks the app, and writes nothing when the app is registered already.
        guard try await register(deviceID: deviceID, generation: generation, bundleID: bundleID, environment: environment) != nil else { return nil }
        var generator = SystemRandomNumberGenerator()
        let activity = pushToStart ? DeviceTokenContents.pushToStart : UInt32.random(in: 1..<DeviceTokenContents.pushToStart, using: &generator)
        let token = codec(environment).issue(DeviceTokenContents(deviceID: deviceID, generation: generation, bundleID: bundleID, activity: activity))
        return (token, activity)
    }

    /// Issues (or returns again) the token of an app on a device and records
    /// the registration; `changed` is false when it was registered so
    /// already. Nil when there is no such app.
    func register(deviceID: UInt64, generation: UInt32, bundleID: String, environment: Environment) async throws -> (token: [UInt8], changed: Bool)? {
        guard try await store.app(bundleID: bundleID) != nil else { return nil }
        let token = codec(environment).issue(DeviceTokenContents(deviceID: deviceID, generation: generation, bundleID: bundleID))
        let key = RegistrationKey(deviceID: deviceID, bundleID: bundleID, environment: environment)
        let existing = try await registration(key)
        if let existing, existing.active, existing.token == token { return (token, false) }
        let registration = AppRegistration(deviceID: deviceID, bundleID: bundleID, environment: environment, token: token, registeredAt: clock.now())
        try await store.register(registration)
        state.withLock { state in
            state.cache(registration, generation: generation, key)
            state.epoch += 1
        }
        return (token, true)
    }

    /// The app was removed from the device. False when it was not registered.
    func unregister(deviceID: UInt64, bundleID: String, environment: Environment, at date: Date? = nil) async throws -> Bool {
        guard try await store.unregister(deviceID: deviceID, bundleID: bundleID, environment: environment, at: date ?? clock.now()) else { return false }
        let key = RegistrationKey(deviceID: deviceID, bundleID: bundleID, environment: environment)
        let updated = try await store.registration(deviceID: deviceID, bundleID: bundleID, environment: environment)
        let generation = issuedGeneration(of: updated, key)
        state.withLock { state in
            state.cache(updated, generation: generation, key)
            state.epoch += 1
        }
        return true
    }

    /// Every cached registration forgotten (messages from the other nodes
    /// may have been lost): each is read again from the store when next needed.
    func forgetAll() {
        state.withLock { state in
            state.registrations = [:]
            state.otherTokens = [:]
            state.forgetActivities()
            state.epoch += 1
        }
    }

    /// Another node changed the registration: read again from the store
    /// when next needed.
    func forget(_ key: RegistrationKey) {
        state.withLock { state in
            if let key = state.cacheKey(key) { state.forget(key) }
            state.epoch += 1
        }
    }

    /// The device was reset: its registrations end (the store's were
    /// ended with its new generation).
    func forgetDevice(_ deviceID: UInt64) {
        state.withLock { state in
            state.registrations = state.registrations.filter { $0.key.deviceID != deviceID }
            state.otherTokens = state.otherTokens.filter { $0.key.deviceID != deviceID }
            for key in state.activities.keys where key.deviceID == deviceID { state.forgetActivities(of: key) }
            state.epoch += 1
        }
    }
}

/// Why a token cannot take a notification, found before its registration
/// was looked at (`TokenProblem.unopened` or `.ofAnotherApp`).
struct TokenCheckFailure: Error {
    var problem: TokenProblem
}
