@testable import CourierServer
import NIOCore
import Testing

/// The device channels' allocator: buffers below 16 KiB from the heap,
/// larger ones in pages of their own, and bytes kept across every kind of
/// growth between the two.
@Suite struct PageBufferAllocatorTests {
    /// Writes `count` bytes of a pattern that differs at every offset.
    func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) } }

    @Test(arguments: [
        (100, 8_000),  // heap to heap (realloc)
        (100, 40_000),  // heap to pages
        (20_000, 30_000),  // pages, growing within the same pages' round-up or not
        (20_000, 200_000),  // pages to more pages
    ])
    func bytesSurviveGrowth(first: Int, total: Int) {
        var buffer = PageBufferAllocator.allocator.buffer(capacity: first)
        let bytes = pattern(total)
        buffer.writeBytes(bytes[..<first])
        buffer.writeBytes(bytes[first...])
        let read = buffer.readBytes(length: buffer.readableBytes) ?? []
        #expect(read.count == total)
        // The first offset that differs, if any (not the whole arrays).
        #expect(read.indices.first { read[$0] != bytes[$0] } == nil)
        #expect(buffer.capacity >= total)
    }

    @Test func copiesAndSlicesOfAMappedBufferAreIndependent() {
        var original = PageBufferAllocator.allocator.buffer(capacity: 32 * 1024)
        original.writeBytes(pattern(20_000))
        var copy = original  // shares the storage until written
        copy.setBytes([0xFF], at: 0)  // copy on write: a second mapping
        #expect(original.getInteger(at: 0, as: UInt8.self) == pattern(1)[0])
        #expect(copy.getInteger(at: 0, as: UInt8.self) == 0xFF)
        #expect(original.getBytes(at: 1, length: 19_999) == copy.getBytes(at: 1, length: 19_999))
        let slice = original.getSlice(at: 10_000, length: 5_000)
        original.clear()
        original.writeBytes([1, 2, 3])
        #expect(slice?.readableBytesView.elementsEqual(pattern(15_000)[10_000...]) == true)
    }
}
