import CourierCore
@testable import CourierPostgres
import CourierStoreConformance
import CourierTestSupport
import Foundation
import Logging
import Testing

/// The PostgreSQL store against a server of the tests' own (`PostgresServer`).
@Suite(.enabled(if: PostgresServer.available, Comment(rawValue: PostgresServer.unavailable)))
struct PostgresStoreTests {
    @Test(arguments: StoreConformance.cases)
    func conforms(_ conformanceCase: StoreConformanceCase) async throws {
        let store = try await openNewStore()
        let failures = await conformanceCase.run(on: store)
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        await store.close()
    }

    @Test func dataSurvivesReopenAndNodesStartingAtOnceMigrateOnce() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        // Three nodes open the new database at once: one migrates, the others wait and find it done.
        let stores = try await withThrowingTaskGroup(of: PostgresStore.self) { group in
            for _ in 0..<3 { group.addTask { try await PostgresStore.open(settings(server, database), logger: Logger(label: "test")) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let versions = try await stores.asyncMap { try await $0.schemaVersion() }
        #expect(versions == Array(repeating: PostgresMigrations.all.last!.version, count: 3))
        try await stores[0].createTeam(Team(id: "TEAM000001", name: "One", createdAt: Date(timeIntervalSince1970: 1_000)))
        #expect(try await stores[2].team(id: "TEAM000001")?.name == "One", "another node reads what one wrote")
        for store in stores { await store.close() }

        let reopened = try await PostgresStore.open(settings(server, database), logger: Logger(label: "test"))
        #expect(try await reopened.team(id: "TEAM000001")?.name == "One")
        #expect(try await reopened.schemaVersion() == versions[0])
        await reopened.close()
    }

    /// Inbox entries shared by nodes: each node reads the others' after
    /// its cursor for each (all of a node it has none for), never its own;
    /// pruning keeps a node's newest and drops the old of every node.
    @Test func sharedInboxEntriesAreReadAfterEachNodesCursorAndPruned() async throws {
        let server = try await PostgresServer.shared()
        let store = try await PostgresStore.open(settings(server, try await server.createDatabase()), logger: Logger(label: "test"))
        func entries(_ node: String, _ sequences: ClosedRange<Int64>) -> [SharedInboxEntry] {
            sequences.map { SharedInboxEntry(node: node, sequence: $0, format: 1, bytes: [UInt8(truncatingIfNeeded: $0), 0xFF, 0xFF]) }
        }
        #expect(try await store.lastSharedInboxSequence(node: "a") == 0)
        try await store.shareInbox(entries("a", 1...300) + entries("b", 10...12))
        // Written twice (a retried batch): kept once.
        try await store.shareInbox(entries("b", 12...13))
        #expect(try await store.lastSharedInboxSequence(node: "a") == 300)
        #expect(try await store.lastSharedInboxSequence(node: "b") == 13)

        let forC = try await store.sharedInbox(except: "c", after: ["a": 298], limit: 10)
        #expect(forC.map { "\($0.node)\($0.sequence)" } == ["a299", "a300", "b10", "b11", "b12", "b13"])
        #expect(forC.first?.bytes == [43, 0xFF, 0xFF])
        let forB = try await store.sharedInbox(except: "b", after: [:], limit: 1000)
        #expect(forB.count == 300 && forB.allSatisfy { $0.node == "a" })
        #expect(try await store.sharedInbox(except: "a", after: ["b": 13], limit: 10).isEmpty)
        #expect(try await store.sharedInbox(except: "c", after: ["a": 0], limit: 2).map(\.sequence) == [1, 2])

        // a keeps its newest 100; nothing is older than an hour.
        try await store.pruneSharedInbox(node: "a", through: 200, olderThan: 3600)
        #expect(try await store.sharedInbox(except: "c", after: [:], limit: 1000).count == 104)
        // Every node's entries older than 0 s go.
        try await store.query("UPDATE inbox_entries SET written_at = written_at - 10")
        try await store.pruneSharedInbox(node: "b", through: 0, olderThan: 0.001)
        #expect(try await store.sharedInbox(except: "c", after: [:], limit: 1000).isEmpty)
        try await store.shareInbox(entries("b", 14...15))
        try await store.clearSharedInbox()
        #expect(try await store.sharedInbox(except: "c", after: [:], limit: 1000).isEmpty)
        await store.close()
    }

    /// A node older than the database's schema refuses to run on it.
    @Test func aSchemaNewerThanTheNodeIsRefused() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let store = try await PostgresStore.open(settings(server, database), logger: Logger(label: "test"))
        try await store.query("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)")
        await store.close()
        let error = await #expect(throws: StoreError.self) { try await PostgresStore.open(settings(server, database), logger: Logger(label: "test")) }
        #expect(
            error?.message == "the database's schema is version 99, newer than this Courier's (\(PostgresMigrations.all.last!.version)): upgrade this node")
    }

