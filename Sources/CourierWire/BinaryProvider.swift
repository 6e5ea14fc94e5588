import CourierCore
import NIOCore

/// A notification read off the binary provider interface (commands 0, 1
/// and 2). Token and payload are slices of the received bytes.
public struct BinaryNotificationFrame: Sendable, Hashable {
    /// 0 (simple), 1 (enhanced) or 2 (item frame).
    public var command: UInt8
    public var token: ByteBuffer
    public var payload: ByteBuffer
    /// The notification identifier (0 when the command has none).
    public var identifier: UInt32
    /// Seconds since 1970; nil for command 0 and for a command-2 frame
    /// without item 4.
    public var expiry: UInt32?
    /// Nil when the frame carried none (commands 0 and 1, or no item 5).
    public var priority: UInt8?

    public init(command: UInt8, token: ByteBuffer, payload: ByteBuffer, identifier: UInt32, expiry: UInt32?, priority: UInt8?) {
        self.command = command
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiry = expiry
        self.priority = priority
    }
}

/// A malformed notification: what to answer and why.
public struct BinaryFrameFailure: Error, Sendable, Hashable, CustomStringConvertible {
    public var status: BinaryStatus
    /// The identifier of the bad notification (0 when it has none or it
    /// could not be read).
    public var identifier: UInt32
    /// False for command 0 and for an unreadable command byte: the seeds'
    /// simple format has no error response, the connection just closes.
    /// True otherwise: write `|8|status|identifier|`, then close.
    public var answers: Bool
    public var detail: String

    public init(status: BinaryStatus, identifier: UInt32, answers: Bool, detail: String) {
        self.status = status
        self.identifier = identifier
        self.answers = answers
        self.detail = detail
    }

    public var description: String { "status \(status) for notification \(identifier): \(detail)" }

    /// Equal when the answer on the wire is the same; the detail is prose.
    public static func == (lhs: BinaryFrameFailure, rhs: BinaryFrameFailure) -> Bool {
        lhs.status == rhs.status && lhs.identifier == rhs.identifier && lhs.answers == rhs.answers
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(status)
        hasher.combine(identifier)
        hasher.combine(answers)
    }
}

/// What the binary provider decoder hands on.
public enum BinaryProviderInbound: Sendable, Hashable {
    case notification(BinaryNotificationFrame)
    /// The first bad notification; the decoder discards everything after it.
    case failure(BinaryFrameFailure)
}

/// Limits the binary decoder enforces before it buffers anything.
public struct BinaryDecoderLimits: Sendable, Hashable {
    /// The only accepted token length (status 5 otherwise).
    public var tokenLength: Int
    /// Payload limit of commands 0 and 1 (status 7 over it).
    public var legacyPayload: Int
    /// Payload limit of command 2 (status 7 over it).
    public var command2Payload: Int

    public init(tokenLength: Int = 32, legacyPayload: Int = 256, command2Payload: Int = 2048) {
        self.tokenLength = tokenLength
        self.legacyPayload = legacyPayload
        self.command2Payload = command2Payload
    }

    /// The longest command-2 frame that can hold a notification: every item
    /// once, a token of up to 255 bytes and a payload at the limit. A
    /// longer frame is read item by item as it arrives, without buffering
    /// it, to answer what is wrong with it (status 7 for a payload over the
    /// limit) with its identifier.
    public var maxCommand2FrameLength: Int { 5 * 3 + 255 + command2Payload + 4 + 4 + 1 }

    /// The longest frame that can be items at all (five items, each at
    /// most once, of at most 65,535 bytes): a longer frame length is a
    /// protocol error at once, identifier 0.
    public static let maxItemsFrameLength = 5 * (3 + Int(UInt16.max))
}

