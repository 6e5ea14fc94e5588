import CourierCore
import Foundation
import NIOCore
import NIOHPACK
import Synchronization

/// The provider interface a notification came in through.
public enum ProviderInterface: String, Sendable, Hashable, Codable, CaseIterable {
    case http2
    case binary
}

/// What Courier answered a notification: accepted, or refused with the
/// interface's own status and reason.
public enum InboxOutcome: Sendable, Hashable {
    case accepted
    /// HTTP/2: the HTTP status and the reason of docs/protocol.md. Binary:
    /// the error-response status (nil: refused without an answer, as
    /// command 0 is) and its name.
    case refused(status: Int?, reason: String)

    public var isAccepted: Bool { self == .accepted }

    /// "accepted", or the reason.
    public var name: String {
        switch self {
        case .accepted: "accepted"
        case .refused(_, let reason): reason
        }
    }
}

/// One notification as Courier received it, for tests that assert on
/// what their provider code sent (`NotificationInbox`). Its fields are
/// kept in one object: recording and listing copy one reference.
public struct InboxEntry: Sendable {
    /// Increases by one per entry: the inbox's order, and its paging key.
    public internal(set) var sequence: UInt64
    /// The fields, in one object: copying an entry copies one reference.
    private let details: Details

    private final class Details: Sendable {
        let record: InboxRecord
        init(_ record: InboxRecord) { self.record = record }
    }

    init(sequence: UInt64, record: InboxRecord) {
        self.sequence = sequence
        details = Details(record)
    }

    public var receivedAt: Date { details.record.receivedAt }
    public var interface: ProviderInterface { details.record.interface }
    public var environment: Environment { details.record.environment }
    /// The apns-id answered (HTTP/2), or the one given to a binary notification.
    public var apnsID: String {
        switch details.record.id {
        case .text(let text): text
        case .uuid(let uuid): uuid.uuidString.lowercased()
        }
    }
    /// The notification's `apns-unique-id` (sandbox HTTP/2 only).
    public var uniqueID: UUID? { details.record.uniqueID }
    /// Nil when the request had no usable token.
    public var token: [UInt8]? { details.record.token }
    public var topic: String? { details.record.topic }
    /// "certificate <serial>" or "key <key id>"; nil when the provider was
    /// not authenticated.
    public var provider: String? { details.record.provider }
    public var teamID: String? { details.record.teamID }
    /// The peer address of the provider connection it came on.
    public var connection: String? { details.record.connection }
    /// HTTP/2: the request's headers (the authorization header's token
    /// left out). Binary: the frame's fields by name.
    public var headers: [(name: String, value: String)] { details.record.received.fields }
    public var payload: [UInt8] { details.record.payload }
    public var outcome: InboxOutcome { details.record.outcome }
    /// The fault rule that acted on it, if one did.
    public var fault: String? { details.record.fault }
    /// The node that received it (several nodes); nil with one node.
    public var node: String? { details.record.node }
    /// What the request was, from its interface and path.
    public var kind: InboxKind {
        guard case .http2(let headers) = details.record.received else { return .notification }
        let path = headers.first(name: ":path") ?? ""
        if path.hasPrefix("/3/device/") { return .notification }
        if path.hasPrefix("/4/broadcasts/") { return .broadcast }
        if path.hasPrefix("/1/apps/") { return .channel }
        return .other
    }
}

/// What a request recorded in the inbox was: a notification to a device
/// token (HTTP/2 `/3/device/`, or a binary frame), a broadcast on a
/// channel (`/4/broadcasts/`), a channel management request (`/1/apps/`,
/// the channel port: create, read, delete, list), or another request (a
/// path the API does not have).
public enum InboxKind: String, Sendable, Hashable, CaseIterable {
    case notification
    case broadcast
    case channel
    case other
}

/// An inbox entry's apns-id: kept as it came, made into text when read.
enum InboxID: Sendable {
    case text(String)
    case uuid(UUID)
}

/// An inbox entry's headers as received: kept as they came, made into
/// name and value pairs only when read (recording costs no strings).
enum InboxHeaders: Sendable {
    case http2(HPACKHeaders)
    case binary(BinaryFrameFields)
    /// A binary frame that could not be decoded.
    case malformed(identifier: UInt32, detail: String)

    var fields: [(name: String, value: String)] {
        switch self {
        case .http2(let headers): headers.map { ($0.name, $0.name == "authorization" ? Self.redacted($0.value) : $0.value) }
        case .binary(let fields): fields.headers
        case .malformed(let identifier, let detail): [("identifier", String(identifier)), ("malformed", detail)]
        }
    }

