import CourierAES
import CourierCore
import Crypto
import Foundation

/// What a device token says, once Courier has opened it.
public struct DeviceTokenContents: Sendable, Hashable {
    public var deviceID: UInt64
    public var generation: UInt32
    /// 0 for the app's device token; a Live Activity token otherwise:
    /// `pushToStart`, or an activity's number (its update token). (Beside
    /// the generation: the contents stay 24 bytes.)
    public var activity: UInt32
    /// The first 8 bytes of SHA-256 over the bundle id (`appHash(of:)`).
    public var appHash: UInt64

    /// `activity` of an app's Live Activity push-to-start token.
    public static let pushToStart = UInt32.max

    public init(deviceID: UInt64, generation: UInt32, appHash: UInt64, activity: UInt32 = 0) {
        self.deviceID = deviceID
        self.generation = generation
        self.appHash = appHash
        self.activity = activity
    }

    public init(deviceID: UInt64, generation: UInt32, bundleID: String, activity: UInt32 = 0) {
        self.init(deviceID: deviceID, generation: generation, appHash: Self.appHash(of: bundleID), activity: activity)
    }

    /// A Live Activity token (push-to-start or update), not a device token.
    public var isLiveActivity: Bool { activity != 0 }

    /// The app part of a token: 64 bits of SHA-256 of the bundle id.
    public static func appHash(of bundleID: String) -> UInt64 {
        let digest = SHA256.hash(data: Array("courier.app:\(bundleID)".utf8))
        return digest.withUnsafeBytes { raw in
            raw.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        }
    }

    /// True when the token was issued for an app with this bundle id.
    public func belongs(to bundleID: String) -> Bool {
        appHash == Self.appHash(of: bundleID)
    }
}

/// Why a token was refused.
public enum DeviceTokenError: Error, Sendable, Hashable {
    /// Not the configured length.
    case badLength(Int)
    /// Not issued by this environment's key, or altered.
    case notAuthentic
}

/// Issues and opens device tokens.
///
/// A token is the 24 bytes `device id (8) | generation (4) | app hash (8)
/// | activity (4)` followed by zero bytes up to the token length (8 of
/// them at the default 32), enciphered as one block by a four-round
/// Feistel network whose round function is AES-128 (a strong pseudo-random
/// permutation, Luby–Rackoff). Opening deciphers and checks the zero
/// bytes: a changed bit garbles the whole block, so a forged or altered
/// token passes with probability 2^-64 — 2^-96 for a device token, whose
/// activity must also be 0 (device tokens issued before Live Activity
/// tokens existed had zeros there, and are read unchanged). The same inputs give the same token, nothing in it
/// is readable without the key, and no database lookup is needed.
///
/// Each environment has its own key, so a token of one environment does
/// not open in the other.
public struct DeviceTokenCodec: Sendable {
    public static let defaultLength = 32
    static let dataLength = 24

    /// Token length in bytes: even, 32 to 254.
    public let length: Int
    /// The four round keys, each expanded once: expanding a key costs
    /// more than the block it enciphers.
    private let roundKeys: [courier_aes_key]

    /// - Parameters:
    ///   - secret: the environment's token key (32 random bytes, kept in
    ///     the data directory).
    ///   - environment: mixed into the round keys.
    public init(secret: SymmetricKey, environment: Environment, length: Int = DeviceTokenCodec.defaultLength) throws {
        guard length >= 32, length <= 254, length % 2 == 0 else { throw PKIError(.invalidArgument, "token length \(length) must be even, 32 to 254") }
        self.length = length
        self.roundKeys = (0..<4).map { round in
            let key = HKDF<SHA256>.deriveKey(
                inputKeyMaterial: secret, salt: Array("courier device token".utf8),
                info: Array("round \(round) \(environment.rawValue) \(length)".utf8), outputByteCount: 16)
            var expanded = courier_aes_key()
            // Cannot fail: the key is 128 bits.
            let status = key.withUnsafeBytes { courier_aes_expand($0.bindMemory(to: UInt8.self).baseAddress, 128, &expanded) }
            precondition(status == 0, "AES-128 key expansion failed")
            return expanded
        }
    }

    /// The token for a device's app.
    public func issue(_ contents: DeviceTokenContents) -> [UInt8] {
        var block = [UInt8](repeating: 0, count: length)
        Self.store(contents.deviceID, into: &block, at: 0)
        Self.store(UInt64(contents.generation) << 32, into: &block, at: 8)  // upper 4 bytes used
        Self.store(contents.appHash, into: &block, at: 12)
        Self.store(UInt64(contents.activity) << 32, into: &block, at: 20)  // upper 4 bytes used
        block.withUnsafeMutableBufferPointer { encipher($0) }
        return block
    }

    /// Opens a token; fails when it is not this environment's or was altered.
    public func open(_ token: some Collection<UInt8>) -> Result<DeviceTokenContents, DeviceTokenError> {
        guard token.count == length else { return .failure(.badLength(token.count)) }
        return token.withContiguousBytes { open($0) }
    }

