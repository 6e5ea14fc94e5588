@testable import CourierCore
import Foundation
import Testing

/// The payload scanner against Foundation's JSON parser: the same
/// accept/reject decision and the same `aps` summary, on samples and on
/// many mutations of them.
@Suite struct PayloadScannerTests {
    static let samples: [String] = [
        #"{"aps":{"alert":"hi"}}"#,
        #"{"aps":{"content-available":1}}"#,
        #"{"aps":{"content-available":1.0,"sound":"a"}}"#,
        #"{"aps":{"content-available":"1"}}"#,
        #"{"aps":{"content-available":0,"badge":3}}"#,
        #"{"aps":{"alert":{"title":"T","body":"B","loc-args":["a","b"]},"badge":1,"sound":"default"},"acme":[1,2.5e3,-0.1,true,false,null]}"#,
        #" { "aps" : { "content-available" : 1 } , "x" : { "y" : [ { } , [ ] ] } } "#,
        #"{"aps":{"alert":"\u00e9\ud83d\ude00 \"quoted\" \\ \/ \b\f\n\r\t"}}"#,
        #"{"aps":{"alert":"é 😀 日本"}}"#,
        #"{"aps":1}"#,
        #"{}"#,
        #"{"aps":{}}"#,
        #"{"aps":{"content-available":1},"aps":{"alert":"x"}}"#,
        #"{"a":-0,"b":0.0e+1,"c":1E-2}"#,
        // Escaped keys: the same keys as the plain ones, duplicates counted once.
        #"{"a\u0070s":{"content-\u0061vailable":1,"content-available":1,"b\/adge":2}}"#,
        #"{"aps":{"al\u0065rt":"x","alert":"y","sound":"s"},"\u0061ps":{"badge":1}}"#,
        #"{"aps":{"sound":"a","so\u0075nd":"b","content-available":1}}"#,
        // More keys than are kept without an allocation, with repeats on both sides of that line.
        #"{"aps":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"a":11,"j":12,"\u006a":13,"content-available":1}}"#,
        #"{"aps":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"content-available":1,"content-available":1}}"#,
        // `true` is not the number 1, though Foundation hands it over as an NSNumber 1.
        #"{"aps":{"content-available":true}}"#, #"{"aps":{"content-available":false,"alert":"x"}}"#,
    ]

    static let booleans = [NSNumber(value: true), NSNumber(value: false)]

