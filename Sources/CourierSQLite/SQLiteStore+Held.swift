import CourierCore
import Foundation
import Logging
import SQLiteNIO
import Synchronization

/// Held notifications (`HeldNotificationStore`): store and forward.
extension SQLiteStore {
    /// Rows per multi-row statement: a batch of pending notifications is
    /// read and written a few hundred rows per statement, not one
    /// statement per row (each statement is a trip to SQLite's thread).
    static let rowsPerStatement = 256

    public func storePending(_ notifications: [PendingNotification]) async throws -> [PendingNotification?] {
        guard !notifications.isEmpty else { return [] }
        let batch = PendingBatch(notifications)
        let chunks = batch.written.slices(of: Self.rowsPerStatement)
        let held = try await atomically(writes: chunks.count) {
            var held: [PendingSlot: PendingNotification] = [:]
            for chunk in chunks {
                let slots = chunk.flatMap { PendingSlot($0).binds }
                for row in try await self.connection.query(Self.heldPendingSQL(chunk.count), slots) {
                    let old = try PendingNotification(row: row)
                    held[PendingSlot(old)] = old
                }
                _ = try await self.connection.query(
                    """
                    INSERT OR REPLACE INTO pending_notifications (device_id, bundle_id, environment, id, token, topic,
                        payload, expiration, priority, collapse_id, push_type, accepted_at, delivery_id)
                    VALUES \(Self.rows(chunk.count, of: 13))
                    """,
                    chunk.flatMap { pending in
                        let n = pending.notification
                        return PendingSlot(pending).binds + [
                            .text(n.id.lowercasedString), .bytes(n.token), .text(n.topic), .bytes(n.payload),
                            .millis(n.expiration), .integer(Int(n.priority.rawValue)), .optionalText(n.collapseID),
                            .optionalText(n.pushType), .millis(pending.acceptedAt), .text(n.deliveryID.lowercasedString),
                        ]
                    })
            }
            return held
        }
        return batch.replacements(of: held)
    }

    /// What `count` (device, app, environment) triples hold, each found by
    /// the primary key: a join, which SQLite plans as a key search in every
    /// version (`IN (VALUES …)` scans the table in older ones, 3.40 here).
    static func heldPendingSQL(_ count: Int) -> String {
        """
        WITH slot(device_id, bundle_id, environment) AS (VALUES \(rows(count, of: 3)))
        SELECT held.* FROM slot JOIN pending_notifications AS held USING (device_id, bundle_id, environment)
        """
    }

    /// Removes `count` held notifications named by (device, app,
    /// environment, delivery id) and returns the ones it removed.
    static func removePendingSQL(_ count: Int) -> String {
        """
        WITH named(device_id, bundle_id, environment, delivery_id) AS (VALUES \(rows(count, of: 4)))
        DELETE FROM pending_notifications WHERE rowid IN (
            SELECT held.rowid FROM named JOIN pending_notifications AS held USING (device_id, bundle_id, environment, delivery_id))
        RETURNING device_id, bundle_id, environment, delivery_id
        """
    }

    /// `count` rows of `columns` placeholders each: "(?, ?), (?, ?)".
    static func rows(_ count: Int, of columns: Int) -> String {
        let row = "(" + Array(repeating: "?", count: columns).joined(separator: ", ") + ")"
        return Array(repeating: row, count: count).joined(separator: ", ")
    }

    public func pendingCount() async throws -> Int {
        try await query("SELECT count(*) AS held FROM pending_notifications").first?.column("held")?.integer ?? 0
    }

    public func pending(deviceID: UInt64, environment: Environment) async throws -> [PendingNotification] {
        try await query(
            "SELECT * FROM pending_notifications WHERE device_id = ? AND environment = ? ORDER BY accepted_at, bundle_id",
            [.device(deviceID), .text(environment.rawValue)]
        ).map(PendingNotification.init(row:))
    }

    public func removePending(_ references: [PendingReference]) async throws -> [Bool] {
        guard !references.isEmpty else { return [] }
        let chunks = references.slices(of: Self.rowsPerStatement)
        var removed = try await atomically(writes: chunks.count) {
            var removed = Set<PendingReference>()
            for chunk in chunks {
                let binds = chunk.flatMap { PendingSlot($0).binds + [.text($0.deliveryID.lowercasedString)] }
                for row in try await self.connection.query(Self.removePendingSQL(chunk.count), binds) {
                    removed.insert(
                        PendingReference(
                            deviceID: try row.device("device_id"), bundleID: try row.text("bundle_id"),
                            environment: try row.environment("environment"), deliveryID: try row.uuid("delivery_id")))
                }
            }
            return removed
        }
        // A reference named twice: the first removed the row.
        return references.map { removed.remove($0) != nil }
    }

    public func removeExpiredPending(before date: Date) async throws -> [PendingNotification] {
        try await transaction { try await self.takePending(where: "expiration IS NOT NULL AND expiration < ?", [.millis(date)]) }
    }

    public func removePending(acceptedBefore date: Date) async throws -> [PendingNotification] {
        try await transaction { try await self.takePending(where: "accepted_at < ?", [.millis(date)]) }
    }

    /// Removes and returns the held notifications that meet `condition`,
    /// oldest first; the caller holds a transaction.
    func takePending(where condition: String, _ binds: [SQLiteData]) async throws -> [PendingNotification] {
        let rows = try await connection.query(
            "SELECT * FROM pending_notifications WHERE \(condition) ORDER BY accepted_at", binds)
        _ = try await connection.query("DELETE FROM pending_notifications WHERE \(condition)", binds)
        return try rows.map(PendingNotification.init(row:))
    }
}
