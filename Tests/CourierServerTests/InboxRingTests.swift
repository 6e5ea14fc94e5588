import CourierCore
import Foundation
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
        ring.write(http2)
        for n in 1...4 { ring.write(record(n)) }
        ring.write(
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
        for n in 1...10 { ring.write(record(n)) }
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
        for n in 1...200 { ring.write(record(n, payload: 4_000)) }
        var entries: [InboxEntry] = []
        ring.forEach { entries.append($0); return true }
        #expect(!entries.isEmpty)
        #expect(entries.count < 40)
        #expect(entries.last?.sequence == 200)
        // Consecutive, ending with the newest, each intact.
        #expect(entries.map(\.sequence) == Array(UInt64(201 - entries.count)...200))
        #expect(entries.allSatisfy { $0.payload.count == 4_000 && $0.topic == "com.example.t\($0.sequence)" })
        // A payload beyond the cut is kept up to it.
        ring.write(record(201, payload: 40_000))
        #expect(ring.last?.payload.count == InboxRing.maxPayload)
    }

    @Test func expiryAndClear() {
        var ring = InboxRing(capacity: 10)
        for n in 1...5 { ring.write(record(n)) }
        ring.expire(before: Date(timeIntervalSince1970: 1_750_000_000.0035))
        var sequences: [UInt64] = []
        ring.forEach { sequences.append($0.sequence); return true }
        #expect(sequences == [4, 5])
        ring.removeAll()
        #expect(ring.count == 0)
        #expect(ring.lastSequence == 5)
        ring.write(record(6))
        #expect(ring.last?.sequence == 6)
    }
}
