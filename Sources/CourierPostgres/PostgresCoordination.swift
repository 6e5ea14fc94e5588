import CourierCore
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// Several nodes on one PostgreSQL: heartbeats in `nodes`, presence in
/// `device_presence`, messages by `NOTIFY` (`pg_notify`) and `LISTEN` on a
/// connection of their own.
extension PostgresStore: NodeCoordination {
    /// The store's clock in milliseconds, in SQL.
    private static let now = "(extract(epoch from clock_timestamp()) * 1000)::bigint"

    public func heartbeat(node: String, peerAddress: String?) async throws -> Bool {
        // xmax is 0 on a row this statement inserted (not updated).
        let rows = try await query(
            """
            INSERT INTO nodes (id, started_at, heartbeat_at, peer_address) VALUES ($1, \(Self.now), \(Self.now), $2)
            ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, peer_address = excluded.peer_address
            RETURNING (xmax = 0) AS inserted
            """, [.text(node), peerAddress.map(Value.text) ?? .null])
        return try rows.first?.cell("inserted").decode(Bool.self) ?? false
    }

    public func peerAddresses() async throws -> [String: String] {
        var addresses: [String: String] = [:]
        for row in try await query("SELECT id, peer_address FROM nodes WHERE peer_address IS NOT NULL") {
            addresses[try row.text("id")] = try row.text("peer_address")
        }
        return addresses
    }

    public func removeNodes(silentFor timeout: Double) async throws -> [String] {
        try await transaction { connection in
            let gone = try await self.query(
                "DELETE FROM nodes WHERE heartbeat_at < \(Self.now) - $1 RETURNING id", [.integer(Int(timeout * 1000))], on: connection
            ).map { try $0.text("id") }
            for node in gone { try await self.removeNodeRows(node, on: connection) }
            return gone.sorted()
        }
    }

    public func liveNodes() async throws -> [String] {
        try await query("SELECT id FROM nodes ORDER BY id").map { try $0.text("id") }
    }

    public func removeNode(_ node: String) async throws {
        try await transaction { connection in
            try await self.removeNodeRows(node, on: connection)
            try await self.query("DELETE FROM nodes WHERE id = $1", [.text(node)], on: connection)
        }
    }

    /// What a node leaves behind: its devices' presence, and what was handed
    /// over to it and not taken (what may be stored is held besides).
    private func removeNodeRows(_ node: String, on connection: PostgresConnection) async throws {
        try await query("DELETE FROM device_presence WHERE node_id = $1", [.text(node)], on: connection)
        try await query("DELETE FROM handovers WHERE node_id = $1", [.text(node)], on: connection)
    }

    public func recordPresence(deviceID: UInt64, environment: Environment, node: String, at date: Date) async throws -> Int64 {
        let rows = try await query(
            """
            INSERT INTO device_presence (device_id, environment, node_id, generation, since)
            VALUES ($1, $2, $3, nextval('presence_generation'), $4)
            ON CONFLICT (device_id, environment) DO UPDATE SET
                node_id = excluded.node_id, generation = excluded.generation, since = excluded.since
                WHERE device_presence.generation < excluded.generation
            RETURNING generation
            """, [.device(deviceID), .text(environment.rawValue), .text(node), .millis(date)])
        // None: a connection made after this one (elsewhere) committed first and stays.
        return Int64(try rows.first?.integer("generation") ?? 0)
    }

    public func removePresence(deviceID: UInt64, environment: Environment, generation: Int64) async throws -> Bool {
        !(try await query(
            "DELETE FROM device_presence WHERE device_id = $1 AND environment = $2 AND generation = $3 RETURNING generation",
            [.device(deviceID), .text(environment.rawValue), .integer(Int(generation))]
        ).isEmpty)
    }

    public func presences() async throws -> [DevicePresenceRecord] {
        try await query(
            "SELECT device_id, environment, node_id, generation, since FROM device_presence JOIN nodes ON nodes.id = device_presence.node_id"
        ).map {
            DevicePresenceRecord(
                deviceID: try $0.device("device_id"), environment: try $0.environment("environment"), node: try $0.text("node_id"),
                generation: Int64(try $0.integer("generation")), since: try $0.date("since"))
        }
    }

