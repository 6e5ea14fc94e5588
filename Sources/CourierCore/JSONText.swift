/// JSON text read byte by byte, telling which bytes belong to strings
/// (their quotes included): for the checks and rewrites that must leave
/// strings alone — a trailing comma (which RFC 8259 refuses and Foundation
/// takes), whitespace to drop between tokens.
public enum JSONText {
    /// Calls `visit` with each byte's offset, the byte, and whether it
    /// belongs to a string; stops, and returns true, as soon as `visit`
    /// returns true.
    @discardableResult
    public static func visit(_ bytes: some Sequence<UInt8>, _ visit: (_ offset: Int, _ byte: UInt8, _ inString: Bool) -> Bool) -> Bool {
        var inString = false
        var escaped = false
        for (offset, byte) in bytes.enumerated() {
            let partOfString: Bool
            if inString {
                partOfString = true
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
            } else {
                partOfString = byte == UInt8(ascii: "\"")
                inString = partOfString
            }
            if visit(offset, byte, partOfString) { return true }
        }
        return false
    }

    static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }

    /// The offset of a comma just before a `}` or `]` (whitespace between
    /// allowed); nil when there is none.
    public static func trailingComma(in bytes: some Sequence<UInt8>) -> Int? {
        var comma: Int?
        var found: Int?
        visit(bytes) { offset, byte, inString in
            if !inString, isWhitespace(byte) { return false }
            if !inString, byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]"), let comma {
                found = comma
                return true
            }
            comma = !inString && byte == UInt8(ascii: ",") ? offset : nil
            return false
        }
        return found
    }

    /// The text without the whitespace between its tokens (so that
    /// pretty-printed JSON fits one line); strings, which hold no raw line
    /// break, and the order of keys are kept.
    public static func compact(_ text: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        visit(text.utf8) { _, byte, inString in
            if inString || !isWhitespace(byte) { out.append(byte) }
            return false
        }
        return String(decoding: out, as: UTF8.self)
    }
}
