import CourierCore
import Crypto
import Foundation
import NIOCore

/// What an AppTokenRequest asks for (item 0x05).
public enum AppTokenKind: UInt8, Sendable, Hashable {
    /// The app's device token (registering the app).
    case device = 0
    /// The app's Live Activity push-to-start token.
    case liveActivityPushToStart = 1
    /// A new Live Activity's update token (the response names its activity).
    case liveActivityUpdate = 2
}

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
    public static let subscribe: UInt8 = 0x15
    public static let unsubscribe: UInt8 = 0x16
    public static let channelAck: UInt8 = 0x17
    public static let error: UInt8 = 0x1F

    /// The commands a device may send; the others are the server's.
    public static let sentByDevices: Set<UInt8> = [
        connect, filter, ack, keepAlive, appTokenRequest, unregister, subscribe, unsubscribe,
    ]
}

/// The statuses of an Ack (item 0x01).
public enum DeviceAckStatus {
    /// The app handled the notification.
    public static let handled: UInt8 = 0
    /// The device could not read the notification frame: the server drops
    /// the notification instead of sending it again.
    public static let unreadable: UInt8 = 1
}

/// The Filter's name for an app: SHA-1 of its bundle id.
public func topicHash(of bundleID: String) -> [UInt8] {
    Array(Insecure.SHA1.hash(data: Array(bundleID.utf8)))
}

/// A notification as the device receives it.
public struct DeviceNotification: Sendable, Hashable {
    public var token: [UInt8]
    public var payload: [UInt8]
    /// The apns-id: the provider's (or one the server made). It may repeat.
    public var id: UUID
    /// The server's id of this notification: the same on every delivery of
    /// it, different for every other notification. The device acknowledges
    /// by it and drops a notification it already handled by it.
    public var deliveryID: UUID
    /// Seconds since 1970; nil or 0 when it was not to be stored.
    public var expiration: UInt32?
    public var priority: UInt8
    public var topic: String
    public var collapseID: String?
    public var pushType: String?
    /// A broadcast's channel (item 0x0A): the device got it as a
    /// subscriber of that channel, not by its token.
    public var channelID: String?

    public init(
        token: [UInt8], payload: [UInt8], id: UUID, deliveryID: UUID, expiration: UInt32?, priority: UInt8, topic: String, collapseID: String? = nil,
        pushType: String? = nil, channelID: String? = nil
    ) {
        self.channelID = channelID
        self.token = token
        self.payload = payload
        self.id = id
        self.deliveryID = deliveryID
        self.expiration = expiration
        self.priority = priority
        self.topic = topic
        self.collapseID = collapseID
        self.pushType = pushType
    }

    /// The sizes the Notification frame's items may have (the table of
    /// docs/device-protocol.md); the codec refuses any other.
    public static let payloadSizes = 1...65_535
    public static let topicSizes = 1...255
    public static let collapseIDSizes = 1...64
    public static let pushTypeSizes = 1...255
    public static let channelIDSizes = 1...64

    /// Why a device could not read this notification, or nil when every
    /// item is within its bounds: what the server checks before sending,
    /// so that no notification ends a device's connection.
    public func problem(tokenLength: Int) -> String? {
        if token.count != tokenLength { return "token is \(token.count) bytes, not \(tokenLength)" }
        if !Self.payloadSizes.contains(payload.count) { return "payload is \(payload.count) bytes" }
        if Priority(rawValue: priority) == nil { return "priority \(priority)" }
        if !Self.topicSizes.contains(topic.utf8.count) { return "topic is \(topic.utf8.count) bytes" }
        if let collapseID, !Self.collapseIDSizes.contains(collapseID.utf8.count) { return "collapse id is \(collapseID.utf8.count) bytes" }
        if let pushType, !Self.pushTypeSizes.contains(pushType.utf8.count) { return "push type is \(pushType.utf8.count) bytes" }
        if let channelID, !Self.channelIDSizes.contains(channelID.utf8.count) { return "channel id is \(channelID.utf8.count) bytes" }
        return nil
    }
}

