import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Hexadecimal text for binary values such as device tokens.
public enum Hex {
    fileprivate static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Lowercase hex of `bytes`.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of a hex string (either case), or nil when it has an odd
    /// length or a character that is not a hex digit.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(of: utf8[index]), let low = value(of: utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    /// The value of one hex digit (either case).
    public static func value(of character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension UUID {
    /// The canonical form APNs uses: 8-4-4-4-12 lowercase hex digits.
    public var lowercasedString: String {
        withUnsafeBytes(of: uuid) { bytes in
            var out: [UInt8] = []
            out.reserveCapacity(36)
            for (index, byte) in bytes.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 { out.append(UInt8(ascii: "-")) }
                out.append(Hex.digits[Int(byte >> 4)])
                out.append(Hex.digits[Int(byte & 0x0F)])
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}

extension UUID {
    private static let randomIDs = RandomIDs()

    /// A fresh random version-4 UUID, as Apple's apns-ids are: for a
    /// notification whose provider gave no apns-id, and for the delivery id
    /// the server gives every notification (devices acknowledge and
    /// de-duplicate by it). 122 bits from the system's random source, so
    /// that no provider can predict another's ids from its own.
    public static func notificationID() -> UUID { randomIDs.next() }
}

/// Random UUIDs from the system's random source, read 4 KiB (256 ids) at
/// a time: one system call per 256 ids instead of one per id.
private final class RandomIDs: Sendable {
    private struct Pool {
        var bytes = [UInt8](repeating: 0, count: 4096)
        /// The next unused byte; `bytes.count` when the pool is used up.
        var next = 4096
    }

    private let pool = Mutex(Pool())

    func next() -> UUID {
        var id = pool.withLock { pool -> uuid_t in
            if pool.next == pool.bytes.count {
                pool.bytes.withUnsafeMutableBytes(Self.fillRandomly)
                pool.next = 0
            }
            defer { pool.next += 16 }
            return pool.bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: pool.next, as: uuid_t.self) }
        }
        // Version 4 (random) and the RFC 4122 variant.
        id.6 = id.6 & 0x0F | 0x40
        id.8 = id.8 & 0x3F | 0x80
        return UUID(uuid: id)
    }

    /// Fills `buffer` from the system's random source, 256 bytes (its
    /// most) per call (`SystemRandomNumberGenerator` asks for eight).
    private static func fillRandomly(_ buffer: UnsafeMutableRawBufferPointer) {
        #if canImport(Glibc)
        var filled = 0
        while filled < buffer.count {
            let chunk = min(256, buffer.count - filled)
            guard getentropy(buffer.baseAddress! + filled, chunk) == 0 else {
                preconditionFailure("getentropy failed: errno \(errno)")
            }
            filled += chunk
        }
        #else
        arc4random_buf(buffer.baseAddress!, buffer.count)
        #endif
    }
}
