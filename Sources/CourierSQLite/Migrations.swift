/// The SQLite schema, as forward-only migrations. A migration is never
/// edited once released; a change is a new entry at the end.
enum SQLiteMigrations {
    struct Migration {
        var version: Int
        var statements: [String]
    }

    static let all: [Migration] = [
        Migration(
            version: 1,
            statements: [
                """
                CREATE TABLE teams (
                    id TEXT PRIMARY KEY,
                    name TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                )
                """,
                """
                CREATE TABLE apps (
                    bundle_id TEXT PRIMARY KEY,
                    team_id TEXT NOT NULL REFERENCES teams(id),
                    topic_kinds TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                )
                """,
                "CREATE INDEX apps_team ON apps(team_id)",
                """
                CREATE TABLE auth_keys (
                    key_id TEXT PRIMARY KEY,
                    team_id TEXT NOT NULL REFERENCES teams(id),
                    public_key BLOB NOT NULL,
                    created_at INTEGER NOT NULL,
                    revoked_at INTEGER
                )
                """,
                """
                CREATE TABLE certificates (
                    serial TEXT PRIMARY KEY,
                    kind TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    team_id TEXT,
                    bundle_id TEXT,
                    device_id INTEGER,
                    environments TEXT NOT NULL,
                    not_after INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    revoked_at INTEGER,
                    pem TEXT NOT NULL
                )
                """,
                """
                CREATE TABLE devices (
                    id INTEGER PRIMARY KEY,
                    certificate_serial TEXT NOT NULL,
                    generation INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    last_seen INTEGER
                )
                """,
                """
                CREATE TABLE app_registrations (
                    device_id INTEGER NOT NULL REFERENCES devices(id),
                    bundle_id TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    token BLOB NOT NULL,
                    active INTEGER NOT NULL,
                    registered_at INTEGER NOT NULL,
                    unregistered_at INTEGER,
                    PRIMARY KEY (device_id, bundle_id, environment)
                )
                """,
                """
                CREATE TABLE pending_notifications (
                    device_id INTEGER NOT NULL,
                    bundle_id TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    id TEXT NOT NULL,
                    token BLOB NOT NULL,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    expiration INTEGER,
                    priority INTEGER NOT NULL,
                    collapse_id TEXT,
                    push_type TEXT,
                    accepted_at INTEGER NOT NULL,
                    PRIMARY KEY (device_id, bundle_id, environment)
                )
                """,
                "CREATE INDEX pending_expiration ON pending_notifications(expiration)",
                "CREATE INDEX pending_accepted ON pending_notifications(accepted_at)",
                """
                CREATE TABLE feedback (
                    environment TEXT NOT NULL,
                    topic TEXT NOT NULL,
                    token BLOB NOT NULL,
                    timestamp INTEGER NOT NULL,
                    PRIMARY KEY (environment, topic, token)
                )
                """,
                """
                CREATE TABLE delivery_log (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    notification_id TEXT NOT NULL,
                    event TEXT NOT NULL,
                    at INTEGER NOT NULL,
                    detail TEXT
                )
                """,
                "CREATE INDEX delivery_log_notification ON delivery_log(notification_id)",
            ]
        ),
        // The delivery log keyed by the id's 16 bytes (not its 36-character
        // text): half the index, no text formatting per event; rowids
        // without AUTOINCREMENT (appends stay in order, no sequence table).
        Migration(
            version: 2,
            statements: [
                """
                CREATE TABLE delivery_events (
                    seq INTEGER PRIMARY KEY,
                    notification_id BLOB NOT NULL,
                    event TEXT NOT NULL,
                    at INTEGER NOT NULL,
                    detail TEXT
                )
                """,
                """
                INSERT INTO delivery_events (seq, notification_id, event, at, detail)
                SELECT seq, unhex(replace(notification_id, '-', '')), event, at, detail FROM delivery_log ORDER BY seq
                """,
                "DROP TABLE delivery_log",
                "CREATE INDEX delivery_events_notification ON delivery_events(notification_id)",
            ]
        ),
        // The delivery log as one row per written batch (packed events and a
        // Bloom filter of their ids, `DeliveryLogBatch`): appends become
        // sequential. `delivery_events` keeps what was logged before and is
        // still read.
        Migration(
            version: 3,
            statements: [
                """
                CREATE TABLE delivery_batches (
                    seq INTEGER PRIMARY KEY,
                    filter BLOB NOT NULL,
                    events BLOB NOT NULL
                )
                """
            ]
        ),
        // Each held notification carries the server's delivery id, by which
        // the device acknowledges it (a provider's apns-id may repeat).
        // Rows held before keep their apns-id as their delivery id.
        Migration(
            version: 4,
            statements: [
                "ALTER TABLE pending_notifications ADD COLUMN delivery_id TEXT",
                "UPDATE pending_notifications SET delivery_id = id",
            ]
        ),
        // The revocation sweep asks every second for certificates revoked
        // lately: an index of the few that are.
        Migration(
            version: 5,
            statements: [
                "CREATE INDEX certificates_revoked ON certificates(revoked_at) WHERE revoked_at IS NOT NULL"
            ]
        ),
        // Auth keys scoped to environments and, topic-specific ones, to
        // apps; keys made before are good for both environments and every
        // app of their team.
        Migration(
            version: 6,
            statements: [
                "ALTER TABLE auth_keys ADD COLUMN environments TEXT NOT NULL DEFAULT 'production,sandbox'",
                "ALTER TABLE auth_keys ADD COLUMN bundle_ids TEXT",
            ]
        ),
        // Live Activities that ended: their update tokens answer ExpiredToken.
        Migration(
            version: 7,
            statements: [
                """
                CREATE TABLE ended_activities (
                    device_id INTEGER NOT NULL,
                    bundle_id TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    activity INTEGER NOT NULL,
                    ended_at INTEGER NOT NULL,
                    PRIMARY KEY (device_id, bundle_id, environment, activity)
                ) WITHOUT ROWID
                """
            ]
        ),
        // Broadcast channels, and the most recent broadcast of those that keep it.
        Migration(
            version: 8,
            statements: [
                """
                CREATE TABLE broadcast_channels (
                    environment TEXT NOT NULL,
                    id TEXT NOT NULL,
                    bundle_id TEXT NOT NULL,
                    storage_policy INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    PRIMARY KEY (environment, id)
                ) WITHOUT ROWID
                """,
                "CREATE INDEX broadcast_channels_app ON broadcast_channels(bundle_id, environment)",
                """
                CREATE TABLE stored_broadcasts (
                    environment TEXT NOT NULL,
                    channel_id TEXT NOT NULL,
                    id TEXT NOT NULL,
                    delivery_id TEXT NOT NULL,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    expiration INTEGER,
                    priority INTEGER NOT NULL,
                    push_type TEXT,
                    stored_at INTEGER NOT NULL,
                    PRIMARY KEY (environment, channel_id)
                ) WITHOUT ROWID
                """,
            ]
        ),
        // Virtual devices: tokens Courier did not issue (a provider team's
        // own Apple tokens), registered to an app in an environment.
        Migration(
            version: 9,
            statements: [
                """
                CREATE TABLE virtual_tokens (
                    environment TEXT NOT NULL,
                    bundle_id TEXT NOT NULL,
                    token BLOB NOT NULL,
                    offline INTEGER NOT NULL,
                    registered_at INTEGER NOT NULL,
                    uninstalled_at INTEGER,
                    PRIMARY KEY (environment, bundle_id, token)
                ) WITHOUT ROWID
                """
            ]
        ),
    ]
}
