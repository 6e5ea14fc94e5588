import CourierCore
import NIOCore

/// The stream of a direct hand-over (`NodeLinks` to `NodeListener`): one
/// `POST /v1/handover` a connection, kept open, both ways at once. The
/// request's body is frames, each its length (4 bytes, of what follows),
/// its sequence number (8 bytes, 1 and up) and a `HandOverBatch` (pushes,
/// and entries of the sending node's admin inbox); the
/// answer's body is the sequence number of each frame taken (8 bytes), in
/// order, once its pushes went to their devices. Big-endian.
enum HandOverFrames {
    /// A frame of more is refused (a batch is `NodeLinks.batchLimit` pushes at most).
    static let maxLength = 32 << 20

    static func frame(_ sequence: UInt64, _ batch: [PendingNotification], inbox: [SharedInboxEntry] = []) -> ByteBuffer {
        let bytes = HandOverBatch.encode(batch, inbox: inbox)
        var buffer = ByteBuffer()
        buffer.reserveCapacity(12 + bytes.count)
        buffer.writeInteger(UInt32(8 + bytes.count))
        buffer.writeInteger(sequence)
        buffer.writeBytes(bytes)
        return buffer
    }

    /// A frame as read.
    struct Frame {
        var sequence: UInt64
        var notifications: [PendingNotification]
        var inbox: [SharedInboxEntry]
    }

    struct BadFrame: Error, CustomStringConvertible {
        var description: String
    }

    /// Reads frames out of the body's parts as they come.
    struct Reader {
        private var buffer = ByteBuffer()

        mutating func append(_ part: ByteBuffer) {
            var part = part
            buffer.writeBuffer(&part)
        }

        /// The next whole frame; nil until one is whole. Throws for a frame
        /// too long, too short, or whose batch is not one.
        mutating func next() throws -> Frame? {
            guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return nil }
            guard length >= 8, length <= maxLength else { throw BadFrame(description: "a frame of \(length) bytes") }
            guard buffer.readableBytes >= 4 + Int(length) else { return nil }
            buffer.moveReaderIndex(forwardBy: 4)
            let sequence = buffer.readInteger(as: UInt64.self)!
            let bytes = buffer.readBytes(length: Int(length) - 8)!
            buffer.discardReadBytes()
            guard let batch = HandOverBatch.decode(bytes) else { throw BadFrame(description: "frame \(sequence) is not a hand-over batch") }
            return Frame(sequence: sequence, notifications: batch.notifications, inbox: batch.inbox)
        }
    }
}
