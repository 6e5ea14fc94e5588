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
    /// Filter bits per event: with 7 probes about 1 % false positives.
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
        let bits = max(64, (events.count * Self.bitsPerEvent + 63) / 64 * 64)
        var filter = [UInt8](repeating: 0, count: bits / 8)
        var packed: [UInt8] = [Self.version]
        packed.reserveCapacity(1 + events.count * 40)
        filter.withUnsafeMutableBufferPointer { filter in
            for event in events {
                Self.probe(event.notificationID, bits: bits) { filter[$0 >> 3] |= 1 << UInt8($0 & 7) }
            }
        }
        for event in events {
            withUnsafeBytes(of: event.notificationID.uuid) { packed.append(contentsOf: $0) }
            let millis = Int64((event.at.timeIntervalSince1970 * 1000).rounded())
            withUnsafeBytes(of: millis.bigEndian) { packed.append(contentsOf: $0) }
            var kind = event.kind.rawValue
            kind.withUTF8 { kind in
                packed.append(UInt8(kind.count))
                packed.append(contentsOf: kind)
            }
            if var detail = event.detail {
                detail.withUTF8 { detail in
                    let bytes = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(detail).prefix(Int(Self.noDetail - 1)))
                    withUnsafeBytes(of: UInt16(bytes.count).bigEndian) { packed.append(contentsOf: $0) }
                    packed.append(contentsOf: bytes)
                }
            } else {
                withUnsafeBytes(of: Self.noDetail.bigEndian) { packed.append(contentsOf: $0) }
            }
        }
        self.init(filter: filter, events: packed)
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
        for round in 0..<UInt64(probes) {
            body(Int((first &+ round &* step) % modulus))
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