    /// With `tls: require` the connections are TLS, the server's
    /// certificate checked against the CA given; one of a CA not given is
    /// refused with one line.
    @Test func tlsToTheDatabaseWhenRequired() async throws {
        let server = try await PostgresServer.shared()
        var settings = settings(server, try await server.createDatabase())
        settings.tls = .required(caFile: server.caPath)
        let store = try await PostgresStore.open(settings, logger: Logger(label: "test"))
        let ssl = try await store.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").first?.cell("ssl").decode(Bool.self)
        #expect(ssl == true, "the connection is TLS")
        await store.close()

        // The system's CAs do not include the tests' own.
        settings.tls = .required(caFile: nil)
        let error = await #expect(throws: StoreError.self) { try await PostgresStore.open(settings, logger: Logger(label: "test")) }
        #expect(error?.message.hasPrefix("cannot connect to postgresql://courier@127.0.0.1:\(server.port)/") == true, "\(String(describing: error))")
        #expect(error?.message.contains("\n") == false)
    }

    @Test func anUnreachableDatabaseIsOneLineNamingIt() async throws {
        let port = try freePort()
        let settings = PostgresSettings(host: "127.0.0.1", port: port, database: "courier", user: "courier", password: "secret")
        let error = await #expect(throws: StoreError.self) { try await PostgresStore.open(settings, logger: Logger(label: "test")) }
        #expect(error?.code == .unavailable)
        #expect(
            error?.message == "cannot connect to postgresql://courier@127.0.0.1:\(port)/courier: connection refused (is PostgreSQL running there, on this port?)",
            "\(String(describing: error))")
        #expect(error?.message.contains("\n") == false)
        #expect(error?.message.contains("secret") == false)
    }

    @Test func aWrongPasswordIsOneLineSayingSo() async throws {
        let server = try await PostgresServer.shared()
        var settings = settings(server, "postgres")
        settings.password = "not-the-password"
        let error = await #expect(throws: StoreError.self) { try await PostgresStore.open(settings, logger: Logger(label: "test")) }
        #expect(error?.message.contains("password authentication failed for user \"courier\"") == true, "\(String(describing: error))")
        #expect(error?.message.contains("not-the-password") == false)
    }

    /// Two nodes store notifications for the same devices at once: each
    /// notification is either the one held at the end or reported replaced
    /// by exactly one later store, whichever node stored it.
    @Test func nodesStoringForTheSameDevicesAtOnceReplaceEachNotificationOnce() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let nodes = [
            try await PostgresStore.open(settings(server, database), logger: Logger(label: "test")),
            try await PostgresStore.open(settings(server, database), logger: Logger(label: "test")),
        ]
        let devices = UInt64(1)...UInt64(40)
        func pending(_ device: UInt64) -> PendingNotification {
            PendingNotification(
                deviceID: device, bundleID: "com.example.a", environment: .production,
                notification: PushNotification(
                    id: UUID(), token: [1], topic: "com.example.a", payload: Array("{}".utf8), expiration: Date(timeIntervalSince1970: 9_999_999_999),
                    priority: .immediate),
                acceptedAt: Date(timeIntervalSince1970: 1))
        }
        // Each node stores 30 batches, each for every device (in opposite orders on the two nodes).
        let outcomes = try await withThrowingTaskGroup(of: [(stored: UUID, replaced: UUID?)].self) { group in
            for (index, node) in nodes.enumerated() {
                group.addTask {
                    var outcomes: [(stored: UUID, replaced: UUID?)] = []
                    for _ in 0..<30 {
                        let batch = (index == 0 ? Array(devices) : devices.reversed()).map(pending)
                        let replaced = try await node.storePending(batch)
                        outcomes += zip(batch, replaced).map { ($0.notification.id, $1?.notification.id) }
                    }
                    return outcomes
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        var held = Set<UUID>()
        for device in devices { held.formUnion(try await nodes[0].pending(deviceID: device, environment: .production).map(\.notification.id)) }
        #expect(held.count == devices.count)
        let replaced = outcomes.compactMap(\.replaced)
        #expect(Set(replaced).count == replaced.count, "no notification reported replaced twice")
        let lost = Set(outcomes.map(\.stored)).subtracting(held).subtracting(replaced)
        #expect(lost.isEmpty, "\(lost.count) stored notifications are neither held nor reported replaced")
        #expect(Set(replaced).intersection(held).isEmpty, "none both held and reported replaced")
        #expect(replaced.count == outcomes.count - devices.count, "each device's first store replaced nothing, every later one something")
        for node in nodes { await node.close() }
    }
}

private func settings(_ server: PostgresServer, _ database: String) -> PostgresSettings {
    PostgresSettings(host: server.host, port: server.port, database: database, user: server.user, password: server.password)
}

private func openNewStore() async throws -> PostgresStore {
    let server = try await PostgresServer.shared()
    return try await PostgresStore.open(settings(server, try await server.createDatabase()), logger: Logger(label: "test"))
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
