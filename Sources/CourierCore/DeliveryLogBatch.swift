import Foundation

/// The delivery log's storage form: the events of one written batch packed
/// into one record, with a Bloom filter of the batch's notification ids.
/// Appending is then one sequential record per batch instead of a row and a
/// random index entry per event (the index's page writes were most of the
/// log's cost); a lookup by id reads every batch's filter and unpacks only
/// the batches that may hold the id.
///
/// Events: a version byte, then per event the id (16 bytes), the time in
/// milliseconds (Int64, big-endian), the kind (length byte + UTF-8) and the
/// detail (UInt16 length, 0xFFFF for none, + UTF-8).
public struct DeliveryLogBatch: Sendable, Hashable {
    public static let version: UInt8 = 1
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
        // Sized first, then written in place.
        var size = 1
        for event in events {
            size += 16 + 8 + 1 + event.kind.rawValue.utf8.count + 2 + (event.detail.map(Self.detailLength) ?? 0)
        }
        let packed = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            var out = Writer(rest: UnsafeMutableRawBufferPointer(buffer))
            out.write(Self.version)
            for index in events.indices {
                withUnsafeBytes(of: events[index].notificationID.uuid) { out.write($0) }
                out.write(Int64((events[index].at.timeIntervalSince1970 * 1000).rounded()))
                let kind = events[index].kind.rawValue
                out.write(UInt8(kind.utf8.count))
                out.write(utf8: kind, prefix: kind.utf8.count)
                if let detail = events[index].detail {
                    let length = Self.detailLength(detail)
                    out.write(UInt16(length))
                    out.write(utf8: detail, prefix: length)
                } else {
                    out.write(Self.noDetail)
                }
            }
            precondition(out.rest.isEmpty, "delivery log batch sized wrongly")
            count = size
        }
        self.init(filter: filter, events: packed)
    }

    /// The bytes of `detail` that are packed: as many as its 16-bit length
    /// can say (0xFFFF means none).
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
        guard try reader.byte() == Self.version else { throw StoreError(.corrupt, "delivery log batch of an unknown version") }
        var result: [DeliveryEvent] = []
        while !reader.atEnd {
            let id = try reader.bytes(16).withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
            let millis = Int64(bitPattern: try reader.integer(8))
            let kindText = String(decoding: try reader.bytes(Int(try reader.byte())), as: UTF8.self)
            guard let kind = DeliveryEvent.Kind(rawValue: kindText) else {
                throw StoreError(.corrupt, "delivery log event of unknown kind \(kindText)")
            }
            let detailLength = UInt16(try reader.integer(2))
            let detail = detailLength == Self.noDetail ? nil : String(decoding: try reader.bytes(Int(detailLength)), as: UTF8.self)
            result.append(DeliveryEvent(notificationID: id, kind: kind, at: Date(timeIntervalSince1970: Double(millis) / 1000), detail: detail))
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

        mutating func bytes(_ count: Int) throws -> ArraySlice<UInt8> {
            guard count <= bytes.count - offset else { throw StoreError(.corrupt, "delivery log batch is truncated") }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }

        mutating func byte() throws -> UInt8 { try bytes(1).first! }

        mutating func integer(_ width: Int) throws -> UInt64 {
            try bytes(width).reduce(0) { $0 << 8 | UInt64($1) }
        }
    }
}
