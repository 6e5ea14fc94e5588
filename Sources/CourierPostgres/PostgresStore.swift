import CourierCore
import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL store is and who Courier is there.
public struct PostgresSettings: Sendable, Hashable {
    public var host: String
    public var port: Int
    public var database: String
    public var user: String
    /// nil: the server asks for none (trust, peer) or the connection fails
    /// saying that it wants one.
    public var password: String?
    /// Connections the store's pool keeps open at most.
    public var connections: Int
    public var tls: TLS

    /// TLS to the server.
    public enum TLS: Sendable, Hashable {
        case disabled
        /// Required: the server's certificate is checked against the CA
        /// certificates of this PEM file (nil: the system's) and the host name.
        case required(caFile: String?)
    }

    public init(
        host: String, port: Int, database: String, user: String, password: String?, connections: Int = 8, tls: TLS = .disabled
    ) {
        self.host = host
        self.port = port
        self.database = database
        self.user = user
        self.password = password
        self.connections = connections
        self.tls = tls
    }

    /// The client side of TLS when it is required.
    func tlsConfiguration() -> TLSConfiguration? {
        guard case .required(let caFile) = tls else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let caFile { configuration.trustRoots = .file(caFile) }
        return configuration
    }

    /// Where, for a one-line message (never the password).
    public var description: String { "postgresql://\(user)@\(host):\(port)/\(database)" }
}

/// The store of several nodes: one PostgreSQL database, shared by every
/// node, through a pool of connections (postgres-nio's `PostgresClient`).
/// Every write is durable when it returns (`synchronous_commit` as the
/// server has it, `on` by default), except the delivery log's batches,
/// written with `synchronous_commit = off` as SQLite's log is written
/// without waiting for the disk: a crash of the database server may lose
/// its last batches, a crash of Courier none.
///
/// Transactions run at PostgreSQL's default isolation (read committed);
/// where a method must read and write as one (what a held notification
/// replaced, a channel limit), it locks what it reads. A transaction that
/// PostgreSQL ends for a deadlock with another node's is run again.
public final class PostgresStore: Store {
    public let endedActivitiesKept = 1_000
    private let client: PostgresClient
    /// A second, small pool whose sessions do not wait for the disk at
    /// commit (`synchronous_commit = off`): for what may be lost with a
    /// crash of the database server, written in one statement each — the
    /// delivery log's batches, hand-overs, messages.
    private let relaxedClient: PostgresClient
    private let runner: Task<Void, Never>
    let settings: PostgresSettings
    let logger: Logger

    private init(client: PostgresClient, relaxedClient: PostgresClient, runner: Task<Void, Never>, settings: PostgresSettings, logger: Logger) {
        self.client = client
        self.relaxedClient = relaxedClient
        self.runner = runner
        self.settings = settings
        self.logger = logger
    }

    /// Milliseconds a transaction may wait for its next statement before
    /// the server ends it (and releases its locks).
    static let idleTransactionLimit = "5000"

