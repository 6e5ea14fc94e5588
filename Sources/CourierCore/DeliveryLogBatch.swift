import Foundation

/// The delivery log's storage form: the events of one written batch packed
/// into one record, with a Bloom filter of the batch's notification ids.
/// Appending is then one sequential record per batch instead of a row and a
/// random index entry per event (the index's page writes were most of the
/// log's cost); a lookup by id reads every batch's filter and unpacks only
/// the batches that may hold the id.
///
/// Events, version 3 (written since 2026-11-28): a version byte; the first
/// event's time in milliseconds (Int64, big-endian); the number of events
/// (so that a cut batch is found out at any length); the batch's distinct
/// details, each once (a count, then per detail its length and UTF-8,
/// lengths and counts as LEB128 varints); the batch's distinct apps (bundle
/// ids), each once, the same way; then per event the id (16 bytes), its
/// time as the zigzag varint of the milliseconds since the event before it
/// (the first: since the time above), the kind's code (one byte,
/// `DeliveryEvent.Kind.code`), its detail's number and its app's number
/// (varints: 0 none, n the n-th). An event takes 20 bytes or so where
/// version 1 took 35 to 65: most events of a batch share a handful of
/// details ("device offline and expiration 0", a rejection's reason) and
/// apps, and the log's cost is mostly the bytes SQLite writes twice (its
/// write-ahead log, then the checkpoint).
///
/// Version 2 (still read; its events have no app): version 3 without the
/// apps and the app numbers.
///
/// Version 1 (still read): a version byte, then per event the id (16
/// bytes), the time in milliseconds (Int64, big-endian), the kind (length
/// byte + UTF-8) and the detail (UInt16 length, 0xFFFF for none, + UTF-8).
public struct DeliveryLogBatch: Sendable, Hashable {
    public static let version: UInt8 = 3
    /// Filter bits per event at least (the filter's size is rounded up to a
    /// power of two): with 7 probes at most about 1 % false positives.
    static let bitsPerEvent = 10
    static let probes = 7
    private static let noDetail = UInt16.max

    public var filter: [UInt8]
    public var events: [UInt8]

    public init(filter: [UInt8], events: [UInt8]) {
        self.filter = filter
        self.events = events
    }

    public init(_ events: some Collection<DeliveryEvent>) {
        // Packed from contiguous storage: the generic collection's iterator
        // is not specialized across modules and costs more than the packing.
        self = events.withContiguousElements(Self.init(packing:))
    }

