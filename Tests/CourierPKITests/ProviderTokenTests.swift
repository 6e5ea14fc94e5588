import CourierPKI
import Crypto
import Foundation
import Testing

@Suite struct ProviderTokenTests {
    let key = AuthKey.generate()

    func sign(_ header: String, _ claims: String, der: Bool = false) throws -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try key.privateKey.signature(for: Array(input.utf8))
        return input + "." + Base64URL.encode(der ? Array(signature.derRepresentation) : Array(signature.rawRepresentation))
    }

    @Test func madeTokensParseAndVerify() throws {
        let compact = ProviderToken.make(key: key, teamID: "TEAM123456", issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let token = try ProviderToken(compact: compact)
        #expect(token.keyID == key.keyID)
        #expect(token.teamID == "TEAM123456")
        #expect(token.issuedAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(token.isSigned(by: key.privateKey.publicKey))
        #expect(!token.isSigned(by: AuthKey.generate().privateKey.publicKey))
    }

    @Test(arguments: [#""1700000000""#, "1700000000", "1700000000.0", "1.7e9"])
    func issuedAtAsNumberFloatOrString(_ iat: String) throws {
        let token = try ProviderToken(compact: sign(#"{"alg":"ES256","kid":"\#(key.keyID)"}"#, #"{"iss":"T","iat":\#(iat)}"#))
        #expect(token.issuedAt == Date(timeIntervalSince1970: 1_700_000_000))
    }

    @Test func derAndJoseSignaturesBothVerify() throws {
        for der in [false, true] {
            let token = try ProviderToken(compact: sign(#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":1}"#, der: der))
            #expect(token.isSigned(by: key.privateKey.publicKey), "der: \(der)")
        }
    }

    @Test func theSameClaimsSignedAgainAreTheSameToken() throws {
        let a = try ProviderToken(compact: sign(#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":5}"#))
        let b = try ProviderToken(compact: sign(#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":5}"#))
        let c = try ProviderToken(compact: sign(#"{"alg":"ES256","kid":"K"}"#, #"{"iss":"T","iat":6}"#))
        #expect(a.signature != b.signature)
        #expect(a.hasSameClaims(as: b))
        #expect(!a.hasSameClaims(as: c))
    }

    @Test(arguments: [
        "", "a.b", "a.b.c.d", "!!.!!.!!",
        Base64URL.encode(Array("not json".utf8)) + ".e30.AA",
    ])
    func malformedTokensAreRefused(_ compact: String) {
        #expect(throws: ProviderToken.Failure.self) { try ProviderToken(compact: compact) }
    }

    @Test func otherAlgorithmsAndMissingClaimsAreRefused() throws {
        #expect(throws: ProviderToken.Failure.unsupportedAlgorithm("HS256")) {
            try ProviderToken(compact: sign(#"{"alg":"HS256","kid":"K"}"#, #"{"iss":"T","iat":1}"#))
        }
        for claims in [#"{"iat":1}"#, #"{"iss":"T"}"#, #"{"iss":"T","iat":true}"#, #"{"iss":"T","iat":"soon"}"#] {
            #expect(throws: ProviderToken.Failure.self, "\(claims)") { try ProviderToken(compact: sign(#"{"alg":"ES256","kid":"K"}"#, claims)) }
        }
        #expect(throws: ProviderToken.Failure.self) { try ProviderToken(compact: sign(#"{"alg":"ES256"}"#, #"{"iss":"T","iat":1}"#)) }
    }
}
