import CourierCore
import CourierWire
import Foundation
import NIOCore
import NIOHPACK
import Testing

@testable import CourierServer

/// The inbox's byte ring: every field comes back as it went in, and the
/// ring drops its oldest entries by count and by bytes (a reused chunk).
@Suite struct InboxRingTests {
    func record(_ n: Int, payload: Int = 20, interface: ProviderInterface = .binary) -> InboxRecord {
        InboxRecord(
            receivedAt: Date(timeIntervalSince1970: 1_750_000_000 + Double(n) / 1000), interface: interface, environment: .sandbox,
            id: .uuid(UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", n))!), token: [UInt8(n % 256), 2, 3],
            topic: "com.example.t\(n)", provider: "certificate 0a\(n)", teamID: "TEAM\(n)",
            received: .binary(BinaryFrameFields(command: 2, identifier: UInt32(n), expiry: n % 2 == 0 ? 7 : nil, priority: 10)),
            payload: Array(repeating: UInt8(ascii: "x"), count: payload), outcome: n % 3 == 0 ? .accepted : .refused(status: n % 2 == 0 ? 8 : nil, reason: "Reason\(n)"),
            fault: n % 5 == 0 ? "f\(n)" : nil)
    }

    @Test func anAuthorizationHeaderKeepsOnlyItsScheme() {
        #expect(InboxHeaders.redacted("bearer a.b.c") == "bearer (not recorded)")
        #expect(InboxHeaders.redacted("Bearer a.b.c") == "bearer (not recorded)")
        #expect(InboxHeaders.redacted("BEARER a.b.c") == "bearer (not recorded)")
        #expect(InboxHeaders.redacted("bearer ") == "bearer (not recorded)")
        #expect(InboxHeaders.redacted("bearer") == "(not recorded)")
        #expect(InboxHeaders.redacted("bearer\ta.b.c") == "(not recorded)")
        #expect(InboxHeaders.redacted("Basic dXNlcjpwYXNz") == "(not recorded)")
        #expect(InboxHeaders.redacted("bearër a") == "(not recorded)")
        #expect(InboxHeaders.redacted("") == "(not recorded)")
    }

    @Test func everyFieldComesBack() {
        var ring = InboxRing(capacity: 10)
        var headers = HPACKHeaders()
        headers.add(name: ":path", value: "/3/device/00ff")
        headers.add(name: "authorization", value: "bearer secret.jwt.value")
        headers.add(name: "apns-topic", value: "com.example.demo")
        let http2 = InboxRecord(
            receivedAt: Date(timeIntervalSince1970: 1_750_000_000.25), interface: .http2, environment: .production, id: .text("my-id"), token: nil,
            topic: nil, provider: nil, teamID: nil, received: .http2(headers), payload: Array("{}".utf8),
            outcome: .refused(status: 403, reason: "InvalidProviderToken"), fault: nil)
        ring.append(http2)
        for n in 1...4 { ring.append(record(n)) }
        ring.append(
            InboxRecord(
                receivedAt: Date(timeIntervalSince1970: 1), interface: .binary, environment: .production, id: .uuid(UUID()), token: nil, topic: "t",
                provider: nil, teamID: nil, received: .malformed(identifier: 9, detail: "item 3 is too long"), payload: [], outcome: .accepted))
        var entries: [InboxEntry] = []
        ring.forEach { entries.append($0); return true }
        #expect(entries.map(\.sequence) == [1, 2, 3, 4, 5, 6])
        let first = entries[0]
        #expect(first.interface == .http2)
        #expect(first.environment == .production)
        #expect(first.apnsID == "my-id")
        #expect(first.receivedAt == Date(timeIntervalSince1970: 1_750_000_000.25))
        #expect(first.token == nil && first.topic == nil && first.provider == nil && first.teamID == nil)
        #expect(first.headers.map(\.name) == [":path", "authorization", "apns-topic"])
        #expect(first.headers[1].value == "bearer (not recorded)")
        #expect(first.payload == Array("{}".utf8))
        #expect(first.outcome == .refused(status: 403, reason: "InvalidProviderToken"))
        for n in 1...4 {
            let entry = entries[n]
            let expected = record(n)
            #expect(entry.apnsID == String(format: "00000000-0000-0000-0000-%012d", n))
            #expect(entry.token == expected.token)
            #expect(entry.topic == expected.topic && entry.provider == expected.provider && entry.teamID == expected.teamID)
            #expect(entry.payload == expected.payload)
            #expect(entry.outcome == expected.outcome)
            #expect(entry.fault == expected.fault)
            #expect(entry.interface == .binary && entry.environment == .sandbox)
            let fields = Dictionary(uniqueKeysWithValues: entry.headers.map { ($0.name, $0.value) })
            #expect(fields["identifier"] == String(n))
            #expect(fields["expiry"] == (n % 2 == 0 ? "7" : nil))
            #expect(fields["priority"] == "10")
        }
        #expect(entries[5].headers.map(\.value) == ["9", "item 3 is too long"])
    }

    @Test func theOldestGoByCount() {
        var ring = InboxRing(capacity: 3)
        for n in 1...10 { ring.append(record(n)) }
        var sequences: [UInt64] = []
        ring.forEach { sequences.append($0.sequence); return true }
        #expect(sequences == [8, 9, 10])
        var newest: [UInt64] = []
        ring.forEach(newestFirst: true) { newest.append($0.sequence); return newest.count < 2 }
        #expect(newest == [10, 9])
    }

    /// Large entries fill the chunks before the count is reached: a reused
    /// chunk drops what it held, and what is kept reads back whole.
    @Test func theOldestGoByBytesAcrossChunks() {
        var ring = InboxRing(capacity: 100)  // two chunks of 64 KiB
        for n in 1...200 { ring.append(record(n, payload: 4_000)) }
        var entries: [InboxEntry] = []
        ring.forEach { entries.append($0); return true }
        #expect(!entries.isEmpty)
        #expect(entries.count < 40)
        #expect(entries.last?.sequence == 200)
        // Consecutive, ending with the newest, each intact.
        #expect(entries.map(\.sequence) == Array(UInt64(201 - entries.count)...200))
        #expect(entries.allSatisfy { $0.payload.count == 4_000 && $0.topic == "com.example.t\($0.sequence)" })
        // A payload beyond the cut is kept up to it.
        ring.append(record(201, payload: 40_000))
        #expect(ring.last?.payload.count == InboxRing.maxPayload)
    }

    @Test func expiryAndClear() {
        var ring = InboxRing(capacity: 10)
        for n in 1...5 { ring.append(record(n)) }
        ring.expire(before: Date(timeIntervalSince1970: 1_750_000_000.0035))
        var sequences: [UInt64] = []
        ring.forEach { sequences.append($0.sequence); return true }
        #expect(sequences == [4, 5])
        ring.removeAll()
        #expect(ring.count == 0)
        #expect(ring.lastSequence == nil)
        ring.write(record(6), sequence: 6)
        #expect(ring.last?.sequence == 6)
    }

    /// An entry shared with another node's ring (several nodes) comes back
    /// there whole, naming the node that received it; each ring names its
    /// own node for its own entries, none with one node.
    @Test func anotherNodesEntryComesBackWithItsNode() throws {
        var a = InboxRing(capacity: 10, node: "node-a")
        var b = InboxRing(capacity: 10, node: "node-b")
        a.append(record(4))
        let bytes = try #require(a.lastEncoded)
        b.append(record(1))
        #expect(InboxRing.isShared(bytes, from: "node-a"))
        b.write(shared: bytes, from: "node-a", sequence: 2)
        let shared = try #require(b.last)
        let original = try #require(a.last)
        #expect(shared.node == "node-a" && original.node == "node-a")
        #expect(shared.apnsID == original.apnsID && shared.token == original.token && shared.topic == original.topic)
        #expect(shared.payload == original.payload && shared.outcome == original.outcome && shared.receivedAt == original.receivedAt)
        #expect(shared.headers.map(\.value) == original.headers.map(\.value))
        var nodes: [String?] = []
        b.forEach { nodes.append($0.node); return true }
        #expect(nodes == ["node-b", "node-a"])
        var alone = InboxRing(capacity: 10)
        alone.append(record(1))
        #expect(alone.last?.node == nil)
        // Not an entry's bytes.
        #expect(!InboxRing.isShared([1, 2, 3], from: "node-a"))
        #expect(!InboxRing.isShared(Array(bytes.dropLast()), from: "node-a"))
        #expect(InboxRing.teamID(of: bytes) == "TEAM4")
        #expect(InboxRing.teamID(of: Array(bytes.prefix(20))) == nil)
    }

    /// Another node's entries arrive late, out of the order they were
    /// received in: a clear up to a time drops exactly those received up
    /// to it, and paging by sequence still finds its place.
    @Test func aClearUpToATimeDropsWhatWasReceivedUpToIt() {
        var ring = InboxRing(capacity: 20)
        for n in [5, 1, 7, 2, 9, 3] { ring.append(record(n)) }
        ring.remove(receivedUpTo: record(3).receivedAt)
        var kept: [(UInt64, String?)] = []
        ring.forEach { kept.append(($0.sequence, $0.topic)); return true }
        #expect(kept.map(\.0) == [1, 3, 5])
        #expect(kept.map(\.1) == ["com.example.t5", "com.example.t7", "com.example.t9"])
        var after: [UInt64] = []
        ring.forEach(after: 2) { after.append($0.sequence); return true }
        #expect(after == [3, 5])
        after = []
        ring.forEach(after: 3) { after.append($0.sequence); return true }
        #expect(after == [5])
        after = []
        ring.forEach(after: 5) { after.append($0.sequence); return true }
        #expect(after.isEmpty)
    }
}

/// A read's entries encoded as they are decided (`InboxBatch`): a binary
/// frame's entry written from the frame is the entry of the record the
/// gateway would make of it, and a batch lands in each team's ring in order.
@Suite struct InboxBatchTests {
    let source = InboxSource(topic: "com.example.demo", provider: "certificate 0a1b", teamID: "TEAMA", connection: "[IPv4]127.0.0.1/127.0.0.1:5000")