    /// An authorization header without its credential (the entry's
    /// `provider` names the key that signed a valid one).
    static func redacted(_ value: String) -> String {
        // "bearer " in any case, byte by byte (no character lowercases to
        // one of its letters but the letter's capital).
        let scheme = "bearer ".utf8
        let isBearer = value.utf8.count >= scheme.count && zip(value.utf8, scheme).allSatisfy { $1 == 0x20 ? $0 == 0x20 : $0 | 0x20 == $1 }
        return isBearer ? "bearer (not recorded)" : "(not recorded)"
    }
}

/// What the inbox's list and wait select. Nil fields select everything.
public struct InboxFilter: Sendable, Hashable {
    public var topic: String?
    public var token: [UInt8]?
    public var apnsID: String?
    public var teamID: String?
    public var interface: ProviderInterface?
    public var environment: Environment?
    /// notification, broadcast, channel (management) or other.
    public var kind: InboxKind?
    /// "accepted", "refused", or a reason (`BadDeviceToken`, `Unregistered`...).
    public var outcome: String?
    public var since: Date?
    public var until: Date?

    public init(
        topic: String? = nil, token: [UInt8]? = nil, apnsID: String? = nil, teamID: String? = nil, interface: ProviderInterface? = nil,
        environment: Environment? = nil, outcome: String? = nil, since: Date? = nil, until: Date? = nil, kind: InboxKind? = nil
    ) {
        self.kind = kind
        self.topic = topic
        self.token = token
        self.apnsID = apnsID
        self.teamID = teamID
        self.interface = interface
        self.environment = environment
        self.outcome = outcome
        self.since = since
        self.until = until
    }

    public func matches(_ entry: InboxEntry) -> Bool {
        if let topic, entry.topic != topic { return false }
        if let token, entry.token != token { return false }
        // An apns-id, or an apns-unique-id.
        if let apnsID, entry.apnsID.lowercased() != apnsID.lowercased(), entry.uniqueID?.lowercasedString != apnsID.lowercased() { return false }
        if let teamID, entry.teamID != teamID { return false }
        if let interface, entry.interface != interface { return false }
        if let environment, entry.environment != environment { return false }
        if let kind, entry.kind != kind { return false }
        if let since, entry.receivedAt < since { return false }
        if let until, entry.receivedAt > until { return false }
        switch outcome {
        case nil: break
        case "accepted": if !entry.outcome.isAccepted { return false }
        case "refused": if entry.outcome.isAccepted { return false }
        case let reason?: if entry.outcome.name != reason { return false }
        }
        return true
    }
}

/// Every notification the provider interfaces received, newest last, with
/// what they answered: a bounded record (by count, bytes and age, per
/// team) that tests list, wait on and clear through the admin API.
/// Recording copies the notification's parts into its team's ring of
/// reused chunks (`InboxRings`) under one lock: nothing kept alive, and
/// one team's notifications never push out another's.
public final class NotificationInbox: Sendable {
    /// Entries kept at most per team (and as many for requests no team was
    /// authenticated for); 0 records nothing.
    public let capacity: Int
    /// Entries older than this are dropped.
    public let maxAge: TimeInterval
    private let clock: any WallClock

    private struct Waiter {
        var id: UInt64
        var filter: InboxFilter
        var after: UInt64
        var continuation: CheckedContinuation<InboxEntry?, Never>
    }

    private struct State {
        /// The entries, and (several nodes) those waiting to be shared.
        var rings: InboxRings
        var waiters: [Waiter] = []
        var nextWaiter: UInt64 = 0
        /// The server is shutting down: waits end at once, with nothing.
        var closed = false
        /// The last time the inbox was cleared (here or on another node):
        /// other nodes' entries received before then are not taken.
        var clearedAt = Date.distantPast
    }

    /// An entry as one node gives it to the others: its sequence there and
    /// its bytes (`InboxRing.lastEncoded`).
    struct SharedEntry: Sendable {
        var sequence: UInt64
        var bytes: [UInt8]
    }

    private let state: Mutex<State>
    /// Told when entries wait to be shared (several nodes).
    private let sharingSignal: AsyncStream<Void>.Continuation?
    /// Yields when entries wait to be shared.
    let unsharedEntries: AsyncStream<Void>?

