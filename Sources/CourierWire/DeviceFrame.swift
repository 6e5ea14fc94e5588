import NIOCore

/// A courier device-protocol frame (docs/device-protocol.md): a command and
/// its items in the order received.
public struct DeviceFrame: Sendable, Hashable {
    public struct Item: Sendable, Hashable {
        public var id: UInt8
        public var value: ByteBuffer

        public init(id: UInt8, value: ByteBuffer) {
            self.id = id
            self.value = value
        }
    }

    public var command: UInt8
    public var items: [Item]

    public init(command: UInt8, items: [Item] = []) {
        self.command = command
        self.items = items
    }

    public func write(to buffer: inout ByteBuffer) {
        buffer.writeItemFrame(command: command) { frame in
            for item in items { frame.writeFrameItem(id: item.id, buffer: item.value) }
        }
    }

    /// The encoded length of the frame.
    public var encodedLength: Int { 5 + items.reduce(0) { $0 + 3 + $1.value.readableBytes } }
}

/// The error codes and statuses of the device protocol.
public struct DeviceProtocolCode: Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let ok = DeviceProtocolCode(rawValue: 0)
    public static let malformedFrame = DeviceProtocolCode(rawValue: 1)
    public static let frameTooLarge = DeviceProtocolCode(rawValue: 2)
    public static let unknownCommand = DeviceProtocolCode(rawValue: 3)
    public static let missingItem = DeviceProtocolCode(rawValue: 4)
    public static let badItemValue = DeviceProtocolCode(rawValue: 5)
    public static let unsupportedVersion = DeviceProtocolCode(rawValue: 6)
    public static let notConnected = DeviceProtocolCode(rawValue: 7)
    public static let unknownApp = DeviceProtocolCode(rawValue: 8)
    public static let certificateRefused = DeviceProtocolCode(rawValue: 9)
    public static let `internal` = DeviceProtocolCode(rawValue: 10)
    /// A Subscribe or Unsubscribe named a channel its app does not have
    /// (or the device is not subscribed to).
    public static let unknownChannel = DeviceProtocolCode(rawValue: 11)
    /// A Subscribe beyond the subscriptions one connection may hold.
    public static let tooManySubscriptions = DeviceProtocolCode(rawValue: 12)
    /// More frames than a device needs (KeepAlive, token requests, …):
    /// over the connection's frame budget; the server closes after it.
    public static let tooManyFrames = DeviceProtocolCode(rawValue: 13)

    public var name: String {
        switch rawValue {
        case 0: "ok"
        case 1: "malformedFrame"
        case 2: "frameTooLarge"
        case 3: "unknownCommand"
        case 4: "missingItem"
        case 5: "badItemValue"
        case 6: "unsupportedVersion"
        case 7: "notConnected"
        case 8: "unknownApp"
        case 9: "certificateRefused"
        case 10: "internal"
        case 11: "unknownChannel"
        case 12: "tooManySubscriptions"
        case 13: "tooManyFrames"
        default: "code\(rawValue)"
        }
    }

    public var description: String { "\(rawValue) (\(name))" }
}

/// A device-protocol violation: the peer gets an Error frame with `code`
/// and the connection closes.
public struct DeviceProtocolError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: DeviceProtocolCode
    public var message: String

    public init(_ code: DeviceProtocolCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.name): \(message)" }
}

/// Decodes device frames. A length over `maxFrameLength` is an error
/// before anything is buffered; an incomplete frame waits for more bytes.
public struct DeviceFrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = DeviceFrame

    public static let defaultMaxFrameLength = 16_384

    public let maxFrameLength: Int

    public init(maxFrameLength: Int = DeviceFrameDecoder.defaultMaxFrameLength) {
        self.maxFrameLength = maxFrameLength
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> DeviceFrame? {
        let start = buffer.readerIndex
        guard let (command, length) = buffer.getMultipleIntegers(at: start, as: (UInt8, UInt32).self) else { return nil }
        guard length <= maxFrameLength else {
            throw DeviceProtocolError(.frameTooLarge, "frame length \(length) is over \(maxFrameLength)")
        }
        guard buffer.readableBytes >= 5 + Int(length) else { return nil }
        var iterator = FrameItemIterator(buffer: buffer, index: start + 5, length: Int(length))
        var items: [DeviceFrame.Item] = []
        items.reserveCapacity(4)
        while true {
            switch iterator.next() {
            case .end:
                buffer.moveReaderIndex(forwardBy: 5 + Int(length))
                return DeviceFrame(command: command, items: items)
            case .overrun:
                throw DeviceProtocolError(.malformedFrame, "an item runs past the end of the frame")
            case .item(let id, let index, let itemLength):
                items.append(DeviceFrame.Item(id: id, value: buffer.getSlice(at: index, length: itemLength)!))
            }
        }
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> DeviceFrame? {
        try decode(buffer: &buffer)
    }
}

/// Writes device frames.
public struct DeviceFrameEncoder: MessageToByteEncoder {
    public typealias OutboundIn = DeviceFrame
    public init() {}
    public func encode(data: DeviceFrame, out: inout ByteBuffer) throws {
        data.write(to: &out)
    }
}

/// Writes device messages, each straight into the outbound buffer.
public struct DeviceMessageEncoder: MessageToByteEncoder {
    public typealias OutboundIn = DeviceMessage
    public init() {}
    public func encode(data: DeviceMessage, out: inout ByteBuffer) throws {
        data.write(to: &out)
    }
}
