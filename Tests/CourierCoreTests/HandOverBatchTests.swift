import CourierCore
import Foundation
import Testing

struct HandOverBatchTests {
    static let batch: [PendingNotification] = [
        PendingNotification(
            deviceID: 0x0123_4567_89AB_CDEF, bundleID: "com.example.app", environment: .production,
            notification: PushNotification(
                id: UUID(), token: Array(repeating: 0xAB, count: 32), topic: "com.example.app", payload: Array(#"{"aps":{"alert":"hé"}}"#.utf8),
                expiration: Date(timeIntervalSince1970: 1_900_000_000.123), priority: .immediate, collapseID: "c-1", pushType: "alert",
                isSilent: false),
            acceptedAt: Date(timeIntervalSince1970: 1_800_000_000.456_789)),
        PendingNotification(
            deviceID: .max, bundleID: "com.example.other", environment: .sandbox,
            notification: PushNotification(
                id: UUID(), token: [1, 2, 3], topic: "com.example.other.voip", payload: [], expiration: Date(timeIntervalSince1970: 0),
                priority: .lowest, isSilent: true),
            acceptedAt: Date(timeIntervalSince1970: 1)),
        PendingNotification(
            deviceID: 0, bundleID: "b", environment: .production,
            notification: PushNotification(
                id: UUID(), token: [], topic: "b", payload: Array(repeating: 0x41, count: 70_000), expiration: nil, priority: .conservePower, collapseID: "",
                pushType: nil),
            acceptedAt: Date(timeIntervalSince1970: 2)),
    ]

    static let inbox: [SharedInboxEntry] = [
        SharedInboxEntry(node: "node-a", sequence: 1_800_000_000_000_000_001, format: 1, bytes: Array(repeating: 0x5A, count: 600)),
        SharedInboxEntry(node: "nœud-b", sequence: -1, format: 0xFFFF, bytes: []),
    ]

    @Test func aBatchArrivesAsItLeft() throws {
        let both = try #require(HandOverBatch.decode(HandOverBatch.encode(Self.batch, inbox: Self.inbox)))
        #expect(both.notifications == Self.batch)
        #expect(both.inbox == Self.inbox)
        let notifications = try #require(HandOverBatch.decode(HandOverBatch.encode(Self.batch)))
        #expect(notifications.notifications == Self.batch)
        #expect(notifications.inbox == [])
        let entries = try #require(HandOverBatch.decode(HandOverBatch.encode([], inbox: Self.inbox)))
        #expect(entries.notifications == [])
        #expect(entries.inbox == Self.inbox)
    }

    /// Without inbox entries a batch is version 1, the notifications alone,
    /// as a node of the version before reads it; with entries, version 2.
    @Test func aBatchWithoutEntriesIsVersionOne() throws {
        var bytes = HandOverBatch.encode(Self.batch)
        #expect(bytes[0] == 1)
        #expect(HandOverBatch.encode(Self.batch, inbox: Self.inbox)[0] == 2)
        let read = try #require(HandOverBatch.decode(bytes))
        #expect(read.notifications == Self.batch)
        #expect(read.inbox == [])
        // Version 2 without its entries' count is cut short.
        bytes[0] = 2
        #expect(HandOverBatch.decode(bytes) == nil)
    }

    @Test func bytesCutShortRunningOnOrOfAnotherVersionAreRefused() {
        let bytes = HandOverBatch.encode(Self.batch, inbox: Self.inbox)
        for length in [0, 1, 4, 5, 40, bytes.count / 2, bytes.count - 700, bytes.count - 1] {
            #expect(HandOverBatch.decode(Array(bytes.prefix(length))) == nil, "cut at \(length)")
        }
        #expect(HandOverBatch.decode(bytes + [0]) == nil)
        for version: UInt8 in [0, 3] {
            var other = bytes
            other[0] = version
            #expect(HandOverBatch.decode(other) == nil, "version \(version)")
        }
    }

    @Test func aValueNoNotificationHasIsRefused() {
        let one = HandOverBatch.encode([Self.batch[1]])
        // Version, count, device id: then the environment's byte.
        var environment = one
        environment[13] = 2
        #expect(HandOverBatch.decode(environment) == nil)
        // A count over the limit, whatever follows.
        var count = one
        count.replaceSubrange(1..<5, with: [0xFF, 0xFF, 0xFF, 0xFF])
        #expect(HandOverBatch.decode(count) == nil)
        // The priority (the byte before the two absent optional strings and the silent flag).
        var priority = one
        priority[priority.count - 6] = 7
        #expect(HandOverBatch.decode(priority) == nil)
    }
}
