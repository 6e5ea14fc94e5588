// Fuzzes the binary provider decoder (commands 0, 1 and 2) as NIO drives it.
//
// Oracles:
// - fed all at once through ByteToMessageHandler or in small pieces through
//   NIOSingleStepByteToMessageProcessor, the decoder hands on the same
//   notifications and the same failure (it must not depend on how TCP cut
//   the stream);
// - at most one failure, and nothing after it; the decoder never throws;
// - every notification keeps the limits (token of exactly 32 bytes, payload
//   of 1 to 256 or 2048 bytes, priority none, 5 or 10);
// - the notifications are read from the stream in order: commands 0 and 1
//   written again give back exactly the bytes they were read from; a command-2
//   frame takes as many bytes as its length field says, and written again
//   with the provider client's writer it decodes to the same notification.

import CourierWire
import FuzzSupport
import NIOCore

let limits = BinaryDecoderLimits()

func describe(_ decoded: Decoded<BinaryProviderInbound>) -> String {
    "\(decoded.messages) error: \(String(describing: decoded.error))"
}

func check(_ bytes: UnsafeRawBufferPointer) {
    let whole = decodeInChannel(BinaryProviderDecoder(limits: limits), bytes)
    var random = InputRandom(seedingFrom: bytes)
    let pieces = decodeInPieces(BinaryProviderDecoder(limits: limits), bytes, sizes: pieceSizes(count: bytes.count, random: &random))
    require(whole.error == nil && pieces.error == nil, "the decoder threw: \(describe(whole)) / \(describe(pieces))")
    require(whole.messages == pieces.messages, "whole and in pieces differ:\n  \(describe(whole))\n  \(describe(pieces))")

    var offset = 0
    for (position, message) in whole.messages.enumerated() {
        switch message {
        case .failure(let failure):
            require(position == whole.messages.count - 1, "output after the failure \(failure)")
            if failure.identifier != 0 {
                require(failure.answers, "an identifier on a failure that is not answered: \(failure)")
            }
        case .notification(let frame):
            let token = Array(frame.token.readableBytesView)
            let payload = Array(frame.payload.readableBytesView)
            require(token.count == limits.tokenLength, "token of \(token.count) bytes")
            let limit = frame.command == 2 ? limits.command2Payload : limits.legacyPayload
            require(!payload.isEmpty && payload.count <= limit, "payload of \(payload.count) bytes for command \(frame.command)")
            require(frame.priority == nil || frame.priority == 5 || frame.priority == 10, "priority \(String(describing: frame.priority))")
            require(offset < bytes.count && bytes[offset] == frame.command, "frame \(position) does not start at byte \(offset)")

            var written = ByteBuffer()
            switch frame.command {
            case 0:
                require(frame.identifier == 0 && frame.expiry == nil && frame.priority == nil, "command 0 with command-1 fields: \(frame)")
                written.writeSimpleNotification(token: token, payload: payload)
            case 1:
                require(frame.expiry != nil && frame.priority == nil, "command 1 without expiry or with priority: \(frame)")
                written.writeEnhancedNotification(token: token, payload: payload, identifier: frame.identifier, expiry: frame.expiry!)
            case 2:
                written.writeBinaryNotification(
                    token: token, payload: payload, identifier: frame.identifier, expiry: frame.expiry, priority: frame.priority)
            default:
                violation("a notification of command \(frame.command)")
            }

            let consumed: Int
            if frame.command == 2 {
                require(bytes.count - offset >= 5, "a command-2 frame shorter than its header")
                let length = (0..<4).reduce(0) { $0 << 8 | Int(bytes[offset + 1 + $1]) }
                consumed = 5 + length
                var again = BinaryProviderDecoder(limits: limits)
                var buffer = written
                let reread = again.next(from: &buffer)
                require(reread == .notification(frame) && buffer.readableBytes == 0, "written again \(hex(written.readableBytesView)) reads as \(String(describing: reread))")
            } else {
                consumed = written.readableBytes
                require(
                    bytes.count - offset >= consumed && Array(bytes[offset..<offset + consumed]) == Array(written.readableBytesView),
                    "command \(frame.command) at \(offset) does not write back as read")
            }
            offset += consumed
            require(offset <= bytes.count, "frames take \(offset) bytes of \(bytes.count)")
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBinaryProvider(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
