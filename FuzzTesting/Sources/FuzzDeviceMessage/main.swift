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
//   first (the codec is canonical), and `message.frame` is the frame read.

import CourierWire
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

func check(_ bytes: UnsafeRawBufferPointer) {
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
        roundTrip(message)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDeviceMessage(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
