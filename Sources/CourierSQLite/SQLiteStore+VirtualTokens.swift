import CourierCore
import Foundation
import SQLiteNIO

/// Virtual tokens (`Store`'s "Virtual tokens").
extension SQLiteStore {
    public func addVirtualTokens(_ tokens: [VirtualToken]) async throws -> [[UInt8]] {
        guard !tokens.isEmpty else { return [] }
        let chunks = tokens.slices(of: Self.rowsPerStatement)
        return try await transaction {
            var added: [[UInt8]] = []
            for chunk in chunks {
                added += try await self.connection.query(
                    """
                    INSERT INTO virtual_tokens (environment, bundle_id, token, offline, registered_at, uninstalled_at)
                    VALUES \(Self.rows(chunk.count, of: 6))
                    ON CONFLICT DO NOTHING RETURNING token
                    """,
                    chunk.flatMap {
                        [
                            .text($0.environment.rawValue), .text($0.bundleID), .bytes($0.token), .integer($0.offline ? 1 : 0), .millis($0.registeredAt),
                            .millis($0.uninstalledAt),
                        ]
                    }
                ).map { try $0.bytes("token") }
            }
            return added
        }
    }

    public func virtualToken(environment: Environment, bundleID: String, token: [UInt8]) async throws -> VirtualToken? {
        try await query(
            "SELECT * FROM virtual_tokens WHERE environment = ? AND bundle_id = ? AND token = ?",
            [.text(environment.rawValue), .text(bundleID), .bytes(token)]
        ).first.map(VirtualToken.init(row:))
    }

    public func virtualTokens(environment: Environment?, bundleID: String?, after: [UInt8]?, limit: Int?) async throws -> [VirtualToken] {
        var conditions: [String] = []
        var binds: [SQLiteData] = []
        if let environment {
            conditions.append("environment = ?")
            binds.append(.text(environment.rawValue))
        }
        if let bundleID {
            conditions.append("bundle_id = ?")
            binds.append(.text(bundleID))
        }
        if let after {
            conditions.append("token > ?")
            binds.append(.bytes(after))
        }
        let whereClause = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let limitClause = limit.map { "LIMIT \($0)" } ?? ""
        return try await query("SELECT * FROM virtual_tokens \(whereClause) ORDER BY environment, bundle_id, token \(limitClause)", binds)
            .map(VirtualToken.init(row:))
    }

    public func virtualTokenCount(environment: Environment, bundleID: String) async throws -> Int {
        try await query(
            "SELECT count(*) AS n FROM virtual_tokens WHERE environment = ? AND bundle_id = ?", [.text(environment.rawValue), .text(bundleID)]
        ).first?.column("n")?.integer ?? 0
    }

    public func updateVirtualToken(
        environment: Environment, bundleID: String, token: [UInt8], offline: Bool?, uninstalled: Date??
    ) async throws -> VirtualToken? {
        var sets: [String] = []
        var binds: [SQLiteData] = []
        if let offline {
            sets.append("offline = ?")
            binds.append(.integer(offline ? 1 : 0))
        }
        if let uninstalled {
            sets.append("uninstalled_at = ?")
            binds.append(.millis(uninstalled))
        }
        return try await query(
            "UPDATE virtual_tokens SET \((sets.isEmpty ? ["offline = offline"] : sets).joined(separator: ", ")) WHERE environment = ? AND bundle_id = ? AND token = ? RETURNING *",
            binds + [.text(environment.rawValue), .text(bundleID), .bytes(token)]
        ).first.map(VirtualToken.init(row:))
    }

    public func removeVirtualTokens(environment: Environment, bundleID: String, tokens: [[UInt8]]?) async throws -> Int {
        let app: [SQLiteData] = [.text(environment.rawValue), .text(bundleID)]
        guard let tokens else {
            return try await query("DELETE FROM virtual_tokens WHERE environment = ? AND bundle_id = ? RETURNING token", app).count
        }
        guard !tokens.isEmpty else { return 0 }
        let chunks = tokens.slices(of: Self.rowsPerStatement)
        return try await transaction {
            var removed = 0
            for chunk in chunks {
                removed += try await self.connection.query(
                    """
                    DELETE FROM virtual_tokens WHERE environment = ? AND bundle_id = ?
                    AND token IN (\(Array(repeating: "?", count: chunk.count).joined(separator: ", "))) RETURNING token
                    """, app + chunk.map { .bytes($0) }
                ).count
            }
            return removed
        }
    }
}
