import CourierCore
import Foundation
import PostgresNIO

/// Virtual tokens (`Store`'s "Virtual tokens").
extension PostgresStore {
    public func addVirtualTokens(_ tokens: [VirtualToken]) async throws -> [[UInt8]] {
        guard !tokens.isEmpty else { return [] }
        return try await transaction { connection in
            var added: [[UInt8]] = []
            for chunk in tokens.slices(of: Self.rowsPerStatement) {
                added += try await self.query(
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
                    }, on: connection
                ).map { try $0.bytes("token") }
            }
            return added
        }
    }

    public func virtualToken(environment: Environment, bundleID: String, token: [UInt8]) async throws -> VirtualToken? {
        try await query(
            "SELECT * FROM virtual_tokens WHERE environment = $1 AND bundle_id = $2 AND token = $3",
            [.text(environment.rawValue), .text(bundleID), .bytes(token)]
        ).first.map(VirtualToken.init(row:))
    }

    public func virtualTokens(environment: Environment?, bundleID: String?, after: [UInt8]?, limit: Int?) async throws -> [VirtualToken] {
        var conditions: [String] = []
        var values: [Value] = []
        func condition(_ text: String, _ value: Value) {
            values.append(value)
            conditions.append("\(text) $\(values.count)")
        }
        if let environment { condition("environment =", .text(environment.rawValue)) }
        if let bundleID { condition("bundle_id =", .text(bundleID)) }
        if let after { condition("token >", .bytes(after)) }
        let whereClause = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let limitClause = limit.map { "LIMIT \($0)" } ?? ""
        return try await query("SELECT * FROM virtual_tokens \(whereClause) ORDER BY environment, bundle_id, token \(limitClause)", values)
            .map(VirtualToken.init(row:))
    }

    public func virtualTokenCount(environment: Environment, bundleID: String) async throws -> Int {
        try await query(
            "SELECT count(*)::BIGINT AS n FROM virtual_tokens WHERE environment = $1 AND bundle_id = $2", [.text(environment.rawValue), .text(bundleID)]
        ).first.map { try $0.integer("n") } ?? 0
    }

    public func updateVirtualToken(
        environment: Environment, bundleID: String, token: [UInt8], offline: Bool?, uninstalled: Date??
    ) async throws -> VirtualToken? {
        var values: [Value] = [.text(environment.rawValue), .text(bundleID), .bytes(token)]
        var sets: [String] = []
        if let offline {
            values.append(.integer(offline ? 1 : 0))
            sets.append("offline = $\(values.count)")
        }
        if let uninstalled {
            values.append(.millis(uninstalled))
            sets.append("uninstalled_at = $\(values.count)")
        }
        return try await query(
            "UPDATE virtual_tokens SET \((sets.isEmpty ? ["offline = offline"] : sets).joined(separator: ", ")) WHERE environment = $1 AND bundle_id = $2 AND token = $3 RETURNING *", values
        ).first.map(VirtualToken.init(row:))
    }

    public func removeVirtualTokens(environment: Environment, bundleID: String, tokens: [[UInt8]]?) async throws -> Int {
        let app: [Value] = [.text(environment.rawValue), .text(bundleID)]
        guard let tokens else {
            return try await query("DELETE FROM virtual_tokens WHERE environment = $1 AND bundle_id = $2 RETURNING token", app).count
        }
        guard !tokens.isEmpty else { return 0 }
        return try await transaction { connection in
            var removed = 0
            for chunk in tokens.slices(of: Self.rowsPerStatement) {
                let placeholders = (0..<chunk.count).map { "$\($0 + 3)" }.joined(separator: ", ")
                removed += try await self.query(
                    "DELETE FROM virtual_tokens WHERE environment = $1 AND bundle_id = $2 AND token IN (\(placeholders)) RETURNING token",
                    app + chunk.map { .bytes($0) }, on: connection
                ).count
            }
            return removed
        }
    }
}
