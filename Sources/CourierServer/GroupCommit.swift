import Synchronization

/// Group commit: callers hand in items one by one and wait; whoever finds
/// the writer idle writes everything queued so far in one batch, again and
/// again until the queue is empty. Under load many items share one
/// transaction; alone, an item is written at once.
final class GroupCommit<Item: Sendable, Result: Sendable>: Sendable {
    private struct Waiter {
        var item: Item
        var continuation: CheckedContinuation<Result, any Error>
    }

    private struct State {
        var queue: [Waiter] = []
        var writing = false
    }

    private let state = Mutex(State())
    private let write: @Sendable ([Item]) async throws -> [Result]

    /// `write` must return one result for each item, in order.
    init(write: @escaping @Sendable ([Item]) async throws -> [Result]) {
        self.write = write
    }

    func submit(_ item: Item) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            let startWriter = state.withLock { state -> Bool in
                state.queue.append(Waiter(item: item, continuation: continuation))
                if state.writing { return false }
                state.writing = true
                return true
            }
            if startWriter {
                Task { await self.drain() }
            }
        }
    }

    private func drain() async {
        while true {
            let batch = state.withLock { state -> [Waiter] in
                let batch = state.queue
                state.queue.removeAll(keepingCapacity: true)
                if batch.isEmpty { state.writing = false }
                return batch
            }
            if batch.isEmpty { return }
            do {
                let results = try await write(batch.map(\.item))
                for (waiter, result) in zip(batch, results) { waiter.continuation.resume(returning: result) }
            } catch {
                for waiter in batch { waiter.continuation.resume(throwing: error) }
            }
        }
    }
}