/// A typed device-protocol message; converts to and from `DeviceFrame`.
public enum DeviceMessage: Sendable, Hashable {
    case connect(version: UInt8, tokens: [[UInt8]], keepAlive: UInt16?, generation: UInt32?)
    case connectAck(
        status: DeviceProtocolCode, serverTime: UInt64, keepAlive: UInt16, maxFrameLength: UInt32, refusedTokens: [[UInt8]], tokenLength: UInt8?)
    case filter(enabledTopicHashes: [[UInt8]])
    case notification(DeviceNotification)
    /// `deliveryID` is the notification's `DeviceNotification.deliveryID`;
    /// `status` one of `DeviceAckStatus`.
    case ack(deliveryID: UUID, status: UInt8)
    case keepAlive
    case keepAliveAck
    case noStorage
    case appTokenRequest(bundleID: String, requestID: UInt32, kind: AppTokenKind = .device)
    /// `activity`: a Live Activity update token's activity.
    case appTokenResponse(requestID: UInt32, bundleID: String?, token: [UInt8]?, status: DeviceProtocolCode, activity: UInt32? = nil)
    /// With `activity`: that Live Activity ended (the app stays).
    case unregister(bundleID: String, requestID: UInt32, activity: UInt32? = nil)
    case unregisterAck(requestID: UInt32, status: DeviceProtocolCode)
    /// Subscribes the app to a broadcast channel for this connection;
    /// `lastDeliveryID`: the channel's broadcast the device has already
    /// (its stored one is then not sent again).
    case subscribe(bundleID: String, requestID: UInt32, channelID: String, lastDeliveryID: UUID? = nil)
    case unsubscribe(bundleID: String, requestID: UInt32, channelID: String)
    /// The answer to a Subscribe or an Unsubscribe.
    case channelAck(requestID: UInt32, status: DeviceProtocolCode)
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
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A])
            let priority = try items.integer(0x05, UInt8.self, "priority")
            guard Priority(rawValue: priority) != nil else { throw DeviceProtocolError(.badItemValue, "priority \(priority)") }
            self = .notification(
                DeviceNotification(
                    token: try items.bytes(0x01, size: tokenLength, "token"),
                    payload: try items.bytes(0x02, "payload"),
                    id: try items.uuid(0x03, "id"),
                    deliveryID: try items.uuid(0x09, "delivery id"),
                    expiration: try items.optionalInteger(0x04, UInt32.self, "expiration"),
                    priority: priority,
                    topic: try items.string(0x06, maxLength: DeviceNotification.topicSizes.upperBound, "topic"),
                    collapseID: try items.optionalString(0x07, maxLength: DeviceNotification.collapseIDSizes.upperBound, "collapse id"),
                    pushType: try items.optionalString(0x08, maxLength: DeviceNotification.pushTypeSizes.upperBound, "push type"),
                    channelID: try items.optionalString(0x0A, maxLength: DeviceNotification.channelIDSizes.upperBound, "channel id")))
        case DeviceCommand.ack:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x03])
            self = .ack(deliveryID: try items.uuid(0x03, "delivery id"), status: try items.optionalInteger(0x01, UInt8.self, "status") ?? 0)
        case DeviceCommand.keepAlive:
            self = .keepAlive
        case DeviceCommand.keepAliveAck:
            self = .keepAliveAck
        case DeviceCommand.noStorage:
            self = .noStorage
        case DeviceCommand.appTokenRequest:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x05])
            let rawKind = try items.optionalInteger(0x05, UInt8.self, "token kind") ?? 0
            guard let kind = AppTokenKind(rawValue: rawKind) else { throw DeviceProtocolError(.badItemValue, "token kind \(rawKind)") }
            self = .appTokenRequest(
                bundleID: try items.string(0x01, maxLength: 155, "bundle id"),
                requestID: try items.integer(0x02, UInt32.self, "request id"), kind: kind)
        case DeviceCommand.appTokenResponse:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x03, 0x04, 0x06])
            let status = DeviceProtocolCode(rawValue: try items.integer(0x04, UInt8.self, "status"))
            let token = try items.optionalBytes(0x03, size: tokenLength, "token")
            if status == .ok, token == nil { throw DeviceProtocolError(.missingItem, "token (item 0x03) is required with status 0") }
            self = .appTokenResponse(
                requestID: try items.integer(0x02, UInt32.self, "request id"),
                bundleID: try items.optionalString(0x01, maxLength: 155, "bundle id"), token: token, status: status,
                activity: try items.optionalInteger(0x06, UInt32.self, "activity"))
        case DeviceCommand.unregister:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x06])
            self = .unregister(
                bundleID: try items.string(0x01, maxLength: 155, "bundle id"),
                requestID: try items.integer(0x02, UInt32.self, "request id"), activity: try items.optionalInteger(0x06, UInt32.self, "activity"))
        case DeviceCommand.unregisterAck:
            let items = try ItemSet(frame, repeatable: [], known: [0x02, 0x04])
            self = .unregisterAck(
                requestID: try items.integer(0x02, UInt32.self, "request id"),
                status: DeviceProtocolCode(rawValue: try items.integer(0x04, UInt8.self, "status")))
        case DeviceCommand.subscribe:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x07, 0x08])
            self = .subscribe(
                bundleID: try items.string(0x01, maxLength: 155, "bundle id"), requestID: try items.integer(0x02, UInt32.self, "request id"),
                channelID: try items.string(0x07, maxLength: DeviceNotification.channelIDSizes.upperBound, "channel id"),
                lastDeliveryID: try items.optionalUUID(0x08, "last delivery id"))
        case DeviceCommand.unsubscribe:
            let items = try ItemSet(frame, repeatable: [], known: [0x01, 0x02, 0x07])
            self = .unsubscribe(
                bundleID: try items.string(0x01, maxLength: 155, "bundle id"), requestID: try items.integer(0x02, UInt32.self, "request id"),
                channelID: try items.string(0x07, maxLength: DeviceNotification.channelIDSizes.upperBound, "channel id"))
        case DeviceCommand.channelAck:
            let items = try ItemSet(frame, repeatable: [], known: [0x02, 0x04])
            self = .channelAck(
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

    /// The message's command.
    public var command: UInt8 {
        switch self {
        case .connect: DeviceCommand.connect
        case .connectAck: DeviceCommand.connectAck
        case .filter: DeviceCommand.filter
        case .notification: DeviceCommand.notification
        case .ack: DeviceCommand.ack
        case .keepAlive: DeviceCommand.keepAlive
        case .keepAliveAck: DeviceCommand.keepAliveAck
        case .noStorage: DeviceCommand.noStorage
        case .appTokenRequest: DeviceCommand.appTokenRequest
        case .appTokenResponse: DeviceCommand.appTokenResponse
        case .unregister: DeviceCommand.unregister
        case .unregisterAck: DeviceCommand.unregisterAck
        case .subscribe: DeviceCommand.subscribe
        case .unsubscribe: DeviceCommand.unsubscribe
        case .channelAck: DeviceCommand.channelAck
        case .error: DeviceCommand.error
        }
    }

    /// Writes the encoded frame: the items go straight into `buffer`.
    public func write(to buffer: inout ByteBuffer) {
        buffer.writeItemFrame(command: command) { writeItems(to: &$0) }
    }

    /// The longest start of `text` that is at most `limit` bytes of UTF-8
    /// and ends on a character's boundary (a cut inside a character would
    /// be decoded with a replacement character, longer than the limit).
    static func cut(_ text: String, toAtMost limit: Int) -> Substring.UTF8View {
        let utf8 = text.utf8
        guard utf8.count > limit else { return text[...].utf8 }
        var end = utf8.index(utf8.startIndex, offsetBy: limit)
        // Back to the start of the character the limit falls in: continuation bytes are 10xxxxxx.
        while end > utf8.startIndex, utf8[end] & 0xC0 == 0x80 { end = utf8.index(before: end) }
        return text[..<end].utf8
    }

    /// Room enough for most frames: a notification's payload on top.
    public var capacityHint: Int {
        if case .notification(let notification) = self { return 256 + notification.payload.count }
        return 256
    }

    /// The frame for this message: what `write(to:)` writes, read back.
    public var frame: DeviceFrame {
        var buffer = ByteBuffer()
        write(to: &buffer)
        var decoder = DeviceFrameDecoder(maxFrameLength: Int(UInt32.max))
        return try! decoder.decode(buffer: &buffer)!
    }

    private func writeItems(to out: inout ByteBuffer) {
        switch self {
        case .connect(let version, let tokens, let keepAlive, let generation):
            out.writeFrameItem(id: 0x01, integer: version)
            for token in tokens { out.writeFrameItem(id: 0x02, token) }
            if let keepAlive { out.writeFrameItem(id: 0x03, integer: keepAlive) }
            if let generation { out.writeFrameItem(id: 0x04, integer: generation) }
        case .connectAck(let status, let serverTime, let keepAlive, let maxFrameLength, let refusedTokens, let tokenLength):
            out.writeFrameItem(id: 0x01, integer: status.rawValue)
            out.writeFrameItem(id: 0x02, integer: serverTime)
            out.writeFrameItem(id: 0x03, integer: keepAlive)
            out.writeFrameItem(id: 0x04, integer: maxFrameLength)
            for token in refusedTokens { out.writeFrameItem(id: 0x05, token) }
            if let tokenLength { out.writeFrameItem(id: 0x06, integer: tokenLength) }
        case .filter(let hashes):
            for hash in hashes { out.writeFrameItem(id: 0x01, hash) }
        case .notification(let notification):
            out.writeFrameItem(id: 0x01, notification.token)
            out.writeFrameItem(id: 0x02, notification.payload)
            out.writeFrameItem(id: 0x03, uuid: notification.id)
            if let expiration = notification.expiration { out.writeFrameItem(id: 0x04, integer: expiration) }
            out.writeFrameItem(id: 0x05, integer: notification.priority)
            out.writeFrameItem(id: 0x06, notification.topic.utf8)
            if let collapseID = notification.collapseID { out.writeFrameItem(id: 0x07, collapseID.utf8) }
            if let pushType = notification.pushType { out.writeFrameItem(id: 0x08, pushType.utf8) }
            out.writeFrameItem(id: 0x09, uuid: notification.deliveryID)
            if let channelID = notification.channelID { out.writeFrameItem(id: 0x0A, channelID.utf8) }
        case .ack(let deliveryID, let status):
            out.writeFrameItem(id: 0x01, integer: status)
            out.writeFrameItem(id: 0x03, uuid: deliveryID)
        case .keepAlive, .keepAliveAck, .noStorage:
            break
        case .appTokenRequest(let bundleID, let requestID, let kind):
            out.writeFrameItem(id: 0x01, bundleID.utf8)
            out.writeFrameItem(id: 0x02, integer: requestID)
            if kind != .device { out.writeFrameItem(id: 0x05, integer: kind.rawValue) }
        case .appTokenResponse(let requestID, let bundleID, let token, let status, let activity):
            if let bundleID { out.writeFrameItem(id: 0x01, bundleID.utf8) }
            out.writeFrameItem(id: 0x02, integer: requestID)
            if let token { out.writeFrameItem(id: 0x03, token) }
            out.writeFrameItem(id: 0x04, integer: status.rawValue)
            if let activity { out.writeFrameItem(id: 0x06, integer: activity) }
        case .unregister(let bundleID, let requestID, let activity):
            out.writeFrameItem(id: 0x01, bundleID.utf8)
            out.writeFrameItem(id: 0x02, integer: requestID)
            if let activity { out.writeFrameItem(id: 0x06, integer: activity) }
        case .unregisterAck(let requestID, let status):
            out.writeFrameItem(id: 0x02, integer: requestID)
            out.writeFrameItem(id: 0x04, integer: status.rawValue)
        case .subscribe(let bundleID, let requestID, let channelID, let lastDeliveryID):
            out.writeFrameItem(id: 0x01, bundleID.utf8)
            out.writeFrameItem(id: 0x02, integer: requestID)
            out.writeFrameItem(id: 0x07, channelID.utf8)
            if let lastDeliveryID { out.writeFrameItem(id: 0x08, uuid: lastDeliveryID) }
        case .unsubscribe(let bundleID, let requestID, let channelID):
            out.writeFrameItem(id: 0x01, bundleID.utf8)
            out.writeFrameItem(id: 0x02, integer: requestID)
            out.writeFrameItem(id: 0x07, channelID.utf8)
        case .channelAck(let requestID, let status):
            out.writeFrameItem(id: 0x02, integer: requestID)
            out.writeFrameItem(id: 0x04, integer: status.rawValue)
        case .error(let code, let message):
            out.writeFrameItem(id: 0x01, integer: code.rawValue)
            if !message.isEmpty { out.writeFrameItem(id: 0x02, Self.cut(message, toAtMost: 1024)) }
        }
    }
}

