import Foundation
import NIOCore

/// The inbox's entries, a ring (`InboxRing`) per team and one for the
/// requests no team was authenticated for: one team's notifications push
/// out only its own entries, never another team's. The sequences are one
/// series across the rings, so reading the rings merged gives the entries
/// in the order they were recorded.
struct InboxRings {
    /// One team's entries, and (several nodes, while sharing) those of
    /// them recorded here and not yet given to the other nodes.
    private struct Team {
        var ring: InboxRing
        var unshared = CircularBuffer<NotificationInbox.SharedEntry>()
        /// Entries dropped from `unshared` before they were taken.
        var unsharedDropped = 0
    }

    private var teams: [Team] = []
    /// Where each team's ring is in `teams`; nil: no team.
    private var indexOfTeam: [String?: Int] = [:]
    /// The last write's team and where its ring is: a connection's
    /// entries come from one team, so the lookup is mostly skipped.
    private var lastTeam: (id: String?, index: Int)?
    /// Entries a team's ring keeps at most.
    let capacity: Int
    /// This node, when there are several.
    let node: String?
    /// The newest entry's sequence, 0 before the first.
    private(set) var lastSequence: UInt64 = 0
    /// Several nodes: the entries recorded here are kept for the others
    /// (`takeUnshared`).
    private(set) var sharing = false

    init(capacity: Int, node: String? = nil) {
        self.capacity = capacity
        self.node = node
    }

    /// Entries held, every team's.
    var count: Int { teams.reduce(0) { $0 + $1.ring.count } }

    /// The oldest entry's sequence, every team's; nil when none is kept.
    var firstSequence: UInt64? { teams.compactMap(\.ring.firstSequence).min() }

    /// Writes one entry into its team's ring; its sequence.
    @discardableResult
    mutating func write(_ record: InboxRecord) -> UInt64 {
        let index = index(of: record.teamID)
        lastSequence += 1
        teams[index].ring.write(record, sequence: lastSequence)
        if sharing, let bytes = teams[index].ring.lastEncoded { keepUnshared(NotificationInbox.SharedEntry(sequence: lastSequence, bytes: bytes), in: index) }
        return lastSequence
    }

    /// Writes a batch's entries, in order, each into its team's ring.
    mutating func write(_ batch: InboxBatch) {
        guard let buffer = batch.bytes else { return }
        buffer.withUnsafeReadableBytes { raw in
            for entry in batch.entries {
                let index = index(of: batch.teams[entry.team])
                let bytes = UnsafeRawBufferPointer(rebasing: raw[entry.offset..<entry.offset + entry.size])
                lastSequence += 1
                teams[index].ring.write(encoded: bytes, receivedAt: entry.receivedAt, sequence: lastSequence)
                if sharing { keepUnshared(NotificationInbox.SharedEntry(sequence: lastSequence, bytes: Array(bytes)), in: index) }
            }
        }
    }

    /// Writes an entry another node received (`InboxRing.lastEncoded`
    /// there) into its team's ring; false when the bytes are not an entry's.
    mutating func write(shared bytes: [UInt8], from node: String) -> Bool {
        guard InboxRing.isShared(bytes, from: node), InboxRing.receivedAt(of: bytes) != nil else { return false }
        let index = index(of: InboxRing.teamID(of: bytes))
        lastSequence += 1
        teams[index].ring.write(shared: bytes, from: node, sequence: lastSequence)
        return true
    }

    private mutating func index(of team: String?) -> Int {
        if let last = lastTeam, last.id == team { return last.index }
        let index: Int
        if let known = indexOfTeam[team] {
            index = known
        } else {
            index = teams.count
            teams.append(Team(ring: InboxRing(capacity: capacity, node: node)))
            indexOfTeam[team] = index
        }
        lastTeam = (team, index)
        return index
    }

    /// The rings a read goes through: the team's alone when it names one.
    private func rings(of team: String?) -> [Int] {
        guard let team else { return Array(teams.indices) }
        return indexOfTeam[team].map { [$0] } ?? []
    }

