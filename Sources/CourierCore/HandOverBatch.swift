import Foundation

/// What one node hands to another directly (each frame of the stream
/// between two nodes, `HandOverFrames`; docs/operations.md): notifications
/// for its devices, and entries of the sender's admin inbox. A binary
/// layout of Courier's own: a version byte (2), a count (4 bytes), then
/// each notification's fields one after the other; then a count of inbox
/// entries (4 bytes) and each entry's node, sequence (8 bytes), format
/// (2 bytes) and bytes (length 4 bytes). Version 1 is the notifications
/// alone: written when there are no entries, so that a node of the version
/// before (which reads only version 1) takes the pushes during an upgrade. Integers are big-endian; a time is
/// the bit pattern of its seconds since 1970 as a 64-bit float, so it
/// arrives as it left; a string or byte field is its length (2 bytes; the
/// payload 4) then its bytes; an optional string's length 0xFFFF means none.
public enum HandOverBatch {
    public static let version: UInt8 = 2
    /// Notifications, or inbox entries, in one batch at most, as the reader takes them.
    public static let maxCount = 100_000

    public static func encode(_ batch: [PendingNotification], inbox: [SharedInboxEntry] = []) -> [UInt8] {
        var writer = Writer()
        writer.bytes.reserveCapacity(
            9 + batch.reduce(0) { $0 + 120 + $1.notification.payload.count } + inbox.reduce(0) { $0 + 16 + $1.node.utf8.count + $1.bytes.count })
        writer.byte(inbox.isEmpty ? 1 : version)
        writer.integer(UInt32(batch.count))
        for pending in batch {
            let n = pending.notification
            writer.integer(pending.deviceID)
            writer.byte(pending.environment == .production ? 0 : 1)
            writer.string(pending.bundleID)
            writer.date(pending.acceptedAt)
            writer.uuid(n.id)
            writer.uuid(n.deliveryID)
            writer.short(n.token)
            writer.string(n.topic)
            writer.integer(UInt32(n.payload.count))
            writer.bytes += n.payload
            if let expiration = n.expiration {
                writer.byte(1)
                writer.date(expiration)
            } else {
                writer.byte(0)
            }
            writer.byte(n.priority.rawValue)
            writer.optionalString(n.collapseID)
            writer.optionalString(n.pushType)
            writer.byte(n.isSilent ? 1 : 0)
        }
        guard !inbox.isEmpty else { return writer.bytes }
        writer.integer(UInt32(inbox.count))
        for entry in inbox {
            writer.string(entry.node)
            writer.integer(UInt64(bitPattern: entry.sequence))
            writer.integer(UInt16(clamping: entry.format))
            writer.integer(UInt32(entry.bytes.count))
            writer.bytes += entry.bytes
        }
        return writer.bytes
    }

    /// The batch: its notifications and inbox entries; nil when the bytes
    /// are not one of version 1 or 2, are cut short or run on, or hold a
    /// value no notification has.
    public static func decode(_ bytes: [UInt8]) -> (notifications: [PendingNotification], inbox: [SharedInboxEntry])? {
        var reader = Reader(bytes)
        guard let version = reader.byte(), version == 1 || version == 2, let count = reader.integer(UInt32.self), count <= maxCount else { return nil }
        var batch: [PendingNotification] = []
        batch.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let deviceID = reader.integer(UInt64.self), let environmentTag = reader.byte(), environmentTag <= 1,
                let bundleID = reader.string(), let acceptedAt = reader.date(), let id = reader.uuid(), let deliveryID = reader.uuid(),
                let token = reader.short(), let topic = reader.string(), let payloadLength = reader.integer(UInt32.self),
                let payload = reader.take(Int(payloadLength)), let hasExpiration = reader.byte(), hasExpiration <= 1
            else { return nil }
            var expiration: Date?
            if hasExpiration == 1 {
                guard let date = reader.date() else { return nil }
                expiration = date
            }
            guard let priority = reader.byte().flatMap(Priority.init(rawValue:)), let collapseID = reader.optionalString(),
                let pushType = reader.optionalString(), let silent = reader.byte(), silent <= 1
            else { return nil }
            let notification = PushNotification(
                id: id, token: token, topic: topic, payload: payload, expiration: expiration, priority: priority, collapseID: collapseID,
                pushType: pushType, isSilent: silent == 1, deliveryID: deliveryID)
            batch.append(
                PendingNotification(
                    deviceID: deviceID, bundleID: bundleID, environment: environmentTag == 0 ? .production : .sandbox, notification: notification,
                    acceptedAt: acceptedAt))
        }
        var inbox: [SharedInboxEntry] = []
        if version >= 2 {
            guard let entries = reader.integer(UInt32.self), entries <= maxCount else { return nil }
            for _ in 0..<entries {
                guard let node = reader.string(), let sequence = reader.integer(UInt64.self), let format = reader.integer(UInt16.self),
                    let length = reader.integer(UInt32.self), let entryBytes = reader.take(Int(length))
                else { return nil }
                inbox.append(SharedInboxEntry(node: node, sequence: Int64(bitPattern: sequence), format: Int(format), bytes: entryBytes))
            }
        }
        return reader.isAtEnd ? (batch, inbox) : nil
    }

    private struct Writer {
        var bytes: [UInt8] = []

        mutating func byte(_ value: UInt8) { bytes.append(value) }

        mutating func integer<T: FixedWidthInteger>(_ value: T) {
            withUnsafeBytes(of: value.bigEndian) { bytes += $0 }
        }

        mutating func date(_ date: Date) { integer(date.timeIntervalSince1970.bitPattern) }

        mutating func uuid(_ id: UUID) { withUnsafeBytes(of: id.uuid) { bytes += $0 } }

        /// At most 0xFFFE bytes (every such field of a notification is far shorter).
        mutating func short(_ value: some Collection<UInt8>) {
            integer(UInt16(min(value.count, 0xFFFE)))
            bytes += value.prefix(0xFFFE)
        }

        mutating func string(_ text: String) { short(text.utf8) }

        mutating func optionalString(_ text: String?) {
            if let text { string(text) } else { integer(UInt16(0xFFFF)) }
        }
    }

    private struct Reader {
        private let bytes: [UInt8]
        private var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var isAtEnd: Bool { index == bytes.count }

        mutating func take(_ count: Int) -> [UInt8]? {
            guard count >= 0, bytes.count - index >= count else { return nil }
            defer { index += count }
            return Array(bytes[index..<index + count])
        }

        mutating func byte() -> UInt8? { take(1)?[0] }

        mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
            take(MemoryLayout<T>.size).map { $0.reduce(T.zero) { $0 << 8 | T($1) } }
        }

        mutating func date() -> Date? {
            integer(UInt64.self).map { Date(timeIntervalSince1970: Double(bitPattern: $0)) }.flatMap { $0.timeIntervalSince1970.isFinite ? $0 : nil }
        }

        mutating func uuid() -> UUID? {
            take(16).map { b in UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])) }
        }

        mutating func short() -> [UInt8]? {
            integer(UInt16.self).flatMap { $0 == 0xFFFF ? nil : take(Int($0)) }
        }

        mutating func string() -> String? { short().flatMap { String(validating: $0, as: UTF8.self) } }

        /// `.some(nil)` for none; nil when the field is not there or not text.
        mutating func optionalString() -> String?? {
            guard let length = integer(UInt16.self) else { return nil }
            if length == 0xFFFF { return .some(nil) }
            return take(Int(length)).flatMap { String(validating: $0, as: UTF8.self) }.map { .some($0) }
        }
    }
}
