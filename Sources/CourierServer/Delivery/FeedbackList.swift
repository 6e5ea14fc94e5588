import CourierCore

/// The feedback service's list: an entry for each push that met an app
/// removed from its device (environment, topic, token, removal time). The
/// dispatcher adds them; the feedback interface reads a topic's entries
/// and removes the ones it sent.
final class FeedbackList: Sendable {
    private let store: any Store

    init(store: any Store) {
        self.store = store
    }

    func add(_ entry: FeedbackEntry) async throws {
        try await store.addFeedback(entry)
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