    /// Connects, migrates the schema and returns the store; an error with
    /// a one-line message when the database cannot be reached or refuses
    /// the user.
    public static func open(_ settings: PostgresSettings, logger: Logger) async throws -> PostgresStore {
        var configuration = PostgresClient.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password, database: settings.database,
            tls: settings.tlsConfiguration().map { .require($0) } ?? .disable)
        configuration.options.maximumConnections = settings.connections
        configuration.options.connectTimeout = .seconds(5)
        // A transaction of Courier's is its statements back to back. One left open by a node that lost the
        // database mid-way (a network cut) would hold its rows' locks, and every other node's commits to the
        // same devices would wait on them, until the server noticed the connection gone (minutes): the server
        // ends it after 5 s idle instead (docs/operations.md).
        configuration.options.additionalStartupParameters = [("idle_in_transaction_session_timeout", Self.idleTransactionLimit)]
        // The pool's own log (connections it opens and closes) from warnings up.
        var background = logger
        background.logLevel = max(logger.logLevel, .warning)
        let client = PostgresClient(configuration: configuration, backgroundLogger: background)
        var relaxed = configuration
        relaxed.options.maximumConnections = 2
        relaxed.options.additionalStartupParameters = [("synchronous_commit", "off"), ("idle_in_transaction_session_timeout", Self.idleTransactionLimit)]
        let relaxedClient = PostgresClient(configuration: relaxed, backgroundLogger: background)
        let runner = Task {
            await withDiscardingTaskGroup { group in
                group.addTask { await client.run() }
                group.addTask { await relaxedClient.run() }
            }
        }
        // The pool retries a failed connection without end; one connection
        // first tells whether the database is there and takes the user.
        do {
            try await connect(settings, logger: logger).close()
        } catch {
            runner.cancel()
            await runner.value
            throw StoreError(.unavailable, "cannot connect to \(settings.description): \(Self.describe(error))")
        }
        let store = PostgresStore(client: client, relaxedClient: relaxedClient, runner: runner, settings: settings, logger: logger)
        do {
            try await store.migrate()
        } catch {
            await store.close()
            throw error
        }
        return store
    }

    /// One connection outside the pool (a check, or a subscription's).
    static func connect(_ settings: PostgresSettings, logger: Logger) async throws -> PostgresConnection {
        let tls: PostgresConnection.Configuration.TLS =
            if let configuration = settings.tlsConfiguration() { .require(try NIOSSLContext(configuration: configuration)) } else { .disable }
        return try await PostgresConnection.connect(
            configuration: PostgresConnection.Configuration(
                host: settings.host, port: settings.port, username: settings.user, password: settings.password, database: settings.database,
                tls: tls),
            id: 0, logger: logger)
    }

    /// Closes the pool's connections.
    public func close() async {
        runner.cancel()
        await runner.value
    }

    // MARK: Running statements

    /// Runs `sql` with `values` bound to $1, $2, … (on `connection` when
    /// inside a transaction) and returns its rows.
    /// `relaxed`: on the pool that does not wait for the disk (one statement, its own transaction).
    @discardableResult
    func query(_ sql: String, _ values: [Value] = [], on connection: PostgresConnection? = nil, relaxed: Bool = false) async throws
        -> [PostgresRandomAccessRow]
    {
        var binds = PostgresBindings(capacity: values.count)
        for value in values { value.bind(into: &binds) }
        let query = PostgresQuery(unsafeSQL: sql, binds: binds)
        // A statement written to a connection already closed would wait for
        // an answer forever (`abandonable` closes it when the task is cancelled).
        if let connection, connection.isClosed || Task.isCancelled { throw StoreError(.unavailable, "the statement's task was cancelled") }
        do {
            let rows =
                if let connection {
                    try await connection.query(query, logger: logger)
                } else {
                    try await (relaxed ? relaxedClient : client).query(query, logger: logger)
                }
            return try await rows.collect().map { $0.makeRandomAccess() }
        } catch let error as PSQLError {
            throw Self.storeError(error)
        }
    }

    /// Runs `body` in a transaction (BEGIN … COMMIT, ROLLBACK when it
    /// throws), again when PostgreSQL ends it for a deadlock or a
    /// serialization failure (nodes writing the same rows at once).
    func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await abandonable { connection in
                    try await self.query("BEGIN", on: connection)
                    do {
                        let result = try await body(connection)
                        try await self.query("COMMIT", on: connection)
                        return result
                    } catch {
                        // A cancelled one's connection is closed: PostgreSQL rolls back.
                        if !Task.isCancelled { _ = try? await self.query("ROLLBACK", on: connection) }
                        throw error
                    }
                }
            } catch let conflict as TransactionConflict {
                guard attempt < 5 else { throw StoreError(.unavailable, "a transaction failed \(attempt) times: \(conflict.message)") }
                logger.debug("transaction run again", metadata: ["reason": "\(conflict.message)"])
            } catch let error as PSQLError {
                throw Self.storeError(error)
            }
        }
    }

    /// Runs `body` on a connection of the pool (`relaxed`: the pool that
    /// does not wait for the disk) that is closed when the task is
    /// cancelled meanwhile, so that `body` ends at once. postgres-nio
    /// leases a connection until its task is cancelled, but a statement
    /// sent waits for its answer however long that takes: a caller with a
    /// deadline (a node's stop) would wait for a server that does not
    /// answer. PostgreSQL rolls back what a closed connection began.
    @discardableResult
    func abandonable<T: Sendable>(relaxed: Bool = false, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await (relaxed ? relaxedClient : client).withConnection { connection in
            try await withTaskCancellationHandler {
                try await body(connection)
            } onCancel: {
                _ = connection.close() as EventLoopFuture<Void>
            }
        }
    }

    /// Inserts a row; a duplicate key or a missing parent row becomes the
    /// store's own error naming `what` or `parent`.
    func insert(_ sql: String, _ values: [Value], what: String, parent: String? = nil) async throws {
        do {
            try await query(sql, values)
        } catch let error as StoreError where error.code == .duplicate {
            throw StoreError(.duplicate, "\(what) exists already")
        } catch let error as StoreError where error.code == .notFound {
            throw StoreError(.notFound, "\(parent ?? "a row \(what) names") does not exist")
        }
    }

    /// The store's error for a failure of postgres-nio: a unique key
    /// (23505) is `duplicate`, a missing parent row (23503) `notFound`,
    /// a deadlock or serialization failure a `TransactionConflict` (run
    /// again), anything else `unavailable`.
    static func storeError(_ error: PSQLError) -> any Error {
        switch error.serverInfo?[.sqlState] {
        case "23505": StoreError(.duplicate, describe(error))
        case "23503": StoreError(.notFound, describe(error))
        case "40P01", "40001": TransactionConflict(message: describe(error))
        default: StoreError(.unavailable, describe(error))
        }
    }

    /// One line for an error of postgres-nio (whose own description hides
    /// the server's message).
    static func describe(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] {
            return message + (error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? "")
        }
        if let underlying = error.underlying {
            // NIO's own text nests ("Connection errors: SingleConnectionFailure(… (errno: 111))"): the few words it means.
            switch ConnectionFailure(underlying) {
            case .refused: return "connection refused (is PostgreSQL running there, on this port?)"
            case .unresolved: return "host not found"
            case .timedOut: return "timed out"
            case .closedBeforeHandshake: return "the server closed the connection"
            case .untrustedServer, .certificateRefused, nil: return "\(underlying)"
            }
        }
        return "\(error.code)"
    }

    // MARK: Schema

    private func migrate() async throws {
        try await transaction { connection in
            // Nodes starting at once migrate one after another.
            try await self.query("SELECT pg_advisory_xact_lock(\(PostgresMigrations.lock))", on: connection)
            try await self.query(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)", on: connection)
            let current = try await self.query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations", on: connection)
                .first?.optionalInteger("v") ?? 0
            let known = PostgresMigrations.all.last?.version ?? 0
            guard current <= known else {
                throw StoreError(
                    .unavailable, "the database's schema is version \(current), newer than this Courier's (\(known)): upgrade this node")
            }
            for migration in PostgresMigrations.all where migration.version > current {
                for statement in migration.statements {
                    try await self.query(statement, on: connection)
                }
                try await self.query(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                    [.integer(migration.version), .millis(Date())], on: connection)
            }
        }
    }

    public func schemaVersion() async throws -> Int {
        try await query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations").first?.integer("v") ?? 0
    }

    // MARK: Teams and apps

    public func createTeam(_ team: Team) async throws {
        try await insert(
            "INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)", [.text(team.id), .text(team.name), .millis(team.createdAt)],
            what: "team \(team.id)")
    }

    public func team(id: String) async throws -> Team? {
        try await query("SELECT * FROM teams WHERE id = $1", [.text(id)]).first.map(Team.init(row:))
    }

    public func teams() async throws -> [Team] {
        try await query("SELECT * FROM teams ORDER BY id").map(Team.init(row:))
    }

    public func createApp(_ app: App) async throws {
        try await insert(
            "INSERT INTO apps (bundle_id, team_id, topic_kinds, created_at) VALUES ($1, $2, $3, $4)",
            [.text(app.bundleID), .text(app.teamID), .text(app.topicKinds.encoded), .millis(app.createdAt)],
            what: "app \(app.bundleID)", parent: "team \(app.teamID)")
    }

    public func app(bundleID: String) async throws -> App? {
        try await query("SELECT * FROM apps WHERE bundle_id = $1", [.text(bundleID)]).first.map(App.init(row:))
    }

    public func apps(teamID: String) async throws -> [App] {
        try await query("SELECT * FROM apps WHERE team_id = $1 ORDER BY bundle_id", [.text(teamID)]).map(App.init(row:))
    }

    // MARK: Auth keys

    public func addAuthKey(_ key: AuthKeyRecord) async throws {
        try await insert(
            """
            INSERT INTO auth_keys (key_id, team_id, public_key, created_at, revoked_at, environments, bundle_ids)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            """,
            [
                .text(key.keyID), .text(key.teamID), .bytes(key.publicKey), .millis(key.createdAt), .millis(key.revokedAt),
                .text(key.environments.encoded), .optionalText(key.encodedBundleIDs),
            ],
            what: "auth key \(key.keyID)", parent: "team \(key.teamID)")
    }

    public func authKey(id: String) async throws -> AuthKeyRecord? {
        try await query("SELECT * FROM auth_keys WHERE key_id = $1", [.text(id)]).first.map(AuthKeyRecord.init(row:))
    }

    public func authKeys(teamID: String) async throws -> [AuthKeyRecord] {
        try await query("SELECT * FROM auth_keys WHERE team_id = $1 ORDER BY key_id", [.text(teamID)]).map(AuthKeyRecord.init(row:))
    }

    public func revokeAuthKey(id: String, at date: Date) async throws -> Bool {
        !(try await query(
            "UPDATE auth_keys SET revoked_at = $1 WHERE key_id = $2 AND revoked_at IS NULL RETURNING key_id", [.millis(date), .text(id)]
        ).isEmpty)
    }

    // MARK: Certificates

    public func addCertificate(_ certificate: CertificateRecord) async throws {
        try await insert(
            """
            INSERT INTO certificates (serial, kind, subject, team_id, bundle_id, device_id, environments,
                not_after, created_at, revoked_at, pem) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
            """,
            [
                .text(certificate.serial), .text(certificate.kind.rawValue), .text(certificate.subject),
                .optionalText(certificate.teamID), .optionalText(certificate.bundleID), .device(certificate.deviceID),
                .text(certificate.environments.encoded), .millis(certificate.notAfter), .millis(certificate.createdAt),
                .millis(certificate.revokedAt), .text(certificate.pem),
            ], what: "certificate \(certificate.serial)")
    }

    public func certificate(serial: String) async throws -> CertificateRecord? {
        try await query("SELECT * FROM certificates WHERE serial = $1", [.text(serial.lowercased())]).first.map(CertificateRecord.init(row:))
    }

    public func certificates(kind: CertificateKind?) async throws -> [CertificateRecord] {
        if let kind {
            return try await query("SELECT * FROM certificates WHERE kind = $1 ORDER BY created_at, serial", [.text(kind.rawValue)])
                .map(CertificateRecord.init(row:))
        }
        return try await query("SELECT * FROM certificates ORDER BY created_at, serial").map(CertificateRecord.init(row:))
    }

    public func revokeCertificate(serial: String, at date: Date) async throws -> Bool {
        !(try await query(
            "UPDATE certificates SET revoked_at = $1 WHERE serial = $2 AND revoked_at IS NULL RETURNING serial",
            [.millis(date), .text(serial.lowercased())]
        ).isEmpty)
    }

    public func certificatesRevoked(since date: Date) async throws -> [String] {
        try await query("SELECT serial FROM certificates WHERE revoked_at >= $1 ORDER BY revoked_at, serial", [.millis(date)])
            .map { try $0.text("serial") }
    }

    // MARK: Broadcast channels

    public func createChannel(_ channel: BroadcastChannel, limit: Int) async throws -> Bool {
        try await transaction { connection in
            // Two nodes adding a channel for the same app count one after the other.
            try await self.query(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                [.text("channels \(channel.environment.rawValue) \(channel.bundleID)")], on: connection)
            let count = try await self.query(
                "SELECT COUNT(*) AS n FROM broadcast_channels WHERE bundle_id = $1 AND environment = $2",
                [.text(channel.bundleID), .text(channel.environment.rawValue)], on: connection
            ).first?.integer("n") ?? 0
            guard count < limit else { return false }
            let inserted = try await self.query(
                """
                INSERT INTO broadcast_channels (environment, id, bundle_id, storage_policy, created_at) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT DO NOTHING RETURNING id
                """,
                [
                    .text(channel.environment.rawValue), .text(channel.id), .text(channel.bundleID), .integer(channel.storagePolicy.rawValue),
                    .millis(channel.createdAt),
                ], on: connection)
            guard !inserted.isEmpty else { throw StoreError(.duplicate, "channel \(channel.id) exists already") }
            return true
        }
    }

    public func channel(id: String, environment: Environment) async throws -> BroadcastChannel? {
        try await query("SELECT * FROM broadcast_channels WHERE environment = $1 AND id = $2", [.text(environment.rawValue), .text(id)])
            .first.map(BroadcastChannel.init(row:))
    }

    public func channels(bundleID: String, environment: Environment) async throws -> [BroadcastChannel] {
        try await query(
            "SELECT * FROM broadcast_channels WHERE bundle_id = $1 AND environment = $2 ORDER BY created_at, id",
            [.text(bundleID), .text(environment.rawValue)]
        ).map(BroadcastChannel.init(row:))
    }

    public func deleteChannel(id: String, environment: Environment) async throws -> Bool {
        let key: [Value] = [.text(environment.rawValue), .text(id)]
        return try await transaction { connection in
            try await self.query("DELETE FROM stored_broadcasts WHERE environment = $1 AND channel_id = $2", key, on: connection)
            return !(try await self.query("DELETE FROM broadcast_channels WHERE environment = $1 AND id = $2 RETURNING id", key, on: connection).isEmpty)
        }
    }

    public func storeBroadcast(_ broadcast: StoredBroadcast) async throws -> Bool {
        try await transaction { connection in
            // The channel stays until this commits (a delete waits for it).
            let exists = try await self.query(
                "SELECT 1 FROM broadcast_channels WHERE environment = $1 AND id = $2 FOR SHARE",
                [.text(broadcast.environment.rawValue), .text(broadcast.channelID)], on: connection)
            guard !exists.isEmpty else { return false }
            try await self.query(
                """
                INSERT INTO stored_broadcasts (environment, channel_id, id, delivery_id, topic, payload, expiration, priority, push_type, stored_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                ON CONFLICT (environment, channel_id) DO UPDATE SET
                    id = excluded.id, delivery_id = excluded.delivery_id, topic = excluded.topic, payload = excluded.payload,
                    expiration = excluded.expiration, priority = excluded.priority, push_type = excluded.push_type, stored_at = excluded.stored_at
                """,
                Self.values(broadcast), on: connection)
            return true
        }
    }

    public func storedBroadcast(channelID: String, environment: Environment) async throws -> StoredBroadcast? {
        try await query("SELECT * FROM stored_broadcasts WHERE environment = $1 AND channel_id = $2", [.text(environment.rawValue), .text(channelID)])
            .first.map(StoredBroadcast.init(row:))
    }

    // MARK: Feedback

    public func addFeedback(_ entries: [FeedbackEntry]) async throws {
        // One row each: a statement may not change a row twice.
        let entries = FeedbackEntry.newest(of: entries)
        guard !entries.isEmpty else { return }
        try await transaction { connection in
            for chunk in entries.slices(of: Self.rowsPerStatement) {
                try await self.query(
                    """
                    INSERT INTO feedback (environment, topic, token, timestamp) VALUES \(Self.rows(chunk.count, of: 4))
                    ON CONFLICT (environment, topic, token) DO UPDATE SET timestamp = GREATEST(feedback.timestamp, excluded.timestamp)
                    """,
                    chunk.flatMap { [.text($0.environment.rawValue), .text($0.topic), .bytes($0.token), .millis($0.timestamp)] },
                    on: connection)
            }
        }
    }

    public func feedback(environment: Environment, topic: String) async throws -> [FeedbackEntry] {
        try await query(
            "SELECT * FROM feedback WHERE environment = $1 AND topic = $2 ORDER BY timestamp, token",
            [.text(environment.rawValue), .text(topic)]
        ).map(FeedbackEntry.init(row:))
    }

    public func removeFeedback(_ entries: [FeedbackEntry]) async throws {
        guard !entries.isEmpty else { return }
        try await transaction { connection in
            for chunk in entries.slices(of: Self.rowsPerStatement) {
                try await self.query(
                    """
                    DELETE FROM feedback AS entry
                    USING (VALUES \(Self.rows(chunk.count, of: 4))) AS named(environment, topic, token, timestamp)
                    WHERE entry.environment = named.environment AND entry.topic = named.topic
                        AND entry.token = named.token AND entry.timestamp = named.timestamp
                    """,
                    chunk.flatMap { [.text($0.environment.rawValue), .text($0.topic), .bytes($0.token), .millis($0.timestamp)] },
                    on: connection)
            }
        }
    }

    // MARK: Delivery log

    /// Events per batch row: a row stays a few hundred kilobytes at most.
    static let eventsPerBatch = 4096

    public func appendDeliveryEvents(_ events: [DeliveryEvent]) async throws {
        guard !events.isEmpty else { return }
        let batches = events.slices(of: Self.eventsPerBatch).map(DeliveryLogBatch.init)
        // The log does not wait for the disk (the next durable commit takes it along).
        try await query(
            "INSERT INTO delivery_batches (filter, events) VALUES \(Self.rows(batches.count, of: 2))",
            batches.flatMap { [.bytes($0.filter), .bytes($0.events)] }, relaxed: true)
    }

    public func deliveryEvents(notificationID: UUID) async throws -> [DeliveryEvent] {
        var events: [DeliveryEvent] = []
        for row in try await query("SELECT seq, filter FROM delivery_batches ORDER BY seq") {
            guard DeliveryLogBatch.filter(try row.bytes("filter"), mayContain: notificationID) else { continue }
            guard let batch = try await query("SELECT filter, events FROM delivery_batches WHERE seq = $1", [.integer(try row.integer("seq"))]).first
            else { continue }
            events += try DeliveryLogBatch(filter: try batch.bytes("filter"), events: try batch.bytes("events")).decoded()
                .filter { $0.notificationID == notificationID }
        }
        return events
    }
}

