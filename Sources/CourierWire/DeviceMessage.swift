import Crypto
import Foundation
import NIOCore

/// The commands of the courier device protocol (docs/device-protocol.md).
public enum DeviceCommand {
    public static let connect: UInt8 = 0x07
    public static let connectAck: UInt8 = 0x08
    public static let filter: UInt8 = 0x09
    public static let notification: UInt8 = 0x0A
    public static let ack: UInt8 = 0x0B
    public static let keepAlive: UInt8 = 0x0C
    public static let keepAliveAck: UInt8 = 0x0D
    public static let noStorage: UInt8 = 0x0E
    public static let appTokenRequest: UInt8 = 0x11
    public static let appTokenResponse: UInt8 = 0x12
    public static let unregister: UInt8 = 0x13
    public static let unregisterAck: UInt8 = 0x14
    public static let error: UInt8 = 0x1F
}

/// The Filter's name for an app: SHA-1 of its bundle id.
public func topicHash(of bundleID: String) -> [UInt8] {
    Array(Insecure.SHA1.hash(data: Array(bundleID.utf8)))
}

/// A notification as the device receives it.
public struct DeviceNotification: Sendable, Hashable {
    public var token: [UInt8]
    public var payload: [UInt8]
    public var id: UUID
    /// Seconds since 1970; nil or 0 when it was not to be stored.
    public var expiration: UInt32?
    public var priority: UInt8
    public var topic: String
    public var collapseID: String?
    public var pushType: String?

    public init(
        token: [UInt8], payload: [UInt8], id: UUID, expiration: UInt32?, priority: UInt8, topic: String, collapseID: String? = nil,
        pushType: String? = nil
    ) {
        self.token = token
        self.payload = payload
        self.id = id
        self.expiration = expiration
        self.priority = priority
        self.topic = topic
        self.collapseID = collapseID
        self.pushType = pushType
    }
}

/// A typed device-protocol message; converts to and from `DeviceFrame`.
public enum DeviceMessage: Sendable, Hashable {
    case connect(version: UInt8, tokens: [[UInt8]], keepAlive: UInt16?, generation: UInt32?)
    case connectAck(
        status: DeviceProtocolCode, serverTime: UInt64, keepAlive: UInt16, maxFrameLength: UInt32, refusedTokens: [[UInt8]], tokenLength: UInt8?)
    case filter(enabledTopicHashes: [[UInt8]])
    case notification(DeviceNotification)
    case ack(id: UUID, status: UInt8)
    case keepAlive
    case keepAliveAck
    case noStorage
    case appTokenRequest(bundleID: String, requestID: UInt32)
    case appTokenResponse(requestID: UInt32, bundleID: String?, token: [UInt8]?, status: DeviceProtocolCode)
    case unregister(bundleID: String, requestID: UInt32)
    case unregisterAck(requestID: UInt32, status: DeviceProtocolCode)
    case error(code: DeviceProtocolCode, message: String)

    /// The protocol version of this codec.
    public static let version: UInt8 = 1

