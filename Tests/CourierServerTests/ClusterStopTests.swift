import CourierCore
@testable import CourierPostgres
@testable import CourierServer
import CourierTestSupport
import Foundation
import Logging
import Testing

/// A node's stop has a deadline that holds even when the store does not
/// answer: the leaving is cancelled and ends (the store closes the
/// statement's connection), inside one task group. Real PostgreSQL, with
/// the nodes table locked by another transaction until the test lets go.
@Suite(.enabled(if: PostgresServer.available, Comment(rawValue: PostgresServer.unavailable)), .timeLimit(.minutes(1)))
struct ClusterStopTests {
    @Test func aNodeWhoseStoreDoesNotAnswerStopsAtItsLimit() async throws {
        let logger = Logger(label: "stop-test")
        let (store, cluster) = try await ClusterOutboxTests.cluster(logger: logger)
        try await cluster.start()
        #expect(try await store.liveNodes() == ["node-a"])

        // Another transaction holds the nodes table until `release`.
        let (locked, lockedSignal) = AsyncStream.makeStream(of: Void.self)
        let (release, releaseSignal) = AsyncStream.makeStream(of: Void.self)
        let holder = Task {
            try await store.transaction { connection in
                try await store.query("LOCK TABLE nodes IN ACCESS EXCLUSIVE MODE", on: connection)
                lockedSignal.yield()
                for await _ in release { break }
            }
        }
        var lockedIterator = locked.makeAsyncIterator()
        await lockedIterator.next()

        // Waits for the lock; left at the limit, the node still recorded.
        await cluster.stop(within: .milliseconds(300))
        releaseSignal.yield()
        try await holder.value
        #expect(try await store.liveNodes() == ["node-a"])

        // With the store answering, the node is removed.
        let (_, again) = try await ClusterOutboxTests.cluster(node: "node-b", on: store, logger: logger)
        try await again.start()
        await again.stop(within: .seconds(30))
        #expect(try await store.liveNodes() == ["node-a"])
        await store.close()
    }
}