    public func handOver(_ notifications: [HandedOver]) async throws {
        // Transient rows, one statement a chunk that does not wait for the disk
        // (what may be stored is held durably besides).
        for chunk in notifications.slices(of: Self.rowsPerStatement) {
            try await query(
                """
                INSERT INTO handovers (node_id, device_id, bundle_id, environment, id, token, topic,
                    payload, expiration, priority, collapse_id, push_type, accepted_at, delivery_id)
                VALUES \(Self.rows(chunk.count, of: 14))
                """, chunk.flatMap { [Value.text($0.node)] + Self.values($0.pending) }, relaxed: true)
        }
    }

    public func takeHandedOver(node: String) async throws -> [PendingNotification] {
        // Taking them need not wait for the disk either: lost with a crash, they are only taken again.
        try await query("DELETE FROM handovers WHERE node_id = $1 RETURNING *", [.text(node)], relaxed: true)
            .map { (seq: try $0.integer("seq"), pending: try PendingNotification(row: $0)) }
            .sorted { $0.seq < $1.seq }
            .map(\.pending)
    }

    public func nextRuleNumber() async throws -> Int {
        guard let number = try await query("SELECT nextval('fault_rule_number') AS n").first?.integer("n") else {
            throw StoreError(.corrupt, "no rule number returned")
        }
        return number
    }

    public func addRule(_ rule: SharedRule) async throws {
        try await query(
            "INSERT INTO fault_rules (id, body, remaining, hits) VALUES ($1, $2, $3, $4)",
            [.text(rule.id), .text(rule.body), rule.remaining.map(Value.integer) ?? .null, .integer(rule.hits)])
    }

    public func removeRule(id: String) async throws -> Bool {
        !(try await query("DELETE FROM fault_rules WHERE id = $1 RETURNING id", [.text(id)]).isEmpty)
    }

    public func rules() async throws -> [SharedRule] {
        try await query("SELECT id, body, remaining, hits FROM fault_rules ORDER BY seq").map(SharedRule.init(row:))
    }

    public func countRuleHit(id: String) async throws -> SharedRule? {
        try await transaction { connection in
            guard
                let row = try await self.query(
                    """
                    UPDATE fault_rules SET hits = hits + 1, remaining = CASE WHEN remaining IS NULL THEN NULL ELSE GREATEST(remaining - 1, 0) END
                    WHERE id = $1 RETURNING id, body, remaining, hits
                    """, [.text(id)], on: connection
                ).first
            else { return nil }
            let rule = try SharedRule(row: row)
            if rule.remaining == 0 { try await self.query("DELETE FROM fault_rules WHERE id = $1", [.text(id)], on: connection) }
            return rule
        }
    }

    public func relay(_ broadcast: StoredBroadcast) async throws -> Int64 {
        let rows = try await query(
            """
            INSERT INTO relayed_broadcasts (environment, channel_id, id, delivery_id, topic, payload, expiration, priority, push_type, stored_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING seq
            """, Self.values(broadcast))
        guard let number = try rows.first?.integer("seq") else { throw StoreError(.corrupt, "no relay number returned") }
        return Int64(number)
    }

    public func relayed(_ number: Int64) async throws -> StoredBroadcast? {
        try await query("SELECT * FROM relayed_broadcasts WHERE seq = $1", [.integer(Int(number))]).first.map(StoredBroadcast.init(row:))
    }

    public func clearRelayed(before date: Date) async throws {
        try await query("DELETE FROM relayed_broadcasts WHERE stored_at < $1", [.millis(date)])
    }