    /// Reads a frame. `tokenLength` is the size every token item must have.
    public init(frame: DeviceFrame, tokenLength: Int = 32) throws {
        switch frame.command {
        case DeviceCommand.connect:
            let items = try ItemSet(frame, repeatable: [0x02], known: [0x01, 0x02, 0x03, 0x04])
            self = .connect(
                version: try items.integer(0x01, UInt8.self, "version"),
                tokens: try items.all(0x02, size: tokenLength, "token"),
                keepAlive: try items.optionalInteger(0x03, UInt16.self, "keepalive"),
                generation: try items.optionalInteger(0x04, UInt32.self, "generation"))
        case DeviceCommand.connectAck:
            let items = try ItemSet(frame, repeatable: [0x05], known: [0x01, 0x02, 0x03, 0x04, 0x05, 0x06])
            // The server's token length, when it says it, sizes the refused tokens too.
            let announced = try items.optionalInteger(0x06, UInt8.self, "token length")
            self = .connectAck(
                status: DeviceProtocolCode(rawValue: try items.integer(0x01, UInt8.self, "status")),
                serverTime: try items.integer(0x02, UInt64.self, "server time"),
                keepAlive: try items.integer(0x03, UInt16.self, "keepalive"),
                maxFrameLength: try items.integer(0x04, UInt32.self, "max frame"),
                refusedTokens: try items.all(0x05, size: announced.map(Int.init) ?? tokenLength, "refused token"),
                tokenLength: announced)
        case DeviceCommand.filter:
            let items = try ItemSet(frame, repeatable: [0x01], known: [0x01])
            self = .filter(enabledTopicHashes: try items.all(0x01, size: 20, "enabled topic"))
        case DeviceCommand.notification:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08])
            let priority = try items.integer(0x05, UInt8.self, "priority")
            guard priority == 5 || priority == 10 else { throw DeviceProtocolError(.badItemValue, "priority \(priority)") }
            self = .notification(
                DeviceNotification(
                    token: try items.bytes(0x01, size: tokenLength, "token"),
                    payload: try items.bytes(0x02, "payload"),
                    id: try items.uuid(0x03, "id"),
                    expiration: try items.optionalInteger(0x04, UInt32.self, "expiration"),
                    priority: priority,
                    topic: try items.string(0x06, maxLength: 255, "topic"),
                    collapseID: try items.optionalString(0x07, maxLength: 64, "collapse id"),
                    pushType: try items.optionalString(0x08, maxLength: 255, "push type")))
        case DeviceCommand.ack:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x03])
            self = .ack(id: try items.uuid(0x03, "id"), status: try items.optionalInteger(0x01, UInt8.self, "status") ?? 0)
        case DeviceCommand.keepAlive:
            self = .keepAlive
        case DeviceCommand.keepAliveAck:
            self = .keepAliveAck
        case DeviceCommand.noStorage:
            self = .noStorage
        case DeviceCommand.appTokenRequest:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02])
            self = .appTokenRequest(
                bundleID: try items.string(0x01, maxLength: 155, "bundle id"),
                requestID: try items.integer(0x02, UInt32.self, "request id"))
        case DeviceCommand.appTokenResponse:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x03, 0x04])
            let status = DeviceProtocolCode(rawValue: try items.integer(0x04, UInt8.self, "status"))
            let token = try items.optionalBytes(0x03, size: tokenLength, "token")
            if status == .ok, token == nil { throw DeviceProtocolError(.missingItem, "token (item 0x03) is required with status 0") }
            self = .appTokenResponse(
                requestID: try items.integer(0x02, UInt32.self, "request id"),
                bundleID: try items.optionalString(0x01, maxLength: 155, "bundle id"), token: token, status: status)
        case DeviceCommand.unregister:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02])
            self = .unregister(
                bundleID: try items.string(0x01, maxLength: 155, "bundle id"),
                requestID: try items.integer(0x02, UInt32.self, "request id"))
        case DeviceCommand.unregisterAck:
            let items = try ItemSet(frame, repeatable: [], known: [0x02, 0x04])
            self = .unregisterAck(
                requestID: try items.integer(0x02, UInt32.self, "request id"),
                status: DeviceProtocolCode(rawValue: try items.integer(0x04, UInt8.self, "status")))
        case DeviceCommand.error:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02])
            self = .error(
                code: DeviceProtocolCode(rawValue: try items.integer(0x01, UInt8.self, "code")),
                message: try items.optionalString(0x02, maxLength: 1024, allowEmpty: true, "message") ?? "")
        default:
            throw DeviceProtocolError(.unknownCommand, "command 0x\(String(frame.command, radix: 16))")
        }
    }

    /// The frame for this message.
    public var frame: DeviceFrame {
        var builder = FrameBuilder()
        switch self {
        case .connect(let version, let tokens, let keepAlive, let generation):
            builder.integer(0x01, version)
            for token in tokens { builder.bytes(0x02, token) }
            if let keepAlive { builder.integer(0x03, keepAlive) }
            if let generation { builder.integer(0x04, generation) }
            return builder.frame(DeviceCommand.connect)
        case .connectAck(let status, let serverTime, let keepAlive, let maxFrameLength, let refusedTokens, let tokenLength):
            builder.integer(0x01, status.rawValue)
            builder.integer(0x02, serverTime)
            builder.integer(0x03, keepAlive)
            builder.integer(0x04, maxFrameLength)
            for token in refusedTokens { builder.bytes(0x05, token) }
            if let tokenLength { builder.integer(0x06, tokenLength) }
            return builder.frame(DeviceCommand.connectAck)
        case .filter(let hashes):
            for hash in hashes { builder.bytes(0x01, hash) }
            return builder.frame(DeviceCommand.filter)
        case .notification(let notification):
            builder.bytes(0x01, notification.token)
            builder.bytes(0x02, notification.payload)
            builder.uuid(0x03, notification.id)
            if let expiration = notification.expiration { builder.integer(0x04, expiration) }
            builder.integer(0x05, notification.priority)
            builder.string(0x06, notification.topic)
            if let collapseID = notification.collapseID { builder.string(0x07, collapseID) }
            if let pushType = notification.pushType { builder.string(0x08, pushType) }
            return builder.frame(DeviceCommand.notification)
        case .ack(let id, let status):
            builder.integer(0x01, status)
            builder.uuid(0x03, id)
            return builder.frame(DeviceCommand.ack)
        case .keepAlive:
            return builder.frame(DeviceCommand.keepAlive)
        case .keepAliveAck:
            return builder.frame(DeviceCommand.keepAliveAck)
        case .noStorage:
            return builder.frame(DeviceCommand.noStorage)
        case .appTokenRequest(let bundleID, let requestID):
            builder.string(0x01, bundleID)
            builder.integer(0x02, requestID)
            return builder.frame(DeviceCommand.appTokenRequest)
        case .appTokenResponse(let requestID, let bundleID, let token, let status):
            if let bundleID { builder.string(0x01, bundleID) }
            builder.integer(0x02, requestID)
            if let token { builder.bytes(0x03, token) }
            builder.integer(0x04, status.rawValue)
            return builder.frame(DeviceCommand.appTokenResponse)
        case .unregister(let bundleID, let requestID):
            builder.string(0x01, bundleID)
            builder.integer(0x02, requestID)
            return builder.frame(DeviceCommand.unregister)
        case .unregisterAck(let requestID, let status):
            builder.integer(0x02, requestID)
            builder.integer(0x04, status.rawValue)
            return builder.frame(DeviceCommand.unregisterAck)
        case .error(let code, let message):
            builder.integer(0x01, code.rawValue)
            if !message.isEmpty { builder.string(0x02, String(decoding: message.utf8.prefix(1024), as: UTF8.self)) }
            return builder.frame(DeviceCommand.error)
        }
    }
}

