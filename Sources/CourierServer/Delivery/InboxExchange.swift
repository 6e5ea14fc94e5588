import CourierCore
import NIOCore
import Synchronization

/// The admin inbox between nodes (several nodes, docs/operations.md):
/// what this node records, given to the others with a sequence above any
/// a former run of this node gave (`start`), and what the others give,
/// taken once each whichever way it came — over the links between nodes
/// (`NodeLinks`, a new link starting with everything its node keeps) or
/// through the store — and in whatever order: each node's sequences taken
/// are remembered (its newest `remembered`).
final class InboxExchange: Sendable {
    let node: String
    let inbox: NotificationInbox
    /// Sequences remembered per other node at most: past it the oldest are
    /// forgotten (one given again after that is recorded again).
    let remembered: Int

    private struct Taken {
        var sequences: Set<Int64> = []
        var order = CircularBuffer<Int64>()
    }

    private struct State {
        /// Added to this node's inbox sequences for the others.
        var base: Int64 = 0
        /// Each other node's sequences taken.
        var taken: [String: Taken] = [:]
        /// Each other node's last entry read from the store.
        var storeCursors: [String: Int64] = [:]
        var throughStore = true
    }

    private let state = Mutex(State())

    /// `remembered`: by default 100,000, or four times the inbox's capacity when more.
    init(node: String, inbox: NotificationInbox, remembered: Int? = nil) {
        self.node = node
        self.inbox = inbox
        self.remembered = remembered ?? max(100_000, 4 * inbox.capacity)
    }

    /// At start: this run's sequences above `base`.
    func start(base: Int64) {
        state.withLock { $0.base = base }
    }

    /// A node alive is not linked to (it records no address, or this node
    /// has no links): this node's entries go through the store too.
    var throughStore: Bool { state.withLock { $0.throughStore } }

    /// Sets `throughStore`; true when it was off and is now on: what this
    /// node keeps is to be written to the store then (`ownKept`), since
    /// the entries of the while before went on the links alone.
    func setThroughStore(_ on: Bool) -> Bool {
        state.withLock { state in
            defer { state.throughStore = on }
            return on && !state.throughStore
        }
    }

    /// Where a read of the store goes on from: each other node's last entry read there.
    var storeCursors: [String: Int64] { state.withLock { $0.storeCursors } }

    /// What this node recorded since the last call, for the others, and how
    /// many were dropped before they could be given.
    func takeUnshared() -> (entries: [SharedInboxEntry], dropped: Int) {
        let (entries, dropped) = inbox.takeUnshared()
        return (shared(entries), dropped)
    }

    /// What this node recorded and keeps, its newest `remembered` (as many
    /// as the other node remembers having taken, so that none it took
    /// comes back as new): what a node newly linked to is given first.
    func ownKept() -> [SharedInboxEntry] {
        shared(Array(inbox.ownKept().suffix(remembered)))
    }

    /// The first sequence of this run that the inbox no longer keeps: the store keeps none below it.
    var keptFrom: Int64 {
        state.withLock { $0.base } + Int64(inbox.keptFrom)
    }

    private func shared(_ entries: [NotificationInbox.SharedEntry]) -> [SharedInboxEntry] {
        let base = state.withLock { $0.base }
        return entries.map { SharedInboxEntry(node: node, sequence: base + Int64($0.sequence), format: InboxRing.sharedFormat, bytes: $0.bytes) }
    }

    /// Records the other nodes' entries not taken before, in the order
    /// given; how many were new. `fromStore`: read from the store, which
    /// gives each node's in order (`storeCursors`).
    @discardableResult
    func take(_ entries: [SharedInboxEntry], fromStore: Bool = false) -> Int {
        guard !entries.isEmpty else { return 0 }
        let new = state.withLock { state -> [(node: String, bytes: [UInt8])] in
            var new: [(node: String, bytes: [UInt8])] = []
            for entry in entries where entry.node != node {
                if fromStore { state.storeCursors[entry.node] = max(state.storeCursors[entry.node] ?? .min, entry.sequence) }
                guard state.taken[entry.node, default: Taken()].sequences.insert(entry.sequence).inserted else { continue }
                state.taken[entry.node]!.order.append(entry.sequence)
                if state.taken[entry.node]!.order.count > remembered {
                    state.taken[entry.node]!.sequences.remove(state.taken[entry.node]!.order.removeFirst())
                }
                if entry.format == InboxRing.sharedFormat { new.append((entry.node, entry.bytes)) }
            }
            return new
        }
        return inbox.recordShared(new)
    }
}
