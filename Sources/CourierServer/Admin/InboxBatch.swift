import CourierCore
import CourierWire
import Foundation
import NIOCore

/// Inbox entries encoded as they are decided, to be written into the
/// inbox together (`NotificationInbox.record(_:)`): a binary connection
/// keeps one per read. Each record is written at once in `InboxRing`'s
/// byte form, so nothing of its notification (token, payload, strings)
/// outlives its frame, and the inbox's lock copies bytes, one entry after
/// another, with no reference counted.
struct InboxBatch {
    /// Where one entry's bytes are in `bytes`, and what the rings need
    /// without reading them.
    struct Entry {
        var offset: Int
        var size: Int
        var receivedAt: Date
        /// Its team, as a position in `teams`.
        var team: Int
    }

    /// The entries' bytes, one after another; allocated at the first.
    private(set) var bytes: ByteBuffer?
    private(set) var entries: [Entry] = []
    /// The teams of the entries (a connection's are mostly one).
    private(set) var teams: [String?] = []

    /// A batch this large is given back to the allocator once written
    /// (a read of many frames may grow it; kept below that, as most are).
    private static let keptCapacity = 256 * 1024

    var isEmpty: Bool { entries.isEmpty }

    /// Encodes `record` after the entries so far.
    mutating func append(_ record: InboxRecord) {
        let size = InboxRing.size(of: record)
        let offset = room(for: size)
        InboxRing.encode(record, size: size, into: &bytes!)
        entries.append(Entry(offset: offset, size: size, receivedAt: record.receivedAt, team: team(record.teamID)))
    }

    /// Encodes a binary notification's entry after the entries so far,
    /// from its frame and its connection's `source` (the same bytes as
    /// the `InboxRecord` the gateway would make of them).
    mutating func append(
        _ frame: BinaryNotificationFrame, id: UUID, source: InboxSource, outcome: InboxOutcome, receivedAt: Date, environment: Environment
    ) {
        let size = InboxRing.size(of: frame, source: source, outcome: outcome)
        let offset = room(for: size)
        InboxRing.encode(frame, id: id, source: source, outcome: outcome, receivedAt: receivedAt, environment: environment, size: size, into: &bytes!)
        entries.append(Entry(offset: offset, size: size, receivedAt: receivedAt, team: team(source.teamID)))
    }

    /// Where the next entry's `size` bytes start (the storage allocated at the first).
    private mutating func room(for size: Int) -> Int {
        if bytes == nil { bytes = ByteBufferAllocator().buffer(capacity: max(size, 1024)) }
        return bytes!.writerIndex
    }

    /// `teamID`'s position in `teams`, added when new.
    private mutating func team(_ teamID: String?) -> Int {
        if let last = teams.indices.last, teams[last] == teamID { return last }
        if let known = teams.firstIndex(of: teamID) { return known }
        teams.append(teamID)
        return teams.count - 1
    }

    /// Forgets the entries (once written), keeping the storage unless it grew large.
    mutating func removeAll() {
        entries.removeAll(keepingCapacity: true)
        teams.removeAll(keepingCapacity: true)
        if let capacity = bytes?.capacity, capacity > Self.keptCapacity {
            bytes = nil
        } else {
            bytes?.clear()
        }
    }
}
