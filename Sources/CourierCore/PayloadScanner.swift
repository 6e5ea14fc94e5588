/// Reads a payload once, without building any objects, and tells what the
/// payload rules need: whether it is a JSON object (RFC 8259, UTF-8), and
/// what its top-level `aps` dictionary holds. Foundation's parser builds a
/// dictionary of boxed values for every push; this is on the hot path of
/// every provider interface.
public struct PayloadScanner {
    /// What the rules learn about `aps`.
    public struct Aps {
        /// `content-available` is the number 1.
        public var contentAvailable = false
        /// `alert`, `sound` or `badge` is present.
        public var visible = false
        /// The number of distinct keys in `aps`.
        public var keyCount = 0
        /// `content-available` is present, whatever its value.
        public var hasContentAvailable = false
    }

    private let bytes: UnsafeRawBufferPointer
    private var index = 0
    /// The decoded contents of the strings with escapes read so far, one
    /// after the other (empty for most payloads).
    private var decoded: [UInt8] = []
    /// The most containers (objects and arrays, the top-level object
    /// included) one inside another: Foundation's parser's limit, 512.
    static let maximumDepth = 512

    private init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    /// The top-level `aps` dictionary's summary (empty when there is none
    /// or it is not an object); nil when the payload is not a JSON object.
    public static func scan(_ payload: some Collection<UInt8>) -> Aps? {
        payload.withContiguousBytes(scan(bytes:))
    }

    static func scan(bytes: UnsafeRawBufferPointer) -> Aps? {
        var scanner = PayloadScanner(bytes)
        return scanner.document()
    }