    func frame(_ n: Int, command: UInt8 = 2, payload: Int = 40) -> BinaryNotificationFrame {
        BinaryNotificationFrame(
            command: command, token: ByteBuffer(bytes: (0..<32).map { UInt8(($0 + n) % 256) }),
            payload: ByteBuffer(bytes: Array(repeating: UInt8(ascii: "p"), count: payload)), identifier: UInt32(n),
            expiry: n % 2 == 0 ? UInt32(1_800_000_000 + n) : nil, priority: command == 2 && n % 3 != 0 ? 10 : nil)
    }

    func record(_ frame: BinaryNotificationFrame, id: UUID, outcome: InboxOutcome, at date: Date, source: InboxSource) -> InboxRecord {
        InboxRecord(
            receivedAt: date, interface: .binary, environment: .sandbox, id: .uuid(id), token: Array(buffer: frame.token), topic: source.topic,
            provider: source.provider, teamID: source.teamID, connection: source.connection, received: .binary(BinaryFrameFields(frame)),
            payload: Array(buffer: frame.payload), outcome: outcome, fault: nil)
    }

    @Test(arguments: [
        (UInt8(2), 40, InboxOutcome.accepted), (1, 0, .refused(status: 8, reason: "InvalidToken")), (0, 20_000, .refused(status: nil, reason: "Unregistered")),
    ])
    func aFramesEntryIsTheEntryOfItsRecord(command: UInt8, payload: Int, outcome: InboxOutcome) {
        let date = Date(timeIntervalSince1970: 1_750_000_000.5)
        let id = UUID()
        for n in [1, 2, 3] {
            let frame = frame(n, command: command, payload: payload)
            var fromFrame = InboxBatch()
            fromFrame.append(frame, id: id, source: source, outcome: outcome, receivedAt: date, environment: .sandbox)
            var fromRecord = InboxBatch()
            fromRecord.append(record(frame, id: id, outcome: outcome, at: date, source: source))
            #expect(fromFrame.entries.map(\.size) == fromRecord.entries.map(\.size))
            #expect(fromFrame.bytes?.readableBytesView.elementsEqual(fromRecord.bytes!.readableBytesView) == true)
        }
        let nobody = InboxSource(topic: "t", provider: nil, teamID: nil, connection: nil)
        var fromFrame = InboxBatch()
        fromFrame.append(frame(4), id: id, source: nobody, outcome: outcome, receivedAt: date, environment: .sandbox)
        var fromRecord = InboxBatch()
        fromRecord.append(record(frame(4), id: id, outcome: outcome, at: date, source: nobody))
        #expect(fromFrame.bytes?.readableBytesView.elementsEqual(fromRecord.bytes!.readableBytesView) == true)
    }

