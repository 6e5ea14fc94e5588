import CourierCore
import Foundation
import NIOCore
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
/// what their provider code sent (`Inbox`).
public struct InboxEntry: Sendable {
    /// Increases by one per entry: the inbox's order, and its paging key.
    public var sequence: UInt64
    public var receivedAt: Date
    public var interface: ProviderInterface
    public var environment: Environment
    /// The apns-id answered (HTTP/2), or the one given to a binary notification.
    public var apnsID: String
    /// Nil when the request had no usable token.
    public var token: [UInt8]?
    public var topic: String?
    /// "certificate <serial>" or "key <key id>"; nil when the provider was
    /// not authenticated.
    public var provider: String?
    public var teamID: String?
    /// HTTP/2: the request's headers (the authorization header's token
    /// left out). Binary: the frame's fields by name.
    public var headers: [(name: String, value: String)]
    public var payload: [UInt8]
    public var outcome: InboxOutcome
}

/// What the inbox's list and wait select. Nil fields select everything.
public struct InboxFilter: Sendable, Hashable {
    public var topic: String?
    public var token: [UInt8]?
    public var apnsID: String?
    public var teamID: String?
    public var interface: ProviderInterface?
    public var environment: Environment?
    /// "accepted", "refused", or a reason (`BadDeviceToken`, `Unregistered`...).
    public var outcome: String?
    public var since: Date?
    public var until: Date?

    public init(
        topic: String? = nil, token: [UInt8]? = nil, apnsID: String? = nil, teamID: String? = nil, interface: ProviderInterface? = nil,
        environment: Environment? = nil, outcome: String? = nil, since: Date? = nil, until: Date? = nil
    ) {
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
        if let apnsID, entry.apnsID.lowercased() != apnsID.lowercased() { return false }
        if let teamID, entry.teamID != teamID { return false }
        if let interface, entry.interface != interface { return false }
        if let environment, entry.environment != environment { return false }
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
/// what they answered: a bounded record (by count and by age) that tests
/// list, wait on and clear through the admin API. Recording costs one lock
/// and an append; entries share the notification's arrays.
public final class NotificationInbox: Sendable {
    /// Entries kept at most; 0 records nothing.
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
        var entries = CircularBuffer<InboxEntry>()
        var next: UInt64 = 1
        var waiters: [Waiter] = []
        var nextWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    public init(capacity: Int, maxAge: TimeInterval, clock: any WallClock) {
        self.capacity = capacity
        self.maxAge = maxAge
        self.clock = clock
    }

    public var isRecording: Bool { capacity > 0 }

    /// Records one notification; its `sequence` is set here.
    func record(_ entry: InboxEntry) {
        guard capacity > 0 else { return }
        let woken = state.withLock { state -> [(CheckedContinuation<InboxEntry?, Never>, InboxEntry)] in
            var entry = entry
            entry.sequence = state.next
            state.next += 1
            if state.entries.count == capacity { state.entries.removeFirst() }
            state.entries.append(entry)
            guard !state.waiters.isEmpty else { return [] }
            var woken: [(CheckedContinuation<InboxEntry?, Never>, InboxEntry)] = []
            state.waiters.removeAll { waiter in
                guard waiter.after < entry.sequence, waiter.filter.matches(entry) else { return false }
                woken.append((waiter.continuation, entry))
                return true
            }
            return woken
        }
        for (continuation, entry) in woken { continuation.resume(returning: entry) }
    }

    /// Drops the entries that are too old.
    private static func expire(_ state: inout State, before cutoff: Date) {
        while let first = state.entries.first, first.receivedAt < cutoff { state.entries.removeFirst() }
    }

    /// The entries after sequence `after` that match, oldest first, at
    /// most `limit`; and whether more match beyond them.
    public func list(_ filter: InboxFilter, after: UInt64 = 0, limit: Int) -> (entries: [InboxEntry], more: Bool) {
        let cutoff = clock.now().addingTimeInterval(-maxAge)
        return state.withLock { state in
            Self.expire(&state, before: cutoff)
            var found: [InboxEntry] = []
            for entry in state.entries where entry.sequence > after && filter.matches(entry) {
                if found.count == limit { return (found, true) }
                found.append(entry)
            }
            return (found, false)
        }
    }

    /// The newest entries for a token, newest first.
    public func recent(token: [UInt8], limit: Int) -> [InboxEntry] {
        state.withLock { state in
            var found: [InboxEntry] = []
            for entry in state.entries.reversed() where entry.token == token {
                found.append(entry)
                if found.count == limit { break }
            }
            return found
        }
    }

    /// The first entry after `after` that matches: one already recorded,
    /// or the next one to be; nil once `timeout` passed (or the task was
    /// cancelled) without one.
    public func wait(for filter: InboxFilter, after: UInt64 = 0, timeout: Duration) async -> InboxEntry? {
        let cutoff = clock.now().addingTimeInterval(-maxAge)
        let id = state.withLock { state -> UInt64 in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        return await withTaskGroup(of: InboxEntry?.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let present = self.state.withLock { state -> InboxEntry?? in
                            Self.expire(&state, before: cutoff)
                            if let entry = state.entries.first(where: { $0.sequence > after && filter.matches($0) }) { return .some(entry) }
                            if Task.isCancelled { return .some(nil) }
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

    private func cancelWaiter(_ id: UInt64) {
        let continuation = state.withLock { state -> CheckedContinuation<InboxEntry?, Never>? in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index).continuation
        }
        continuation?.resume(returning: nil)
    }

    /// Forgets every entry (waiters keep waiting).
    public func clear() {
        state.withLock { $0.entries.removeAll() }
    }

    /// Entries held now.
    public var count: Int { state.withLock { $0.entries.count } }

    /// The sequence of the newest entry (0: none yet): a wait `after` it
    /// sees only what comes next.
    public var lastSequence: UInt64 { state.withLock { $0.next - 1 } }
}