/// Decodes the binary provider stream: commands 0, 1 and 2 in any mix.
/// Pure parsing; the gateway applies payload and token rules afterwards.
///
/// After the first failure it emits nothing more and swallows all input,
/// because the seeds discard everything sent after a bad notification.
public struct BinaryProviderDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = BinaryProviderInbound

    public let limits: BinaryDecoderLimits
    private var failed = false
    /// A command-2 frame over the longest valid one, being read.
    private var longFrame: LongFrame?

    /// What is known of a frame over the longest valid one while its items
    /// pass: nothing of it is kept but an item header or the identifier.
    private struct LongFrame {
        /// Its bytes not read yet.
        var remaining: Int
        /// What is left of the current item's value, passed over unread.
        var skip = 0
        var identifier: UInt32?
        var seen: UInt8 = 0
        /// The first thing found wrong, in item order.
        var problem: (status: BinaryStatus, detail: String)?
    }

    /// The decoder is inside a frame it reads without keeping (over the
    /// longest valid one): the connection's unfinished-frame deadline
    /// applies as if its bytes were held.
    public var isInsideLongFrame: Bool { longFrame != nil }

    public init(limits: BinaryDecoderLimits = BinaryDecoderLimits()) {
        self.limits = limits
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> BinaryProviderInbound? {
        next(from: &buffer)
    }

    /// The next notification (or the first failure) in `buffer`; nil while
    /// the next frame is not complete, and after a failure.
    public mutating func next(from buffer: inout ByteBuffer) -> BinaryProviderInbound? {
        if failed {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return nil
        }
        let result: BinaryProviderInbound?
        if longFrame != nil {
            result = continueLongFrame(&buffer)
        } else {
            guard let command = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
            result = decode(command, &buffer)
        }
        if case .failure = result {
            failed = true
            longFrame = nil
            buffer.moveReaderIndex(to: buffer.writerIndex)
        }
        return result
    }

    private mutating func decode(_ command: UInt8, _ buffer: inout ByteBuffer) -> BinaryProviderInbound? {
        let result: BinaryProviderInbound?
        switch command {
        case 2: result = decodeCommand2(&buffer)
        case 1: result = decodeEnhanced(&buffer)
        case 0: result = decodeSimple(&buffer)
        default:
            result = .failure(BinaryFrameFailure(status: .protocolError, identifier: 0, answers: true, detail: "unknown command \(command)"))
        }
        return result
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> BinaryProviderInbound? {
        next(from: &buffer)
    }

    // Command 2: |2|frame length:u32|items|
    @inline(__always)
    private mutating func decodeCommand2(_ buffer: inout ByteBuffer) -> BinaryProviderInbound? {
        let start = buffer.readerIndex
        guard let (_, frameLength) = buffer.getMultipleIntegers(at: start, as: (UInt8, UInt32).self) else { return nil }
        guard frameLength <= limits.maxCommand2FrameLength else {
            guard frameLength <= BinaryDecoderLimits.maxItemsFrameLength else {
                return .failure(fail(.protocolError, 0, "frame length \(frameLength) is over \(BinaryDecoderLimits.maxItemsFrameLength): it cannot be items"))
            }
            buffer.moveReaderIndex(forwardBy: 5)
            longFrame = LongFrame(remaining: Int(frameLength))
            return continueLongFrame(&buffer)
        }
        let length = Int(frameLength)
        guard buffer.readableBytes >= 5 + length else { return nil }

        var items = FrameItemIterator(buffer: buffer, index: start + 5, length: length)
        var seen: UInt8 = 0
        // Where the token and payload are: sliced once the frame is known to be good.
        var token = (index: 0, length: 0)
        var payload = (index: 0, length: 0)
        var identifier: UInt32 = 0
        var expiry: UInt32?
        var priority: UInt8?
        var identifierKnown = false
        var problem: BinaryFrameFailure?

        walk: while true {
            switch items.next() {
            case .end:
                break walk
            case .overrun:
                problem = fail(.protocolError, identifier, "an item runs past the end of the frame")
                break walk
            case .item(let id, let index, let itemLength):
                guard (1...5).contains(id) else {
                    problem = fail(.protocolError, identifier, "unknown item \(id)")
                    break walk
                }
                let bit: UInt8 = 1 << id
                guard seen & bit == 0 else {
                    problem = fail(.protocolError, identifier, "item \(id) appears twice")
                    break walk
                }
                seen |= bit
                switch id {
                case 1:
                    token = (index, itemLength)
                case 2:
                    payload = (index, itemLength)
                case 3:
                    guard itemLength == 4 else {
                        problem = fail(.protocolError, identifier, "notification identifier item is \(itemLength) bytes, not 4")
                        break walk
                    }
                    identifier = buffer.getInteger(at: index, as: UInt32.self)!
                    identifierKnown = true
                case 4:
                    guard itemLength == 4 else {
                        problem = fail(.protocolError, identifier, "expiration item is \(itemLength) bytes, not 4")
                        break walk
                    }
                    expiry = buffer.getInteger(at: index, as: UInt32.self)!
                default:
                    guard itemLength == 1 else {
                        problem = fail(.protocolError, identifier, "priority item is \(itemLength) bytes, not 1")
                        break walk
                    }
                    let value = buffer.getInteger(at: index, as: UInt8.self)!
                    guard value == 5 || value == 10 else {
                        problem = fail(.protocolError, identifier, "priority \(value) is neither 5 nor 10")
                        break walk
                    }
                    priority = value
                }
            }
        }
        // The identifier may follow the bad item: report it when it can be found.
        if var failure = problem {
            if !identifierKnown, let found = Self.findIdentifier(in: buffer, index: start + 5, length: length) {
                failure.identifier = found
            }
            return .failure(failure)
        }
        if let failure = checkTokenAndPayload(tokenLength: token.length, payloadLength: payload.length, payloadLimit: limits.command2Payload, identifier: identifier) {
            return .failure(failure)
        }
        let frame = BinaryNotificationFrame(
            command: 2, token: buffer.getSlice(at: token.index, length: token.length)!, payload: buffer.getSlice(at: payload.index, length: payload.length)!,
            identifier: identifier, expiry: expiry, priority: priority)
        buffer.moveReaderIndex(forwardBy: 5 + length)
        return .notification(frame)
    }

    /// Reads on in a frame over the longest valid one: item headers and
    /// the identifier are read, every other value passed over as it
    /// arrives. The answer comes once what is wrong and the identifier are
    /// known, or at the frame's end.
    private mutating func continueLongFrame(_ buffer: inout ByteBuffer) -> BinaryProviderInbound? {
        guard var frame = longFrame else { return nil }
        defer { longFrame = frame }
        while true {
            if let problem = frame.problem, let identifier = frame.identifier {
                return .failure(fail(problem.status, identifier, problem.detail))
            }
            if frame.skip > 0 {
                let passed = min(frame.skip, buffer.readableBytes)
                buffer.moveReaderIndex(forwardBy: passed)
                frame.skip -= passed
                frame.remaining -= passed
                if frame.skip > 0 { return nil }
            }
            if frame.remaining == 0 {
                let problem = frame.problem ?? (.protocolError, "frame length is over \(limits.maxCommand2FrameLength)")
                return .failure(fail(problem.status, frame.identifier ?? 0, problem.detail))
            }
            // An item cut by the frame's end: the problem met before it, if any, comes first.
            let overrun = frame.problem ?? (.protocolError, "an item runs past the end of the frame")
            guard frame.remaining >= 3 else { return .failure(fail(overrun.status, frame.identifier ?? 0, overrun.detail)) }
            guard let (id, length) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt8, UInt16).self) else { return nil }
            let valueLength = Int(length)
            guard valueLength <= frame.remaining - 3 else { return .failure(fail(overrun.status, frame.identifier ?? 0, overrun.detail)) }
            if id == 3, valueLength == 4, frame.identifier == nil {
                guard let (_, _, identifier) = buffer.readMultipleIntegers(as: (UInt8, UInt16, UInt32).self) else { return nil }
                frame.identifier = identifier
                frame.remaining -= 7
                frame.seen |= 1 << 3
                continue
            }
            // The priority's value is checked as in a frame of valid length (5 or 10).
            if id == 5, valueLength == 1, frame.seen & (1 << 5) == 0, frame.problem == nil {
                guard let (_, _, priority) = buffer.readMultipleIntegers(as: (UInt8, UInt16, UInt8).self) else { return nil }
                frame.remaining -= 4
                frame.seen |= 1 << 5
                if priority != 5 && priority != 10 { frame.problem = (.protocolError, "priority \(priority) is neither 5 nor 10") }
                continue
            }
            buffer.moveReaderIndex(forwardBy: 3)
            frame.remaining -= 3
            frame.skip = valueLength
            guard frame.problem == nil else { continue }
            let bit: UInt8 = id < 8 ? 1 << id : 0
            if !(1...5).contains(id) {
                frame.problem = (.protocolError, "unknown item \(id)")
            } else if frame.seen & bit != 0 {
                frame.problem = (.protocolError, "item \(id) appears twice")
            } else if id == 1, valueLength == 0 {
                frame.problem = (.missingDeviceToken, "the token item is empty")
            } else if id == 2, valueLength == 0 {
                frame.problem = (.missingPayload, "the payload item is empty")
            } else if id == 1, valueLength != limits.tokenLength {
                frame.problem = (.invalidTokenSize, "token is \(valueLength) bytes, not \(limits.tokenLength)")
            } else if id == 2, valueLength > limits.command2Payload {
                frame.problem = (.invalidPayloadSize, "payload is \(valueLength) bytes, over \(limits.command2Payload)")
            } else if id >= 3, valueLength != (id == 5 ? 1 : 4) {
                frame.problem = (.protocolError, "item \(id) is \(valueLength) bytes")
            }
            frame.seen |= bit
        }
    }

    private static func findIdentifier(in buffer: ByteBuffer, index: Int, length: Int) -> UInt32? {
        var items = FrameItemIterator(buffer: buffer, index: index, length: length)
        while case .item(let id, let at, let itemLength) = items.next() {
            if id == 3, itemLength == 4 { return buffer.getInteger(at: at, as: UInt32.self) }
        }
        return nil
    }

    // Command 1: |1|identifier:u32|expiry:u32|token length:u16|token|payload length:u16|payload|
    private func decodeEnhanced(_ buffer: inout ByteBuffer) -> BinaryProviderInbound? {
        let start = buffer.readerIndex
        guard let (_, identifier, expiry, tokenLength) = buffer.getMultipleIntegers(at: start, as: (UInt8, UInt32, UInt32, UInt16).self)
        else { return nil }
        return decodeTokenAndPayload(
            &buffer, command: 1, headerLength: 11, tokenLength: Int(tokenLength), identifier: identifier, expiry: expiry,
            answers: true)
    }

    // Command 0: |0|token length:u16|token|payload length:u16|payload|
    private func decodeSimple(_ buffer: inout ByteBuffer) -> BinaryProviderInbound? {
        guard let (_, tokenLength) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt8, UInt16).self) else { return nil }
        return decodeTokenAndPayload(&buffer, command: 0, headerLength: 3, tokenLength: Int(tokenLength), identifier: 0, expiry: nil, answers: false)
    }

    private func decodeTokenAndPayload(
        _ buffer: inout ByteBuffer, command: UInt8, headerLength: Int, tokenLength: Int, identifier: UInt32, expiry: UInt32?, answers: Bool
    ) -> BinaryProviderInbound? {
        // The sizes are judged before waiting for the bytes, so an oversized
        // announcement is never buffered.
        if tokenLength == 0 { return .failure(fail(.missingDeviceToken, identifier, "token length is 0", answers: answers)) }
        if tokenLength != limits.tokenLength {
            return .failure(fail(.invalidTokenSize, identifier, "token length \(tokenLength) is not \(limits.tokenLength)", answers: answers))
        }
        let start = buffer.readerIndex
        let payloadLengthIndex = start + headerLength + tokenLength
        guard let payloadLength = buffer.getInteger(at: payloadLengthIndex, as: UInt16.self) else { return nil }
        if payloadLength == 0 { return .failure(fail(.missingPayload, identifier, "payload length is 0", answers: answers)) }
        if Int(payloadLength) > limits.legacyPayload {
            return .failure(
                fail(.invalidPayloadSize, identifier, "payload length \(payloadLength) is over \(limits.legacyPayload)", answers: answers))
        }
        let total = headerLength + tokenLength + 2 + Int(payloadLength)
        guard buffer.readableBytes >= total else { return nil }
        let token = buffer.getSlice(at: start + headerLength, length: tokenLength)!
        let payload = buffer.getSlice(at: payloadLengthIndex + 2, length: Int(payloadLength))!
        buffer.moveReaderIndex(forwardBy: total)
        return .notification(
            BinaryNotificationFrame(command: command, token: token, payload: payload, identifier: identifier, expiry: expiry, priority: nil))
    }

    @inline(__always)
    /// A command-2 frame's token and payload, by their lengths (0: no such item).
    private func checkTokenAndPayload(tokenLength: Int, payloadLength: Int, payloadLimit: Int, identifier: UInt32) -> BinaryFrameFailure? {
        if tokenLength == 0 { return fail(.missingDeviceToken, identifier, "no device token item") }
        if tokenLength != limits.tokenLength {
            return fail(.invalidTokenSize, identifier, "token is \(tokenLength) bytes, not \(limits.tokenLength)")
        }
        if payloadLength == 0 { return fail(.missingPayload, identifier, "no payload item") }
        if payloadLength > payloadLimit {
            return fail(.invalidPayloadSize, identifier, "payload is \(payloadLength) bytes, over \(payloadLimit)")
        }
        return nil
    }

    private func fail(_ status: BinaryStatus, _ identifier: UInt32, _ detail: String, answers: Bool = true) -> BinaryFrameFailure {
        BinaryFrameFailure(status: status, identifier: identifier, answers: answers, detail: detail)
    }
}