extension DeviceFrame {
    /// For a Notification frame the device could not read: its delivery id
    /// (item 0x09), when the frame has exactly one of 16 bytes — what the
    /// device needs to refuse it (`DeviceAckStatus.unreadable`) and carry on.
    public var deliveryIDOfUnreadableNotification: UUID? {
        guard command == DeviceCommand.notification else { return nil }
        let found = items.filter { $0.id == 0x09 }
        guard found.count == 1, let value = found.first?.value, value.readableBytes == 16 else { return nil }
        return value.withUnsafeReadableBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }
}

extension ByteBuffer {
    /// Writes a UUID item: its 16 bytes.
    fileprivate mutating func writeFrameItem(id: UInt8, uuid: UUID) {
        withUnsafeBytes(of: uuid.uuid) { writeFrameItem(id: id, $0) }
    }
}

/// A set of item ids below 64 (every item the protocol defines), as bits.
private struct ItemIDs: ExpressibleByArrayLiteral {
    private var bits: UInt64 = 0

    init(arrayLiteral ids: UInt8...) {
        for id in ids { _ = insert(id) }
    }

    func contains(_ id: UInt8) -> Bool { id < 64 && bits & (1 << id) != 0 }

    /// False when it was there already.
    mutating func insert(_ id: UInt8) -> Bool {
        precondition(id < 64, "item ids of the protocol are below 64")
        defer { bits |= 1 << id }
        return !contains(id)
    }
}