    @Test func aBatchLandsInItsTeamsRingsInOrder() {
        let inbox = NotificationInbox(capacity: 2, maxAge: 3600, clock: ManualWallClock(Date(timeIntervalSince1970: 1_750_000_000)))
        let other = InboxSource(topic: "com.example.other", provider: "certificate 0c", teamID: "TEAMB", connection: nil)
        var batch = InboxBatch()
        let date = Date(timeIntervalSince1970: 1_750_000_000)
        for n in 1...5 {
            batch.append(frame(n), id: UUID(), source: n == 3 ? other : source, outcome: .accepted, receivedAt: date, environment: .sandbox)
        }
        inbox.record(batch)
        batch.removeAll()
        #expect(batch.isEmpty && batch.teams.isEmpty)
        // Capacity 2 per team: TEAMA keeps its newest two (frames 4 and 5), TEAMB its one (frame 3).
        let entries = inbox.list(InboxFilter(), limit: 10).entries
        #expect(entries.map(\.sequence) == [3, 4, 5])
        #expect(entries.map(\.teamID) == ["TEAMB", "TEAMA", "TEAMA"])
        #expect(entries.map { $0.headers.first { $0.name == "identifier" }?.value } == ["3", "4", "5"])
        #expect(entries[1].token == (0..<32).map { UInt8(($0 + 4) % 256) })
        #expect(entries[1].connection == source.connection && entries[1].provider == "certificate 0a1b")
        #expect(inbox.list(InboxFilter(teamID: "TEAMA"), limit: 10).entries.count == 2)
    }

