import CourierCore
import CourierSQLite
import CourierStoreConformance
import Foundation
import Logging
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
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-sqlite-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await SQLiteStore.open(path: directory.appendingPathComponent("store.sqlite").path, logger: Logger(label: "test"))
        let failures = await conformanceCase.run(on: store)
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        try await store.close()
    }

    @Test func dataSurvivesReopenAndMigrationsRunOnce() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-sqlite-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("store.sqlite").path
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
