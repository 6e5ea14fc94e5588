import Testing

@testable import CourierCore

/// JSON text byte by byte: strings (quotes and escapes included) are left
/// alone by the trailing-comma check and by compaction.
@Suite struct JSONTextTests {
    @Test(arguments: [
        (#"{"a": 1,}"#, 7),
        (#"[1, 2 ,  ]"#, 6),
        ("{\"a\": [1,\n  ]}", 8),
        (#"{"a": "x,}", "b": 1}"#, nil),
        (#"{"a": "\",}"}"#, nil),
        (#"{"a": [1, 2], "b": {}}"#, nil),
    ] as [(String, Int?)])
    func aTrailingCommaIsFoundOutsideStringsOnly(_ text: String, _ offset: Int?) {
        #expect(JSONText.trailingComma(in: Array(text.utf8)) == offset, "\(text)")
    }

    @Test func compactionDropsWhitespaceBetweenTokensOnly() {
        let pretty = "{\n  \"aps\" : {\n    \"alert\" : \"two  spaces, \\\"quoted\\\" \\\\\"\n  },\n  \"b\" : [ 1, 2 ]\n}\n"
        #expect(JSONText.compact(pretty) == #"{"aps":{"alert":"two  spaces, \"quoted\" \\"},"b":[1,2]}"#)
        #expect(JSONText.compact("") == "")
    }
}
