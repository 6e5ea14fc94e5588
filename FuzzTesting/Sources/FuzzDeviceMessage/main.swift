// Fuzzes the device protocol: the frame decoder as NIO drives it, and the
// typed message codec in both directions.
//
// Oracles:
// - fed all at once through ByteToMessageHandler or in small pieces through
//   NIOSingleStepByteToMessageProcessor, the frame decoder hands on the same
//   frames and ends with the same error;
// - each frame written again gives back exactly the bytes it was read from,
//   in order, and its `encodedLength` is their count;
// - the only error the frame decoder throws is a DeviceProtocolError, and so
//   is every error of `DeviceMessage(frame:)`;
// - a message that decodes from a frame, written and read again (frame, then
//   message), is an equal message; its second writing is byte for byte its
//   first (the codec is canonical), and `message.frame` is the frame read;
// - a Notification read is within the bounds `DeviceNotification.problem`
//   checks, and `deliveryIDOfUnreadableNotification` finds its delivery id.
//
// The other direction: the same input also describes a message (see
// `message(from:)`); written, it reads back equal. A Notification is built
// with any sizes: it reads back equal exactly when `problem(tokenLength:)`
// finds nothing (what the server checks before sending), and is refused
// otherwise. An Error message longer than its item allows (1,024 bytes) is
// cut by the writer: it must still read back, as a prefix of the message.

import CourierWire
import Foundation
import FuzzSupport
import NIOCore

let maxFrameLength = DeviceFrameDecoder.defaultMaxFrameLength

func roundTrip(_ message: DeviceMessage) {
    var written = ByteBuffer()
    message.write(to: &written)
    var decoder = DeviceFrameDecoder(maxFrameLength: Int(UInt32.max))
    var buffer = written
    let frame: DeviceFrame
    do {
        guard let read = try decoder.decode(buffer: &buffer), buffer.readableBytes == 0 else {
            violation("\(message) writes \(hex(written.readableBytesView)), not one whole frame")
        }
        frame = read
    } catch {
        violation("\(message) writes \(hex(written.readableBytesView)), which the frame decoder refuses: \(error)")
    }
    let again: DeviceMessage
    do {
        again = try DeviceMessage(frame: frame)
    } catch {
        violation("\(message) writes \(hex(written.readableBytesView)), which reads back as \(error)")
    }
    require(again == message, "\(message) writes \(hex(written.readableBytesView)), which reads back as \(again)")
    var rewritten = ByteBuffer()
    again.write(to: &rewritten)
    require(rewritten == written, "written twice: \(hex(written.readableBytesView)) then \(hex(rewritten.readableBytesView))")
    require(message.frame == frame, "message.frame \(message.frame) is not the frame written \(frame)")
}

/// Reads values off the input, front to back; nil once it runs out.
struct Reader {
    var bytes: ArraySlice<UInt8>

    mutating func byte() -> UInt8? { bytes.popFirst() }

    mutating func take(_ count: Int) -> [UInt8]? {
        guard bytes.count >= count else { return nil }
        defer { bytes = bytes.dropFirst(count) }
        return Array(bytes.prefix(count))
    }

    mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
        take(MemoryLayout<T>.size).map { $0.reduce(T(0)) { $0 << 8 | T($1) } }
    }

    mutating func flag() -> Bool? { byte().map { $0 & 1 == 1 } }

    /// A string of 1 to `max` bytes of valid UTF-8 (its length first).
    mutating func string(max: Int) -> String? {
        guard let length = byte(), length > 0, Int(length) <= max, let text = take(Int(length)) else { return nil }
        return String(validating: text, as: UTF8.self)
    }

    /// A string of 0 to 255 bytes, not UTF-8 repaired as a String does (its
    /// length first).
    mutating func anyString() -> String? {
        guard let length = byte(), let text = take(Int(length)) else { return nil }
        return String(decoding: text, as: UTF8.self)
    }

    mutating func uuid() -> UUID? {
        take(16).map { bytes in UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
            bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15])) }
    }

    /// Up to `limit` values of `size` bytes (the count first).
    mutating func values(size: Int, limit: Int) -> [[UInt8]]? {
        guard let count = byte() else { return nil }
        var values: [[UInt8]] = []
        for _ in 0..<min(Int(count), limit) {
            guard let value = take(size) else { return nil }
            values.append(value)
        }
        return values
    }
}