    public func shareInbox(_ entries: [SharedInboxEntry]) async throws {
        // Like hand-overs: transient, not waiting for the disk.
        for chunk in entries.slices(of: Self.rowsPerStatement) {
            try await abandonable(relaxed: true) { connection in
                try await query(
                    """
                    INSERT INTO inbox_entries (node_id, sequence, format, entry, written_at)
                    SELECT v.node_id, v.sequence, v.format, v.entry, \(Self.now) FROM (VALUES \(Self.rows(chunk.count, of: 4)))
                        AS v(node_id, sequence, format, entry)
                    ON CONFLICT (node_id, sequence) DO NOTHING
                    """, chunk.flatMap { [Value.text($0.node), .integer(Int($0.sequence)), .integer($0.format), .bytes($0.bytes)] },
                    on: connection)
            }
        }
    }

    public func sharedInbox(except node: String, after cursors: [String: Int64], limit: Int) async throws -> [SharedInboxEntry] {
        let known = Array(cursors.keys)
        return try await query(
            """
            SELECT e.node_id, e.sequence, e.format, e.entry FROM inbox_entries e
            LEFT JOIN unnest($2::text[], $3::bigint[]) AS c(node_id, sequence) ON c.node_id = e.node_id
            WHERE e.node_id <> $1 AND e.sequence > coalesce(c.sequence, 0)
            ORDER BY e.node_id, e.sequence LIMIT $4
            """, [.text(node), .texts(known), .integers(known.map { Int(cursors[$0]!) }), .integer(limit)], relaxed: true
        ).map {
            SharedInboxEntry(
                node: try $0.text("node_id"), sequence: Int64(try $0.integer("sequence")), format: try $0.integer("format"),
                bytes: try $0.bytes("entry"))
        }
    }

    public func lastSharedInboxSequence(node: String) async throws -> Int64 {
        Int64(try await query("SELECT max(sequence) AS last FROM inbox_entries WHERE node_id = $1", [.text(node)]).first?.optionalInteger("last") ?? 0)
    }

    public func pruneSharedInbox(node: String, through sequence: Int64, olderThan seconds: Double) async throws {
        try await query(
            "DELETE FROM inbox_entries WHERE (node_id = $1 AND sequence <= $2) OR written_at < \(Self.now) - $3",
            [.text(node), .integer(Int(sequence)), .integer(Int(seconds * 1000))], relaxed: true)
    }

    public func clearSharedInbox() async throws {
        try await query("DELETE FROM inbox_entries", relaxed: true)
    }

    public func publish(_ payload: String, to channel: String) async throws {
        try await abandonable(relaxed: true) { connection in
            try await query("SELECT pg_notify($1, $2)", [.text(channel), .text(payload)], on: connection)
        }
    }

    public func messages(on channels: [String], listening: @escaping @Sendable () -> Void) -> AsyncStream<NodeMessage> {
        let (stream, continuation) = AsyncStream.makeStream(of: NodeMessage.self)
        let settings = settings
        let logger = logger
        let task = Task {
            var delay: Duration = .milliseconds(100)
            while !Task.isCancelled {
                do {
                    let connection = try await Self.connect(settings, logger: logger)
                    defer { Task { try? await connection.close() } }
                    delay = .milliseconds(100)
                    let started = ListenCount()
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for channel in channels {
                            group.addTask {
                                try await connection.listen(on: channel) { notifications in
                                    // Once every channel's LISTEN is in place, the subscription is.
                                    if started.increment() == channels.count { listening() }
                                    for try await notification in notifications {
                                        continuation.yield(NodeMessage(channel: channel, payload: notification.payload))
                                    }
                                }
                            }
                        }
                        // Until the connection fails or the reader goes.
                        try await group.next()
                        group.cancelAll()
                    }
                } catch {
                    if Task.isCancelled { break }
                    logger.warning(
                        "listening to the other nodes failed; trying again", metadata: ["courier.error": "\(Self.describe(error))"])
                }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}

/// Channels whose LISTEN is in place on one connection.
private final class ListenCount: Sendable {
    private let count = Mutex(0)

    /// Counts one more; returns the count.
    func increment() -> Int {
        count.withLock { count in
            count += 1
            return count
        }
    }
}

extension SharedRule {
    init(row: PostgresRandomAccessRow) throws {
        self.init(
            id: try row.text("id"), body: try row.text("body"), remaining: try row.optionalInteger("remaining"), hits: try row.integer("hits"))
    }
}
