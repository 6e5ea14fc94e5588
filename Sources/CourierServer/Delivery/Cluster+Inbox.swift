import CourierCore
import Foundation

/// The admin inbox between nodes (`InboxExchange`): what this node
/// records given to the others, what they record taken into this one's.
extension Cluster {
    /// Entries read from the store at most at once.
    static let inboxPage = 1000
    /// Time between two batches of inbox entries: one frame on each link
    /// (and, through the store, one statement, one announcement, one read
    /// on each other node) for what was recorded meanwhile, so that the
    /// inbox does not crowd out hand-overs.
    static let inboxLinger: Duration = .milliseconds(50)

    /// Gives what this node's inbox recorded since the last call to the
    /// others: on the links; through the store too (and announced) while a
    /// node alive is not linked to.
    func shareInbox() async {
        let (entries, dropped) = inboxExchange.takeUnshared()
        if dropped > 0 {
            logger.warning("the inbox recorded faster than it could be shared; the other nodes miss entries", metadata: ["courier.count": "\(dropped)"])
        }
        guard !entries.isEmpty else { return }
        let everyNode = links?.share(entries) ?? false
        guard inboxExchange.throughStore || !everyNode else { return }
        await storeInbox(entries)
    }

    /// Writes inbox entries to the store for the others, and tells them.
    func storeInbox(_ entries: [SharedInboxEntry]) async {
        guard !entries.isEmpty else { return }
        do {
            try await coordination.shareInbox(entries)
            metrics?.inboxShared(direct: 0, store: entries.count)
            await publish(.inboxShared(from: node))
        } catch {
            logger.error("store failed sharing inbox entries with the other nodes", metadata: ["courier.error": "\(error)"])
        }
    }

    /// Reads what the other nodes' inboxes shared through the store, and
    /// this node has not taken yet (from the store or a link), into this one's.
    func readInbox() async {
        guard inbox.isRecording else { return }
        do {
            while true {
                let entries = try await coordination.sharedInbox(except: node, after: inboxExchange.storeCursors, limit: Self.inboxPage)
                inboxExchange.take(entries, fromStore: true)
                if entries.count < Self.inboxPage { return }
            }
        } catch {
            logger.error("store failed reading the other nodes' inbox entries", metadata: ["courier.error": "\(error)"])
        }
    }

    /// Clears every node's inbox (the admin API's `DELETE /v1/inbox`):
    /// this one's now, the others' when they hear of it, each dropping
    /// what was received up to now.
    func clearInbox() async throws {
        let at = inbox.clear()
        try await coordination.clearSharedInbox()
        await publish(.inboxCleared(from: node, upTo: at))
    }
}