    /// Opens a token held in contiguous memory (the hot path: no copies
    /// through generic collections).
    public func open(_ token: UnsafeRawBufferPointer) -> Result<DeviceTokenContents, DeviceTokenError> {
        guard token.count == length else { return .failure(.badLength(token.count)) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: length) { block in
            UnsafeMutableRawBufferPointer(block).copyMemory(from: token)
            decipher(block)
            var zeroCheck: UInt8 = 0
            for index in Self.dataLength..<length { zeroCheck |= block[index] }
            guard zeroCheck == 0 else { return .failure(.notAuthentic) }
            let deviceID = Self.load(block, at: 0)
            let generation = UInt32(truncatingIfNeeded: Self.load(block, at: 8) >> 32)
            let appHash = Self.load(block, at: 12)
            let activity = UInt32(truncatingIfNeeded: Self.load(block, at: 20) >> 32)
            return .success(DeviceTokenContents(deviceID: deviceID, generation: generation, appHash: appHash, activity: activity))
        }
    }

    // MARK: Feistel network over the two halves of the block

    private func encipher(_ block: UnsafeMutableBufferPointer<UInt8>) {
        let half = length / 2
        let left = UnsafeMutableBufferPointer(rebasing: block[0..<half])
        let right = UnsafeMutableBufferPointer(rebasing: block[half..<length])
        roundKeys.withUnsafeBufferPointer { keys in
            let key = keys.baseAddress!
            Self.mix(into: right, from: left, key: key)
            Self.mix(into: left, from: right, key: key + 1)
            Self.mix(into: right, from: left, key: key + 2)
            Self.mix(into: left, from: right, key: key + 3)
        }
    }

    private func decipher(_ block: UnsafeMutableBufferPointer<UInt8>) {
        let half = length / 2
        let left = UnsafeMutableBufferPointer(rebasing: block[0..<half])
        let right = UnsafeMutableBufferPointer(rebasing: block[half..<length])
        roundKeys.withUnsafeBufferPointer { keys in
            let key = keys.baseAddress!
            Self.mix(into: left, from: right, key: key + 3)
            Self.mix(into: right, from: left, key: key + 2)
            Self.mix(into: left, from: right, key: key + 1)
            Self.mix(into: right, from: left, key: key)
        }
    }

    /// `target ^= F(key, source)`. F is AES-128 on a 16-byte half; a longer
    /// half is first reduced by CBC-MAC (fixed length, so a PRF) and the
    /// output is stretched in counter mode.
    private static func mix(
        into target: UnsafeMutableBufferPointer<UInt8>, from source: UnsafeMutableBufferPointer<UInt8>, key: UnsafePointer<courier_aes_key>
    ) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { state in
            if source.count == 16 {
                // One block: the AES input is the source itself.
                UnsafeMutableRawBufferPointer(state).copyMemory(from: UnsafeRawBufferPointer(source))
                Self.aes(state, key)
            } else {
                state.initialize(repeating: 0)
            }
            var offset = source.count == 16 ? 16 : 0
            while offset < source.count {
                let end = min(offset + 16, source.count)
                for index in offset..<end { state[index - offset] ^= source[index] }
                Self.aes(state, key)
                offset = end
            }
            if target.count == 16 {
                let raw = UnsafeMutableRawBufferPointer(target)
                let mask = UnsafeRawBufferPointer(state)
                for word in 0..<2 {
                    let offset = word * 8
                    raw.storeBytes(
                        of: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self) ^ mask.loadUnaligned(fromByteOffset: offset, as: UInt64.self),
                        toByteOffset: offset, as: UInt64.self)
                }
                return
            }
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { stream in
                var produced = 0
                var counter: UInt8 = 0
                while produced < target.count {
                    for index in 0..<16 { stream[index] = state[index] }
                    stream[15] ^= counter
                    stream[0] ^= 0x80  // keeps the expansion apart from the MAC value itself
                    Self.aes(stream, key)
                    let take = min(16, target.count - produced)
                    for index in 0..<take { target[produced + index] ^= stream[index] }
                    produced += take
                    counter &+= 1
                }
            }
        }
    }

    /// AES-128 on a 16-byte block, in place.
    private static func aes(_ block: UnsafeMutableBufferPointer<UInt8>, _ key: UnsafePointer<courier_aes_key>) {
        courier_aes_encrypt_block(block.baseAddress, block.baseAddress, key)
    }

    private static func store(_ value: UInt64, into block: inout [UInt8], at index: Int) {
        for byte in 0..<8 { block[index + byte] = UInt8(truncatingIfNeeded: value >> (56 - 8 * byte)) }
    }

    private static func load(_ block: UnsafeMutableBufferPointer<UInt8>, at index: Int) -> UInt64 {
        var value: UInt64 = 0
        for byte in 0..<8 { value = value << 8 | UInt64(block[index + byte]) }
        return value
    }
}
