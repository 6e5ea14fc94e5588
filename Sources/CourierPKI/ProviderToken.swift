import CourierCore
import Crypto
import Foundation

/// A provider authentication token: a JWT signed with ES256 by an auth key
/// (the seeds' "Provider Authentication Tokens"). The header names the key
/// (`kid`), the claims the team (`iss`) and the issue time (`iat`).
///
/// Parsing accepts what real clients send: `iat` as an integer, a float or
/// a numeric string, and the signature as JOSE `r||s` (64 bytes) or as DER
/// (what Apple's openssl recipe produces).
public struct ProviderToken: Sendable, Hashable {
    public let keyID: String
    public let teamID: String
    public let issuedAt: Date
    /// `header.claims`, the bytes the signature covers.
    public let signingInput: [UInt8]
    public let signature: [UInt8]

    /// Why a token cannot be used; every case is `InvalidProviderToken` on the wire.
    public enum Failure: Error, Sendable, Hashable {
        case malformed(String)
        case unsupportedAlgorithm(String)
    }

    /// Parses the compact form `header.claims.signature` (base64url parts).
    public init(compact: some StringProtocol) throws(Failure) {
        let parts = compact.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("not three dot-separated parts") }
        guard let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2])
        else { throw .malformed("a part is not base64url") }
        guard let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes)) else {
            throw .malformed("the header is not a JSON object with alg and kid strings")
        }
        guard header.alg == "ES256" else { throw .unsupportedAlgorithm(header.alg) }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: Data(claimBytes)) else {
            throw .malformed("the claims are not a JSON object with iss and a numeric iat")
        }
        let keyID = header.kid
        let teamID = claims.iss
        let issuedAt = claims.iat.seconds
        guard !keyID.isEmpty, !teamID.isEmpty, issuedAt.isFinite else { throw .malformed("empty kid or iss") }
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = Date(timeIntervalSince1970: issuedAt)
        self.signingInput = Array(compact[compact.startIndex..<parts[1].endIndex].utf8)
        self.signature = signature
    }

    private struct Header: Decodable {
        var alg: String
        var kid: String
    }

    private struct Claims: Decodable {
        var iss: String
        var iat: Seconds
    }

    /// `iat` as a JSON number (integer or float) or a numeric string.
    private struct Seconds: Decodable {
        var seconds: Double

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let number = try? container.decode(Double.self) {
                seconds = number
            } else if let text = try? container.decode(String.self), let number = Double(text) {
                seconds = number
            } else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "iat is not a number")
            }
        }
    }

    /// True when the signature is the key's over `header.claims`.
    public func isSigned(by publicKey: P256.Signing.PublicKey) -> Bool {
        let signature: P256.Signing.ECDSASignature
        if self.signature.count == 64, let raw = try? P256.Signing.ECDSASignature(rawRepresentation: self.signature) {
            signature = raw
        } else if let der = try? P256.Signing.ECDSASignature(derRepresentation: self.signature) {
            signature = der
        } else {
            return false
        }
        return publicKey.isValidSignature(signature, for: signingInput)
    }

    /// True when both name the same key, team and issue time: the same token
    /// signed again (ECDSA signatures differ each time).
    public func hasSameClaims(as other: ProviderToken) -> Bool {
        keyID == other.keyID && teamID == other.teamID && issuedAt == other.issuedAt
    }

    /// A new token in compact form, signed with `key` (JOSE `r||s` signature).
    public static func make(key: AuthKey, teamID: String, issuedAt: Date) -> String {
        let header = #"{"alg":"ES256","kid":"\#(key.keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(Int64(issuedAt.timeIntervalSince1970))}"#
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try! key.privateKey.signature(for: Array(input.utf8))
        return input + "." + Base64URL.encode(Array(signature.rawRepresentation))
    }
}

/// Base64 with the URL alphabet and no padding (RFC 7515, appendix C).
public enum Base64URL {
    public static func encode(_ bytes: [UInt8]) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var standard = String(text).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !standard.contains("=") else { return nil }
        standard += String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
        return Data(base64Encoded: standard).map(Array.init)
    }
}
