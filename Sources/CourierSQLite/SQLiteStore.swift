import CourierCore
import Foundation
import Logging
import SQLiteNIO
import Synchronization

/// The embedded store: one SQLite file (SQLite itself is compiled in, so
/// there is nothing to install). Writes are durable when they return
/// (WAL journal, `synchronous=FULL`), except the delivery log's: its
/// batches are written by a second connection to the same file that does
/// not wait for the disk (`synchronous=NORMAL`), so they survive the
/// process being killed but the last of them may be lost if the machine
/// loses power. The next durable commit makes them durable too.
public final class SQLiteStore: Store {
    public let endedActivitiesKept = 1_000
    let connection: SQLiteConnection
    /// Writes and reads the delivery log; `connection` itself for an
    /// in-memory database (a second connection would open another one).
    private let logConnection: SQLiteConnection
    let gate = SerialGate()
    private let closed = Mutex(false)

    private init(connection: SQLiteConnection, logConnection: SQLiteConnection) {
        self.connection = connection
        self.logConnection = logConnection
    }

    deinit {
        // A store dropped without close() still closes its connections; the
        // futures keep the connections alive until that is done.
        if !closed.withLock({ $0 }) {
            _ = connection.close()
            if logConnection !== connection { _ = logConnection.close() }
        }
    }

    /// Opens (creating if needed) the database at `path` and migrates it.
    public static func open(path: String, logger: Logger) async throws -> SQLiteStore {
        let connection = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        let logConnection: SQLiteConnection
        do {
            logConnection = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        } catch {
            try? await connection.close()
            throw error
        }
        let store = SQLiteStore(connection: connection, logConnection: logConnection)
        try await store.prepare()
        return store
    }

    /// An in-memory database, for tests.
    public static func inMemory(logger: Logger) async throws -> SQLiteStore {
        let connection = try await SQLiteConnection.open(storage: .memory, logger: logger)
        let store = SQLiteStore(connection: connection, logConnection: connection)
        try await store.prepare()
        return store
    }

    /// Closes both connections once the operation running now is done,
    /// even when the calling task is cancelled (a service group that is
    /// cancelled rather than shut down): sqlite-nio skips a close asked
    /// for by a cancelled task, and the connection would stay open.
    public func close() async throws {
        guard closed.withLock({ wasClosed in
            defer { wasClosed = true }
            return !wasClosed
        }) else { return }
        let (gate, connection, logConnection) = (self.gate, self.connection, self.logConnection)
        try await Task {
            try await gate.run {
                if logConnection !== connection { try await logConnection.close() }
                try await connection.close()
            }
        }.value
    }

    private func prepare() async throws {
        try await gate.run {
            _ = try await self.connection.query("PRAGMA journal_mode=WAL")
            _ = try await self.connection.query("PRAGMA synchronous=FULL")
            _ = try await self.connection.query("PRAGMA foreign_keys=ON")
            _ = try await self.connection.query("PRAGMA busy_timeout=5000")
            // Statement journals in memory, not in a temporary file per statement.
            _ = try await self.connection.query("PRAGMA temp_store=MEMORY")
            if self.logConnection !== self.connection {
                _ = try await self.logConnection.query("PRAGMA synchronous=NORMAL")
                _ = try await self.logConnection.query("PRAGMA busy_timeout=5000")
                _ = try await self.logConnection.query("PRAGMA temp_store=MEMORY")
            }
            _ = try await self.connection.query(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"
            )
            let rows = try await self.connection.query("SELECT MAX(version) AS v FROM schema_migrations")
            let current = rows.first?.column("v")?.integer ?? 0
            for migration in SQLiteMigrations.all where migration.version > current {
                try await self.inTransaction {
                    for statement in migration.statements {
                        _ = try await self.connection.query(statement)
                    }
                    _ = try await self.connection.query(
                        "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                        [.integer(migration.version), .integer(Int(Date().timeIntervalSince1970))]
                    )
                }
            }
        }
    }

