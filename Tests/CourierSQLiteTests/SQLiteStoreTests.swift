import CourierCore
@testable import CourierSQLite
import CourierStoreConformance
import CourierTestSupport
import Foundation
import Logging
import SQLiteNIO
import Testing

@Suite struct SQLiteStoreTests {
    @Test(arguments: StoreConformance.cases)
    func conformsInMemory(_ conformanceCase: StoreConformanceCase) async throws {
        let store = try await SQLiteStore.inMemory(logger: Logger(label: "test"))
        let failures = await conformanceCase.run(on: store)
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        try await store.close()
    }

    @Test(arguments: StoreConformance.cases)
    func conformsOnDisk(_ conformanceCase: StoreConformanceCase) async throws {
        try await withDatabasePath { path in
            let store = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            let failures = await conformanceCase.run(on: store)
            #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
            try await store.close()
        }
    }

    @Test func dataSurvivesReopenAndMigrationsRunOnce() async throws {
        try await withDatabasePath { path in
            let first = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            try await first.createTeam(Team(id: "TEAM000001", name: "One", createdAt: Date(timeIntervalSince1970: 1_000)))
            let version = try await first.schemaVersion()
            try await first.close()

            let second = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            #expect(try await second.schemaVersion() == version)
            #expect(try await second.team(id: "TEAM000001")?.name == "One")
            try await second.close()
        }
    }

    /// A store closed by a cancelled task (a service group cancelled
    /// rather than shut down) still closes its connections: nothing it is
    /// asked afterwards reaches the file.
    @Test func closesEvenWhenTheClosingTaskIsCancelled() async throws {
        try await withDatabasePath { path in
            let store = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            try await store.createTeam(Team(id: "TEAM000001", name: "One", createdAt: Date(timeIntervalSince1970: 1_000)))
            let closing = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                #expect(Task.isCancelled)
                try await store.close()
            }
            try await closing.value
            await #expect(throws: (any Error).self, "the connection is closed") { try await store.team(id: "TEAM000001") }

            let reopened = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            #expect(try await reopened.team(id: "TEAM000001")?.name == "One")
            try await reopened.close()
        }
    }

    /// The delivery log is written by a connection that does not wait for
    /// the disk; everything else still commits durably. Both write the
    /// same file: what either wrote is there after reopening.
    @Test func theDeliveryLogAloneCommitsWithoutWaitingForTheDisk() async throws {
        try await withDatabasePath { path in
            let id = UUID()
            let first = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            let modes = try await first.synchronousModes()
            #expect(modes.store == 2)
            #expect(modes.log == 1)
            try await first.appendDeliveryEvents([DeliveryEvent(notificationID: id, bundleID: "com.example.one", kind: .accepted, at: Date(timeIntervalSince1970: 1))])
            try await first.createTeam(Team(id: "TEAM000001", name: "One", createdAt: Date(timeIntervalSince1970: 1_000)))
            try await first.appendDeliveryEvents([DeliveryEvent(notificationID: id, bundleID: "com.example.one", kind: .stored, at: Date(timeIntervalSince1970: 2))])
            #expect(try await first.deliveryEvents(notificationID: id).map(\.kind) == [.accepted, .stored])
            try await first.close()

            let second = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            #expect(try await second.deliveryEvents(notificationID: id).map(\.kind) == [.accepted, .stored])
            #expect(try await second.team(id: "TEAM000001")?.name == "One")
            try await second.close()

            // In memory there is one connection, and it commits durably.
            let memory = try await SQLiteStore.inMemory(logger: Logger(label: "test"))
            #expect(try await memory.synchronousModes().log == 2)
            try await memory.close()
        }
    }

    /// Pending notifications are written and removed several hundred rows
    /// per statement: a batch longer than one statement behaves as if its
    /// notifications were stored one after the other — each replaces what
    /// its (device, app) held before it, stored earlier or earlier in the
    /// batch — and removing works across statements too.
    /// The batch statements look each row up by the primary key; none
    /// scans the table of held notifications.
    @Test func batchStatementsSearchThePrimaryKey() async throws {
        try await withDatabasePath { path in
            try await SQLiteStore.open(path: path, logger: Logger(label: "test")).close()
            let connection = try await SQLiteConnection.open(storage: .file(path: path))
            func plan(_ sql: String, _ binds: [SQLiteData]) async throws -> [String] {
                try await connection.query("EXPLAIN QUERY PLAN " + sql, binds).compactMap { $0.column("detail")?.string }
            }
            let slot: [SQLiteData] = [.integer(1), .text("com.example.a"), .text("production")]
            let held = try await plan(SQLiteStore.heldPendingSQL(2), slot + slot)
            #expect(held.contains { $0.hasPrefix("SEARCH held USING INDEX") }, "\(held)")
            #expect(!held.contains { $0.hasPrefix("SCAN held") }, "\(held)")
            let removed = try await plan(SQLiteStore.removePendingSQL(2), slot + [.text("x")] + slot + [.text("y")])
            #expect(removed.contains { $0.hasPrefix("SEARCH pending_notifications USING INTEGER PRIMARY KEY") }, "\(removed)")
            #expect(removed.contains { $0.hasPrefix("SEARCH held USING INDEX") }, "\(removed)")
            #expect(!removed.contains { $0.hasPrefix("SCAN held") || $0.hasPrefix("SCAN pending_notifications") }, "\(removed)")
            try await connection.close()
        }
    }

    /// A version-1 database (delivery log keyed by text ids) is migrated
    /// to the current version with its events kept; events logged after
    /// the migration (packed batches) follow them.
    @Test func theDeliveryLogOfVersion1IsMigrated() async throws {
        try await withDatabasePath { path in
            let id = UUID()
            let connection = try await SQLiteConnection.open(storage: .file(path: path))
            _ = try await connection.query("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)")
            for statement in SQLiteMigrations.all[0].statements { _ = try await connection.query(statement) }
            _ = try await connection.query("INSERT INTO schema_migrations (version, applied_at) VALUES (1, 0)")
            _ = try await connection.query(
                "INSERT INTO delivery_log (notification_id, event, at, detail) VALUES (?, 'accepted', 1000, NULL), (?, 'delivered', 2000, 'x')",
                [.text(id.uuidString.lowercased()), .text(id.uuidString.lowercased())])
            try await connection.close()

            let store = try await SQLiteStore.open(path: path, logger: Logger(label: "test"))
            #expect(try await store.schemaVersion() == SQLiteMigrations.all.last?.version)
            try await store.appendDeliveryEvents([
                DeliveryEvent(notificationID: UUID(), bundleID: "com.example.one", kind: .accepted, at: Date(timeIntervalSince1970: 3)),
                DeliveryEvent(notificationID: id, bundleID: "com.example.one", kind: .acknowledged, at: Date(timeIntervalSince1970: 3)),
            ])
            let events = try await store.deliveryEvents(notificationID: id)
            #expect(events.map(\.kind) == [.accepted, .delivered, .acknowledged])
            #expect(events.map(\.at) == [Date(timeIntervalSince1970: 1), Date(timeIntervalSince1970: 2), Date(timeIntervalSince1970: 3)])
            #expect(events.map(\.detail) == [nil, "x", nil])
            try await store.close()
        }
    }
}

/// Runs `body` with the path of a database file in a new temporary
/// directory, which is removed afterwards.
private func withDatabasePath(_ body: (String) async throws -> Void) async throws {
    let directory = try temporaryDirectory("courier-sqlite")
    defer { removeTemporaryDirectory(directory) }
    try await body(directory + "/store.sqlite")
}
