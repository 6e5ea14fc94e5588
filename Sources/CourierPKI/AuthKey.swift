import CourierCore
import Crypto
import Foundation

/// A provider auth key (ES256 on P-256) with its 10-character key id. The
/// provider gets the private key as `AuthKey_<KEYID>.p8` (PKCS#8 PEM);
/// Courier keeps the public key only.
public struct AuthKey: Sendable {
    public let keyID: String
    public let privateKey: P256.Signing.PrivateKey

    public init(keyID: String, privateKey: P256.Signing.PrivateKey) throws {
        guard Identifiers.isTenCharacterID(keyID) else {
            throw PKIError(.invalidArgument, "key id '\(keyID)' is not ten characters A-Z, 0-9")
        }
        self.keyID = keyID
        self.privateKey = privateKey
    }

    /// A new key with a random key id.
    public static func generate() -> AuthKey {
        try! AuthKey(keyID: randomID(), privateKey: P256.Signing.PrivateKey())
    }

    /// Reads a `.p8` file's text.
    public init(keyID: String, p8PEM: String) throws {
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: p8PEM)
        } catch {
            throw PKIError(.badFile, "not a PEM P-256 private key (.p8): \(error)")
        }
        try self.init(keyID: keyID, privateKey: key)
    }

    /// The file name Apple gives the key: `AuthKey_<KEYID>.p8`.
    public var fileName: String { "AuthKey_\(keyID).p8" }

    /// The `.p8` contents (PKCS#8, "BEGIN PRIVATE KEY").
    public var p8PEM: String { privateKey.pemRepresentation + "\n" }

    /// The public key as Courier stores it (X9.63, 65 bytes).
    public var publicKeyX963: [UInt8] { Array(privateKey.publicKey.x963Representation) }

    /// A random ten-character id of A–Z and 0–9 (team ids, key ids).
    public static func randomID() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<10).map { _ in alphabet[Int(generator.next(upperBound: UInt32(alphabet.count)))] })
    }
}
