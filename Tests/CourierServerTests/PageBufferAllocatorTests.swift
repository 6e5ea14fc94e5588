@testable import CourierServer
import NIOCore
import Testing

#if canImport(Glibc)
import Glibc
#endif

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

    /// Pages of a mapped buffer's block that are resident (`mincore`).
    func residentPages(of buffer: ByteBuffer) -> Int {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        return buffer.withVeryUnsafeBytes { bytes in
            // The block (16-byte header, then the storage) starts on a page boundary.
            let block = UnsafeMutableRawPointer(mutating: bytes.baseAddress! - 16)
            let pages = (bytes.count + 16 + page - 1) / page
            var vector = [UInt8](repeating: 0, count: pages)
            #expect(mincore(block, pages * page, &vector) == 0)
            return vector.filter { $0 & 1 == 1 }.count
        }
    }

    /// NIOSSL's 32 KiB buffer of decrypted bytes is copied on write when
    /// frames sliced from it are still held at its next read (NIO copies the
    /// whole capacity then): only the pages written in the source may become
    /// resident in the copy, and every byte must be the source's.
    @Test func aCopyOnWriteTouchesOnlyTheWrittenPages() {
        var original = PageBufferAllocator.allocator.buffer(capacity: 32 * 1024)
        original.writeBytes(pattern(100))
        original.setBytes(pattern(50), at: 20_000)  // written, beyond the readable bytes
        let held = original.getSlice(at: 0, length: 100)!  // a frame still held
        // What NIOSSL does before its next read: indices back to 0, then a write.
        original.moveReaderIndex(to: 0)
        original.moveWriterIndex(to: 0)
        original.writeBytes([1, 2, 3])  // copy on write
        #expect(original.capacity == 32 * 1024)
        // The copy's first page (header and first bytes) and the page of offset 20,000.
        #expect(residentPages(of: original) == 2)
        let storage = original.withVeryUnsafeBytes { Array($0) }
        var expected = [UInt8](repeating: 0, count: storage.count)
        expected.replaceSubrange(0..<100, with: pattern(100))
        expected.replaceSubrange(0..<3, with: [1, 2, 3])
        expected.replaceSubrange(20_000..<20_050, with: pattern(50))
        // The first offset that differs, if any (not the whole arrays).
        #expect(storage.indices.first { storage[$0] != expected[$0] } == nil)
        #expect(held.readableBytesView.elementsEqual(pattern(100)))
    }
}