/// The error-response packet: `|8|status:u8|identifier:u32|`.
public struct BinaryErrorResponse: Sendable, Hashable {
    public static let command: UInt8 = 8
    public static let length = 6

    public var status: BinaryStatus
    public var identifier: UInt32

    public init(status: BinaryStatus, identifier: UInt32) {
        self.status = status
        self.identifier = identifier
    }

    public func write(to buffer: inout ByteBuffer) {
        buffer.writeMultipleIntegers(Self.command, status.rawValue, identifier)
    }

    /// Reads one packet; nil while fewer than six bytes are there. A packet
    /// whose first byte is not 8 is an error.
    public static func read(from buffer: inout ByteBuffer) throws -> BinaryErrorResponse? {
        guard let (command, status, identifier) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt8, UInt8, UInt32).self)
        else { return nil }
        guard command == Self.command else { throw WireError.unexpectedCommand(command) }
        buffer.moveReaderIndex(forwardBy: length)
        return BinaryErrorResponse(status: BinaryStatus(rawValue: status), identifier: identifier)
    }
}

/// Errors of the client-side readers.
public enum WireError: Error, Hashable {
    case unexpectedCommand(UInt8)
    case frameTooLarge(Int)
}

/// Decodes error-response packets (provider side).
public struct BinaryErrorResponseDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = BinaryErrorResponse
    public init() {}
    public mutating func decode(buffer: inout ByteBuffer) throws -> BinaryErrorResponse? {
        try BinaryErrorResponse.read(from: &buffer)
    }
    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> BinaryErrorResponse? {
        try decode(buffer: &buffer)
    }
}