    /// The entries after `after` (of `team` alone when given), oldest
    /// first, while `body` returns true.
    func forEach(after: UInt64 = 0, team: String? = nil, _ body: (InboxEntry) -> Bool) {
        let chosen = rings(of: team)
        if chosen.count == 1 { return teams[chosen[0]].ring.forEach(after: after, body) }
        // Each ring's next position; the smallest sequence among them goes first.
        var cursors = chosen.map { (ring: $0, position: teams[$0].ring.position(after: after)) }.filter { $0.position < teams[$0.ring].ring.count }
        while !cursors.isEmpty {
            var best = 0
            var bestSequence = UInt64.max
            for (at, cursor) in cursors.enumerated() {
                let sequence = teams[cursor.ring].ring.sequence(at: cursor.position)
                if sequence < bestSequence { (best, bestSequence) = (at, sequence) }
            }
            let cursor = cursors[best]
            guard body(teams[cursor.ring].ring.entry(at: cursor.position)) else { return }
            if cursor.position + 1 < teams[cursor.ring].ring.count { cursors[best].position += 1 } else { cursors.remove(at: best) }
        }
    }

    /// Every entry, newest first, while `body` returns true.
    func forEachNewestFirst(_ body: (InboxEntry) -> Bool) {
        var cursors = teams.indices.map { (ring: $0, position: teams[$0].ring.count - 1) }.filter { $0.position >= 0 }
        while !cursors.isEmpty {
            var best = 0
            var bestSequence = UInt64.min
            for (at, cursor) in cursors.enumerated() {
                let sequence = teams[cursor.ring].ring.sequence(at: cursor.position)
                if sequence > bestSequence { (best, bestSequence) = (at, sequence) }
            }
            let cursor = cursors[best]
            guard body(teams[cursor.ring].ring.entry(at: cursor.position)) else { return }
            if cursor.position > 0 { cursors[best].position -= 1 } else { cursors.remove(at: best) }
        }
    }

    /// Drops entries received before `cutoff`.
    mutating func expire(before cutoff: Date) {
        for index in teams.indices { teams[index].ring.expire(before: cutoff) }
    }

    /// Drops every entry, and what waited to be shared.
    mutating func removeAll() {
        for index in teams.indices {
            teams[index].ring.removeAll()
            teams[index].unshared.removeAll(keepingCapacity: true)
        }
    }

    /// Drops the entries received at `cutoff` or before.
    mutating func remove(receivedUpTo cutoff: Date) {
        for index in teams.indices { teams[index].ring.remove(receivedUpTo: cutoff) }
    }

    // MARK: Several nodes

    /// From now on, what is recorded here is kept for the other nodes,
    /// starting with what this node recorded and keeps; whether there is
    /// any. Nothing when already sharing.
    mutating func startSharing() -> Bool {
        guard !sharing else { return false }
        sharing = true
        var backlog = false
        for index in teams.indices {
            for entry in ownKept(in: index) {
                keepUnshared(entry, in: index)
                backlog = true
            }
        }
        return backlog
    }

    /// What this node recorded and keeps (not what other nodes gave it), in sequence order.
    func ownKept() -> [NotificationInbox.SharedEntry] {
        var entries = teams.indices.flatMap { ownKept(in: $0) }
        if teams.count > 1 { entries.sort { $0.sequence < $1.sequence } }
        return entries
    }

    private func ownKept(in index: Int) -> [NotificationInbox.SharedEntry] {
        let ring = teams[index].ring
        return (0..<ring.count).compactMap { position in
            ring.ownEncoded(at: position).map { NotificationInbox.SharedEntry(sequence: ring.sequence(at: position), bytes: $0) }
        }
    }

    /// Nothing is kept for other nodes until `startSharing`.
    mutating func stopSharing() {
        sharing = false
        for index in teams.indices {
            teams[index].unshared.removeAll()
            teams[index].unsharedDropped = 0
        }
    }

    /// Keeps an entry for the other nodes; a team's oldest goes past
    /// `capacity` (its writer fell behind), so a team fills only its own.
    private mutating func keepUnshared(_ entry: NotificationInbox.SharedEntry, in index: Int) {
        if teams[index].unshared.count == capacity {
            teams[index].unshared.removeFirst()
            teams[index].unsharedDropped += 1
        }
        teams[index].unshared.append(entry)
    }

    /// What was kept for the other nodes since the last call, in sequence
    /// order, and how many were dropped before they could be.
    mutating func takeUnshared() -> (entries: [NotificationInbox.SharedEntry], dropped: Int) {
        var entries: [NotificationInbox.SharedEntry] = []
        var dropped = 0
        for index in teams.indices {
            entries.append(contentsOf: teams[index].unshared)
            dropped += teams[index].unsharedDropped
            teams[index].unshared.removeAll(keepingCapacity: true)
            teams[index].unsharedDropped = 0
        }
        if teams.count > 1 { entries.sort { $0.sequence < $1.sequence } }
        return (entries, dropped)
    }
}
