import CourierCore
import Logging

/// The feedback service's list: an entry for each push that met an app
/// removed from its device (environment, topic, token, removal time). The
/// dispatcher adds them; the feedback interface reads a topic's entries
/// and removes the ones it sent.
final class FeedbackList: Sendable {
    private let store: any FeedbackStore
    private let logger: Logger
    /// Entries are written in group commits: a provider that keeps pushing
    /// to removed apps' tokens costs one transaction per batch, which
    /// writes each token once.
    let writer: GroupCommit<FeedbackEntry, Void>

    init(store: any FeedbackStore, metrics: ServerMetrics, logger: Logger) {
        self.store = store
        self.logger = logger
        writer = GroupCommit(observe: { metrics.committed(.feedback, in: $0) }) { batch in
            try await store.addFeedback(batch)
            return batch.map { _ in () }
        }
    }

    /// Queues the entry for the next commit: the result arrives once it is
    /// written, or once writing it failed (logged), so a refusal that waits
    /// for it is answered either way.
    func written(_ entry: FeedbackEntry) -> Pending<Void> {
        let settled = Pending<Void>()
        writer.enqueue(entry).whenResolved { [logger] result in
            if case .failure(let error) = result {
                logger.error("store failed adding a feedback entry", metadata: ["courier.error": "\(error)"])
            }
            settled.resolve(.success(()))
        }
        return settled
    }

    /// A topic's entries in the environment.
    func entries(environment: Environment, topic: String) async throws -> [FeedbackEntry] {
        try await store.feedback(environment: environment, topic: topic)
    }

    /// Entries a provider received: the list forgets them.
    func sent(_ entries: [FeedbackEntry]) async throws {
        try await store.removeFeedback(entries)
    }
}