    private init(packing events: UnsafeBufferPointer<DeliveryEvent>) {
        // A power of two, so that a probe's bit is a mask, not a division.
        let wanted = max(64, events.count * Self.bitsPerEvent)
        let bits = 1 << (Int.bitWidth - (wanted - 1).leadingZeroBitCount)
        var filter = [UInt8](repeating: 0, count: bits / 8)
        filter.withUnsafeMutableBufferPointer { filter in
            for event in events {
                Self.probe(event.notificationID, bits: bits) { filter[$0 >> 3] |= 1 << UInt8($0 & 7) }
            }
        }
        // Each distinct detail and app once, numbered.
        var details = Numbering<String>()
        var apps = Numbering<AppNumber>()
        var detailNumbers = [Int](repeating: 0, count: events.count)
        var appNumbers = [Int](repeating: 0, count: events.count)
        // Each event's time as written: the difference from the one before.
        var steps = [UInt64](repeating: 0, count: events.count)
        let base = events.first.map { Self.millis($0.at) } ?? 0
        // Sized first, then written in place.
        var size = 1 + 8 + Self.varintLength(UInt64(events.count))
        var previous = base
        for index in events.indices {
            let millis = Self.millis(events[index].at)
            steps[index] = Self.zigzag(millis &- previous)
            previous = millis
            detailNumbers[index] = details.number(of: events[index].detail)
            let app = events[index].appNumber
            appNumbers[index] = app == .none ? 0 : apps.number(of: app)
            size += 16 + Self.varintLength(steps[index]) + 1
            size += Self.varintLength(UInt64(detailNumbers[index])) + Self.varintLength(UInt64(appNumbers[index]))
        }
        // The apps' names, once per batch.
        let appNames = apps.keys.map(\.bundleID)
        size += Self.packedSize(details.keys) + Self.packedSize(appNames)
        let packed = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            var out = Writer(rest: UnsafeMutableRawBufferPointer(buffer))
            out.write(Self.version)
            out.write(base)
            out.write(varint: UInt64(events.count))
            Self.write(details.keys, to: &out)
            Self.write(appNames, to: &out)
            for index in events.indices {
                withUnsafeBytes(of: events[index].notificationID.uuid) { out.write($0) }
                out.write(varint: steps[index])
                out.write(events[index].kind.code)
                out.write(varint: UInt64(detailNumbers[index]))
                out.write(varint: UInt64(appNumbers[index]))
            }
            precondition(out.rest.isEmpty, "delivery log batch sized wrongly")
            count = size
        }
        self.init(filter: filter, events: packed)
    }

    /// A batch's distinct details (or apps), numbered from 1 in the order
    /// first met (0: none). An event's is usually its predecessor's, else
    /// looked up.
    private struct Numbering<Key: Hashable> {
        private(set) var keys: [Key] = []
        private var numbers: [Key: Int] = [:]
        private var last: (key: Key, number: Int)?

        mutating func number(of key: Key?) -> Int {
            guard let key else { return 0 }
            if let last, last.key == key { return last.number }
            let number: Int
            if let known = numbers[key] {
                number = known
            } else {
                keys.append(key)
                number = keys.count
                numbers[key] = number
            }
            last = (key, number)
            return number
        }
    }

    /// A table of strings in a batch: the count, then each string's length and UTF-8.
    private static func packedSize(_ strings: [String]) -> Int {
        strings.reduce(varintLength(UInt64(strings.count))) {
            let length = detailLength($1)
            return $0 + varintLength(UInt64(length)) + length
        }
    }

    private static func write(_ strings: [String], to out: inout Writer) {
        out.write(varint: UInt64(strings.count))
        for string in strings {
            let length = detailLength(string)
            out.write(varint: UInt64(length))
            out.write(utf8: string, prefix: length)
        }
    }

    /// The kinds by their code since version 2 (`DeliveryEvent.Kind.code`).
    private static let kindCodes: [DeliveryEvent.Kind] = {
        let table = DeliveryEvent.Kind.allCases.sorted { $0.code < $1.code }
        precondition(table.indices.allSatisfy { Int(table[$0].code) == $0 }, "kind codes must be 0, 1, 2, ... with no gap")
        return table
    }()

    private static func millis(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    /// Small differences either way as small numbers: 0, -1, 1, -2, ... as 0, 1, 2, 3, ...
    private static func zigzag(_ value: Int64) -> UInt64 {
        UInt64(bitPattern: (value << 1) ^ (value >> 63))
    }

    private static func unzigzag(_ value: UInt64) -> Int64 {
        Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
    }

    /// Bytes of `value` as a LEB128 varint.
    private static func varintLength(_ value: UInt64) -> Int {
        value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7
    }

    /// The bytes of `detail` that are packed: at most 65,534, as many as
    /// version 1's 16-bit length could say (0xFFFF meant none). Version 2's
    /// lengths have no such bound; it keeps the cut so that a detail reads
    /// back the same whichever version wrote it.
    private static func detailLength(_ detail: String) -> Int {
        min(detail.utf8.count, Int(noDetail - 1))
    }

    /// Writes into memory sized beforehand.
    private struct Writer {
        var rest: UnsafeMutableRawBufferPointer

        mutating func write(_ bytes: UnsafeRawBufferPointer) {
            rest.copyMemory(from: bytes)
            rest = UnsafeMutableRawBufferPointer(rebasing: rest[bytes.count...])
        }

        /// Big-endian.
        mutating func write<T: FixedWidthInteger>(_ value: T) {
            rest.storeBytes(of: value.bigEndian, as: T.self)
            rest = UnsafeMutableRawBufferPointer(rebasing: rest[MemoryLayout<T>.size...])
        }

        /// LEB128: seven bits a byte, low bits first, the high bit set on all but the last.
        mutating func write(varint value: UInt64) {
            var value = value
            while value >= 0x80 {
                write(UInt8(truncatingIfNeeded: value) | 0x80)
                value >>= 7
            }
            write(UInt8(value))
        }

        mutating func write(utf8 text: String, prefix: Int) {
            var text = text
            text.withUTF8 { write(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer($0).prefix(prefix))) }
        }
    }

    /// False when the batch certainly holds no event of `id`.
    public static func filter(_ filter: [UInt8], mayContain id: UUID) -> Bool {
        let bits = filter.count * 8
        guard bits > 0 else { return false }
        var all = true
        probe(id, bits: bits) { bit in
            if filter[bit >> 3] & (1 << UInt8(bit & 7)) == 0 { all = false }
        }
        return all
    }

    /// Unpacks the events.
    public func decoded() throws -> [DeliveryEvent] {
        var reader = Reader(bytes: events)
        switch try reader.byte() {
        case 1: return try Self.decodedVersion1(&reader)
        case 2: return try Self.decoded(&reader, withApps: false)
        case 3: return try Self.decoded(&reader, withApps: true)
        default: throw StoreError(.corrupt, "delivery log batch of an unknown version")
        }
    }

    /// Versions 2 and 3 (`withApps`).
    private static func decoded(_ reader: inout Reader, withApps: Bool) throws -> [DeliveryEvent] {
        var millis = Int64(bitPattern: try reader.integer(8))
        let eventCount = try reader.varint()
        let details = try strings(&reader)
        let apps = withApps ? try strings(&reader).map(AppNumber.init) : []
        // Each event takes 19 bytes at least (20 with its app).
        guard eventCount <= UInt64(reader.remaining / (withApps ? 20 : 19)) else { throw StoreError(.corrupt, "delivery log batch is truncated") }
        var result: [DeliveryEvent] = []
        result.reserveCapacity(Int(eventCount))
        for _ in 0..<eventCount {
            let id = try reader.bytes(16).withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
            millis &+= unzigzag(try reader.varint())
            let code = Int(try reader.byte())
            guard code < kindCodes.count else { throw StoreError(.corrupt, "delivery log event of unknown kind \(code)") }
            let detail = try reader.varint()
            guard detail <= UInt64(details.count) else { throw StoreError(.corrupt, "delivery log event names detail \(detail) of \(details.count)") }
            let app = withApps ? try reader.varint() : 0
            guard app <= UInt64(apps.count) else { throw StoreError(.corrupt, "delivery log event names app \(app) of \(apps.count)") }
            result.append(
                DeliveryEvent(
                    notificationID: id, app: app == 0 ? nil : apps[Int(app) - 1], kind: kindCodes[code],
                    at: Date(timeIntervalSince1970: Double(millis) / 1000), detail: detail == 0 ? nil : details[Int(detail) - 1]))
        }
        guard reader.atEnd else { throw StoreError(.corrupt, "delivery log batch has bytes after its last event") }
        return result
    }

    /// A table of strings (`packedSize`, `write`), read.
    private static func strings(_ reader: inout Reader) throws -> [String] {
        let count = try reader.varint()
        // Each string takes a byte at least: a count beyond the bytes left is damage.
        guard count <= UInt64(reader.remaining) else { throw StoreError(.corrupt, "delivery log batch is truncated") }
        var strings: [String] = []
        strings.reserveCapacity(Int(count))
        for _ in 0..<count {
            let length = try reader.varint()
            guard length <= UInt64(reader.remaining) else { throw StoreError(.corrupt, "delivery log batch is truncated") }
            strings.append(String(decoding: try reader.bytes(Int(length)), as: UTF8.self))
        }
        return strings
    }

    private static func decodedVersion1(_ reader: inout Reader) throws -> [DeliveryEvent] {
        var result: [DeliveryEvent] = []
        while !reader.atEnd {
            let id = try reader.bytes(16).withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
            let millis = Int64(bitPattern: try reader.integer(8))
            let kindText = String(decoding: try reader.bytes(Int(try reader.byte())), as: UTF8.self)
            guard let kind = DeliveryEvent.Kind(rawValue: kindText) else {
                throw StoreError(.corrupt, "delivery log event of unknown kind \(kindText)")
            }
            let detailLength = UInt16(try reader.integer(2))
            let detail = detailLength == noDetail ? nil : String(decoding: try reader.bytes(Int(detailLength)), as: UTF8.self)
            result.append(DeliveryEvent(notificationID: id, app: nil, kind: kind, at: Date(timeIntervalSince1970: Double(millis) / 1000), detail: detail))
        }
        return result
    }

    /// The filter bits of `id`: double hashing over a fixed mix of its 16
    /// bytes (the same in every process, unlike `Hasher`), so ids a
    /// provider chose by counting spread as well as random ones.
    private static func probe(_ id: UUID, bits: Int, _ body: (Int) -> Void) {
        let (high, low) = withUnsafeBytes(of: id.uuid) { ($0.loadUnaligned(fromByteOffset: 0, as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
        let first = mix(high ^ mix(low))
        let step = mix(low &+ 0x9E37_79B9_7F4A_7C15 ^ first) | 1
        let modulus = UInt64(bits)
        // Batches written since filters are a power of two take a mask;
        // older ones, of any size, the remainder (the same bit for a power of two).
        let mask = modulus & (modulus - 1) == 0 ? modulus - 1 : nil
        for round in 0..<UInt64(probes) {
            let hash = first &+ round &* step
            body(Int(mask.map { hash & $0 } ?? hash % modulus))
        }
    }

    /// The splitmix64 finaliser.
    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        var atEnd: Bool { offset == bytes.count }
        var remaining: Int { bytes.count - offset }

        mutating func bytes(_ count: Int) throws -> ArraySlice<UInt8> {
            guard count <= bytes.count - offset else { throw StoreError(.corrupt, "delivery log batch is truncated") }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }

        mutating func byte() throws -> UInt8 { try bytes(1).first! }

        mutating func integer(_ width: Int) throws -> UInt64 {
            try bytes(width).reduce(0) { $0 << 8 | UInt64($1) }
        }

        /// A LEB128 varint of at most ten bytes.
        mutating func varint() throws -> UInt64 {
            var value: UInt64 = 0
            for shift in stride(from: 0, to: 70, by: 7) {
                let byte = try self.byte()
                value |= UInt64(byte & 0x7F) << UInt64(shift)
                if byte < 0x80 { return value }
            }
            throw StoreError(.corrupt, "delivery log batch has an overlong number")
        }
    }
}
