import CourierCore
import CourierPostgres
@testable import CourierServer
import CourierTestSupport
import Foundation
import Logging
import Testing

/// What a node sends the others goes through one ordered outbox that the
/// cluster's service runs (`Cluster.send`, `runOutbox`), not a task per
/// message: the others hear of a registration's change and a device's
/// reset in the order they were made. Real PostgreSQL, its `NOTIFY`.
@Suite(.enabled(if: PostgresServer.available, Comment(rawValue: PostgresServer.unavailable)), .timeLimit(.minutes(1)))
struct ClusterOutboxTests {
    @Test func messagesReachTheOtherNodesInTheOrderTheyWereAsked() async throws {
        let (store, cluster) = try await Self.cluster(logger: Logger(label: "outbox-test"))
        let (listening, ready) = AsyncStream.makeStream(of: Void.self)
        let messages = store.messages(on: [Cluster.broadcastChannel]) { ready.yield() }
        var subscribed = listening.makeAsyncIterator()
        await subscribed.next()
        let outbox = Task { await cluster.runOutbox() }

        // Registrations and resets, alternating, each naming its number as the device.
        let count = 200
        for number in 0..<count {
            if number.isMultiple(of: 2) {
                cluster.registrationChanged(deviceID: UInt64(number), bundleID: "com.example.demo", environment: .production)
            } else {
                cluster.deviceReset(UInt64(number))
            }
        }
        var heard: [UInt64] = []
        for await message in messages {
            switch ClusterMessage(text: message.payload) {
            case .registrationChanged(_, _, let deviceID, _), .deviceReset(_, let deviceID): heard.append(deviceID)
            default: Issue.record("an unexpected message: \(message.payload)")
            }
            if heard.count == count { break }
        }
        #expect(heard == (0..<count).map(UInt64.init))
        outbox.cancel()
        await store.close()
    }

    /// A fresh database of the shared test server, and a node's cluster on it
    /// (`node`); more nodes on the same store with `on:`.
    static func cluster(node: String = "node-a", on existing: PostgresStore? = nil, logger: Logger) async throws -> (PostgresStore, Cluster) {
        let store: PostgresStore
        if let existing {
            store = existing
        } else {
            let server = try await PostgresServer.shared()
            let settings = PostgresSettings(
                host: server.host, port: server.port, database: try await server.createDatabase(), user: server.user, password: server.password)
            store = try await PostgresStore.open(settings, logger: logger)
        }
        let clock = ManualWallClock(Date())
        let cluster = Cluster(
            node: node, coordination: store, faults: FaultInjector(), inbox: NotificationInbox(capacity: 10, maxAge: 60, clock: clock, node: node),
            heartbeatInterval: 1, nodeTimeout: 10, clock: clock, logger: logger)
        return (store, cluster)
    }
}
