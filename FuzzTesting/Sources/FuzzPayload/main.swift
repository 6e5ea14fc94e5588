// Fuzzes the payload scanner against Foundation's JSONSerialization, with
// the oracle of Tests/CourierCoreTests/PayloadScannerTests.swift: the same
// decision (a JSON object or not) and, for an object, the same summary of
// its top-level `aps` (content-available is the number 1; alert, sound or
// badge present; the number of distinct keys; content-available present).
// The one difference that test allows is allowed here too: Foundation on
// Linux takes a trailing comma (`{"a":1,}`), which RFC 8259 and the scanner
// refuse. And one that the test's samples never meet: Foundation guesses
// the encoding, reading UTF-16 and UTF-32 (a NUL among the first four
// bytes) and skipping a byte order mark; payloads are UTF-8 without one
// (RFC 8259 §8.1), which is all the scanner reads. Foundation also drops a
// U+FEFF written as is (EF BB BF) at the start of a string and after an
// escape, which changes keys; so Foundation is handed each one escaped
// (`\ufeff`, which it keeps, and which is the same key to the scanner),
// and when one follows a backslash (where the escape would change the
// JSON) a difference is allowed. Last: Foundation converts numbers only
// when it hands them over, so a number beyond Double's range whose key a
// later duplicate replaces is never read and the object is taken
// (`{"b":1e999,"b":1}`); the scanner refuses such a number wherever it
// stands, so where the input holds one and Foundation took it anyway, the
// difference is allowed.
//
// Also: PayloadRules.isJSONObject and PayloadRules.check answer as the
// scanner's summary says (empty, NUL-terminated, not an object, silent,
// priority 10 on a push with content-available alone).

import CourierCore
import Foundation
import FuzzSupport

struct Summary: Equatable, CustomStringConvertible {
    var contentAvailable: Bool
    var visible: Bool
    var keyCount: Int
    var hasContentAvailable: Bool

    init(_ aps: PayloadScanner.Aps) {
        contentAvailable = aps.contentAvailable
        visible = aps.visible
        keyCount = aps.keyCount
        hasContentAvailable = aps.hasContentAvailable
    }

    init(contentAvailable: Bool, visible: Bool, keyCount: Int, hasContentAvailable: Bool) {
        self.contentAvailable = contentAvailable
        self.visible = visible
        self.keyCount = keyCount
        self.hasContentAvailable = hasContentAvailable
    }

    var description: String {
        "content-available 1: \(contentAvailable), visible: \(visible), keys: \(keyCount), has content-available: \(hasContentAvailable)"
    }
}

let booleans = [NSNumber(value: true), NSNumber(value: false)]

func isBoolean(_ number: NSNumber) -> Bool {
    booleans.contains { $0 === number }
}

/// The summary as Foundation's objects show it; nil when Foundation finds
/// no JSON object.
func foundation(_ bytes: [UInt8]) -> Summary? {
    guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else { return nil }
    guard let aps = object["aps"] as? [String: Any] else {
        return Summary(contentAvailable: false, visible: false, keyCount: 0, hasContentAvailable: false)
    }
    var isOne = false
    // The number 1. `true` is no number, though Foundation hands it on as
    // an NSNumber too. Neither `is Bool` (an NSNumber 1 casts to Bool) nor
    // `type(of:) != Bool.self` (what the unit test uses: on Linux a JSON
    // `true` is a `__NSCFBoolean`, an NSNumber subclass) tells them apart;
    // the booleans are Foundation's two shared instances.
    if let value = aps["content-available"], let number = value as? NSNumber, !isBoolean(number) {
        isOne = number.doubleValue == 1
    }
    return Summary(
        contentAvailable: isOne,
        visible: aps["alert"] != nil || aps["sound"] != nil || aps["badge"] != nil,
        keyCount: aps.count,
        hasContentAvailable: aps["content-available"] != nil)
}

/// What Foundation reads as other than UTF-8, or with a byte order mark.
func isOtherEncoding(_ bytes: [UInt8]) -> Bool {
    bytes.prefix(4).contains(0) || bytes.starts(with: [0xEF, 0xBB, 0xBF]) || bytes.starts(with: [0xFE, 0xFF])
        || bytes.starts(with: [0xFF, 0xFE])
}

let byteOrderMark: [UInt8] = [0xEF, 0xBB, 0xBF]

/// `bytes` with every U+FEFF escaped, and whether one followed a backslash.
func escapingByteOrderMarks(_ bytes: [UInt8]) -> (bytes: [UInt8], afterBackslash: Bool) {
    var out: [UInt8] = []
    var afterBackslash = false
    var index = 0
    while index < bytes.count {
        if bytes.count - index >= 3, bytes[index] == 0xEF, bytes[index + 1] == 0xBB, bytes[index + 2] == 0xBF {
            if index > 0, bytes[index - 1] == UInt8(ascii: "\\") { afterBackslash = true }
            out += Array("\\ufeff".utf8)
            index += 3
        } else {
            out.append(bytes[index])
            index += 1
        }
    }
    return (out, afterBackslash)
}

/// True when a number outside strings is beyond Double's range (what
/// Foundation refuses when it converts it).
func hasNumberBeyondDouble(_ bytes: [UInt8]) -> Bool {
    var number: [UInt8] = []
    func ends() -> Bool {
        defer { number = [] }
        guard !number.isEmpty, let value = Double(String(decoding: number, as: UTF8.self)) else { return false }
        return value.isInfinite
    }
    let numeral = Set("0123456789-+.eE".utf8)
    return JSONText.visit(bytes) { _, byte, inString in
        if !inString, numeral.contains(byte) {
            number.append(byte)
            return false
        }
        return ends()
    } || ends()
}

func check(_ input: UnsafeRawBufferPointer) {
    let bytes = Array(input)
    let scanned = PayloadScanner.scan(bytes).map(Summary.init)
    let escaped = escapingByteOrderMarks(bytes)
    let reference = foundation(escaped.bytes)
    if scanned == nil, reference != nil, JSONText.trailingComma(in: bytes) != nil || isOtherEncoding(bytes) {
        // A difference allowed (above).
    } else if escaped.afterBackslash {
        // Allowed too (above).
    } else if scanned == nil, reference != nil, hasNumberBeyondDouble(bytes) {
        // A replaced number Foundation never read (above).
    } else {
        require(
            scanned == reference,
            "scanner: \(scanned.map { "\($0)" } ?? "not an object"); Foundation: \(reference.map { "\($0)" } ?? "not an object"); payload \(hex(bytes))")
    }

    require(PayloadRules.isJSONObject(bytes) == (scanned != nil), "isJSONObject disagrees with the scanner")
    let unlimited = PayloadLimits(binaryLegacy: .max, binaryCommand2: .max, http2: .max, http2VoIP: .max)
    for priority: UInt8? in [nil, 5, 10] {
        let verdict = PayloadRules.check(bytes, priority: priority, channel: .http2, limits: unlimited)
        let expected: Result<PayloadSummary, PayloadError>
        if bytes.isEmpty {
            expected = .failure(.empty)
        } else if bytes.last == 0 {
            expected = .failure(.nullTerminated)
        } else if let scanned {
            let silent = scanned.contentAvailable && !scanned.visible
            if silent, priority == 10, scanned.keyCount == 1, scanned.hasContentAvailable {
                expected = .failure(.priorityTenSilent)
            } else {
                expected = .success(PayloadSummary(isSilent: silent))
            }
        } else {
            expected = .failure(.notJSONObject)
        }
        require(verdict == expected, "check with priority \(String(describing: priority)): \(verdict), expected \(expected)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPayload(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