/// The items of a received frame, checked for repeats of items that may
/// appear once.
private struct ItemSet {
    let items: [DeviceFrame.Item]

    init(_ frame: DeviceFrame, repeatable: ItemIDs, known: ItemIDs) throws {
        var seen = ItemIDs()
        for item in frame.items where known.contains(item.id) && !repeatable.contains(item.id) {
            guard seen.insert(item.id) else {
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
        try checkLength(value, size: size, name)
        return Array(buffer: value)
    }

    /// The value is `size` bytes, or (without a size) not empty.
    private static func checkLength(_ value: ByteBuffer, size: Int?, _ name: String) throws {
        if let size, value.readableBytes != size {
            throw DeviceProtocolError(.badItemValue, "\(name) is \(value.readableBytes) bytes, not \(size)")
        }
        if size == nil, value.readableBytes == 0 { throw DeviceProtocolError(.badItemValue, "\(name) is empty") }
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

    func optionalUUID(_ id: UInt8, _ name: String) throws -> UUID? {
        guard first(id) != nil else { return nil }
        return try uuid(id, name)
    }

    func uuid(_ id: UInt8, _ name: String) throws -> UUID {
        let value = try required(id, name)
        try Self.checkLength(value, size: 16, name)
        return value.withUnsafeReadableBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }
}
