import CourierCore
import Foundation
import Synchronization

/// What a fault rule does to a notification it matches.
public enum FaultAction: Sendable, Hashable {
    /// Refused with `reason` (HTTP/2: its status; `Unregistered` with
    /// `timestamp`); binary: `binaryStatus`, else the reason's own status,
    /// else the connection closes without an answer.
    case reject(reason: Reason, timestamp: Date?, binaryStatus: BinaryStatus?)
    /// Answered only after this long (then as without the rule).
    case delay(milliseconds: Int)
    /// The connection ends now: HTTP/2 GOAWAY with `reason` (the request is
    /// refused with it), binary status 10 Shutdown.
    case close(reason: Reason)
}

/// Which notifications a rule matches: every field given must match.
public struct FaultMatch: Sendable, Hashable {
    public var token: [UInt8]?
    public var topic: String?
    public var teamID: String?
    public var keyID: String?
    public var certificateSerial: String?
    public var interface: ProviderInterface?
    public var environment: Environment?

    public init(
        token: [UInt8]? = nil, topic: String? = nil, teamID: String? = nil, keyID: String? = nil, certificateSerial: String? = nil,
        interface: ProviderInterface? = nil, environment: Environment? = nil
    ) {
        self.token = token
        self.topic = topic
        self.teamID = teamID
        self.keyID = keyID
        self.certificateSerial = certificateSerial
        self.interface = interface
        self.environment = environment
    }

    func matches(_ request: FaultRequest) -> Bool {
        if let interface, request.interface != interface { return false }
        if let environment, request.environment != environment { return false }
        if let token, request.token != token { return false }
        if let topic, request.topic != topic { return false }
        if let teamID, request.identity?.teamID != teamID { return false }
        if let keyID, request.identity?.name != "key " + keyID { return false }
        if let certificateSerial, request.identity?.name.lowercased() != "certificate " + certificateSerial.lowercased() { return false }
        return true
    }
}

/// A notification as the fault rules see it, where its interface has
/// found its provider, and the dispatcher found the notification to be
/// that provider's (`Dispatcher.Owned`): a rule never acts on, nor is
/// used up by, a request of a team it was not meant for.
struct FaultRequest {
    let interface: ProviderInterface
    let environment: Environment
    let token: [UInt8]?
    let topic: String?
    let identity: ProviderIdentity?

    init(_ owned: Dispatcher.Owned, interface: ProviderInterface, identity: ProviderIdentity?) {
        self.interface = interface
        environment = owned.environment
        token = owned.token
        topic = owned.topic
        self.identity = identity
    }
}

/// One fault rule: the error cases Apple's sandbox cannot produce on
/// demand (docs/admin-api.md, "Faults").
public struct FaultRule: Sendable, Hashable {
    public var id: String
    public var match: FaultMatch
    public var action: FaultAction
    /// Notifications it may still act on; nil: no count limit.
    public var remaining: Int?
    /// It ends then; nil: never.
    public var until: Date?
    /// Notifications it acted on.
    public var hits = 0
    public var createdAt: Date
}

/// The fault rules in force. A provider interface asks `take` for each
/// notification only while a rule exists (one atomic load otherwise).
public final class FaultInjector: Sendable {
    private struct State {
        var rules: [FaultRule] = []
        var next = 1
    }

    private let state = Mutex(State())
    private let any = Atomic<Bool>(false)
    /// Told of each notification a rule acted on (several nodes share the counts).
    private let hitHook = Mutex<(@Sendable (FaultRule) -> Void)?>(nil)
    /// Rules at most: a rule is checked against every notification.
    public static let capacity = 1_000

    public init() {}

    var isActive: Bool { any.load(ordering: .relaxed) }

    /// Adds a rule; nil when there are `capacity` already.
    public func add(match: FaultMatch, action: FaultAction, count: Int?, until: Date?, now: Date) -> FaultRule? {
        state.withLock { state in
            guard state.rules.count < Self.capacity else { return nil }
            let rule = FaultRule(id: "f\(state.next)", match: match, action: action, remaining: count, until: until, createdAt: now)
            state.next += 1
            state.rules.append(rule)
            any.store(true, ordering: .relaxed)
            return rule
        }
    }

    /// The rules in force (ended ones dropped), oldest first.
    public func list(now: Date) -> [FaultRule] {
        state.withLock { state in
            drop(&state, now: now)
            return state.rules
        }
    }

    public func remove(id: String) -> Bool {
        state.withLock { state in
            guard let index = state.rules.firstIndex(where: { $0.id == id }) else { return false }
            state.rules.remove(at: index)
            any.store(!state.rules.isEmpty, ordering: .relaxed)
            return true
        }
    }

    /// Several nodes: the rules are the shared ones (`Cluster`), and each
    /// hit is told to `hook`.
    func shareHits(with hook: @escaping @Sendable (FaultRule) -> Void) {
        hitHook.withLock { $0 = hook }
    }

    /// Adds a rule made elsewhere (its id given); false when there are
    /// `capacity` already.
    func insert(_ rule: FaultRule) -> Bool {
        state.withLock { state in
            guard state.rules.count < Self.capacity else { return false }
            state.rules.removeAll { $0.id == rule.id }
            state.rules.append(rule)
            any.store(true, ordering: .relaxed)
            return true
        }
    }

    /// Replaces every rule (another node changed them).
    func replaceAll(_ rules: [FaultRule]) {
        state.withLock { state in
            state.rules = Array(rules.prefix(Self.capacity))
            any.store(!state.rules.isEmpty, ordering: .relaxed)
        }
    }

    /// Another node counted a hit: the rule's counts as the store has them.
    func update(id: String, remaining: Int?, hits: Int) {
        state.withLock { state in
            guard let index = state.rules.firstIndex(where: { $0.id == id }) else { return }
            if let remaining, remaining <= 0 {
                state.rules.remove(at: index)
            } else {
                // Counts only go down (remaining) and up (hits), whichever node's word arrives first.
                if let remaining { state.rules[index].remaining = min(state.rules[index].remaining ?? remaining, remaining) }
                state.rules[index].hits = max(state.rules[index].hits, hits)
            }
            any.store(!state.rules.isEmpty, ordering: .relaxed)
        }
    }

    var count: Int { state.withLock { $0.rules.count } }

    /// The first rule in force that matches, counted; nil when none does.
    func take(_ request: FaultRequest, now: Date) -> FaultRule? {
        guard isActive else { return nil }
        let taken = takeLocally(request, now: now)
        if let taken, let hook = hitHook.withLock({ $0 }) { hook(taken) }
        return taken
    }

    private func takeLocally(_ request: FaultRequest, now: Date) -> FaultRule? {
        state.withLock { state in
            drop(&state, now: now)
            guard let index = state.rules.firstIndex(where: { $0.match.matches(request) }) else { return nil }
            state.rules[index].hits += 1
            if let remaining = state.rules[index].remaining { state.rules[index].remaining = remaining - 1 }
            let rule = state.rules[index]
            if rule.remaining == 0 {
                state.rules.remove(at: index)
                any.store(!state.rules.isEmpty, ordering: .relaxed)
            }
            return rule
        }
    }

    /// Drops the rules whose time is over.
    private func drop(_ state: inout State, now: Date) {
        state.rules.removeAll { $0.until.map { $0 <= now } ?? false }
        any.store(!state.rules.isEmpty, ordering: .relaxed)
    }
}
