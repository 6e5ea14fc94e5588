import NIOCore

/// One feedback-service tuple: `timestamp:u32 | token length:u16 | token`.
public struct FeedbackTuple: Sendable, Hashable {
    /// Seconds since 1970 when the app was found removed.
    public var timestamp: UInt32
    public var token: [UInt8]

    public init(timestamp: UInt32, token: [UInt8]) {
        self.timestamp = timestamp
        self.token = token
    }

    public func write(to buffer: inout ByteBuffer) {
        buffer.writeMultipleIntegers(timestamp, UInt16(token.count))
        buffer.writeBytes(token)
    }
}

/// Decodes feedback tuples (provider side). A token length over
/// `maxTokenLength` is an error, never an allocation.
public struct FeedbackTupleDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = FeedbackTuple

    public let maxTokenLength: Int

    public init(maxTokenLength: Int = 255) {
        self.maxTokenLength = maxTokenLength
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> FeedbackTuple? {
        guard let (timestamp, length) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt32, UInt16).self) else {
            return nil
        }
        guard Int(length) <= maxTokenLength else { throw WireError.frameTooLarge(Int(length)) }
        guard buffer.readableBytes >= 6 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 6)
        let token = buffer.readBytes(length: Int(length))!
        return FeedbackTuple(timestamp: timestamp, token: token)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> FeedbackTuple? {
        try decode(buffer: &buffer)
    }
}
