// What the fuzz targets share: how an oracle reports a violation, how a
// stream decoder is driven through NIO (all at once and in pieces), and a
// small deterministic random source derived from the input itself.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOEmbedded

/// An oracle was violated: print what and crash, so that libFuzzer keeps
/// the input (as `crash-<sha1>`) and stops.
public func violation(_ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    fatalError("fuzz oracle violated: \(message())", file: file, line: line)
}

/// Crashes with `message` unless `condition` holds.
@inline(__always)
public func require(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
    if !condition { violation(message(), file: file, line: line) }
}

/// Set (COURIER_FUZZ_STRICT=1, as `run.sh --regressions` does) to stop
/// excusing the differences a target knows as reported findings
/// (Regressions/ keeps their inputs), so that those inputs crash again.
public let strict = getenv("COURIER_FUZZ_STRICT").map { String(cString: $0) != "0" } ?? false

/// True when `difference` holds and is to be let through: a reported finding
/// not yet fixed, outside strict mode.
public func known(_ difference: Bool) -> Bool {
    difference && !strict
}

/// Lowercase hex of some bytes, for the messages of a violation.
public func hex(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
}

/// A deterministic generator seeded from the input, so that a crash file
/// replays exactly (splitmix64's mixing steps; FNV-1a for the seed).
public struct InputRandom {
    private var state: UInt64

    public init(seedingFrom bytes: UnsafeRawBufferPointer) {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        state = hash ^ UInt64(bytes.count)
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `0..<bound` (bound > 0).
    public mutating func below(_ bound: Int) -> Int {
        Int(next() % UInt64(bound))
    }
}

/// Cuts `count` bytes into pieces: mostly short ones (1 to 16 bytes, so that
/// every header and length field is split somewhere), now and then a long
/// one. The sizes depend only on the input.
public func pieceSizes(count: Int, random: inout InputRandom) -> [Int] {
    var sizes: [Int] = []
    var left = count
    while left > 0 {
        let size = random.below(8) == 0 ? 1 + random.below(max(1, left)) : 1 + random.below(16)
        sizes.append(min(size, left))
        left -= sizes.last!
    }
    return sizes
}

/// What a decoder made of a byte stream: the messages in order and the
/// error that ended decoding, if one did.
public struct Decoded<Message> {
    public var messages: [Message] = []
    public var error: (any Error)?
}

/// Feeds `bytes` to `decoder` through NIO's `ByteToMessageHandler` in an
/// `EmbeddedChannel`, as one read, then closes the channel (which calls
/// `decodeLast`).
public func decodeInChannel<Decoder: ByteToMessageDecoder>(
    _ decoder: Decoder, _ bytes: UnsafeRawBufferPointer
) -> Decoded<Decoder.InboundOut> {
    var result = Decoded<Decoder.InboundOut>()
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(decoder))
    func drain() {
        while let message = try? channel.readInbound(as: Decoder.InboundOut.self) {
            result.messages.append(message)
        }
    }
    do {
        try channel.writeInbound(channel.allocator.buffer(bytes: bytes))
    } catch {
        result.error = error
    }
    drain()
    if result.error == nil {
        // The end of the stream: ByteToMessageHandler calls decodeLast.
        channel.pipeline.fireChannelInactive()
        channel.embeddedEventLoop.run()
        do {
            try channel.throwIfErrorCaught()
        } catch {
            result.error = error
        }
        drain()
    }
    // Bytes still unread when the handler goes are NIO's
    // `leftoverDataWhenDone`, not the decoder's error.
    _ = try? channel.finish(acceptAlreadyClosed: true)
    return result
}

/// Feeds `bytes` to `decoder` in pieces of the given sizes through NIO's
/// `NIOSingleStepByteToMessageProcessor`, then finishes with EOF.
public func decodeInPieces<Decoder: NIOSingleStepByteToMessageDecoder>(
    _ decoder: Decoder, _ bytes: UnsafeRawBufferPointer, sizes: [Int]
) -> Decoded<Decoder.InboundOut> {
    var result = Decoded<Decoder.InboundOut>()
    let processor = NIOSingleStepByteToMessageProcessor(decoder)
    let allocator = ByteBufferAllocator()
    var offset = 0
    do {
        for size in sizes {
            let piece = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + size])
            offset += size
            try processor.process(buffer: allocator.buffer(bytes: piece)) { result.messages.append($0) }
        }
        try processor.finishProcessing(seenEOF: true) { result.messages.append($0) }
    } catch {
        result.error = error
    }
    return result
}
