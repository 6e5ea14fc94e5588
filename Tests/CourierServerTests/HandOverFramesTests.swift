import CourierCore
@testable import CourierServer
import Foundation
import NIOCore
import Testing

/// The frames of the stream between two nodes, read as they come: in
/// parts of any size, whole frames only, and a frame that is not one refused.
struct HandOverFramesTests {
    static func pending(_ n: Int) -> PendingNotification {
        PendingNotification(
            deviceID: UInt64(n), bundleID: "com.example.app", environment: .production,
            notification: PushNotification(
                id: UUID(), token: [1, 2, 3], topic: "com.example.app", payload: Array("{\"n\":\(n)}".utf8), expiration: nil, priority: .immediate),
            acceptedAt: Date(timeIntervalSince1970: 1_800_000_000))
    }

    @Test func framesDripFedAByteAtATimeComeOutWholeAndInOrder() throws {
        let batches = [[Self.pending(1)], [Self.pending(2), Self.pending(3)], [], []]
        let entries = [[], [], [SharedInboxEntry(node: "node-a", sequence: 7, format: 1, bytes: [1, 2, 3])], []]
        var bytes = ByteBuffer()
        for (index, batch) in batches.enumerated() {
            var frame = HandOverFrames.frame(UInt64(index + 1), batch, inbox: entries[index])
            bytes.writeBuffer(&frame)
        }
        var reader = HandOverFrames.Reader()
        var read: [HandOverFrames.Frame] = []
        while let byte = bytes.readSlice(length: 1) {
            reader.append(byte)
            while let frame = try reader.next() { read.append(frame) }
        }
        #expect(read.map(\.sequence) == [1, 2, 3, 4])
        #expect(read.map(\.notifications) == batches)
        #expect(read.map(\.inbox) == entries)
    }

    @Test func aFrameTooLongOrNotABatchIsRefused() {
        var tooLong = ByteBuffer()
        tooLong.writeInteger(UInt32(HandOverFrames.maxLength + 1))
        var reader = HandOverFrames.Reader()
        reader.append(tooLong)
        #expect(throws: HandOverFrames.BadFrame.self) { try reader.next() }

        var notABatch = ByteBuffer()
        notABatch.writeInteger(UInt32(8 + 3))
        notABatch.writeInteger(UInt64(1))
        notABatch.writeBytes([9, 9, 9])
        var other = HandOverFrames.Reader()
        other.append(notABatch)
        #expect(throws: HandOverFrames.BadFrame.self) { try other.next() }
    }
}
