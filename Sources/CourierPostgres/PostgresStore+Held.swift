import CourierCore
import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO

/// Held notifications (`HeldNotificationStore`): store and forward.
extension PostgresStore {
    /// Rows per multi-row statement (13 values each, within PostgreSQL's
    /// 65,535 parameters).
    static let rowsPerStatement = 256

    public func storePending(_ notifications: [PendingNotification]) async throws -> [PendingNotification?] {
        guard !notifications.isEmpty else { return [] }
        // In key order, so that two nodes' batches lock shared rows in the same order.
        let batch = PendingBatch(notifications)
        let written = batch.written.sorted { PendingSlot($0) < PendingSlot($1) }
        let held = try await transaction { connection in
            var held: [PendingSlot: PendingNotification] = [:]
            for chunk in written.slices(of: Self.rowsPerStatement) {
                // What the slots hold, locked until the commit.
                held.merge(try await self.lockHeld(chunk.map(PendingSlot.init), on: connection)) { $1 }
                // The empty slots are filled; a slot another node filled meanwhile is not (ON CONFLICT DO NOTHING) …
                let empty = chunk.filter { held[PendingSlot($0)] == nil }
                var filled = Set<PendingSlot>()
                if !empty.isEmpty {
                    filled = Set(
                        try await self.query(
                            Self.insertPendingSQL(empty.count, onConflict: "DO NOTHING RETURNING device_id, bundle_id, environment"),
                            empty.flatMap(Self.values), on: connection
                        ).map(PendingSlot.init(row:)))
                }
                // … it is read (it has committed) and replaced with the rest.
                let racing = empty.map(PendingSlot.init).filter { !filled.contains($0) }
                if !racing.isEmpty { held.merge(try await self.lockHeld(racing, on: connection)) { $1 } }
                let replacing = chunk.filter { !filled.contains(PendingSlot($0)) }
                if !replacing.isEmpty {
                    try await self.query(
                        Self.insertPendingSQL(
                            replacing.count,
                            onConflict: """
                                (device_id, bundle_id, environment) DO UPDATE SET
                                    id = excluded.id, token = excluded.token, topic = excluded.topic, payload = excluded.payload,
                                    expiration = excluded.expiration, priority = excluded.priority, collapse_id = excluded.collapse_id,
                                    push_type = excluded.push_type, accepted_at = excluded.accepted_at, delivery_id = excluded.delivery_id
                                """),
                        replacing.flatMap(Self.values), on: connection)
                }
            }
            return held
        }
        return batch.replacements(of: held)
    }

    /// The notifications `slots` hold, each row locked until the transaction ends.
    private func lockHeld(_ slots: [PendingSlot], on connection: PostgresConnection) async throws -> [PendingSlot: PendingNotification] {
        let rows = try await query(
            """
            SELECT held.* FROM pending_notifications AS held
            JOIN (VALUES \(Self.rows(slots.count, of: 3))) AS slot(device_id, bundle_id, environment) USING (device_id, bundle_id, environment)
            FOR UPDATE OF held
            """, slots.flatMap(\.values), on: connection)
        var held: [PendingSlot: PendingNotification] = [:]
        for row in rows {
            let pending = try PendingNotification(row: row)
            held[PendingSlot(pending)] = pending
        }
        return held
    }

    private static func insertPendingSQL(_ count: Int, onConflict: String) -> String {
        """
        INSERT INTO pending_notifications (device_id, bundle_id, environment, id, token, topic,
            payload, expiration, priority, collapse_id, push_type, accepted_at, delivery_id)
        VALUES \(rows(count, of: 13))
        ON CONFLICT \(onConflict)
        """
    }

    /// A broadcast's columns, in the order of `stored_broadcasts` and `relayed_broadcasts`.
    static func values(_ broadcast: StoredBroadcast) -> [Value] {
        let n = broadcast.notification
        return [
            .text(broadcast.environment.rawValue), .text(broadcast.channelID), .uuid(n.id), .uuid(n.deliveryID), .text(n.topic), .bytes(n.payload),
            .millis(n.expiration), .integer(Int(n.priority.rawValue)), .optionalText(n.pushType), .millis(broadcast.storedAt),
        ]
    }

    static func values(_ pending: PendingNotification) -> [Value] {
        let n = pending.notification
        return PendingSlot(pending).values + [
            .uuid(n.id), .bytes(n.token), .text(n.topic), .bytes(n.payload), .millis(n.expiration), .integer(Int(n.priority.rawValue)),
            .optionalText(n.collapseID), .optionalText(n.pushType), .millis(pending.acceptedAt), .uuid(n.deliveryID),
        ]
    }

    /// `count` rows of `columns` numbered parameters each: "($1, $2), ($3, $4)".
    static func rows(_ count: Int, of columns: Int) -> String {
        (0..<count).map { row in
            "(" + (1...columns).map { "$\(row * columns + $0)" }.joined(separator: ", ") + ")"
        }.joined(separator: ", ")
    }

    public func pendingCount() async throws -> Int {
        try await query("SELECT count(*) AS held FROM pending_notifications").first?.integer("held") ?? 0
    }

    public func pending(deviceID: UInt64, environment: Environment) async throws -> [PendingNotification] {
        try await query(
            "SELECT * FROM pending_notifications WHERE device_id = $1 AND environment = $2 ORDER BY accepted_at, bundle_id",
            [.device(deviceID), .text(environment.rawValue)]
        ).map(PendingNotification.init(row:))
    }

    public func removePending(_ references: [PendingReference]) async throws -> [Bool] {
        guard !references.isEmpty else { return [] }
        var removed = try await transaction { connection in
            var removed = Set<PendingReference>()
            for chunk in references.slices(of: Self.rowsPerStatement) {
                let rows = try await self.query(
                    """
                    DELETE FROM pending_notifications AS held
                    USING (VALUES \(Self.rows(chunk.count, of: 4))) AS named(device_id, bundle_id, environment, delivery_id)
                    WHERE held.device_id = named.device_id AND held.bundle_id = named.bundle_id
                        AND held.environment = named.environment AND held.delivery_id = named.delivery_id
                    RETURNING held.device_id, held.bundle_id, held.environment, held.delivery_id
                    """, chunk.flatMap { PendingSlot($0).values + [.uuid($0.deliveryID)] }, on: connection)
                for row in rows {
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
        try await transaction { try await self.takePending(where: "expiration IS NOT NULL AND expiration < $1", [.millis(date)], on: $0) }
    }

    public func removePending(acceptedBefore date: Date) async throws -> [PendingNotification] {
        try await transaction { try await self.takePending(where: "accepted_at < $1", [.millis(date)], on: $0) }
    }

    /// Removes and returns the held notifications that meet `condition`, oldest first.
    func takePending(where condition: String, _ values: [Value], on connection: PostgresConnection) async throws -> [PendingNotification] {
        try await query("DELETE FROM pending_notifications WHERE \(condition) RETURNING *", values, on: connection)
            .map(PendingNotification.init(row:))
            .sorted { $0.acceptedAt < $1.acceptedAt }
    }
}