extension ByteBuffer {
    /// Writes a command-2 notification frame (items 1–5; items 3, 4 and 5
    /// only when given).
    public mutating func writeBinaryNotification(
        token: some Collection<UInt8>, payload: some Collection<UInt8>, identifier: UInt32?, expiry: UInt32?, priority: UInt8?
    ) {
        writeItemFrame(command: 2) { frame in
            frame.writeFrameItem(id: 1, token)
            frame.writeFrameItem(id: 2, payload)
            if let identifier { frame.writeFrameItem(id: 3, integer: identifier) }
            if let expiry { frame.writeFrameItem(id: 4, integer: expiry) }
            if let priority { frame.writeFrameItem(id: 5, integer: priority) }
        }
    }

    /// Writes a command-1 (enhanced format) notification.
    public mutating func writeEnhancedNotification(
        token: some Collection<UInt8>, payload: some Collection<UInt8>, identifier: UInt32, expiry: UInt32
    ) {
        writeMultipleIntegers(UInt8(1), identifier, expiry, UInt16(token.count))
        writeBytes(token)
        writeInteger(UInt16(payload.count))
        writeBytes(payload)
    }

    /// Writes a command-0 (simple format) notification.
    public mutating func writeSimpleNotification(token: some Collection<UInt8>, payload: some Collection<UInt8>) {
        writeMultipleIntegers(UInt8(0), UInt16(token.count))
        writeBytes(token)
        writeInteger(UInt16(payload.count))
        writeBytes(payload)
    }
}
