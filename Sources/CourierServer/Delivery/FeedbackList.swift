import CourierCore

/// The feedback service's list: an entry for each push that met an app
/// removed from its device (environment, topic, token, removal time). The
/// dispatcher adds them; the feedback interface reads a topic's entries
/// and removes the ones it sent.
final class FeedbackList: Sendable {
    private let store: any Store
    /// Entries are written in group commits: a provider that keeps pushing
    /// to removed apps' tokens costs one transaction per batch, which
    /// writes each token once.
    let writer: GroupCommit<FeedbackEntry, Void>

    init(store: any Store, metrics: ServerMetrics) {
        self.store = store
        writer = GroupCommit(observe: { metrics.committed(.feedback, in: $0) }) { batch in
            try await store.addFeedback(batch)
            return batch.map { _ in () }
        }
    }

    /// Returns once the entry is written.
    func add(_ entry: FeedbackEntry) async throws {
        try await writer.submit(entry)
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