    /// What the rules need, as Foundation's dictionary shows it.
    static func foundationSummary(_ bytes: [UInt8]) -> PayloadScanner.Aps? {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] else { return nil }
        var aps = PayloadScanner.Aps()
        guard let dictionary = object["aps"] as? [String: Any] else { return aps }
        // A number equal to 1; `true` is not one (Apple's guide asks for the
        // number 1). Foundation hands both over as NSNumber; on Linux a JSON
        // boolean is one of its two shared instances (`type(of:)` does not
        // tell them apart there: it is an NSNumber subclass, not Bool).
        if let value = dictionary["content-available"], let number = value as? NSNumber,
            !Self.booleans.contains(where: { $0 === number })
        {
            aps.contentAvailable = number.doubleValue == 1
        }
        aps.visible = dictionary["alert"] != nil || dictionary["sound"] != nil || dictionary["badge"] != nil
        aps.keyCount = dictionary.count
        aps.hasContentAvailable = dictionary["content-available"] != nil
        return aps
    }

    static func same(_ a: PayloadScanner.Aps?, _ b: PayloadScanner.Aps?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let a?, let b?):
            a.contentAvailable == b.contentAvailable && a.visible == b.visible && a.keyCount == b.keyCount
                && a.hasContentAvailable == b.hasContentAvailable
        default: false
        }
    }

    static func hasTrailingComma(_ bytes: [UInt8]) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        return text.range(of: #",\s*[}\]]"#, options: .regularExpression) != nil
    }

    @Test(arguments: samples)
    func samplesAgreeWithFoundation(_ sample: String) {
        let bytes = Array(sample.utf8)
        #expect(PayloadScanner.scan(bytes) != nil, "\(sample)")
        #expect(Self.same(PayloadScanner.scan(bytes), Self.foundationSummary(bytes)), "\(sample)")
    }

    @Test(arguments: [
        "", "{", "}", "[]", "[{}]", "\"x\"", "1", "null", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}", "{\"a\":1}x", "{\"a\":01}",
        "{\"a\":1.}", "{\"a\":.5}", "{\"a\":+1}", "{\"a\":tru}", "{\"a\":\"\u{01}\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}", "{'a':1}",
        "{\"a\":[1,]}", "{\"a\":1e}",
    ])
    func malformedIsRefused(_ text: String) {
        #expect(PayloadScanner.scan(Array(text.utf8)) == nil, "\(text)")
    }

    @Test func invalidUTF8IsRefused() {
        for bad: [UInt8] in [[0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xE2, 0x82], [0xF4, 0x90, 0x80, 0x80]] {
            let payload = Array(#"{"a":""#.utf8) + bad + Array(#""}"#.utf8)
            #expect(PayloadScanner.scan(payload) == nil, "\(bad)")
        }
    }

    /// A number beyond Double's range is refused, as Foundation refuses it;
    /// one within it is read (found by FuzzPayload).
    @Test(arguments: [
        (#"{"a":1e309}"#, false), (#"{"a":-1e309}"#, false), (#"{"a":1e308}"#, true), (#"{"a":1e-400}"#, true),
        (#"{"a":"# + String(repeating: "9", count: 400) + "}", false), (#"{"a":"# + String(repeating: "9", count: 300) + "}", true),
        (#"{"aps":{"badge":1E+999}}"#, false),
    ])
    func numbersBeyondDoubleAreRefusedAsFoundationRefusesThem(_ text: String, _ readable: Bool) {
        let bytes = Array(text.utf8)
        #expect((PayloadScanner.scan(bytes) != nil) == readable, "\(text.prefix(40))")
        #expect(Self.same(PayloadScanner.scan(bytes), Self.foundationSummary(bytes)), "as Foundation: \(text.prefix(40))")
    }

    /// Such a number is refused even where a later duplicate key replaces
    /// it: Foundation converts numbers lazily and so never reads the
    /// replaced one (it takes `{"b":1e999,"b":1}`); the scanner reads every
    /// value, and a payload with a number that is not a Double is not JSON
    /// to Courier wherever it stands (found by FuzzPayload in CI).
    @Test func aNumberBeyondDoubleIsRefusedEvenWhenItsKeyIsRepeated() {
        for text in [#"{"b":1e999,"b":1}"#, #"{"a":-0,"b":1.0e+1666660,"b":1.666666666666}"#, #"{"aps":{"badge":1e400,"badge":1}}"#] {
            #expect(PayloadScanner.scan(Array(text.utf8)) == nil, "\(text)")
        }
    }

    /// Containers nested up to the limit (512, the top-level object
    /// included) are read, one more is not: as Foundation's parser does,
    /// for arrays, objects, and inside `aps`.
    @Test(arguments: [
        ("[", "", "]"), (#"{"k":"#, "1", "}"),
    ])
    func nestingIsLimitedAsFoundationLimitsIt(_ open: String, _ inner: String, _ close: String) {
        for (wrap, unwrap) in [(#"{"a":"#, "}"), (#"{"aps":{"b":"#, "}}")] {
            let outer = wrap == #"{"a":"# ? 1 : 2
            for nested in [PayloadScanner.maximumDepth - outer, PayloadScanner.maximumDepth - outer + 1] {
                let text = wrap + String(repeating: open, count: nested) + inner + String(repeating: close, count: nested) + unwrap
                let bytes = Array(text.utf8)
                let scanned = PayloadScanner.scan(bytes)
                #expect((scanned != nil) == (nested + outer <= PayloadScanner.maximumDepth), "\(nested + outer) containers")
                #expect(Self.same(scanned, Self.foundationSummary(bytes)), "\(nested + outer) containers: as Foundation")
            }
        }
    }

    /// Strings are read eight bytes at a time: whatever stops the plain run
    /// (a quote, an escape, a control character, a multi-byte or invalid
    /// sequence) is found at every position in a word and across words,
    /// in keys and in values, as Foundation finds it.
    @Test func longStringsAgreeWithFoundationWhereverTheirSpecialBytesFall() {
        let specials: [[UInt8]] = [
            [], Array(#"\""#.utf8), Array(#"\n"#.utf8), Array(#"\u00e9"#.utf8), [0x01], [0x1F], [0x20], [0x7F], Array("é".utf8), Array("€".utf8),
            Array("😀".utf8), [0xFF], [0xC3], [0xE2, 0x82], Array(#"""#.utf8),
        ]
        var disagreements: [String] = []
        for special in specials {
            for offset in 0..<20 {
                let text = Array(repeating: UInt8(ascii: "a"), count: offset) + special + Array("bcdefghijk".utf8)
                for payload in [
                    Array(#"{"aps":{"alert":""#.utf8) + text + Array(#""}}"#.utf8),
                    Array(#"{"aps":{""#.utf8) + text + Array(#"":1,"content-available":1}}"#.utf8),
                    Array(#"{""#.utf8) + text + Array(#"":{"aps":1},"aps":{"sound":"s"}}"#.utf8),
                ] where !Self.same(PayloadScanner.scan(payload), Self.foundationSummary(payload)) {
                    disagreements.append(String(decoding: payload, as: UTF8.self))
                }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(10))")
    }

    /// Every sample with bytes deleted, replaced or inserted at random: the
    /// decision and the summary match Foundation's (a fixed seed, so a
    /// failure repeats).
    @Test func mutationsAgreeWithFoundation() {
        var random = SplitMix(seed: 0x5EED)
        let alphabet = Array(#"{}[]:,"\ -.eE+01239aslurtfn"#.utf8) + [0x00, 0x1F, 0x80, 0xC3, 0xA9, 0xFF]
        var disagreements: [String] = []
        for sample in Self.samples {
            for _ in 0..<400 {
                var bytes = Array(sample.utf8)
                for _ in 0..<Int(random.next() % 3 + 1) {
                    let position = Int(random.next() % UInt64(bytes.count + 1))
                    let byte = alphabet[Int(random.next() % UInt64(alphabet.count))]
                    switch random.next() % 3 {
                    case 0 where position < bytes.count: bytes.remove(at: position)
                    case 1 where position < bytes.count: bytes[position] = byte
                    default: bytes.insert(byte, at: position)
                    }
                }
                let scanned = PayloadScanner.scan(bytes)
                let foundation = Self.foundationSummary(bytes)
                // Known difference: Foundation on Linux takes a trailing comma
                // (`{"a":1,}`), which RFC 8259 and the scanner refuse.
                if scanned == nil, foundation != nil, Self.hasTrailingComma(bytes) { continue }
                if !Self.same(scanned, foundation) {
                    disagreements.append(String(decoding: bytes, as: UTF8.self))
                }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(10))")
    }
}

/// A small deterministic generator for the mutation test.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
