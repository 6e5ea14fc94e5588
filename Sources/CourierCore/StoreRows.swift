import Foundation

/// One row a store read, as both stores keep their columns: times as
/// milliseconds since 1970, device ids as the bit pattern of a signed
/// 64-bit integer, ids as lowercase UUID text, sets as comma-separated
/// names. Each store supplies the three primitive reads; the models are
/// made from rows here, once for both.
public protocol StoreRow {
    /// The column's text; nil when it is NULL.
    func optionalText(_ name: String) throws -> String?
    /// The column's integer; nil when it is NULL.
    func optionalInteger(_ name: String) throws -> Int?
    /// The column's bytes; nil when it is NULL.
    func optionalBytes(_ name: String) throws -> [UInt8]?
}

extension StoreRow {
    public func text(_ name: String) throws -> String {
        guard let text = try optionalText(name) else { throw StoreError(.corrupt, "column \(name) is missing") }
        return text
    }

    public func integer(_ name: String) throws -> Int {
        guard let value = try optionalInteger(name) else { throw StoreError(.corrupt, "column \(name) is missing") }
        return value
    }

    public func bytes(_ name: String) throws -> [UInt8] {
        guard let bytes = try optionalBytes(name) else { throw StoreError(.corrupt, "column \(name) is missing") }
        return bytes
    }

    public func date(_ name: String) throws -> Date { Date(storeMillis: try integer(name)) }

    public func optionalDate(_ name: String) throws -> Date? { try optionalInteger(name).map(Date.init(storeMillis:)) }

    public func device(_ name: String) throws -> UInt64 { UInt64(bitPattern: Int64(try integer(name))) }

    public func optionalDevice(_ name: String) throws -> UInt64? { try optionalInteger(name).map { UInt64(bitPattern: Int64($0)) } }

    public func environment(_ name: String) throws -> Environment {
        let raw = try text(name)
        guard let environment = Environment(rawValue: raw) else { throw StoreError(.corrupt, "unknown environment \(raw)") }
        return environment
    }

    public func uuid(_ name: String) throws -> UUID {
        let raw = try text(name)
        guard let uuid = UUID(uuidString: raw) else { throw StoreError(.corrupt, "bad id \(raw)") }
        return uuid
    }

    public func priority(_ name: String) throws -> Priority {
        let raw = try integer(name)
        guard let priority = Priority(rawValue: UInt8(truncatingIfNeeded: raw)) else { throw StoreError(.corrupt, "bad priority \(raw)") }
        return priority
    }
}

extension Date {
    /// A time as stores keep it: whole milliseconds since 1970.
    public var storeMillis: Int { Int((timeIntervalSince1970 * 1000).rounded()) }

    public init(storeMillis: Int) { self.init(timeIntervalSince1970: Double(storeMillis) / 1000) }
}

extension UInt64 {
    /// A device id as stores keep it (SQLite's and PostgreSQL's integers are signed).
    public var storeInteger: Int { Int(Int64(bitPattern: self)) }
}

extension Set where Element == TopicKind {
    /// The kinds as a store keeps them: their names, comma-separated, in declaration order.
    public var encoded: String { TopicKind.allCases.filter(contains).map(\.rawValue).joined(separator: ",") }

    public init(encoded: String) {
        self = Set(encoded.split(separator: ",").compactMap { TopicKind(rawValue: String($0)) })
    }
}

extension Set where Element == Environment {
    /// The environments as a store keeps them: their names, comma-separated.
    public var encoded: String { Environment.allCases.filter(contains).map(\.rawValue).joined(separator: ",") }

    public init(encoded: String) {
        self = Set(encoded.split(separator: ",").compactMap { Environment(rawValue: String($0)) })
    }
}

extension AuthKeyRecord {
    /// A key's apps as a store keeps them: sorted, comma-separated; nil for every app of its team.
    public var encodedBundleIDs: String? { bundleIDs.map { $0.sorted().joined(separator: ",") } }
}

extension Team {
    public init(row: some StoreRow) throws {
        self.init(id: try row.text("id"), name: try row.text("name"), createdAt: try row.date("created_at"))
    }
}

extension App {
    public init(row: some StoreRow) throws {
        self.init(
            bundleID: try row.text("bundle_id"), teamID: try row.text("team_id"),
            topicKinds: Set<TopicKind>(encoded: try row.text("topic_kinds")), createdAt: try row.date("created_at"))
    }
}