/// A message the input describes, or nil: with values the protocol allows
/// (a 32-byte token, bundle ids of 1 to 155 bytes, 20-byte topic hashes),
/// except a Notification, whose items may have any size.
func message(from input: [UInt8]) -> DeviceMessage? {
    var reader = Reader(bytes: input[...])
    guard let kind = reader.byte() else { return nil }
    switch kind % 16 {
    case 0:
        guard let version = reader.byte(), let tokens = reader.values(size: 32, limit: 8), let hasKeepAlive = reader.flag(),
            let keepAlive = reader.integer(UInt16.self), let hasGeneration = reader.flag(), let generation = reader.integer(UInt32.self)
        else { return nil }
        return .connect(version: version, tokens: tokens, keepAlive: hasKeepAlive ? keepAlive : nil, generation: hasGeneration ? generation : nil)
    case 1:
        guard let status = reader.byte(), let time = reader.integer(UInt64.self), let keepAlive = reader.integer(UInt16.self),
            let maxFrame = reader.integer(UInt32.self), let announces = reader.flag(), let length = reader.byte()
        else { return nil }
        let tokenLength = announces ? Int(length) : 32
        guard let refused = reader.values(size: tokenLength, limit: 8) else { return nil }
        return .connectAck(
            status: DeviceProtocolCode(rawValue: status), serverTime: time, keepAlive: keepAlive, maxFrameLength: maxFrame,
            refusedTokens: refused, tokenLength: announces ? length : nil)
    case 2:
        guard let hashes = reader.values(size: 20, limit: 16) else { return nil }
        return .filter(enabledTopicHashes: hashes)
    case 3: return .keepAlive
    case 4: return .keepAliveAck
    case 5: return .noStorage
    case 6:
        guard let bundleID = reader.string(max: 155), let requestID = reader.integer(UInt32.self) else { return nil }
        return .appTokenRequest(bundleID: bundleID, requestID: requestID)
    case 7:
        guard let requestID = reader.integer(UInt32.self), let status = reader.byte(), let hasBundleID = reader.flag(),
            let hasToken = reader.flag()
        else { return nil }
        let bundleID = hasBundleID ? reader.string(max: 155) : nil
        let token = hasToken ? reader.take(32) : nil
        if hasBundleID && bundleID == nil || hasToken && token == nil || status == 0 && token == nil { return nil }
        return .appTokenResponse(requestID: requestID, bundleID: bundleID, token: token, status: DeviceProtocolCode(rawValue: status))
    case 8:
        guard let bundleID = reader.string(max: 155), let requestID = reader.integer(UInt32.self) else { return nil }
        return .unregister(bundleID: bundleID, requestID: requestID)
    case 9:
        guard let requestID = reader.integer(UInt32.self), let status = reader.byte() else { return nil }
        return .unregisterAck(requestID: requestID, status: DeviceProtocolCode(rawValue: status))
    case 11:
        guard let tokenLength = reader.byte(), let token = reader.take(Int(tokenLength)), let payloadLength = reader.integer(UInt16.self),
            let payload = reader.take(Int(payloadLength)), let id = reader.uuid(), let deliveryID = reader.uuid(),
            let hasExpiration = reader.flag(), let expiration = reader.integer(UInt32.self), let priority = reader.byte(),
            let topic = reader.anyString(), let hasCollapseID = reader.flag(), let collapseID = reader.anyString(),
            let hasPushType = reader.flag(), let pushType = reader.anyString()
        else { return nil }
        // A broadcast's channel, when the input goes on (inputs written before it still describe a Notification).
        let channelID = reader.flag() == true ? reader.anyString() : nil
        return .notification(
            DeviceNotification(
                token: token, payload: payload, id: id, deliveryID: deliveryID, expiration: hasExpiration ? expiration : nil,
                priority: priority, topic: topic, collapseID: hasCollapseID ? collapseID : nil, pushType: hasPushType ? pushType : nil,
                channelID: channelID))
    case 12:
        guard let deliveryID = reader.uuid(), let status = reader.byte() else { return nil }
        return .ack(deliveryID: deliveryID, status: status)
    case 13:
        guard let bundleID = reader.string(max: 155), let requestID = reader.integer(UInt32.self), let channelID = reader.string(max: 64),
            let hasLast = reader.flag()
        else { return nil }
        let last = hasLast ? reader.uuid() : nil
        if hasLast && last == nil { return nil }
        return .subscribe(bundleID: bundleID, requestID: requestID, channelID: channelID, lastDeliveryID: last)
    case 14:
        guard let bundleID = reader.string(max: 155), let requestID = reader.integer(UInt32.self), let channelID = reader.string(max: 64) else { return nil }
        return .unsubscribe(bundleID: bundleID, requestID: requestID, channelID: channelID)
    case 15:
        guard let requestID = reader.integer(UInt32.self), let status = reader.byte() else { return nil }
        return .channelAck(requestID: requestID, status: DeviceProtocolCode(rawValue: status))
    default:
        // Any text, as long as the input goes: the writer cuts it to 1,024 bytes.
        guard let code = reader.byte() else { return nil }
        return .error(code: DeviceProtocolCode(rawValue: code), message: String(decoding: reader.bytes, as: UTF8.self))
    }
}