    @Test func aLargeBatchsStorageIsGivenBack() {
        var batch = InboxBatch()
        for n in 1...40 { batch.append(frame(n, payload: 16_000), id: UUID(), source: source, outcome: .accepted, receivedAt: Date(), environment: .sandbox) }
        #expect(batch.bytes!.capacity > 256 * 1024)
        batch.removeAll()
        #expect(batch.bytes == nil)
        batch.append(frame(1), id: UUID(), source: source, outcome: .accepted, receivedAt: Date(), environment: .sandbox)
        batch.removeAll()
        #expect(batch.bytes?.readableBytes == 0, "a small one is kept, emptied")
    }
}

extension InboxRing {
    /// Writes under the sequence after the newest (a ring tested alone).
    mutating func append(_ record: InboxRecord) {
        write(record, sequence: (lastSequence ?? 0) + 1)
    }
}

/// The inbox with several nodes: what it records waits to be shared
/// (bounded), and what other nodes shared wakes its waiters, except what
/// was received before its last clear.
@Suite struct SharedInboxTests {
    let clock = ManualWallClock(Date(timeIntervalSince1970: 1_750_000_100))

    func record(_ n: Int, at date: Date) -> InboxRecord {
        InboxRecord(
            receivedAt: date, interface: .http2, environment: .production, id: .text("id-\(n)"), token: [1, 2, 3], topic: "com.example.demo",
            provider: nil, teamID: nil, received: .http2(HPACKHeaders()), payload: Array("{\"n\":\(n)}".utf8), outcome: .accepted, fault: nil)
    }

