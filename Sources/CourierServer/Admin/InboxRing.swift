import CourierCore
import CourierWire
import Foundation
import NIOCore
import NIOHPACK

/// What the inbox records of a notification, before it is written: the
/// parts as the interface has them (nothing is copied until `write`).
struct InboxRecord {
    var receivedAt: Date
    var interface: ProviderInterface
    var environment: Environment
    var id: InboxID
    var token: [UInt8]?
    var topic: String?
    var provider: String?
    var teamID: String?
    /// The provider connection's peer address.
    var connection: String? = nil
    var received: InboxHeaders
    var payload: [UInt8]
    var outcome: InboxOutcome
    var fault: String?
    /// The notification's `apns-unique-id` (sandbox only).
    var uniqueID: UUID? = nil
    /// The node that received it (several nodes): written only for
    /// another node's entry; read back as this node for its own.
    var node: String? = nil
}

/// Who sent a connection's notifications and for which topic, as the
/// inbox records them: the same for every frame of a binary connection,
/// so written as bytes once (`encoded`) and copied into each entry.
final class InboxSource: Sendable {
    let topic: String?
    let provider: String?
    let teamID: String?
    let connection: String?
    /// The four as `InboxRing` writes them, one after another.
    let encoded: [UInt8]

    init(topic: String?, provider: String?, teamID: String?, connection: String?) {
        self.topic = topic
        self.provider = provider
        self.teamID = teamID
        self.connection = connection
        encoded = InboxRing.encoded(strings: [topic, provider, teamID, connection])
    }
}

/// One team's inbox entries as bytes (`InboxRings` keeps one per team), in
/// fixed chunks allocated as the ring first fills and reused after:
/// recording one copies its parts into the current chunk (no allocation
/// once the ring is full, no reference kept to the notification's arrays);
/// a chunk reused drops the entries it held, the oldest. Entries are made
/// into `InboxEntry` values only when they are read. Sequences are given by
/// the caller, increasing: they are the inbox's, across every team's ring.
struct InboxRing {
    /// One entry: where its bytes are.
    private struct Slot {
        var sequence: UInt64
        var chunk: Int
        var offset: Int
        var receivedAt: Date
    }

    static let chunkSize = 64 * 1024
    /// Header blocks and payloads beyond these are cut (a chunk holds any entry).
    static let maxPayload = 16 * 1024
    static let maxHeaderBytes = 16 * 1024

    /// The chunks allocated so far: one at first, `chunkLimit` at most.
    private var chunks: [ByteBuffer]
    private let chunkLimit: Int
    private var current = 0
    private var slots = CircularBuffer<Slot>()
    /// Entries kept at most.
    let capacity: Int
    /// The node the entries recorded here were received by (nil: one node).
    let node: String?

    /// `capacity` entries at most, in about `capacity` × 512 bytes (at
    /// least two chunks), allocated a chunk at a time as they are needed.
    init(capacity: Int, node: String? = nil) {
        self.capacity = capacity
        self.node = node
        chunkLimit = max(2, (capacity * 512 + Self.chunkSize - 1) / Self.chunkSize)
        chunks = [ByteBufferAllocator().buffer(capacity: Self.chunkSize)]
    }

    var count: Int { slots.count }
    /// The newest entry's sequence, if there is one.
    var lastSequence: UInt64? { slots.last?.sequence }
    /// The oldest entry's sequence, if there is one.
    var firstSequence: UInt64? { slots.first?.sequence }

    /// Writes one entry under `sequence` (greater than any written before).
    mutating func write(_ record: InboxRecord, sequence: UInt64) {
        let size = Self.size(of: record)
        let (chunk, offset) = room(for: size)
        Self.encode(record, size: size, into: &chunks[chunk])
        slots.append(Slot(sequence: sequence, chunk: chunk, offset: offset, receivedAt: record.receivedAt))
    }