/// Writes a message built from the input and reads it back.
func checkWriting(_ input: [UInt8]) {
    guard let message = message(from: input) else { return }
    if case .notification(let notification) = message, let problem = notification.problem(tokenLength: 32) {
        // Out of bounds: the server does not send it, and a device would refuse it.
        var written = ByteBuffer()
        message.write(to: &written)
        var decoder = DeviceFrameDecoder(maxFrameLength: Int(UInt32.max))
        guard let frame = try? decoder.decode(buffer: &written) else { violation("a Notification is not written as a whole frame") }
        do {
            let read = try DeviceMessage(frame: frame)
            violation("a Notification with a problem (\(problem)) reads back as \(read)")
        } catch {
            require(error is DeviceProtocolError, "a Notification with a problem is refused with \(error)")
        }
        require(frame.deliveryIDOfUnreadableNotification == notification.deliveryID, "the delivery id of an unreadable Notification is not found")
        return
    }
    guard case .error(let code, let text) = message, text.utf8.count > 1024 else {
        roundTrip(message)
        return
    }
    // Cut by the writer (on a character boundary): what is read back is the start of the text, at most 1,024 bytes.
    var written = ByteBuffer()
    message.write(to: &written)
    var decoder = DeviceFrameDecoder(maxFrameLength: Int(UInt32.max))
    do {
        guard let frame = try decoder.decode(buffer: &written) else { violation("an Error frame is not whole") }
        let read = try DeviceMessage(frame: frame)
        guard case .error(let readCode, let readText) = read, readCode == code else { violation("\(message) reads back as \(read)") }
        require(readText.utf8.count <= 1024 && text.utf8.starts(with: readText.utf8), "an Error of \(text.utf8.count) bytes reads back as \(readText.utf8.count) bytes that do not start it")
    } catch {
        violation("an Error message of \(text.utf8.count) bytes is written so that it cannot be read: \(error)")
    }
}

func check(_ bytes: UnsafeRawBufferPointer) {
    checkWriting(Array(bytes))

    let whole = decodeInChannel(DeviceFrameDecoder(maxFrameLength: maxFrameLength), bytes)
    var random = InputRandom(seedingFrom: bytes)
    let pieces = decodeInPieces(
        DeviceFrameDecoder(maxFrameLength: maxFrameLength), bytes, sizes: pieceSizes(count: bytes.count, random: &random))
    require(whole.messages == pieces.messages, "whole and in pieces differ: \(whole.messages) / \(pieces.messages)")
    if let error = whole.error {
        require(error is DeviceProtocolError, "the frame decoder threw \(error)")
        require(pieces.error as? DeviceProtocolError == error as? DeviceProtocolError, "whole and in pieces end differently: \(error) / \(String(describing: pieces.error))")
    } else {
        require(pieces.error == nil, "only the pieces ended in \(String(describing: pieces.error))")
    }

    var offset = 0
    for frame in whole.messages {
        var written = ByteBuffer()
        frame.write(to: &written)
        let count = written.readableBytes
        require(count == frame.encodedLength, "encodedLength \(frame.encodedLength) for \(count) bytes")
        require(
            bytes.count - offset >= count && Array(bytes[offset..<offset + count]) == Array(written.readableBytesView),
            "frame at \(offset) does not write back as read: \(frame)")
        offset += count

        let message: DeviceMessage
        do {
            message = try DeviceMessage(frame: frame)
        } catch is DeviceProtocolError {
            continue
        } catch {
            violation("DeviceMessage(frame:) threw \(error)")
        }
        if case .notification(let notification) = message {
            require(notification.problem(tokenLength: 32) == nil, "a Notification read has a problem: \(notification.problem(tokenLength: 32)!)")
            require(frame.deliveryIDOfUnreadableNotification == notification.deliveryID, "deliveryIDOfUnreadableNotification misses \(notification.deliveryID)")
        }
        roundTrip(message)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDeviceMessage(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