/// Builds the items of a frame.
private struct FrameBuilder {
    var items: [DeviceFrame.Item] = []

    mutating func bytes(_ id: UInt8, _ value: [UInt8]) {
        items.append(DeviceFrame.Item(id: id, value: ByteBuffer(bytes: value)))
    }

    mutating func string(_ id: UInt8, _ value: String) {
        items.append(DeviceFrame.Item(id: id, value: ByteBuffer(string: value)))
    }

    mutating func integer<T: FixedWidthInteger>(_ id: UInt8, _ value: T) {
        var buffer = ByteBuffer()
        buffer.writeInteger(value)
        items.append(DeviceFrame.Item(id: id, value: buffer))
    }

    mutating func uuid(_ id: UInt8, _ value: UUID) {
        bytes(id, withUnsafeBytes(of: value.uuid) { Array($0) })
    }

    func frame(_ command: UInt8) -> DeviceFrame { DeviceFrame(command: command, items: items) }
}

/// The items of a received frame, checked for repeats of items that may
/// appear once.
private struct ItemSet {
    let items: [DeviceFrame.Item]

    init(_ frame: DeviceFrame, repeatable: Set<UInt8>, known: Set<UInt8>) throws {
        var seen = Set<UInt8>()
        for item in frame.items where known.contains(item.id) && !repeatable.contains(item.id) {
            guard seen.insert(item.id).inserted else {
                throw DeviceProtocolError(.malformedFrame, "item 0x\(String(item.id, radix: 16)) appears twice")
            }
        }
        items = frame.items
    }