/// A value bound to a statement's numbered parameter.
enum Value: Sendable {
    case text(String)
    case integer(Int)
    case bytes([UInt8])
    case texts([String])
    case integers([Int])
    case null

    static func millis(_ date: Date) -> Value { .integer(date.storeMillis) }
    static func millis(_ date: Date?) -> Value { date.map { .millis($0) } ?? .null }
    static func optionalText(_ text: String?) -> Value { text.map(Value.text) ?? .null }
    static func device(_ id: UInt64) -> Value { .integer(id.storeInteger) }
    static func device(_ id: UInt64?) -> Value { id.map { .device($0) } ?? .null }
    /// Ids as both stores keep them: lowercase text.
    static func uuid(_ id: UUID) -> Value { .text(id.uuidString.lowercased()) }

    func bind(into binds: inout PostgresBindings) {
        switch self {
        case .text(let text): binds.append(text)
        case .integer(let integer): binds.append(integer)
        case .bytes(let bytes): binds.append(ByteBuffer(bytes: bytes))
        case .texts(let texts): binds.append(texts)
        case .integers(let integers): binds.append(integers)
        case .null: binds.appendNull()
        }
    }
}

extension PostgresRandomAccessRow: StoreRow {
    public func optionalText(_ name: String) throws -> String? { try cell(name).decode(String?.self) }

    public func optionalInteger(_ name: String) throws -> Int? { try cell(name).decode(Int64?.self).map(Int.init) }

    public func optionalBytes(_ name: String) throws -> [UInt8]? { try cell(name).decode(ByteBuffer?.self).map { Array(buffer: $0) } }

    func cell(_ name: String) throws -> PostgresCell {
        guard contains(name) else { throw StoreError(.corrupt, "column \(name) is missing") }
        return self[name]
    }
}

/// PostgreSQL ended a transaction for a deadlock or a serialization
/// failure: it may be run again.
struct TransactionConflict: Error {
    var message: String
}

extension PendingSlot {
    init(row: PostgresRandomAccessRow) throws {
        self.init(deviceID: try row.device("device_id"), bundleID: try row.text("bundle_id"), environment: try row.environment("environment"))
    }

    var values: [Value] { [.device(deviceID), .text(bundleID), .text(environment.rawValue)] }
}
