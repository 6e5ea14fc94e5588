import CourierCore
import Foundation
import NIOCore
import SQLiteNIO

extension SQLiteData {
    static func millis(_ date: Date) -> SQLiteData {
        .integer(Int((date.timeIntervalSince1970 * 1000).rounded()))
    }

    static func millis(_ date: Date?) -> SQLiteData {
        date.map { millis($0) } ?? .null
    }

    static func optionalText(_ text: String?) -> SQLiteData {
        text.map(SQLiteData.text) ?? .null
    }

    static func bytes(_ bytes: [UInt8]) -> SQLiteData {
        .blob(ByteBuffer(bytes: bytes))
    }

    /// Device ids are unsigned 64-bit; SQLite keeps their bit pattern.
    /// A UUID as its 16 bytes.
    static func uuid(_ id: UUID) -> SQLiteData {
        .bytes(withUnsafeBytes(of: id.uuid) { Array($0) })
    }

    static func device(_ id: UInt64) -> SQLiteData {
        .integer(Int(Int64(bitPattern: id)))
    }

    static func device(_ id: UInt64?) -> SQLiteData {
        id.map { device($0) } ?? .null
    }
}

extension SQLiteRow {
    func required(_ name: String) throws -> SQLiteData {
        guard let value = column(name), !value.isNull else {
            throw StoreError(.corrupt, "column \(name) is missing")
        }
        return value
    }

    func text(_ name: String) throws -> String {
        guard let text = try required(name).string else { throw StoreError(.corrupt, "column \(name) is not text") }
        return text
    }

    func optionalText(_ name: String) -> String? {
        guard let value = column(name), !value.isNull else { return nil }
        return value.string
    }

    func integer(_ name: String) throws -> Int {
        guard let value = try required(name).integer else { throw StoreError(.corrupt, "column \(name) is not a number") }
        return value
    }

    func bytes(_ name: String) throws -> [UInt8] {
        guard let blob = try required(name).blob else { throw StoreError(.corrupt, "column \(name) is not a blob") }
        return Array(buffer: blob)
    }

    func date(_ name: String) throws -> Date {
        Date(timeIntervalSince1970: Double(try integer(name)) / 1000)
    }

    func optionalDate(_ name: String) -> Date? {
        guard let value = column(name), !value.isNull, let ms = value.integer else { return nil }
        return Date(timeIntervalSince1970: Double(ms) / 1000)
    }

    func device(_ name: String) throws -> UInt64 {
        UInt64(bitPattern: Int64(try integer(name)))
    }

    func environment(_ name: String) throws -> Environment {
        let raw = try text(name)
        guard let environment = Environment(rawValue: raw) else { throw StoreError(.corrupt, "unknown environment \(raw)") }
        return environment
    }

    func uuid(_ name: String) throws -> UUID {
        let raw = try text(name)
        guard let uuid = UUID(uuidString: raw) else { throw StoreError(.corrupt, "bad id \(raw)") }
        return uuid
    }

    func priority(_ name: String) throws -> Priority {
        let raw = try integer(name)
        guard let priority = Priority(rawValue: UInt8(truncatingIfNeeded: raw)) else { throw StoreError(.corrupt, "bad priority \(raw)") }
        return priority
    }

    /// A UUID stored as its 16 bytes.
    func uuidBytes(_ name: String) throws -> UUID {
        let bytes = try self.bytes(name)
        guard bytes.count == 16 else { throw StoreError(.corrupt, "column \(name) is not a 16-byte id") }
        return UUID(uuid: bytes.withUnsafeBytes { $0.loadUnaligned(as: uuid_t.self) })
    }
}

extension Set where Element == TopicKind {
    var encoded: String { TopicKind.allCases.filter(contains).map(\.rawValue).joined(separator: ",") }

    init(encoded: String) {
        self = Set(encoded.split(separator: ",").compactMap { TopicKind(rawValue: String($0)) })
    }
}

extension Set where Element == Environment {
    var encoded: String { Environment.allCases.filter(contains).map(\.rawValue).joined(separator: ",") }

    init(encoded: String) {
        self = Set(encoded.split(separator: ",").compactMap { Environment(rawValue: String($0)) })
    }
}

extension Team {
    init(row: SQLiteRow) throws {
        self.init(id: try row.text("id"), name: try row.text("name"), createdAt: try row.date("created_at"))
    }
}

extension App {
    init(row: SQLiteRow) throws {
        self.init(
            bundleID: try row.text("bundle_id"), teamID: try row.text("team_id"),
            topicKinds: Set<TopicKind>(encoded: try row.text("topic_kinds")), createdAt: try row.date("created_at"))
    }
}

