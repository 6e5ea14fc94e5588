import NIOCore

/// Walks the items of an item frame (binary command 2 and every courier
/// device frame): `id:u8 | length:u16 | value`, back to back, filling the
/// frame exactly.
public struct FrameItemIterator {
    public enum Step: Equatable {
        /// An item whose value is `length` bytes at `index` of the buffer.
        case item(id: UInt8, index: Int, length: Int)
        /// The frame ended exactly after the last item.
        case end
        /// An item header or value runs past the end of the frame.
        case overrun
    }

    @usableFromInline let buffer: ByteBuffer
    @usableFromInline var index: Int
    @usableFromInline let end: Int

    /// Items of the `length` bytes at `index` of `buffer`.
    @inlinable
    public init(buffer: ByteBuffer, index: Int, length: Int) {
        self.buffer = buffer
        self.index = index
        self.end = index + length
    }

    @inlinable
    public mutating func next() -> Step {
        if index == end { return .end }
        guard end - index >= 3, let (id, length) = buffer.getMultipleIntegers(at: index, as: (UInt8, UInt16).self) else {
            return .overrun
        }
        let valueIndex = index + 3
        guard end - valueIndex >= Int(length) else { return .overrun }
        index = valueIndex + Int(length)
        return .item(id: id, index: valueIndex, length: Int(length))
    }
}

extension ByteBuffer {
    /// Writes one frame item.
    @inlinable
    public mutating func writeFrameItem(id: UInt8, _ value: some Collection<UInt8>) {
        precondition(value.count <= Int(UInt16.max), "an item value holds at most 65,535 bytes")
        writeMultipleIntegers(id, UInt16(truncatingIfNeeded: value.count))
        writeBytes(value)
    }

    /// Writes one frame item whose value is a buffer's readable bytes.
    @inlinable
    public mutating func writeFrameItem(id: UInt8, buffer value: ByteBuffer) {
        precondition(value.readableBytes <= Int(UInt16.max), "an item value holds at most 65,535 bytes")
        writeMultipleIntegers(id, UInt16(truncatingIfNeeded: value.readableBytes))
        writeImmutableBuffer(value)
    }

    /// Writes a fixed-width integer item.
    @inlinable
    public mutating func writeFrameItem<T: FixedWidthInteger>(id: UInt8, integer value: T) {
        writeMultipleIntegers(id, UInt16(MemoryLayout<T>.size))
        writeInteger(value)
    }

    /// Writes a frame: `command:u8 | length:u32 | items`, with `body`
    /// writing the items. The length is filled in afterwards.
    @inlinable
    public mutating func writeItemFrame(command: UInt8, _ body: (inout ByteBuffer) -> Void) {
        writeInteger(command)
        let lengthIndex = writerIndex
        writeInteger(UInt32(0))
        let start = writerIndex
        body(&self)
        setInteger(UInt32(writerIndex - start), at: lengthIndex)
    }
}
