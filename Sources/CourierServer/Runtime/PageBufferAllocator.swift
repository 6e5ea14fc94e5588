@_spi(CustomByteBufferAllocator) import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The byte buffers of a long-lived, mostly idle connection (a device's).
///
/// NIOSSL gives every connection a 32 KiB buffer for decrypted bytes and a
/// 16 KiB one for encrypted output, of which an idle device touches a page
/// or two. From the process heap those 48 KiB soon become resident anyway
/// (the heap reuses pages other allocations wrote) and stay so while the
/// connection lives. Here a buffer of `largeSize` or more gets pages of its
/// own: only the pages written become resident, and they go back to the
/// system when the buffer is freed. Smaller buffers come from the heap.
///
/// Each block starts with a 16-byte header holding the length of its
/// mapping (0 for a heap block), so that freeing knows where it came from.
///
/// Copying into new pages skips the source's pages that hold only zeros:
/// NIO copies a buffer's whole capacity when it copies on write (NIOSSL's
/// decrypted-bytes buffer is copied so when the frames read from it are
/// still held at the next read), and a plain copy would make every page of
/// the new 32 KiB resident, for the life of the connection.
public enum PageBufferAllocator {
    static let largeSize = 16 * 1024

    public static let allocator = ByteBufferAllocator(
        allocate: { size in pageBufferAllocate(size) },
        reallocate: { pointer, oldSize, newSize in pageBufferReallocate(pointer, oldSize, newSize) },
        deallocate: { pointer in pageBufferDeallocate(pointer) },
        copy: { destination, source, count in pageBufferCopy(destination, source, count) }
    )
}

private let headerSize = 16
private let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

/// The length of the mapping for `size` usable bytes, or 0 for the heap.
private func mappingLength(_ size: Int) -> Int {
    guard size >= PageBufferAllocator.largeSize else { return 0 }
    return (size + headerSize + pageSize - 1) / pageSize * pageSize
}

private func pageBufferAllocate(_ size: Int) -> UnsafeMutableRawPointer? {
    let length = mappingLength(size)
    var block: UnsafeMutableRawPointer?
    if length > 0, let mapped = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), mapped != MAP_FAILED {
        block = mapped
        block!.storeBytes(of: length, as: Int.self)
    } else {
        // Small, or no mapping to be had: the heap (and then freed as such).
        block = malloc(size + headerSize)
        block?.storeBytes(of: 0, as: Int.self)
    }
    return block.map { $0 + headerSize }
}

private func pageBufferDeallocate(_ pointer: UnsafeMutableRawPointer) {
    let block = pointer - headerSize
    let length = block.load(as: Int.self)
    if length > 0 {
        munmap(block, length)
    } else {
        free(block)
    }
}

/// Copies into a block `pageBufferAllocate` returned. A mapped block is
/// fresh (all zeros), so the source's all-zero pages are not written.
private func pageBufferCopy(_ destination: UnsafeMutableRawPointer, _ source: UnsafeRawPointer, _ count: Int) {
    guard (destination - headerSize).load(as: Int.self) > 0 else {
        destination.copyMemory(from: source, byteCount: count)
        return
    }
    // Chunks end on the destination's page boundaries (it starts after the header).
    var offset = 0
    var chunk = pageSize - headerSize
    while offset < count {
        let length = min(chunk, count - offset)
        if memcmp(source + offset, zeroPage, length) != 0 {
            (destination + offset).copyMemory(from: source + offset, byteCount: length)
        }
        offset += length
        chunk = pageSize
    }
}

/// A page of zeros to compare with.
private nonisolated(unsafe) let zeroPage = UnsafeRawPointer(calloc(1, pageSize)!)

private func pageBufferReallocate(_ pointer: UnsafeMutableRawPointer?, _ oldSize: Int, _ newSize: Int) -> UnsafeMutableRawPointer? {
    guard let pointer else { return pageBufferAllocate(newSize) }
    let block = pointer - headerSize
    let length = block.load(as: Int.self)
    if length == 0, mappingLength(newSize) == 0 {
        return realloc(block, newSize + headerSize).map { $0 + headerSize }
    }
    if length > 0, newSize + headerSize <= length {
        return pointer
    }
    guard let moved = pageBufferAllocate(newSize) else { return nil }
    pageBufferCopy(moved, pointer, min(oldSize, newSize))
    pageBufferDeallocate(pointer)
    return moved
}