extension AuthKeyRecord {
    init(row: SQLiteRow) throws {
        self.init(
            keyID: try row.text("key_id"), teamID: try row.text("team_id"), publicKey: try row.bytes("public_key"),
            createdAt: try row.date("created_at"), revokedAt: row.optionalDate("revoked_at"),
            environments: Set<Environment>(encoded: try row.text("environments")),
            bundleIDs: row.optionalText("bundle_ids").map { Set($0.split(separator: ",").map(String.init)) })
    }
}

extension CertificateRecord {
    init(row: SQLiteRow) throws {
        let rawKind = try row.text("kind")
        guard let kind = CertificateKind(rawValue: rawKind) else { throw StoreError(.corrupt, "unknown kind \(rawKind)") }
        let deviceID: UInt64? = row.column("device_id").flatMap { $0.isNull ? nil : $0.integer }.map {
            UInt64(bitPattern: Int64($0))
        }
        self.init(
            serial: try row.text("serial"), kind: kind, subject: try row.text("subject"), teamID: row.optionalText("team_id"),
            bundleID: row.optionalText("bundle_id"), deviceID: deviceID,
            environments: Set<Environment>(encoded: try row.text("environments")), notAfter: try row.date("not_after"),
            createdAt: try row.date("created_at"), revokedAt: row.optionalDate("revoked_at"), pem: try row.text("pem"))
    }
}

extension Device {
    init(row: SQLiteRow) throws {
        self.init(
            id: try row.device("id"), certificateSerial: try row.text("certificate_serial"),
            generation: UInt32(truncatingIfNeeded: try row.integer("generation")), createdAt: try row.date("created_at"),
            lastSeen: row.optionalDate("last_seen"))
    }
}

extension AppRegistration {
    init(row: SQLiteRow) throws {
        self.init(
            deviceID: try row.device("device_id"), bundleID: try row.text("bundle_id"),
            environment: try row.environment("environment"), token: try row.bytes("token"),
            active: try row.integer("active") != 0, registeredAt: try row.date("registered_at"),
            unregisteredAt: row.optionalDate("unregistered_at"))
    }
}

extension PendingNotification {
    init(row: SQLiteRow) throws {
        let notification = PushNotification(
            id: try row.uuid("id"), token: try row.bytes("token"), topic: try row.text("topic"),
            payload: try row.bytes("payload"), expiration: row.optionalDate("expiration"), priority: try row.priority("priority"),
            collapseID: row.optionalText("collapse_id"), pushType: row.optionalText("push_type"), deliveryID: try row.uuid("delivery_id"))
        self.init(
            deviceID: try row.device("device_id"), bundleID: try row.text("bundle_id"),
            environment: try row.environment("environment"), notification: notification,
            acceptedAt: try row.date("accepted_at"))
    }
}

extension BroadcastChannel {
    init(row: SQLiteRow) throws {
        let rawPolicy = try row.integer("storage_policy")
        guard let policy = MessageStoragePolicy(rawValue: rawPolicy) else { throw StoreError(.corrupt, "bad storage policy \(rawPolicy)") }
        self.init(
            id: try row.text("id"), bundleID: try row.text("bundle_id"), environment: try row.environment("environment"), storagePolicy: policy,
            createdAt: try row.date("created_at"))
    }
}

extension StoredBroadcast {
    init(row: SQLiteRow) throws {
        let notification = PushNotification(
            id: try row.uuid("id"), token: [], topic: try row.text("topic"), payload: try row.bytes("payload"),
            expiration: row.optionalDate("expiration"), priority: try row.priority("priority"), pushType: row.optionalText("push_type"),
            deliveryID: try row.uuid("delivery_id"))
        self.init(
            channelID: try row.text("channel_id"), environment: try row.environment("environment"), notification: notification,
            storedAt: try row.date("stored_at"))
    }
}

extension FeedbackEntry {
    init(row: SQLiteRow) throws {
        self.init(
            environment: try row.environment("environment"), topic: try row.text("topic"), token: try row.bytes("token"),
            timestamp: try row.date("timestamp"))
    }
}

extension DeliveryEvent {
    init(row: SQLiteRow) throws {
        let rawKind = try row.text("event")
        guard let kind = Kind(rawValue: rawKind) else { throw StoreError(.corrupt, "unknown event \(rawKind)") }
        self.init(
            notificationID: try row.uuidBytes("notification_id"), kind: kind, at: try row.date("at"),
            detail: row.optionalText("detail"))
    }
}
