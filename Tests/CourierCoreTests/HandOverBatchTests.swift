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

    @Test func aBatchArrivesAsItLeft() {
        #expect(HandOverBatch.decode(HandOverBatch.encode(Self.batch)) == Self.batch)
        #expect(HandOverBatch.decode(HandOverBatch.encode([])) == [])
    }

    @Test func bytesCutShortRunningOnOrOfAnotherVersionAreRefused() {
        let bytes = HandOverBatch.encode(Self.batch)
        for length in [0, 1, 4, 5, 40, bytes.count / 2, bytes.count - 1] {
            #expect(HandOverBatch.decode(Array(bytes.prefix(length))) == nil, "cut at \(length)")
        }
        #expect(HandOverBatch.decode(bytes + [0]) == nil)
        var later = bytes
        later[0] = 2
        #expect(HandOverBatch.decode(later) == nil)
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