    func first(_ id: UInt8) -> ByteBuffer? { items.first { $0.id == id }?.value }

    func required(_ id: UInt8, _ name: String) throws -> ByteBuffer {
        guard let value = first(id) else {
            throw DeviceProtocolError(.missingItem, "\(name) (item 0x\(String(id, radix: 16))) is required")
        }
        return value
    }

    func optionalInteger<T: FixedWidthInteger>(_ id: UInt8, _: T.Type, _ name: String) throws -> T? {
        guard let value = first(id) else { return nil }
        guard value.readableBytes == MemoryLayout<T>.size, let integer = value.getInteger(at: value.readerIndex, as: T.self) else {
            throw DeviceProtocolError(.badItemValue, "\(name) is \(value.readableBytes) bytes, not \(MemoryLayout<T>.size)")
        }
        return integer
    }

    func integer<T: FixedWidthInteger>(_ id: UInt8, _ type: T.Type, _ name: String) throws -> T {
        _ = try required(id, name)
        return try optionalInteger(id, type, name)!
    }

    func optionalBytes(_ id: UInt8, size: Int? = nil, _ name: String) throws -> [UInt8]? {
        guard let value = first(id) else { return nil }
        return try Self.check(value, size: size, name)
    }

    func bytes(_ id: UInt8, size: Int? = nil, _ name: String) throws -> [UInt8] {
        try Self.check(try required(id, name), size: size, name)
    }

    func all(_ id: UInt8, size: Int, _ name: String) throws -> [[UInt8]] {
        try items.filter { $0.id == id }.map { try Self.check($0.value, size: size, name) }
    }

    private static func check(_ value: ByteBuffer, size: Int?, _ name: String) throws -> [UInt8] {
        if let size, value.readableBytes != size {
            throw DeviceProtocolError(.badItemValue, "\(name) is \(value.readableBytes) bytes, not \(size)")
        }
        if size == nil, value.readableBytes == 0 { throw DeviceProtocolError(.badItemValue, "\(name) is empty") }
        return Array(value.readableBytesView)
    }

    func optionalString(_ id: UInt8, maxLength: Int, allowEmpty: Bool = false, _ name: String) throws -> String? {
        guard let value = first(id) else { return nil }
        guard value.readableBytes <= maxLength, allowEmpty || value.readableBytes > 0 else {
            throw DeviceProtocolError(.badItemValue, "\(name) is \(value.readableBytes) bytes, allowed \(allowEmpty ? 0 : 1)…\(maxLength)")
        }
        guard let text = String(validating: value.readableBytesView, as: UTF8.self) else {
            throw DeviceProtocolError(.badItemValue, "\(name) is not UTF-8")
        }
        return text
    }

    func string(_ id: UInt8, maxLength: Int, _ name: String) throws -> String {
        _ = try required(id, name)
        return try optionalString(id, maxLength: maxLength, name)!
    }

    func uuid(_ id: UInt8, _ name: String) throws -> UUID {
        let bytes = try self.bytes(id, size: 16, name)
        return bytes.withUnsafeBytes { raw in
            UUID(uuid: raw.loadUnaligned(as: uuid_t.self))
        }
    }
}