    /// Writes one entry encoded before (`InboxBatch`) under `sequence`.
    mutating func write(encoded bytes: UnsafeRawBufferPointer, receivedAt: Date, sequence: UInt64) {
        let (chunk, offset) = room(for: bytes.count)
        chunks[chunk].writeBytes(bytes)
        slots.append(Slot(sequence: sequence, chunk: chunk, offset: offset, receivedAt: receivedAt))
    }

    /// The encoded form of the entries written here, for the other nodes'
    /// inboxes (`write(shared:from:)`); its version. A node reads only the
    /// entries of its own version.
    static let sharedFormat = 1

    /// The newest entry's bytes as written (its node left out).
    var lastEncoded: [UInt8]? {
        slots.isEmpty ? nil : encoded(at: slots.index(before: slots.endIndex))
    }

    /// The bytes of the entry at `index` of the slots, as written.
    private func encoded(at index: CircularBuffer<Slot>.Index) -> [UInt8]? {
        let slot = slots[index]
        let next = slots.index(after: index)
        // Entries follow one another in a chunk: this one ends where the next one starts, or at the chunk's end.
        let end = next != slots.endIndex && slots[next].chunk == slot.chunk ? slots[next].offset : chunks[slot.chunk].writerIndex
        return chunks[slot.chunk].getBytes(at: slot.offset, length: end - slot.offset)
    }

    /// Whether `bytes` can be an entry another node wrote (`lastEncoded`
    /// there), to be written here as from `node`.
    static func isShared(_ bytes: [UInt8], from node: String) -> Bool {
        // Ends with the node, none (written as 0xFFFF) on the node that received it.
        bytes.count >= 10 && bytes.suffix(2) == [0xFF, 0xFF] && bytes.count + string(node) - 2 <= chunkSize
    }

    /// Writes an entry another node received (`lastEncoded` there, and
    /// `isShared`) under `sequence`.
    mutating func write(shared bytes: [UInt8], from node: String, sequence: UInt64) {
        precondition(Self.isShared(bytes, from: node), "not an entry's bytes")
        let size = bytes.count + Self.string(node) - 2
        let receivedAt = Self.receivedAt(of: bytes)!
        let (chunk, offset) = room(for: size)
        chunks[chunk].writeWithUnsafeMutableBytes(minimumWritableBytes: size) { raw in
            var out = RawWriter(base: raw.baseAddress!)
            bytes.withUnsafeBytes { out.bytes(UnsafeRawBufferPointer(rebasing: $0.dropLast(2))) }
            out.string(node)
            return out.offset
        }
        slots.append(Slot(sequence: sequence, chunk: chunk, offset: offset, receivedAt: receivedAt))
    }