    private mutating func document() -> Aps? {
        skipSpace()
        guard peek == UInt8(ascii: "{") else { return nil }
        var aps = Aps()
        guard object(depth: 1, topLevel: &aps) else { return nil }
        skipSpace()
        return index == bytes.count ? aps : nil
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func expect(_ byte: UInt8) -> Bool {
        guard peek == byte else { return false }
        index += 1
        return true
    }

    /// A value inside a container at `depth` (the top-level object is 1).
    private mutating func value(depth: Int) -> Bool {
        skipSpace()
        switch peek {
        case UInt8(ascii: "{"):
            return depth < Self.maximumDepth && anyObject(depth: depth + 1)
        case UInt8(ascii: "["): return depth < Self.maximumDepth && array(depth: depth + 1)
        case UInt8(ascii: "\""): return string() != nil
        case UInt8(ascii: "t"): return literal("true")
        case UInt8(ascii: "f"): return literal("false")
        case UInt8(ascii: "n"): return literal("null")
        default: return number()
        }
    }

    /// A string's contents: where they stand in the payload when it has no
    /// escapes (the usual case, no copy), in `decoded` otherwise.
    private struct Key {
        var range: Range<Int>
        var isDecoded = false
    }

    /// One step through an object's members.
    private enum Member {
        /// A key and its colon were read; the value follows.
        case key(Key)
        /// The closing brace was read.
        case end
        case malformed
    }

    /// Reads the opening brace, or the comma before the next member (or
    /// the closing brace), then the member's key and colon.
    private mutating func nextMember(first: Bool) -> Member {
        skipSpace()
        if first {
            guard expect(UInt8(ascii: "{")) else { return .malformed }
            skipSpace()
            if expect(UInt8(ascii: "}")) { return .end }
        } else {
            if expect(UInt8(ascii: "}")) { return .end }
            guard expect(UInt8(ascii: ",")) else { return .malformed }
            skipSpace()
        }
        guard let key = string() else { return .malformed }
        skipSpace()
        guard expect(UInt8(ascii: ":")) else { return .malformed }
        skipSpace()
        return .key(key)
    }

    /// The top-level object: records what its `aps` member holds (the last
    /// `aps` counts, as with a dictionary).
    private mutating func object(depth: Int, topLevel aps: inout Aps) -> Bool {
        var first = true
        while true {
            switch nextMember(first: first) {
            case .end: return true
            case .malformed: return false
            case .key(let key):
                if equal(key, "aps") {
                    aps = Aps()
                    let valid = peek == UInt8(ascii: "{") ? apsObject(depth: depth + 1, into: &aps) : value(depth: depth)
                    guard valid else { return false }
                } else {
                    guard value(depth: depth) else { return false }
                }
            }
            first = false
        }
    }

    /// Any object below the top level.
    private mutating func anyObject(depth: Int) -> Bool {
        var first = true
        while true {
            switch nextMember(first: first) {
            case .end: return true
            case .malformed: return false
            case .key: guard value(depth: depth) else { return false }
            }
            first = false
        }
    }

    /// The `aps` object: its keys, `content-available`'s value.
    private mutating func apsObject(depth: Int, into aps: inout Aps) -> Bool {
        var keys = DistinctKeys()
        var contentAvailable = false
        var first = true
        members: while true {
            switch nextMember(first: first) {
            case .end: break members
            case .malformed: return false
            case .key(let key):
                let valueStart = index
                guard value(depth: depth) else { return false }
                let isContentAvailable = equal(key, "content-available")
                if isContentAvailable {
                    contentAvailable = Self.isNumberOne(UnsafeRawBufferPointer(rebasing: bytes[valueStart..<index]))
                }
                if keys.insert(key, scanner: self) {
                    aps.hasContentAvailable = aps.hasContentAvailable || isContentAvailable
                    aps.visible = aps.visible || equal(key, "alert") || equal(key, "sound") || equal(key, "badge")
                }
            }
            first = false
        }
        aps.keyCount = keys.count
        aps.contentAvailable = contentAvailable
        return true
    }

    /// The distinct keys of one object: the usual few kept inline (no
    /// allocation per payload), any beyond them in an array.
    private struct DistinctKeys {
        private var inline = InlineArray<8, Key>(repeating: Key(range: 0..<0))
        private var inlineCount = 0
        private var others: [Key] = []

        var count: Int { inlineCount + others.count }

        /// Adds `key`; false when an equal key was there already.
        mutating func insert(_ key: Key, scanner: PayloadScanner) -> Bool {
            for slot in 0..<inlineCount where scanner.equal(key, inline[slot]) { return false }
            if others.contains(where: { scanner.equal(key, $0) }) { return false }
            if inlineCount < inline.count {
                inline[inlineCount] = key
                inlineCount += 1
            } else {
                others.append(key)
            }
            return true
        }
    }

    private func withBytes<R>(of key: Key, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        guard key.isDecoded else { return body(UnsafeRawBufferPointer(rebasing: bytes[key.range])) }
        return decoded.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[key.range])) }
    }

    private func equal(_ key: Key, _ text: StaticString) -> Bool {
        withBytes(of: key) { Self.same($0, UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)) }
    }

    private func equal(_ left: Key, _ right: Key) -> Bool {
        withBytes(of: left) { left in withBytes(of: right) { right in Self.same(left, right) } }
    }

    private static func same(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Bool {
        guard left.count == right.count else { return false }
        for offset in 0..<left.count where left[offset] != right[offset] { return false }
        return true
    }

    private mutating func array(depth: Int) -> Bool {
        guard expect(UInt8(ascii: "[")) else { return false }
        skipSpace()
        if expect(UInt8(ascii: "]")) { return true }
        while true {
            guard value(depth: depth) else { return false }
            skipSpace()
            if expect(UInt8(ascii: ",")) { continue }
            return expect(UInt8(ascii: "]"))
        }
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count else { return false }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { return false }
        index += count
        return true
    }

    /// A string (its opening quote at `index`) when it is a valid JSON
    /// string of valid UTF-8: where its contents stand when it has no
    /// escapes, its decoded bytes when it has; nil otherwise.
    private mutating func string() -> Key? {
        guard expect(UInt8(ascii: "\"")) else { return nil }
        let start = index
        // The plain run: no escape, nothing to copy. Eight bytes at a time
        // while none of them needs a look of its own.
        while index < bytes.count {
            if bytes.count - index >= 8 {
                let special = Self.specialBytes(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)))
                guard special != 0 else {
                    index += 8
                    continue
                }
                // Read little-endian: the lowest flagged byte comes first.
                index += special.trailingZeroBitCount / 8
            }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return Key(range: start..<index - 1)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { return nil }
            if byte < 0x80 {
                index += 1
            } else {
                guard let length = utf8Sequence() else { return nil }
                index += length
            }
        }
        guard index < bytes.count else { return nil }
        return escapedString(plainFrom: start)
    }

    /// The bytes of `word` (eight bytes of a string, read little-endian)
    /// that a string's plain run stops at — a quote, a backslash, a control
    /// character or a byte of a multi-byte sequence — flagged by their high
    /// bit. The lowest flag is exact (a flag can be wrong only above a
    /// true one).
    private static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        /// Flags the bytes that are zero.
        func zeroBytes(_ value: UInt64) -> UInt64 { (value &- ones) & ~value & highs }
        let quote = zeroBytes(word ^ (ones &* 0x22))
        let backslash = zeroBytes(word ^ (ones &* 0x5C))
        let control = (word &- ones &* 0x20) & ~word & highs
        return quote | backslash | control | (word & highs)
    }

    /// The rest of a string from its first backslash, decoded into
    /// `decoded` after its plain run (from `start`).
    private mutating func escapedString(plainFrom start: Int) -> Key? {
        let first = decoded.count
        decoded.append(contentsOf: bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return Key(range: first..<decoded.count, isDecoded: true)
            case UInt8(ascii: "\\"):
                index += 1
                guard let escaped = peek else { return nil }
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escaped)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"):
                    guard var scalar = hex4() else { return nil }
                    if (0xD800...0xDBFF).contains(scalar) {
                        // A high surrogate must be followed by an escaped low one.
                        guard expect(UInt8(ascii: "\\")), expect(UInt8(ascii: "u")), let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        return nil
                    }
                    decoded.append(contentsOf: Unicode.UTF8.encode(Unicode.Scalar(scalar)!)!)
                default: return nil
                }
            case 0x00..<0x20:
                return nil
            case 0x00..<0x80:
                decoded.append(byte)
                index += 1
            default:
                guard let length = utf8Sequence() else { return nil }
                decoded.append(contentsOf: bytes[index..<index + length])
                index += length
            }
        }
        return nil
    }

    /// The length of the well-formed UTF-8 sequence at `index` (a lead byte
    /// of 0x80 or more), or nil.
    private func utf8Sequence() -> Int? {
        let lead = bytes[index]
        let length: Int
        var lower: UInt8 = 0x80
        var upper: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; lower = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; upper = 0x9F
        case 0xF0: length = 4; lower = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; upper = 0x8F
        default: return nil
        }
        guard bytes.count - index >= length else { return nil }
        let second = bytes[index + 1]
        guard second >= lower, second <= upper else { return nil }
        for offset in 2..<length where !(0x80...0xBF).contains(bytes[index + offset]) { return nil }
        return length
    }

    private mutating func hex4() -> UInt32? {
        guard bytes.count - index >= 4 else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Hex.value(of: bytes[index]) else { return nil }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    /// A number (RFC 8259 grammar).
    /// A number, within Double's range: one beyond it (`1e309`) is refused,
    /// as Foundation's parser (and so an app's) refuses it. Only a number
    /// with an exponent or more digits than a Double's largest has can be
    /// beyond it; only such a number is converted to see.
    private mutating func number() -> Bool {
        let start = index
        _ = expect(UInt8(ascii: "-"))
        guard let first = peek, (0x30...0x39).contains(first) else { return false }
        index += 1
        if first != 0x30 { digits() }
        var mayOverflow = index - start > 300
        if expect(UInt8(ascii: ".")) {
            guard let next = peek, (0x30...0x39).contains(next) else { return false }
            digits()
        }
        if let e = peek, e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            index += 1
            if let sign = peek, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { index += 1 }
            guard let next = peek, (0x30...0x39).contains(next) else { return false }
            digits()
            mayOverflow = true
        }
        guard mayOverflow else { return true }
        return Double(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self))?.isFinite ?? false
    }

    /// True when a scanned value is a number equal to 1 (`1`, `1.0`, `10e-1`).
    private static func isNumberOne(_ text: UnsafeRawBufferPointer) -> Bool {
        guard let first = text.first, first == UInt8(ascii: "-") || (0x30...0x39).contains(first) else { return false }
        return Double(String(decoding: text, as: UTF8.self)) == 1
    }

    private mutating func digits() {
        while let byte = peek, (0x30...0x39).contains(byte) { index += 1 }
    }
}