extension AuthKeyRecord {
    public init(row: some StoreRow) throws {
        self.init(
            keyID: try row.text("key_id"), teamID: try row.text("team_id"), publicKey: try row.bytes("public_key"),
            createdAt: try row.date("created_at"), revokedAt: try row.optionalDate("revoked_at"),
            environments: Set<Environment>(encoded: try row.text("environments")),
            bundleIDs: try row.optionalText("bundle_ids").map { Set($0.split(separator: ",").map(String.init)) })
    }
}

extension CertificateRecord {
    public init(row: some StoreRow) throws {
        let rawKind = try row.text("kind")
        guard let kind = CertificateKind(rawValue: rawKind) else { throw StoreError(.corrupt, "unknown kind \(rawKind)") }
        self.init(
            serial: try row.text("serial"), kind: kind, subject: try row.text("subject"), teamID: try row.optionalText("team_id"),
            bundleID: try row.optionalText("bundle_id"), deviceID: try row.optionalDevice("device_id"),
            environments: Set<Environment>(encoded: try row.text("environments")), notAfter: try row.date("not_after"),
            createdAt: try row.date("created_at"), revokedAt: try row.optionalDate("revoked_at"), pem: try row.text("pem"))
    }
}

extension Device {
    public init(row: some StoreRow) throws {
        self.init(
            id: try row.device("id"), certificateSerial: try row.text("certificate_serial"),
            generation: UInt32(truncatingIfNeeded: try row.integer("generation")), createdAt: try row.date("created_at"),
            lastSeen: try row.optionalDate("last_seen"))
    }
}

extension AppRegistration {
    public init(row: some StoreRow) throws {
        self.init(
            deviceID: try row.device("device_id"), bundleID: try row.text("bundle_id"),
            environment: try row.environment("environment"), token: try row.bytes("token"),
            active: try row.integer("active") != 0, registeredAt: try row.date("registered_at"),
            unregisteredAt: try row.optionalDate("unregistered_at"))
    }
}

extension PendingNotification {
    public init(row: some StoreRow) throws {
        let notification = PushNotification(
            id: try row.uuid("id"), token: try row.bytes("token"), topic: try row.text("topic"),
            payload: try row.bytes("payload"), expiration: try row.optionalDate("expiration"), priority: try row.priority("priority"),
            collapseID: try row.optionalText("collapse_id"), pushType: try row.optionalText("push_type"), deliveryID: try row.uuid("delivery_id"))
        self.init(
            deviceID: try row.device("device_id"), bundleID: try row.text("bundle_id"),
            environment: try row.environment("environment"), notification: notification,
            acceptedAt: try row.date("accepted_at"))
    }
}

extension BroadcastChannel {
    public init(row: some StoreRow) throws {
        let rawPolicy = try row.integer("storage_policy")
        guard let policy = MessageStoragePolicy(rawValue: rawPolicy) else { throw StoreError(.corrupt, "bad storage policy \(rawPolicy)") }
        self.init(
            id: try row.text("id"), bundleID: try row.text("bundle_id"), environment: try row.environment("environment"), storagePolicy: policy,
            createdAt: try row.date("created_at"))
    }
}

extension StoredBroadcast {
    public init(row: some StoreRow) throws {
        let notification = PushNotification(
            id: try row.uuid("id"), token: [], topic: try row.text("topic"), payload: try row.bytes("payload"),
            expiration: try row.optionalDate("expiration"), priority: try row.priority("priority"), pushType: try row.optionalText("push_type"),
            deliveryID: try row.uuid("delivery_id"))
        self.init(
            channelID: try row.text("channel_id"), environment: try row.environment("environment"), notification: notification,
            storedAt: try row.date("stored_at"))
    }
}

extension FeedbackEntry {
    public init(row: some StoreRow) throws {
        self.init(
            environment: try row.environment("environment"), topic: try row.text("topic"), token: try row.bytes("token"),
            timestamp: try row.date("timestamp"))
    }
}

extension VirtualToken {
    public init(row: some StoreRow) throws {
        self.init(
            environment: try row.environment("environment"), bundleID: try row.text("bundle_id"), token: try row.bytes("token"),
            offline: try row.integer("offline") != 0, registeredAt: try row.date("registered_at"),
            uninstalledAt: try row.optionalDate("uninstalled_at"))
    }
}