    /// `node`: this node's id when there are several, to be shared with
    /// the others' inboxes (`takeUnshared`, `recordShared`).
    public init(capacity: Int, maxAge: TimeInterval, clock: any WallClock, node: String? = nil) {
        self.capacity = capacity
        self.maxAge = maxAge
        self.clock = clock
        let initial = State(rings: InboxRings(capacity: max(capacity, 1), node: node))
        if node != nil, capacity > 0 {
            let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            unsharedEntries = stream
            sharingSignal = continuation
        } else {
            unsharedEntries = nil
            sharingSignal = nil
        }
        state = Mutex(initial)
    }

    public var isRecording: Bool { capacity > 0 }

    /// Records one notification.
    func record(_ record: InboxRecord) {
        guard capacity > 0 else { return }
        writing { $0.write(record) }
    }

    /// Records a batch's notifications in order, under one lock.
    func record(_ batch: InboxBatch) {
        guard capacity > 0, !batch.isEmpty else { return }
        writing { $0.write(batch) }
    }

    /// Writes under the lock, then wakes the waiters the new entries answer
    /// and tells the sharing there is something to share.
    private func writing(_ write: (inout InboxRings) -> Void) {
        var shared = false
        let woken = state.withLock { state -> [(CheckedContinuation<InboxEntry?, Never>, InboxEntry)] in
            let first = state.rings.lastSequence + 1
            write(&state.rings)
            shared = state.rings.sharing
            return Self.waitersWoken(&state, from: first)
        }
        if shared { sharingSignal?.yield() }
        for (continuation, entry) in woken { continuation.resume(returning: entry) }
    }

    /// The waiters the entries from sequence `first` on answer, taken from the waiting.
    private static func waitersWoken(_ state: inout State, from first: UInt64) -> [(CheckedContinuation<InboxEntry?, Never>, InboxEntry)] {
        guard !state.waiters.isEmpty else { return [] }
        // Waiters see the new entries as the API shows them.
        var woken: [(CheckedContinuation<InboxEntry?, Never>, InboxEntry)] = []
        state.rings.forEach(after: first - 1) { entry in
            state.waiters.removeAll { waiter in
                guard waiter.after < entry.sequence, waiter.filter.matches(entry) else { return false }
                woken.append((waiter.continuation, entry))
                return true
            }
            return !state.waiters.isEmpty
        }
        return woken
    }

    // MARK: Several nodes

    /// Another node is alive: what this node recorded and keeps, and
    /// everything it records from now on, is to be shared (`takeUnshared`).
    /// True when what it kept now waits to be shared (sharing began, with entries kept).
    @discardableResult
    func startSharing() -> Bool {
        guard sharingSignal != nil else { return false }
        let backlog = state.withLock { $0.rings.startSharing() }
        if backlog { sharingSignal?.yield() }
        return backlog
    }

    /// No other node is alive: nothing is shared until one is.
    func stopSharing() {
        state.withLock { $0.rings.stopSharing() }
    }

    /// The entries recorded here since the last call, for the other nodes,
    /// oldest first, and how many were dropped before they could be (the
    /// writer fell more than `capacity` of a team's entries behind).
    func takeUnshared() -> (entries: [SharedEntry], dropped: Int) {
        state.withLock { $0.rings.takeUnshared() }
    }

    /// What this node recorded and keeps, for a node that has not had it
    /// (several nodes: given first on each new link to another node), oldest
    /// first.
    func ownKept() -> [SharedEntry] {
        let cutoff = clock.now().addingTimeInterval(-maxAge)
        return state.withLock { state in
            state.rings.expire(before: cutoff)
            return state.rings.ownKept()
        }
    }

    /// Records what other nodes received (`takeUnshared` there), in order;
    /// entries received before the last clear, or older than `maxAge`,
    /// are left out. Returns how many were recorded.
    @discardableResult
    func recordShared(_ entries: [(node: String, bytes: [UInt8])]) -> Int {
        guard capacity > 0, !entries.isEmpty else { return 0 }
        let cutoff = clock.now().addingTimeInterval(-maxAge)
        var recorded = 0
        let woken = state.withLock { state -> [(CheckedContinuation<InboxEntry?, Never>, InboxEntry)] in
            let first = state.rings.lastSequence + 1
            let since = max(cutoff, state.clearedAt)
            for (node, bytes) in entries where InboxRing.receivedAt(of: bytes).map({ $0 > since }) ?? false {
                if state.rings.write(shared: bytes, from: node) { recorded += 1 }
            }
            return Self.waitersWoken(&state, from: first)
        }
        for (continuation, entry) in woken { continuation.resume(returning: entry) }
        return recorded
    }