    /// When an encoded entry was received (its first field).
    static func receivedAt(of bytes: [UInt8]) -> Date? {
        guard bytes.count >= 8 else { return nil }
        return Date(timeIntervalSince1970: Double(bitPattern: bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }))
    }

    /// The team of an encoded entry (`lastEncoded`); nil for none, or for
    /// bytes too short to hold one.
    static func teamID(of bytes: [UInt8]) -> String? {
        var buffer = ByteBuffer(bytes: bytes)
        // receivedAt, interface, environment; the id; the token; topic and provider.
        guard buffer.readSlice(length: 10) != nil, let idKind = buffer.readInteger(as: UInt8.self) else { return nil }
        if idKind == 1 {
            guard buffer.readSlice(length: 16) != nil else { return nil }
        } else {
            _ = readString(&buffer)
        }
        if let length = buffer.readInteger(as: UInt16.self), length != .max { guard buffer.readSlice(length: Int(length)) != nil else { return nil } }
        _ = readString(&buffer)
        _ = readString(&buffer)
        return readString(&buffer)
    }

    /// Where an entry of `size` bytes goes: the current chunk, or the next
    /// one when it has no room (a new chunk while the ring may grow, else
    /// the oldest, whose entries go).
    private mutating func room(for size: Int) -> (chunk: Int, offset: Int) {
        if slots.count == capacity { slots.removeFirst() }
        if chunks[current].writerIndex + size > Self.chunkSize {
            if current + 1 == chunks.count, chunks.count < chunkLimit {
                chunks.append(ByteBufferAllocator().buffer(capacity: Self.chunkSize))
                current += 1
            } else {
                current = (current + 1) % chunks.count
                while let first = slots.first, first.chunk == current { slots.removeFirst() }
                chunks[current].clear()
            }
        }
        return (current, chunks[current].writerIndex)
    }

    /// Drops entries received before `cutoff`.
    mutating func expire(before cutoff: Date) {
        while let first = slots.first, first.receivedAt < cutoff { slots.removeFirst() }
    }

    mutating func removeAll() {
        slots.removeAll(keepingCapacity: true)
    }

    /// Drops the entries received at `cutoff` or before (wherever they are:
    /// another node's come late).
    mutating func remove(receivedUpTo cutoff: Date) {
        guard slots.contains(where: { $0.receivedAt <= cutoff }) else { return }
        var kept = CircularBuffer<Slot>(initialCapacity: slots.count)
        for slot in slots where slot.receivedAt > cutoff { kept.append(slot) }
        slots = kept
    }

    /// The entries after `after`, oldest first (or newest first), while
    /// `body` returns true. The slots are in sequence order, so the first
    /// one after `after` is found by halving.
    func forEach(after: UInt64 = 0, newestFirst: Bool = false, _ body: (InboxEntry) -> Bool) {
        if newestFirst {
            var index = slots.endIndex
            while index != slots.startIndex {
                index = slots.index(before: index)
                let slot = slots[index]
                guard slot.sequence > after, body(entry(slot)) else { return }
            }
            return
        }
        let low = position(after: after)
        guard low < slots.count else { return }
        var index = slots.index(slots.startIndex, offsetBy: low)
        while index != slots.endIndex {
            guard body(entry(slots[index])) else { return }
            index = slots.index(after: index)
        }
    }

    /// The newest entry.
    var last: InboxEntry? { slots.last.map(entry) }

    /// The position (0 the oldest, `count` past the newest) of the first
    /// entry after sequence `after`: the slots are in sequence order.
    func position(after: UInt64) -> Int {
        var low = 0
        var high = slots.count
        while low < high {
            let middle = (low + high) / 2
            if sequence(at: middle) <= after { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The sequence of the entry at `position` (below `count`).
    func sequence(at position: Int) -> UInt64 {
        slots[slots.index(slots.startIndex, offsetBy: position)].sequence
    }

    /// The entry at `position` (below `count`).
    func entry(at position: Int) -> InboxEntry {
        entry(slots[slots.index(slots.startIndex, offsetBy: position)])
    }

    /// The bytes of the entry at `position` as written (`lastEncoded`),
    /// when this node received it (not another).
    func ownEncoded(at position: Int) -> [UInt8]? {
        // Another node's entry ends with its node; this node's with none (0xFFFF).
        guard let bytes = encoded(at: slots.index(slots.startIndex, offsetBy: position)), bytes.suffix(2) == [0xFF, 0xFF] else { return nil }
        return bytes
    }

    private func entry(_ slot: Slot) -> InboxEntry {
        var buffer = chunks[slot.chunk]
        buffer.moveReaderIndex(to: slot.offset)
        return Self.decode(&buffer, sequence: slot.sequence, localNode: node)
    }

    // MARK: Bytes

    /// The exact size `encode` writes.
    static func size(of record: InboxRecord) -> Int {
        var size = headSize(record.id)
        size += 2 + min(record.token?.count ?? 0, 0xFFFE)
        size += string(record.topic) + string(record.provider) + string(record.teamID) + string(record.connection)
        switch record.received {
        case .http2(let headers):
            size += 1 + 2
            recordedHeaders(headers) { name, value in size += string(name) + string(value) }
        case .binary: size += binaryFieldsSize
        case .malformed(_, let detail): size += 1 + 4 + string(detail)
        }
        size += 4 + min(record.payload.count, maxPayload)
        size += tailSize(outcome: record.outcome, fault: record.fault, uniqueID: record.uniqueID, node: record.node)
        return size
    }

    /// The size of what `RawWriter.head` writes.
    private static func headSize(_ id: InboxID) -> Int {
        switch id {
        case .uuid: uuidHeadSize
        case .text(let text): 8 + 1 + 1 + 1 + string(text)
        }
    }

    /// The size of what `RawWriter.head` writes for an id that is a UUID.
    private static let uuidHeadSize = 8 + 1 + 1 + 1 + 16

    /// The size of what `RawWriter.binary` writes.
    private static let binaryFieldsSize = 1 + 1 + 4 + 5 + 2

    /// The size of what `RawWriter.tail` writes.
    private static func tailSize(outcome: InboxOutcome, fault: String?, uniqueID: UUID?, node: String?) -> Int {
        var size = 0
        switch outcome {
        case .accepted: size += 1
        case .refused(_, let reason): size += 1 + 5 + string(reason)
        }
        return size + string(fault) + 1 + (uniqueID == nil ? 0 : 16) + string(node)
    }

    /// The headers as recorded, in order: the authorization header's
    /// credential left out, and none once `maxHeaderBytes` would be passed.
    private static func recordedHeaders(_ headers: HPACKHeaders, _ body: (String, String) -> Void) {
        var budget = maxHeaderBytes
        for header in headers {
            let value = header.name == "authorization" ? InboxHeaders.redacted(header.value) : header.value
            let cost = string(header.name) + string(value)
            guard cost <= budget else { return }
            budget -= cost
            body(header.name, value)
        }
    }

    /// `strings` as `encode` writes them, one after another.
    static func encoded(strings: [String?]) -> [UInt8] {
        let size = strings.reduce(0) { $0 + string($1) }
        return [UInt8](unsafeUninitializedCapacity: size) { raw, count in
            var out = RawWriter(base: UnsafeMutableRawPointer(raw.baseAddress!))
            for text in strings { out.string(text) }
            count = out.offset
        }
    }

    /// A string's size: a 16-bit length (0xFFFF: none) and its UTF-8, cut at 0xFFFE bytes.
    private static func string(_ text: String?) -> Int {
        2 + min(text?.utf8.count ?? 0, 0xFFFE)
    }

    private static func readString(_ buffer: inout ByteBuffer) -> String? {
        guard let length = buffer.readInteger(as: UInt16.self), length != .max else { return nil }
        return buffer.readString(length: Int(length))
    }

    /// Writes the entry's `size` bytes in one go (one uniqueness check of
    /// the buffer, then plain stores), in the byte order `decode` reads.
    static func encode(_ record: InboxRecord, size: Int, into buffer: inout ByteBuffer) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { raw in
            var out = RawWriter(base: raw.baseAddress!)
            out.head(receivedAt: record.receivedAt, interface: record.interface, environment: record.environment, id: record.id)
            if let token = record.token {
                token.withUnsafeBytes { out.token($0) }
            } else {
                out.integer(UInt16.max)
            }
            out.string(record.topic)
            out.string(record.provider)
            out.string(record.teamID)
            out.string(record.connection)
            switch record.received {
            case .http2(let headers):
                out.integer(UInt8(0))
                let countAt = out.offset
                out.integer(UInt16(0))
                var written: UInt16 = 0
                recordedHeaders(headers) { name, value in
                    out.string(name)
                    out.string(value)
                    written += 1
                }
                out.integer(written, at: countAt)
            case .binary(let fields):
                out.binary(fields)
            case .malformed(let identifier, let detail):
                out.integer(UInt8(2))
                out.integer(identifier)
                out.string(detail)
            }
            record.payload.withUnsafeBytes { out.payload($0) }
            out.tail(outcome: record.outcome, fault: record.fault, uniqueID: record.uniqueID, node: record.node)
            assert(out.offset == size, "size(of:) and encode disagree")
            return out.offset
        }
    }

    /// The size `encode(_:id:source:outcome:receivedAt:environment:into:)` writes.
    static func size(of frame: BinaryNotificationFrame, source: InboxSource, outcome: InboxOutcome) -> Int {
        uuidHeadSize + 2 + min(frame.token.readableBytes, 0xFFFE) + source.encoded.count + binaryFieldsSize
            + 4 + min(frame.payload.readableBytes, maxPayload) + tailSize(outcome: outcome, fault: nil, uniqueID: nil, node: nil)
    }

    /// A binary notification's entry, written from its frame and its
    /// connection's `source` as `encode` writes the record the gateway
    /// would make of them (`InboxRecord` with `.binary` fields), without
    /// making one.
    static func encode(
        _ frame: BinaryNotificationFrame, id: UUID, source: InboxSource, outcome: InboxOutcome, receivedAt: Date, environment: Environment, size: Int,
        into buffer: inout ByteBuffer
    ) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { raw in
            var out = RawWriter(base: raw.baseAddress!)
            out.head(receivedAt: receivedAt, interface: .binary, environment: environment, id: .uuid(id))
            frame.token.withUnsafeReadableBytes { out.token($0) }
            source.encoded.withUnsafeBytes { out.bytes($0) }
            out.binary(BinaryFrameFields(frame))
            frame.payload.withUnsafeReadableBytes { out.payload($0) }
            out.tail(outcome: outcome, fault: nil, uniqueID: nil, node: nil)
            assert(out.offset == size, "size(of:source:outcome:) and encode disagree")
            return out.offset
        }
    }

    /// Plain big-endian stores into memory known to have room.
    private struct RawWriter {
        let base: UnsafeMutableRawPointer
        var offset = 0

        mutating func integer<T: FixedWidthInteger>(_ value: T) {
            base.storeBytes(of: value.bigEndian, toByteOffset: offset, as: T.self)
            offset += MemoryLayout<T>.size
        }

        func integer<T: FixedWidthInteger>(_ value: T, at position: Int) {
            base.storeBytes(of: value.bigEndian, toByteOffset: position, as: T.self)
        }

        mutating func bytes(_ bytes: UnsafeRawBufferPointer) {
            guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
            (base + offset).copyMemory(from: source, byteCount: bytes.count)
            offset += bytes.count
        }

        /// When, where and under which id it was received.
        mutating func head(receivedAt: Date, interface: ProviderInterface, environment: Environment, id: InboxID) {
            integer(receivedAt.timeIntervalSince1970.bitPattern)
            integer(interface == .http2 ? UInt8(0) : 1)
            integer(environment == .production ? UInt8(0) : 1)
            switch id {
            case .uuid(let uuid):
                integer(UInt8(1))
                withUnsafeBytes(of: uuid.uuid) { bytes($0) }
            case .text(let text):
                integer(UInt8(0))
                string(text)
            }
        }

        /// A token: a 16-bit length and its bytes, cut at 0xFFFE.
        mutating func token(_ token: UnsafeRawBufferPointer) {
            let length = min(token.count, 0xFFFE)
            integer(UInt16(length))
            bytes(UnsafeRawBufferPointer(rebasing: token.prefix(length)))
        }

        /// A binary frame's fields.
        mutating func binary(_ fields: BinaryFrameFields) {
            integer(UInt8(1))
            integer(fields.command)
            integer(fields.identifier)
            integer(fields.expiry == nil ? UInt8(0) : 1)
            integer(fields.expiry ?? 0)
            integer(fields.priority == nil ? UInt8(0) : 1)
            integer(fields.priority ?? 0)
        }

        /// A payload: a 32-bit length and its bytes, cut at `maxPayload`.
        mutating func payload(_ payload: UnsafeRawBufferPointer) {
            let length = min(payload.count, maxPayload)
            integer(UInt32(length))
            bytes(UnsafeRawBufferPointer(rebasing: payload.prefix(length)))
        }

        /// The outcome, the fault rule, the unique id and the node.
        mutating func tail(outcome: InboxOutcome, fault: String?, uniqueID: UUID?, node: String?) {
            switch outcome {
            case .accepted:
                integer(UInt8(0))
            case .refused(let status, let reason):
                integer(UInt8(1))
                integer(status == nil ? UInt8(0) : 1)
                integer(Int32(status ?? 0))
                string(reason)
            }
            string(fault)
            if let uniqueID {
                integer(UInt8(1))
                withUnsafeBytes(of: uniqueID.uuid) { bytes($0) }
            } else {
                integer(UInt8(0))
            }
            string(node)
        }

        /// A 16-bit length (0xFFFF: none) and the UTF-8, cut at 0xFFFE bytes.
        mutating func string(_ text: String?) {
            guard var text else {
                integer(UInt16.max)
                return
            }
            text.withUTF8 { utf8 in
                let length = min(utf8.count, 0xFFFE)
                integer(UInt16(length))
                bytes(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8).prefix(length)))
            }
        }
    }

    /// What `encode` wrote (the buffer's reader at its start).
    private static func decode(_ buffer: inout ByteBuffer, sequence: UInt64, localNode: String?) -> InboxEntry {
        let receivedAt = Date(timeIntervalSince1970: Double(bitPattern: buffer.readInteger(as: UInt64.self) ?? 0))
        let interface: ProviderInterface = buffer.readInteger(as: UInt8.self) == 0 ? .http2 : .binary
        let environment: Environment = buffer.readInteger(as: UInt8.self) == 0 ? .production : .sandbox
        let id: InboxID
        if buffer.readInteger(as: UInt8.self) == 1, let bytes = buffer.readBytes(length: 16) {
            id = .uuid(bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) })
        } else {
            id = .text(readString(&buffer) ?? "")
        }
        var token: [UInt8]?
        if let length = buffer.readInteger(as: UInt16.self), length != .max { token = buffer.readBytes(length: Int(length)) }
        let topic = readString(&buffer)
        let provider = readString(&buffer)
        let teamID = readString(&buffer)
        let connection = readString(&buffer)
        let received: InboxHeaders
        switch buffer.readInteger(as: UInt8.self) {
        case 0:
            var headers = HPACKHeaders()
            for _ in 0..<(buffer.readInteger(as: UInt16.self) ?? 0) {
                headers.add(name: readString(&buffer) ?? "", value: readString(&buffer) ?? "")
            }
            received = .http2(headers)
        case 1:
            let command = buffer.readInteger(as: UInt8.self) ?? 0
            let identifier = buffer.readInteger(as: UInt32.self) ?? 0
            let hasExpiry = buffer.readInteger(as: UInt8.self) == 1
            let expiry = buffer.readInteger(as: UInt32.self) ?? 0
            let hasPriority = buffer.readInteger(as: UInt8.self) == 1
            let priority = buffer.readInteger(as: UInt8.self) ?? 0
            received = .binary(
                BinaryFrameFields(command: command, identifier: identifier, expiry: hasExpiry ? expiry : nil, priority: hasPriority ? priority : nil))
        default:
            let identifier = buffer.readInteger(as: UInt32.self) ?? 0
            received = .malformed(identifier: identifier, detail: readString(&buffer) ?? "")
        }
        let payload = buffer.readInteger(as: UInt32.self).flatMap { buffer.readBytes(length: Int($0)) } ?? []
        let outcome: InboxOutcome
        if buffer.readInteger(as: UInt8.self) == 1 {
            let hasStatus = buffer.readInteger(as: UInt8.self) == 1
            let status = Int(buffer.readInteger(as: Int32.self) ?? 0)
            outcome = .refused(status: hasStatus ? status : nil, reason: readString(&buffer) ?? "")
        } else {
            outcome = .accepted
        }
        let fault = readString(&buffer)
        var uniqueID: UUID?
        if buffer.readInteger(as: UInt8.self) == 1, let bytes = buffer.readBytes(length: 16) {
            uniqueID = bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
        }
        let node = readString(&buffer) ?? localNode
        return InboxEntry(
            sequence: sequence,
            record: InboxRecord(
                receivedAt: receivedAt, interface: interface, environment: environment, id: id, token: token, topic: topic, provider: provider,
                teamID: teamID, connection: connection, received: received, payload: payload, outcome: outcome, fault: fault, uniqueID: uniqueID, node: node))
    }
}
