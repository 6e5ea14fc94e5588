// Fuzzes the provider authentication token (JWT) parser and verifier.
//
// An input that starts with `{` is a token's parts: the header JSON up to
// the first newline, the claims JSON up to the second, then the signature:
// none (the harness signs header.claims with its key, JOSE r||s), `der`
// (signed, DER), or the bytes given. The harness base64url-encodes the
// parts, so the fuzzer works on the JSON. Any other input is the compact
// token itself (bytes that are not UTF-8 repaired, as a header value
// would hold them).
//
// Oracles:
// - parsing never crashes; a parsed token's signingInput is the text up to
//   the second dot, its signature the third part decoded, its ids non-empty
//   and its issue time finite;
// - a token the harness signed verifies with the harness's key and with no
//   other key; any parsed token signed again (both signature forms) parses
//   to the same claims and verifies; a signature over other bytes does not;
// - Base64URL: decoding what it encoded gives the bytes back, and encoded
//   text has no `+`, `/` or `=`.

import CourierPKI
import Crypto
import Foundation
import FuzzSupport

let key = try! P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 0x11, count: 31) + [0x01])
let otherKey = try! P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 0x22, count: 31) + [0x02])

enum Signing { case raw, der, given([UInt8]) }

func sign(_ input: String, _ form: Signing) -> [UInt8] {
    let signature = try! key.signature(for: Array(input.utf8))
    switch form {
    case .raw: return Array(signature.rawRepresentation)
    case .der: return Array(signature.derRepresentation)
    case .given(let bytes): return bytes
    }
}

func checkBase64URL(_ bytes: [UInt8]) {
    let text = Base64URL.encode(bytes)
    require(!text.contains("+") && !text.contains("/") && !text.contains("="), "Base64URL.encode gives \(text)")
    require(Base64URL.decode(text) == bytes, "Base64URL does not round-trip \(hex(bytes)) (\(text))")
}

func parse(_ compact: String) -> ProviderToken? {
    do {
        let token = try ProviderToken(compact: compact)
        let parts = compact.split(separator: ".", omittingEmptySubsequences: false)
        require(parts.count == 3, "a token of \(parts.count) parts parsed")
        require(token.signingInput == Array((parts[0] + "." + parts[1]).utf8), "signingInput is not header.claims")
        require(Base64URL.decode(parts[2]) == token.signature, "signature is not the third part")
        require(!token.keyID.isEmpty && !token.teamID.isEmpty && token.issuedAt.timeIntervalSince1970.isFinite, "empty ids or time: \(token)")
        return token
    } catch {
        return nil
    }
}

/// Signs the token's header.claims again in both forms: the result parses
/// to the same claims and verifies with the key.
func resign(_ token: ProviderToken) {
    let input = String(decoding: token.signingInput, as: UTF8.self)
    for form in [Signing.raw, .der] {
        let compact = input + "." + Base64URL.encode(sign(input, form))
        guard let again = parse(compact) else { violation("\(compact) does not parse after signing again") }
        require(again.hasSameClaims(as: token) && again.signingInput == token.signingInput, "signed again, \(again) is not \(token)")
        require(again.isSigned(by: key.publicKey), "signed again (\(form)), \(compact) does not verify")
        require(!again.isSigned(by: otherKey.publicKey), "\(compact) verifies with another key")
    }
    // A signature over other bytes is refused.
    let other = Base64URL.encode(sign(input + "x", .raw))
    if let wrong = parse(input + "." + other) {
        require(!wrong.isSigned(by: key.publicKey), "a signature over other bytes verifies: \(input).\(other)")
    }
}

func check(_ bytes: UnsafeRawBufferPointer) {
    let input = Array(bytes)
    checkBase64URL(input)
    if input.first == UInt8(ascii: "{") {
        let lines = input.split(separator: 0x0A, maxSplits: 2, omittingEmptySubsequences: false)
        let header = Array(lines[0])
        let claims = lines.count > 1 ? Array(lines[1]) : []
        let rest = lines.count > 2 ? Array(lines[2]) : []
        let form: Signing = rest.isEmpty ? .raw : rest == Array("der".utf8) ? .der : .given(rest)
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(claims)
        let compact = signingInput + "." + Base64URL.encode(sign(signingInput, form))
        guard let token = parse(compact) else { return }
        let verified = token.isSigned(by: key.publicKey)
        if case .given = form {} else {
            require(verified, "a token the harness signed does not verify: \(compact)")
        }
        require(!token.isSigned(by: otherKey.publicKey), "\(compact) verifies with another key")
        resign(token)
    } else {
        let compact = String(decoding: input, as: UTF8.self)
        guard let token = parse(compact) else { return }
        _ = token.isSigned(by: key.publicKey)
        resign(token)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzProviderToken(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