    /// Runs `body` inside BEGIN/COMMIT on `connection` (the store's unless
    /// told); the caller holds the gate.
    private func inTransaction<T: Sendable>(
        on connection: SQLiteConnection? = nil, _ body: @Sendable () async throws -> T
    ) async throws -> T {
        let connection = connection ?? self.connection
        _ = try await connection.query("BEGIN IMMEDIATE")
        do {
            let result = try await body()
            _ = try await connection.query("COMMIT")
            return result
        } catch {
            _ = try? await connection.query("ROLLBACK")
            throw error
        }
    }

    func query(_ sql: String, _ binds: [SQLiteData] = []) async throws -> [SQLiteRow] {
        try await gate.run { try await self.connection.query(sql, binds) }
    }

    /// A transaction under the gate, on `connection` (the store's unless
    /// told): the two connections never wait for each other's lock.
    func transaction<T: Sendable>(
        on connection: SQLiteConnection? = nil, _ body: @Sendable @escaping () async throws -> T
    ) async throws -> T {
        try await gate.run { try await self.inTransaction(on: connection, body) }
    }

    /// `body`, which makes `writes` write statements (and reads before
    /// them), under the gate: in one transaction when it writes more than
    /// once. A single write statement is atomic by itself, and the gate
    /// keeps every other operation on this connection from running
    /// between `body`'s reads and its write (the delivery log's connection
    /// writes only the log, under the same gate): so one write goes without
    /// BEGIN and COMMIT, two fewer trips to SQLite's thread. A group
    /// commit's batch, or the log's, is almost always one statement.
    func atomically<T: Sendable>(
        writes: Int, on connection: SQLiteConnection? = nil, _ body: @Sendable @escaping () async throws -> T
    ) async throws -> T {
        writes > 1 ? try await transaction(on: connection, body) : try await gate.run(body)
    }

    /// Rows changed by the last statement (same connection, under the gate).
    func changes() async throws -> Int {
        try await connection.query("SELECT changes() AS n").first?.column("n")?.integer ?? 0
    }

    private func insert(_ sql: String, _ binds: [SQLiteData], what: String) async throws {
        do {
            _ = try await query(sql, binds)
        } catch let error as SQLiteError
            where [.constraint, .constraintPrimaryKeyFailed, .constraintUniqueFailed].contains(error.reason)
        {
            throw StoreError(.duplicate, "\(what) exists already")
        }
    }

    // MARK: Schema

    public func schemaVersion() async throws -> Int {
        try await query("SELECT MAX(version) AS v FROM schema_migrations").first?.column("v")?.integer ?? 0
    }

    // MARK: Teams and apps

    public func createTeam(_ team: Team) async throws {
        try await insert(
            "INSERT INTO teams (id, name, created_at) VALUES (?, ?, ?)",
            [.text(team.id), .text(team.name), .millis(team.createdAt)], what: "team \(team.id)")
    }

    public func team(id: String) async throws -> Team? {
        try await query("SELECT * FROM teams WHERE id = ?", [.text(id)]).first.map(Team.init(row:))
    }

    public func teams() async throws -> [Team] {
        try await query("SELECT * FROM teams ORDER BY id").map(Team.init(row:))
    }

    public func createApp(_ app: App) async throws {
        guard try await team(id: app.teamID) != nil else {
            throw StoreError(.notFound, "team \(app.teamID) does not exist")
        }
        try await insert(
            "INSERT INTO apps (bundle_id, team_id, topic_kinds, created_at) VALUES (?, ?, ?, ?)",
            [.text(app.bundleID), .text(app.teamID), .text(app.topicKinds.encoded), .millis(app.createdAt)],
            what: "app \(app.bundleID)")
    }

    public func app(bundleID: String) async throws -> App? {
        try await query("SELECT * FROM apps WHERE bundle_id = ?", [.text(bundleID)]).first.map(App.init(row:))
    }

    public func apps(teamID: String) async throws -> [App] {
        try await query("SELECT * FROM apps WHERE team_id = ? ORDER BY bundle_id", [.text(teamID)]).map(App.init(row:))
    }

