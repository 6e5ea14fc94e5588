import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import CourierServer

/// The group commit's writer, a service: batches in the order items were
/// handed in, and at graceful shutdown what was queued is written and
/// nothing more is taken.
@Suite(.timeLimit(.minutes(2))) struct GroupCommitTests {
    /// A commit whose first write waits until `release` is resolved (and
    /// resolves `started` as it begins), recording every batch.
    final class HeldCommit: Sendable {
        final class Batches: Sendable {
            let all = Mutex<[[Int]]>([])
        }

        let started = Pending<Void>()
        let release = Pending<Void>()
        let batches = Batches()
        let commit: GroupCommit<Int, Int>

        init() {
            let (started, release, batches) = (started, release, batches)
            commit = GroupCommit { items in
                let first = batches.all.withLock { batches in
                    batches.append(items)
                    return batches.count == 1
                }
                if first {
                    started.resolve(.success(()))
                    try await release.value
                }
                return items.map { $0 * 10 }
            }
        }

        var written: [[Int]] { batches.all.withLock { $0 } }
    }

    /// Runs `commit` in a service group for `body`, then shuts the group
    /// down gracefully (a throwing body cancels it instead).
    func withRunning<T: Sendable>(_ commit: GroupCommit<Int, Int>, _ body: @Sendable (ServiceGroup) async throws -> T) async throws -> T {
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [commit], logger: Logger(label: "test")))
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let result = try await body(group)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        }
    }

    @Test func itemsHandedInDuringAWriteGoInTheNextBatchInOrder() async throws {
        let held = HeldCommit()
        let commit = held.commit
        try await withRunning(commit) { _ in
            let first = commit.enqueue(1)
            try await held.started.value
            let rest = (2...5).map { commit.enqueue($0) }
            held.release.resolve(.success(()))
            #expect(try await first.value == 10)
            for (index, pending) in rest.enumerated() { #expect(try await pending.value == (index + 2) * 10) }
            // Alone again, an item is written at once in a batch of its own.
            #expect(try await commit.submit(6) == 60)
        }
        #expect(held.written == [[1], [2, 3, 4, 5], [6]])
    }

    @Test func atShutdownWhatIsQueuedIsWrittenAndNothingIsTakenAfter() async throws {
        let held = HeldCommit()
        let commit = held.commit
        let queued = try await withRunning(commit) { group in
            let first = commit.enqueue(1)
            try await held.started.value
            let queued = [first, commit.enqueue(2), commit.enqueue(3)]
            // Shutdown begins while the first write runs.
            await group.triggerGracefulShutdown()
            held.release.resolve(.success(()))
            return queued
        }
        for (index, pending) in queued.enumerated() { #expect(try await pending.value == (index + 1) * 10) }
        #expect(held.written == [[1], [2, 3]])
        await #expect(throws: GroupCommitEnded.self) { try await commit.submit(4) }
        #expect(held.written == [[1], [2, 3]])
    }
}