    @Test func whatIsRecordedWaitsToBeSharedInOrderAndBounded() {
        let inbox = NotificationInbox(capacity: 3, maxAge: 3600, clock: clock, node: "node-a")
        inbox.startSharing()
        for n in 1...5 { inbox.record(record(n, at: clock.now())) }
        let (entries, dropped) = inbox.takeUnshared()
        #expect(entries.map(\.sequence) == [3, 4, 5])
        #expect(dropped == 2)
        #expect(inbox.takeUnshared().entries.isEmpty)
        let single = NotificationInbox(capacity: 3, maxAge: 3600, clock: clock)
        single.startSharing()
        single.record(record(1, at: clock.now()))
        #expect(single.takeUnshared().entries.isEmpty, "one node shares nothing")
        #expect(single.unsharedEntries == nil)
    }

    /// Alone, a node shares nothing; when another node is alive it shares
    /// first what it kept of its own (not what other nodes gave it), then
    /// what comes; alone again, it stops.
    @Test func sharingStartsWithWhatWasKeptWhenAnotherNodeIsAlive() {
        let a = NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-a")
        let b = NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-b")
        b.startSharing()
        b.record(record(9, at: clock.now()))
        a.record(record(1, at: clock.now()))
        a.recordShared(b.takeUnshared().entries.map { ("node-b", $0.bytes) })
        a.record(record(2, at: clock.now()))
        #expect(a.takeUnshared().entries.isEmpty, "alone, nothing waits to be shared")
        a.startSharing()
        a.record(record(3, at: clock.now()))
        let shared = a.takeUnshared().entries
        #expect(shared.map(\.sequence) == [1, 3, 4], "its own two kept, then the new one; node-b's not")
        let c = NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-c")
        c.recordShared(shared.map { ("node-a", $0.bytes) })
        #expect(c.list(InboxFilter(), limit: 10).entries.map(\.apnsID) == ["id-1", "id-2", "id-3"])
        a.startSharing()
        #expect(a.takeUnshared().entries.isEmpty, "already sharing: nothing again")
        a.stopSharing()
        a.record(record(4, at: clock.now()))
        #expect(a.takeUnshared().entries.isEmpty)
    }

