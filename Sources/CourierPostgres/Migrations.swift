/// The PostgreSQL schema, as forward-only migrations. A migration is never
/// edited once released; a change is a new entry at the end.
///
/// The columns keep what the SQLite store's keep, in the same form (times
/// as milliseconds, device ids as signed 64-bit integers, ids as UUID
/// text), so that one set of row readers serves both (`StoreRow`). Text is
/// compared byte by byte (`COLLATE "C"`), as SQLite compares it, whatever
/// the database's locale: lists come back in the same order from both.
enum PostgresMigrations {
    struct Migration {
        var version: Int
        var statements: [String]
    }

    /// The advisory lock under which a node migrates (nodes starting at once
    /// migrate one after another); any number of Courier's own.
    static let lock = 0x436F_7572_6965_72

    private static let text = #"TEXT COLLATE "C""#

    static let all: [Migration] = [
        Migration(
            version: 1,
            statements: [
                "CREATE TABLE teams (id \(text) PRIMARY KEY, name \(text) NOT NULL, created_at BIGINT NOT NULL)",
                """
                CREATE TABLE apps (
                    bundle_id \(text) PRIMARY KEY,
                    team_id \(text) NOT NULL REFERENCES teams(id),
                    topic_kinds \(text) NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX apps_team ON apps(team_id)",
                """
                CREATE TABLE auth_keys (
                    key_id \(text) PRIMARY KEY,
                    team_id \(text) NOT NULL REFERENCES teams(id),
                    public_key BYTEA NOT NULL,
                    created_at BIGINT NOT NULL,
                    revoked_at BIGINT,
                    environments \(text) NOT NULL,
                    bundle_ids \(text)
                )
                """,
                "CREATE INDEX auth_keys_team ON auth_keys(team_id)",
                """
                CREATE TABLE certificates (
                    serial \(text) PRIMARY KEY,
                    kind \(text) NOT NULL,
                    subject \(text) NOT NULL,
                    team_id \(text),
                    bundle_id \(text),
                    device_id BIGINT,
                    environments \(text) NOT NULL,
                    not_after BIGINT NOT NULL,
                    created_at BIGINT NOT NULL,
                    revoked_at BIGINT,
                    pem \(text) NOT NULL
                )
                """,
                "CREATE INDEX certificates_revoked ON certificates(revoked_at) WHERE revoked_at IS NOT NULL",
                """
                CREATE TABLE devices (
                    id BIGINT PRIMARY KEY,
                    certificate_serial \(text) NOT NULL,
                    generation BIGINT NOT NULL,
                    created_at BIGINT NOT NULL,
                    last_seen BIGINT
                )
                """,
                """
                CREATE TABLE app_registrations (
                    device_id BIGINT NOT NULL REFERENCES devices(id),
                    bundle_id \(text) NOT NULL,
                    environment \(text) NOT NULL,
                    token BYTEA NOT NULL,
                    active SMALLINT NOT NULL,
                    registered_at BIGINT NOT NULL,
                    unregistered_at BIGINT,
                    PRIMARY KEY (device_id, bundle_id, environment)
                )
                """,
                """
                CREATE TABLE ended_activities (
                    device_id BIGINT NOT NULL,
                    bundle_id \(text) NOT NULL,
                    environment \(text) NOT NULL,
                    activity BIGINT NOT NULL,
                    ended_at BIGINT NOT NULL,
                    PRIMARY KEY (device_id, bundle_id, environment, activity)
                )
                """,
                """
                CREATE TABLE pending_notifications (
                    device_id BIGINT NOT NULL,
                    bundle_id \(text) NOT NULL,
                    environment \(text) NOT NULL,
                    id \(text) NOT NULL,
                    token BYTEA NOT NULL,
                    topic \(text) NOT NULL,
                    payload BYTEA NOT NULL,
                    expiration BIGINT,
                    priority SMALLINT NOT NULL,
                    collapse_id \(text),
                    push_type \(text),
                    accepted_at BIGINT NOT NULL,
                    delivery_id \(text) NOT NULL,
                    PRIMARY KEY (device_id, bundle_id, environment)
                )
                """,
                "CREATE INDEX pending_expiration ON pending_notifications(expiration) WHERE expiration IS NOT NULL",
                "CREATE INDEX pending_accepted ON pending_notifications(accepted_at)",
                """
                CREATE TABLE feedback (
                    environment \(text) NOT NULL,
                    topic \(text) NOT NULL,
                    token BYTEA NOT NULL,
                    timestamp BIGINT NOT NULL,
                    PRIMARY KEY (environment, topic, token)
                )
                """,
                "CREATE TABLE delivery_batches (seq BIGSERIAL PRIMARY KEY, filter BYTEA NOT NULL, events BYTEA NOT NULL)",
                """
                CREATE TABLE broadcast_channels (
                    environment \(text) NOT NULL,
                    id \(text) NOT NULL,
                    bundle_id \(text) NOT NULL,
                    storage_policy SMALLINT NOT NULL,
                    created_at BIGINT NOT NULL,
                    PRIMARY KEY (environment, id)
                )
                """,
                "CREATE INDEX broadcast_channels_app ON broadcast_channels(bundle_id, environment)",
                """
                CREATE TABLE stored_broadcasts (
                    environment \(text) NOT NULL,
                    channel_id \(text) NOT NULL,
                    id \(text) NOT NULL,
                    delivery_id \(text) NOT NULL,
                    topic \(text) NOT NULL,
                    payload BYTEA NOT NULL,
                    expiration BIGINT,
                    priority SMALLINT NOT NULL,
                    push_type \(text),
                    stored_at BIGINT NOT NULL,
                    PRIMARY KEY (environment, channel_id)
                )
                """,
            ]
        ),
        // Several nodes: each node's heartbeat, and which node each device
        // is connected to (with its connection's generation).
        Migration(
            version: 2,
            statements: [
                "CREATE TABLE nodes (id \(text) PRIMARY KEY, started_at BIGINT NOT NULL, heartbeat_at BIGINT NOT NULL)",
                "CREATE SEQUENCE presence_generation",
                """
                CREATE TABLE device_presence (
                    device_id BIGINT NOT NULL,
                    environment \(text) NOT NULL,
                    node_id \(text) NOT NULL,
                    generation BIGINT NOT NULL,
                    since BIGINT NOT NULL,
                    PRIMARY KEY (device_id, environment)
                )
                """,
                "CREATE INDEX device_presence_node ON device_presence(node_id)",
                // The admin API's fault rules, applied by every node.
                "CREATE SEQUENCE fault_rule_number",
                """
                CREATE TABLE fault_rules (
                    id \(text) PRIMARY KEY,
                    body \(text) NOT NULL,
                    remaining BIGINT,
                    hits BIGINT NOT NULL DEFAULT 0,
                    seq BIGSERIAL
                )
                """,
                // Notifications one node hands to the node their device is connected to.
                """
                CREATE TABLE handovers (
                    seq BIGSERIAL PRIMARY KEY,
                    node_id \(text) NOT NULL,
                    device_id BIGINT NOT NULL,
                    bundle_id \(text) NOT NULL,
                    environment \(text) NOT NULL,
                    id \(text) NOT NULL,
                    token BYTEA NOT NULL,
                    topic \(text) NOT NULL,
                    payload BYTEA NOT NULL,
                    expiration BIGINT,
                    priority SMALLINT NOT NULL,
                    collapse_id \(text),
                    push_type \(text),
                    accepted_at BIGINT NOT NULL,
                    delivery_id \(text) NOT NULL
                )
                """,
                "CREATE INDEX handovers_node ON handovers(node_id, seq)",
                // Broadcasts accepted by one node, for the others' subscribers (kept a minute).
                """
                CREATE TABLE relayed_broadcasts (
                    seq BIGSERIAL PRIMARY KEY,
                    environment \(text) NOT NULL,
                    channel_id \(text) NOT NULL,
                    id \(text) NOT NULL,
                    delivery_id \(text) NOT NULL,
                    topic \(text) NOT NULL,
                    payload BYTEA NOT NULL,
                    expiration BIGINT,
                    priority SMALLINT NOT NULL,
                    push_type \(text),
                    stored_at BIGINT NOT NULL
                )
                """,
            ]
        ),
        // Each node's admin inbox entries, for the others' inboxes. Unlogged:
        // no write-ahead log for them, and emptied if the database server
        // crashes (the inboxes themselves are memory only).
        Migration(
            version: 3,
            statements: [
                """
                CREATE UNLOGGED TABLE inbox_entries (
                    node_id \(text) NOT NULL,
                    sequence BIGINT NOT NULL,
                    format SMALLINT NOT NULL,
                    entry BYTEA NOT NULL,
                    written_at BIGINT NOT NULL,
                    PRIMARY KEY (node_id, sequence)
                )
                """,
                "CREATE INDEX inbox_entries_written ON inbox_entries(written_at)",
            ]
        ),
        // Virtual devices: tokens Courier did not issue (a provider team's
        // own Apple tokens), registered to an app in an environment.
        Migration(
            version: 4,
            statements: [
                """
                CREATE TABLE virtual_tokens (
                    environment \(text) NOT NULL,
                    bundle_id \(text) NOT NULL,
                    token BYTEA NOT NULL,
                    offline SMALLINT NOT NULL,
                    registered_at BIGINT NOT NULL,
                    uninstalled_at BIGINT,
                    PRIMARY KEY (environment, bundle_id, token)
                )
                """
            ]
        ),
        // The address each node takes direct hand-overs on (`host:port`;
        // null: none, the database's queue only).
        Migration(version: 5, statements: ["ALTER TABLE nodes ADD COLUMN peer_address \(text)"]),
    ]
}
