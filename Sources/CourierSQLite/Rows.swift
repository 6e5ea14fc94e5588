import CourierCore
import Foundation
import NIOCore
import SQLiteNIO

extension SQLiteData {
    static func millis(_ date: Date) -> SQLiteData {
        .integer(date.storeMillis)
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
        .integer(id.storeInteger)
    }

    static func device(_ id: UInt64?) -> SQLiteData {
        id.map { device($0) } ?? .null
    }
}

extension SQLiteRow: StoreRow {
    public func optionalText(_ name: String) throws -> String? {
        guard let value = column(name), !value.isNull else { return nil }
        guard let text = value.string else { throw StoreError(.corrupt, "column \(name) is not text") }
        return text
    }

    public func optionalInteger(_ name: String) throws -> Int? {
        guard let value = column(name), !value.isNull else { return nil }
        guard let integer = value.integer else { throw StoreError(.corrupt, "column \(name) is not a number") }
        return integer
    }

    public func optionalBytes(_ name: String) throws -> [UInt8]? {
        guard let value = column(name), !value.isNull else { return nil }
        guard let blob = value.blob else { throw StoreError(.corrupt, "column \(name) is not a blob") }
        return Array(buffer: blob)
    }

    /// A UUID stored as its 16 bytes (the delivery log of before its batches).
    func uuidBytes(_ name: String) throws -> UUID {
        let bytes = try self.bytes(name)
        guard bytes.count == 16 else { throw StoreError(.corrupt, "column \(name) is not a 16-byte id") }
        return UUID(uuid: bytes.withUnsafeBytes { $0.loadUnaligned(as: uuid_t.self) })
    }
}

extension DeliveryEvent {
    init(row: SQLiteRow) throws {
        let rawKind = try row.text("event")
        guard let kind = Kind(rawValue: rawKind) else { throw StoreError(.corrupt, "unknown event \(rawKind)") }
        self.init(
            notificationID: try row.uuidBytes("notification_id"), bundleID: nil, kind: kind, at: try row.date("at"),
            detail: try row.optionalText("detail"))
    }
}