    /// Between nodes (`InboxExchange`): what a node keeps of its own is
    /// given with its run's base; another node takes each entry once,
    /// whichever way and in whatever order it comes (a link's backlog after
    /// the store gave some), skips its own, and reads the store on from
    /// what the store gave alone.
    @Test func anotherNodesEntriesAreTakenOnceWhicheverWayTheyCome() {
        let a = InboxExchange(node: "node-a", inbox: NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-a"))
        let b = InboxExchange(node: "node-b", inbox: NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-b"))
        a.start(base: 1_000)
        a.inbox.startSharing()
        for n in 1...3 { a.inbox.record(record(n, at: clock.now())) }
        let first = a.takeUnshared().entries
        #expect(first.map(\.sequence) == [1_001, 1_002, 1_003])
        #expect(first.allSatisfy { $0.node == "node-a" && $0.format == InboxRing.sharedFormat })

        // Through the store: the second alone, then a link's backlog with all three.
        #expect(b.take([first[1]], fromStore: true) == 1)
        #expect(b.storeCursors == ["node-a": 1_002])
        #expect(b.take(a.ownKept()) == 2, "the first and the third: the second was taken")
        #expect(b.take(first) == 0, "all three taken already")
        #expect(b.storeCursors == ["node-a": 1_002], "a link's entries leave the store's cursor alone")
        #expect(b.inbox.list(InboxFilter(), limit: 10).entries.map(\.apnsID).sorted() == ["id-1", "id-2", "id-3"])
        b.inbox.startSharing()
        b.inbox.record(record(9, at: clock.now()))
        #expect(b.ownKept().count == 1)
        #expect(b.take(b.ownKept()) == 0, "its own entries are not another node's")
        #expect(a.take(first) == 0, "nor are a node's own given back to it")
    }

    /// A node remembers at most `remembered` sequences of each other node:
    /// the backlog a link starts with is that node's newest as many, so none
    /// it took comes back as new (an older one would: forgotten).
    @Test func theBacklogIsWhatTheOtherNodeRemembers() {
        let a = InboxExchange(node: "node-a", inbox: NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-a"), remembered: 3)
        let b = InboxExchange(node: "node-b", inbox: NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-b"), remembered: 3)
        a.inbox.startSharing()
        for n in 1...5 { a.inbox.record(record(n, at: clock.now())) }
        let all = a.takeUnshared().entries
        #expect(b.take(all) == 5)
        #expect(a.ownKept().map(\.sequence) == Array(all.suffix(3)).map(\.sequence))
        #expect(b.take(a.ownKept()) == 0)
        #expect(b.take([all[0]]) == 1, "the oldest was forgotten")
        let defaults = InboxExchange(node: "node-c", inbox: NotificationInbox(capacity: 30_000, maxAge: 3600, clock: clock, node: "node-c"))
        #expect(defaults.remembered == 120_000)
        #expect(InboxExchange(node: "node-d", inbox: NotificationInbox(capacity: 10, maxAge: 3600, clock: clock)).remembered == 100_000)
    }

    /// What waits to be shared is bounded per team: another team's flood
    /// drops its own oldest, never this team's entry.
    @Test func whatWaitsToBeSharedIsBoundedPerTeam() {
        let inbox = NotificationInbox(capacity: 3, maxAge: 3600, clock: clock, node: "node-a")
        inbox.startSharing()
        var own = record(1, at: clock.now())
        own.teamID = "TEAMA"
        inbox.record(own)
        for n in 2...9 {
            var other = record(n, at: clock.now())
            other.teamID = "TEAMB"
            inbox.record(other)
        }
        let (entries, dropped) = inbox.takeUnshared()
        #expect(entries.map(\.sequence) == [1, 7, 8, 9])
        #expect(dropped == 5)
        let b = NotificationInbox(capacity: 3, maxAge: 3600, clock: clock, node: "node-b")
        b.recordShared(entries.map { ("node-a", $0.bytes) })
        #expect(b.list(InboxFilter(teamID: "TEAMA"), limit: 10).entries.map(\.apnsID) == ["id-1"])
        #expect(b.list(InboxFilter(), limit: 10).entries.map(\.apnsID) == ["id-1", "id-7", "id-8", "id-9"])
        // Newest first across the teams.
        #expect(b.recent(token: [1, 2, 3], limit: 2).map(\.apnsID) == ["id-9", "id-8"])
    }

    @Test func anotherNodesEntryWakesAWaiter() async throws {
        let a = NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-a")
        let b = NotificationInbox(capacity: 10, maxAge: 3600, clock: clock, node: "node-b")
        a.startSharing()
        let waiting = Task { await b.wait(for: InboxFilter(apnsID: "id-7"), timeout: .seconds(30)) }
        while b.waiting == 0 { await Task.yield() }
        a.record(record(7, at: clock.now()))
        #expect(b.recordShared(a.takeUnshared().entries.map { ("node-a", $0.bytes) }) == 1)
        let entry = await waiting.value
        #expect(entry?.apnsID == "id-7")
        #expect(entry?.node == "node-a")
        #expect(entry?.payload == Array("{\"n\":7}".utf8))
    }

    @Test func whatWasReceivedBeforeAClearIsNotTaken() {
        let a = NotificationInbox(capacity: 10, maxAge: 60, clock: clock, node: "node-a")
        let b = NotificationInbox(capacity: 10, maxAge: 60, clock: clock, node: "node-b")
        a.startSharing()
        let now = clock.now()
        a.record(record(1, at: now.addingTimeInterval(-2)))
        a.record(record(2, at: now.addingTimeInterval(-120)))
        a.record(record(3, at: now))
        b.record(record(4, at: now.addingTimeInterval(-3)))
        b.record(record(5, at: now))
        b.clear(upTo: now.addingTimeInterval(-1))
        #expect(b.list(InboxFilter(), limit: 10).entries.map(\.apnsID) == ["id-5"])
        // id-1 came before the clear, id-2 is older than maxAge: only id-3 is taken.
        #expect(b.recordShared(a.takeUnshared().entries.map { ("node-a", $0.bytes) }) == 1)
        #expect(b.list(InboxFilter(), limit: 10).entries.map(\.apnsID) == ["id-5", "id-3"])
    }
}