    // MARK: Auth keys

    public func addAuthKey(_ key: AuthKeyRecord) async throws {
        guard try await team(id: key.teamID) != nil else {
            throw StoreError(.notFound, "team \(key.teamID) does not exist")
        }
        try await insert(
            "INSERT INTO auth_keys (key_id, team_id, public_key, created_at, revoked_at, environments, bundle_ids) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                .text(key.keyID), .text(key.teamID), .bytes(key.publicKey), .millis(key.createdAt), .millis(key.revokedAt), .text(key.environments.encoded),
                .optionalText(key.encodedBundleIDs),
            ],
            what: "auth key \(key.keyID)")
    }

    public func authKey(id: String) async throws -> AuthKeyRecord? {
        try await query("SELECT * FROM auth_keys WHERE key_id = ?", [.text(id)]).first.map(AuthKeyRecord.init(row:))
    }

    public func authKeys(teamID: String) async throws -> [AuthKeyRecord] {
        try await query("SELECT * FROM auth_keys WHERE team_id = ? ORDER BY key_id", [.text(teamID)])
            .map(AuthKeyRecord.init(row:))
    }

    public func revokeAuthKey(id: String, at date: Date) async throws -> Bool {
        try await gate.run {
            _ = try await self.connection.query(
                "UPDATE auth_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", [.millis(date), .text(id)])
            return try await self.changes() > 0
        }
    }

    // MARK: Certificates

    public func addCertificate(_ certificate: CertificateRecord) async throws {
        try await insert(
            """
            INSERT INTO certificates (serial, kind, subject, team_id, bundle_id, device_id, environments,
                not_after, created_at, revoked_at, pem) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .text(certificate.serial), .text(certificate.kind.rawValue), .text(certificate.subject),
                .optionalText(certificate.teamID), .optionalText(certificate.bundleID), .device(certificate.deviceID),
                .text(certificate.environments.encoded), .millis(certificate.notAfter), .millis(certificate.createdAt),
                .millis(certificate.revokedAt), .text(certificate.pem),
            ], what: "certificate \(certificate.serial)")
    }

    public func certificate(serial: String) async throws -> CertificateRecord? {
        try await query("SELECT * FROM certificates WHERE serial = ?", [.text(serial.lowercased())]).first
            .map(CertificateRecord.init(row:))
    }

    public func certificates(kind: CertificateKind?) async throws -> [CertificateRecord] {
        if let kind {
            return try await query("SELECT * FROM certificates WHERE kind = ? ORDER BY created_at, serial", [.text(kind.rawValue)])
                .map(CertificateRecord.init(row:))
        }
        return try await query("SELECT * FROM certificates ORDER BY created_at, serial").map(CertificateRecord.init(row:))
    }

    public func revokeCertificate(serial: String, at date: Date) async throws -> Bool {
        try await gate.run {
            _ = try await self.connection.query(
                "UPDATE certificates SET revoked_at = ? WHERE serial = ? AND revoked_at IS NULL",
                [.millis(date), .text(serial.lowercased())])
            return try await self.changes() > 0
        }
    }

    public func certificatesRevoked(since date: Date) async throws -> [String] {
        try await query("SELECT serial FROM certificates WHERE revoked_at >= ? ORDER BY revoked_at", [.millis(date)]).map { try $0.text("serial") }
    }

    // MARK: Devices and registrations

    public func createDevice(_ device: Device) async throws {
        try await insert(
            "INSERT INTO devices (id, certificate_serial, generation, created_at, last_seen) VALUES (?, ?, ?, ?, ?)",
            [
                .device(device.id), .text(device.certificateSerial), .integer(Int(device.generation)),
                .millis(device.createdAt), .millis(device.lastSeen),
            ], what: "device \(device.id)")
    }

    public func device(id: UInt64) async throws -> Device? {
        try await query("SELECT * FROM devices WHERE id = ?", [.device(id)]).first.map(Device.init(row:))
    }

    @discardableResult
    public func setDeviceGeneration(id: UInt64, generation: UInt32) async throws -> [PendingNotification] {
        try await transaction {
            _ = try await self.connection.query(
                "UPDATE devices SET generation = ? WHERE id = ?", [.integer(Int(generation)), .device(id)])
            guard try await self.changes() > 0 else { throw StoreError(.notFound, "device \(id) does not exist") }
            _ = try await self.connection.query("DELETE FROM app_registrations WHERE device_id = ?", [.device(id)])
            // Its Live Activity tokens ended with its other tokens.
            _ = try await self.connection.query("DELETE FROM ended_activities WHERE device_id = ?", [.device(id)])
            return try await self.takePending(where: "device_id = ?", [.device(id)])
        }
    }

    public func markDeviceSeen(id: UInt64, at date: Date) async throws {
        _ = try await query("UPDATE devices SET last_seen = ? WHERE id = ?", [.millis(date), .device(id)])
    }

    public func register(_ registration: AppRegistration) async throws {
        guard try await device(id: registration.deviceID) != nil else {
            throw StoreError(.notFound, "device \(registration.deviceID) does not exist")
        }
        _ = try await query(
            """
            INSERT INTO app_registrations (device_id, bundle_id, environment, token, active, registered_at, unregistered_at)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (device_id, bundle_id, environment) DO UPDATE SET
                token = excluded.token, active = excluded.active,
                registered_at = excluded.registered_at, unregistered_at = excluded.unregistered_at
            """,
            [
                .device(registration.deviceID), .text(registration.bundleID), .text(registration.environment.rawValue),
                .bytes(registration.token), .integer(registration.active ? 1 : 0), .millis(registration.registeredAt),
                .millis(registration.unregisteredAt),
            ])
    }

    public func registration(deviceID: UInt64, bundleID: String, environment: Environment) async throws -> AppRegistration? {
        try await query(
            "SELECT * FROM app_registrations WHERE device_id = ? AND bundle_id = ? AND environment = ?",
            [.device(deviceID), .text(bundleID), .text(environment.rawValue)]
        ).first.map(AppRegistration.init(row:))
    }

    public func registrations(deviceID: UInt64) async throws -> [AppRegistration] {
        try await query(
            "SELECT * FROM app_registrations WHERE device_id = ? ORDER BY bundle_id, environment", [.device(deviceID)]
        ).map(AppRegistration.init(row:))
    }

    public func unregister(deviceID: UInt64, bundleID: String, environment: Environment, at date: Date) async throws -> Bool {
        try await gate.run {
            _ = try await self.connection.query(
                """
                UPDATE app_registrations SET active = 0, unregistered_at = ?
                WHERE device_id = ? AND bundle_id = ? AND environment = ? AND active = 1
                """, [.millis(date), .device(deviceID), .text(bundleID), .text(environment.rawValue)])
            return try await self.changes() > 0
        }
    }

    public func endActivity(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32, at date: Date) async throws -> Bool {
        let key: [SQLiteData] = [.device(deviceID), .text(bundleID), .text(environment.rawValue)]
        return try await transaction {
            _ = try await self.connection.query(
                """
                INSERT INTO ended_activities (device_id, bundle_id, environment, activity, ended_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT DO NOTHING
                """, key + [.integer(Int(activity)), .millis(date)])
            guard try await self.changes() > 0 else { return false }
            // The most recent ends only, so that a device cannot grow the table without bound.
            _ = try await self.connection.query(
                """
                DELETE FROM ended_activities WHERE device_id = ? AND bundle_id = ? AND environment = ? AND activity NOT IN (
                    SELECT activity FROM ended_activities WHERE device_id = ? AND bundle_id = ? AND environment = ?
                    ORDER BY ended_at DESC, activity DESC LIMIT \(self.endedActivitiesKept))
                """, key + key)
            return true
        }
    }

    public func activityEnd(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32) async throws -> Date? {
        try await query(
            "SELECT ended_at FROM ended_activities WHERE device_id = ? AND bundle_id = ? AND environment = ? AND activity = ?",
            [.device(deviceID), .text(bundleID), .text(environment.rawValue), .integer(Int(activity))]
        ).first.map { try $0.date("ended_at") }
    }

    // MARK: Broadcast channels

    public func createChannel(_ channel: BroadcastChannel, limit: Int) async throws -> Bool {
        try await transaction {
            let count =
                try await self.connection.query(
                    "SELECT COUNT(*) AS n FROM broadcast_channels WHERE bundle_id = ? AND environment = ?",
                    [.text(channel.bundleID), .text(channel.environment.rawValue)]
                ).first?.column("n")?.integer ?? 0
            guard count < limit else { return false }
            do {
                _ = try await self.connection.query(
                    "INSERT INTO broadcast_channels (environment, id, bundle_id, storage_policy, created_at) VALUES (?, ?, ?, ?, ?)",
                    [
                        .text(channel.environment.rawValue), .text(channel.id), .text(channel.bundleID), .integer(channel.storagePolicy.rawValue),
                        .millis(channel.createdAt),
                    ])
            } catch let error as SQLiteError where [.constraint, .constraintPrimaryKeyFailed, .constraintUniqueFailed].contains(error.reason) {
                throw StoreError(.duplicate, "channel \(channel.id) exists already")
            }
            return true
        }
    }

    public func channel(id: String, environment: Environment) async throws -> BroadcastChannel? {
        try await query("SELECT * FROM broadcast_channels WHERE environment = ? AND id = ?", [.text(environment.rawValue), .text(id)])
            .first.map(BroadcastChannel.init(row:))
    }

    public func channels(bundleID: String, environment: Environment) async throws -> [BroadcastChannel] {
        try await query(
            "SELECT * FROM broadcast_channels WHERE bundle_id = ? AND environment = ? ORDER BY created_at, id", [.text(bundleID), .text(environment.rawValue)]
        ).map(BroadcastChannel.init(row:))
    }

    public func deleteChannel(id: String, environment: Environment) async throws -> Bool {
        let key: [SQLiteData] = [.text(environment.rawValue), .text(id)]
        return try await transaction {
            _ = try await self.connection.query("DELETE FROM stored_broadcasts WHERE environment = ? AND channel_id = ?", key)
            _ = try await self.connection.query("DELETE FROM broadcast_channels WHERE environment = ? AND id = ?", key)
            return try await self.changes() > 0
        }
    }

    public func storeBroadcast(_ broadcast: StoredBroadcast) async throws -> Bool {
        let n = broadcast.notification
        return try await transaction {
            let exists = try await self.connection.query(
                "SELECT 1 FROM broadcast_channels WHERE environment = ? AND id = ?", [.text(broadcast.environment.rawValue), .text(broadcast.channelID)])
            guard !exists.isEmpty else { return false }
            _ = try await self.connection.query(
                """
                INSERT OR REPLACE INTO stored_broadcasts (environment, channel_id, id, delivery_id, topic, payload, expiration, priority, push_type, stored_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                [
                    .text(broadcast.environment.rawValue), .text(broadcast.channelID), .text(n.id.uuidString), .text(n.deliveryID.uuidString),
                    .text(n.topic), .bytes(n.payload), .millis(n.expiration), .integer(Int(n.priority.rawValue)), .optionalText(n.pushType),
                    .millis(broadcast.storedAt),
                ])
            return true
        }
    }

    public func storedBroadcast(channelID: String, environment: Environment) async throws -> StoredBroadcast? {
        try await query("SELECT * FROM stored_broadcasts WHERE environment = ? AND channel_id = ?", [.text(environment.rawValue), .text(channelID)])
            .first.map(StoredBroadcast.init(row:))
    }

    // MARK: Feedback

    public func addFeedback(_ entries: [FeedbackEntry]) async throws {
        let entries = FeedbackEntry.newest(of: entries)
        guard !entries.isEmpty else { return }
        let chunks = entries.slices(of: Self.rowsPerStatement)
        try await atomically(writes: chunks.count) {
            for chunk in chunks {
                _ = try await self.connection.query(
                    """
                    INSERT INTO feedback (environment, topic, token, timestamp) VALUES \(Self.rows(chunk.count, of: 4))
                    ON CONFLICT (environment, topic, token) DO UPDATE SET timestamp = MAX(timestamp, excluded.timestamp)
                    """, chunk.flatMap { [.text($0.environment.rawValue), .text($0.topic), .bytes($0.token), .millis($0.timestamp)] })
            }
        }
    }

    public func feedback(environment: Environment, topic: String) async throws -> [FeedbackEntry] {
        try await query(
            "SELECT * FROM feedback WHERE environment = ? AND topic = ? ORDER BY timestamp, token",
            [.text(environment.rawValue), .text(topic)]
        ).map(FeedbackEntry.init(row:))
    }

    public func removeFeedback(_ entries: [FeedbackEntry]) async throws {
        guard !entries.isEmpty else { return }
        try await transaction {
            for entry in entries {
                _ = try await self.connection.query(
                    "DELETE FROM feedback WHERE environment = ? AND topic = ? AND token = ? AND timestamp = ?",
                    [.text(entry.environment.rawValue), .text(entry.topic), .bytes(entry.token), .millis(entry.timestamp)])
            }
        }
    }

    // MARK: Delivery log

    /// Events per batch row: a row stays a few hundred kilobytes at most.
    static let eventsPerBatch = 4096

    public func appendDeliveryEvents(_ events: [DeliveryEvent]) async throws {
        guard !events.isEmpty else { return }
        let batches = events.slices(of: Self.eventsPerBatch).map(DeliveryLogBatch.init)
        try await atomically(writes: batches.count, on: logConnection) {
            for batch in batches {
                _ = try await self.logConnection.query(
                    "INSERT INTO delivery_batches (filter, events) VALUES (?, ?)", [.bytes(batch.filter), .bytes(batch.events)])
            }
        }
    }

    /// `PRAGMA synchronous` of the store's connection and of the delivery
    /// log's (2 = FULL, 1 = NORMAL).
    func synchronousModes() async throws -> (store: Int, log: Int) {
        try await gate.run {
            func mode(_ connection: SQLiteConnection) async throws -> Int {
                try await connection.query("PRAGMA synchronous").first?.column("synchronous")?.integer ?? -1
            }
            return (try await mode(self.connection), try await mode(self.logConnection))
        }
    }

    public func deliveryEvents(notificationID: UUID) async throws -> [DeliveryEvent] {
        try await gate.run {
            // Rows of before migration 3 first (they are older), then the batches whose filter may hold the id.
            var events = try await self.logConnection.query(
                "SELECT * FROM delivery_events WHERE notification_id = ? ORDER BY seq", [.uuid(notificationID)]
            ).map(DeliveryEvent.init(row:))
            let candidates = Mutex<[Int]>([])
            try await self.logConnection.query("SELECT seq, filter FROM delivery_batches ORDER BY seq", []) { row in
                guard let seq = row.column("seq")?.integer, let filter = row.column("filter")?.blob else { return }
                if DeliveryLogBatch.filter(Array(buffer: filter), mayContain: notificationID) {
                    candidates.withLock { $0.append(seq) }
                }
            }
            for seq in candidates.withLock({ $0 }) {
                guard let row = try await self.logConnection.query("SELECT * FROM delivery_batches WHERE seq = ?", [.integer(seq)]).first else { continue }
                let batch = DeliveryLogBatch(filter: try row.bytes("filter"), events: try row.bytes("events"))
                events += try batch.decoded().filter { $0.notificationID == notificationID }
            }
            return events
        }
    }
}

extension PendingSlot {
    var binds: [SQLiteData] { [.device(deviceID), .text(bundleID), .text(environment.rawValue)] }
}
