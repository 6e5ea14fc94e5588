// Fuzzes the feedback tuple decoder (provider side) as NIO drives it.
//
// Oracles:
// - fed all at once through ByteToMessageHandler or in small pieces through
//   NIOSingleStepByteToMessageProcessor, the decoder hands on the same tuples
//   and ends with the same error;
// - each tuple written again gives back exactly the bytes it was read from,
//   in order, with a token of at most 255 bytes;
// - the only error is `frameTooLarge`, for the length at the next tuple's
//   place, which is over 255.

import CourierWire
import FuzzSupport
import NIOCore

func check(_ bytes: UnsafeRawBufferPointer) {
    let whole = decodeInChannel(FeedbackTupleDecoder(), bytes)
    var random = InputRandom(seedingFrom: bytes)
    let pieces = decodeInPieces(FeedbackTupleDecoder(), bytes, sizes: pieceSizes(count: bytes.count, random: &random))
    require(whole.messages == pieces.messages, "whole and in pieces differ: \(whole.messages) / \(pieces.messages)")
    let wholeError = whole.error.map { "\($0)" }
    let piecesError = pieces.error.map { "\($0)" }
    require(wholeError == piecesError, "whole and in pieces end differently: \(String(describing: wholeError)) / \(String(describing: piecesError))")

    var offset = 0
    for tuple in whole.messages {
        require(tuple.token.count <= 255, "a token of \(tuple.token.count) bytes")
        var written = ByteBuffer()
        tuple.write(to: &written)
        let count = written.readableBytes
        require(
            bytes.count - offset >= count && Array(bytes[offset..<offset + count]) == Array(written.readableBytesView),
            "tuple at \(offset) does not write back as read: \(tuple)")
        offset += count
    }
    if let error = whole.error {
        guard let wire = error as? WireError, case .frameTooLarge(let length) = wire else { violation("unexpected error \(error)") }
        require(bytes.count - offset >= 6, "an error before a whole tuple header")
        let announced = Int(bytes[offset + 4]) << 8 | Int(bytes[offset + 5])
        require(length == announced && length > 255, "frameTooLarge(\(length)) for an announced \(announced)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFeedback(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