    /// Another node's inbox was cleared at `date`: the entries received up
    /// to then go here too.
    func clear(upTo date: Date) {
        state.withLock { state in
            state.clearedAt = max(state.clearedAt, date)
            state.rings.remove(receivedUpTo: date)
        }
    }

    /// The entries after sequence `after` that match, oldest first, at
    /// most `limit`; and whether more match beyond them.
    public func list(_ filter: InboxFilter, after: UInt64 = 0, limit: Int) -> (entries: [InboxEntry], more: Bool) {
        let cutoff = clock.now().addingTimeInterval(-maxAge)
        return state.withLock { state in
            state.rings.expire(before: cutoff)
            var found: [InboxEntry] = []
            var more = false
            state.rings.forEach(after: after, team: filter.teamID) { entry in
                guard filter.matches(entry) else { return true }
                if found.count == limit {
                    more = true
                    return false
                }
                found.append(entry)
                return true
            }
            return (found, more)
        }
    }

    /// The newest entries for a token, newest first.
    public func recent(token: [UInt8], limit: Int) -> [InboxEntry] {
        let cutoff = clock.now().addingTimeInterval(-maxAge)
        return state.withLock { state in
            state.rings.expire(before: cutoff)
            var found: [InboxEntry] = []
            state.rings.forEachNewestFirst { entry in
                if entry.token == token { found.append(entry) }
                return found.count < limit
            }
            return found
        }
    }

    /// The first entry after `after` that matches: one already recorded,
    /// or the next one to be; nil once `timeout` passed (or the task was
    /// cancelled, or the server is shutting down) without one.
    public func wait(for filter: InboxFilter, after: UInt64 = 0, timeout: Duration) async -> InboxEntry? {
        let cutoff = clock.now().addingTimeInterval(-maxAge)
        // One already recorded answers at once, whatever the timeout.
        if let present = first(matching: filter, after: after, cutoff: cutoff) { return present }
        guard timeout > .zero else { return nil }
        let id = state.withLock { state -> UInt64 in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        return await withTaskGroup(of: InboxEntry?.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let present = self.state.withLock { state -> InboxEntry?? in
                            if let match = Self.first(in: state.rings, matching: filter, after: after) { return .some(match) }
                            if Task.isCancelled || state.closed { return .some(nil) }
                            state.waiters.append(Waiter(id: id, filter: filter, after: after, continuation: continuation))
                            return .none
                        }
                        if let present { continuation.resume(returning: present) }
                    }
                } onCancel: {
                    self.cancelWaiter(id)
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    private func first(matching filter: InboxFilter, after: UInt64, cutoff: Date) -> InboxEntry? {
        state.withLock { state in
            state.rings.expire(before: cutoff)
            return Self.first(in: state.rings, matching: filter, after: after)
        }
    }

    private static func first(in rings: InboxRings, matching filter: InboxFilter, after: UInt64) -> InboxEntry? {
        var match: InboxEntry?
        rings.forEach(after: after, team: filter.teamID) { entry in
            if filter.matches(entry) { match = entry }
            return match == nil
        }
        return match
    }

    /// True once the server is shutting down (`close()`).
    var isClosed: Bool { state.withLock { $0.closed } }

    /// Graceful shutdown: every wait ends now (with nothing), and later ones at once.
    func close() {
        let waiters = state.withLock { state -> [Waiter] in
            state.closed = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.continuation.resume(returning: nil) }
    }

    private func cancelWaiter(_ id: UInt64) {
        let continuation = state.withLock { state -> CheckedContinuation<InboxEntry?, Never>? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index).continuation
        }
        continuation?.resume(returning: nil)
    }

    /// Forgets every entry (waiters keep waiting); when it was cleared.
    @discardableResult
    public func clear() -> Date {
        let now = clock.now()
        state.withLock { state in
            state.clearedAt = max(state.clearedAt, now)
            state.rings.removeAll()
        }
        return now
    }

    /// Entries held now.
    public var count: Int { state.withLock { $0.rings.count } }

    /// Waits pending now (tests).
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// The sequence of the newest entry (0: none yet): a wait `after` it
    /// sees only what comes next.
    public var lastSequence: UInt64 { state.withLock { $0.rings.lastSequence } }

    /// The sequence below which nothing is kept: the oldest entry's (of
    /// any team), or the next one's when none is.
    var keptFrom: UInt64 { state.withLock { $0.rings.firstSequence ?? $0.rings.lastSequence + 1 } }
}
