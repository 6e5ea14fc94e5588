import Crypto
import Foundation
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
        // Over the string's own bytes when they are contiguous (a native
        // string's are): every HTTP/2 request's token comes here.
        if let decoded = text.utf8.withContiguousStorageIfAvailable(decode(utf8:)) { return decoded }
        return Array(text.utf8).withUnsafeBufferPointer(decode(utf8:))
    }

    private static func decode(utf8: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard utf8.count % 2 == 0 else { return nil }
        var valid = true
        let bytes = [UInt8](unsafeUninitializedCapacity: utf8.count / 2) { out, written in
            while written < out.count {
                guard let high = value(of: utf8[2 * written]), let low = value(of: utf8[2 * written + 1]) else {
                    valid = false
                    return
                }
                out[written] = high << 4 | low
                written += 1
            }
        }
        return valid ? bytes : nil
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
    private static let deliveryIDs = CountedIDs()

    /// A fresh random version-4 UUID, as Apple's apns-ids are: for a
    /// notification whose provider gave no apns-id. 122 bits of a
    /// keystream keyed from the system's random source, so that no
    /// provider can tell another's ids from its own.
    public static func notificationID() -> UUID { randomIDs.next() }

    /// A fresh delivery id (`PushNotification.deliveryID`): unique, but
    /// not secret — no provider ever sees one or chooses one — so it
    /// counts up from a random base chosen once per process (unique across
    /// restarts too: the bases differ).
    public static func deliveryID() -> UUID { deliveryIDs.next() }
}

/// Random UUIDs, 256 at a time from the keystream of AES-GCM over zeros
/// (BoringSSL, AES-NI where the processor has it) under a key drawn from
/// the system's random source once per process, with a counter as the
/// nonce: a CSPRNG that costs a few nanoseconds an id, where asking the
/// system for every id (or 256 bytes at a time) cost a system call per few
/// ids on the binary path's 1M+ notifications a second.
private final class RandomIDs: Sendable {
    private struct Pool {
        var bytes: [UInt8] = []
        /// The next unused byte.
        var next = 0
        /// The nonce of the next block of ids.
        var counter: UInt64 = 0
    }

    private static let zeros = [UInt8](repeating: 0, count: 4096)
    private let key = SymmetricKey(size: .bits256)
    private let pool = Mutex(Pool())

    func next() -> UUID {
        var id = pool.withLock { pool -> uuid_t in
            if pool.next >= pool.bytes.count {
                pool.counter += 1
                var nonce = [UInt8](repeating: 0, count: 12)
                withUnsafeBytes(of: pool.counter.bigEndian) { nonce.replaceSubrange(4..<12, with: $0) }
                // A 12-byte nonce and a fresh counter each time: the seal cannot fail.
                let sealed = try! AES.GCM.seal(Self.zeros, using: key, nonce: AES.GCM.Nonce(data: nonce))
                pool.bytes = Array(sealed.ciphertext)
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
}

/// UUIDs whose last 48 bits count up from a random base chosen once per
/// process: unique without any randomness per id.
private final class CountedIDs: Sendable {
    private let base: uuid_t
    private let counter = Atomic<UInt64>(0)

    init() {
        base = UUID().uuid
    }

    func next() -> UUID {
        let count = counter.add(1, ordering: .relaxed).newValue
        var id = base
        withUnsafeMutableBytes(of: &id) { bytes in
            // Bytes 10–15: base + count (mod 2^48); the version and variant bits (bytes 6 and 8) stay the base's.
            var low: UInt64 = 0
            for index in 10..<16 { low = low << 8 | UInt64(bytes[index]) }
            low = (low &+ count) & 0xFFFF_FFFF_FFFF
            for index in (10..<16).reversed() {
                bytes[index] = UInt8(truncatingIfNeeded: low)
                low >>= 8
            }
        }
        return UUID(uuid: id)
    }
}
