extension Collection {
    /// Runs `body` with the elements in contiguous memory: in place when
    /// they already are (an array, a received buffer's view), copied into
    /// an array otherwise.
    ///
    /// Inlinable, so that it runs specialized for the caller's collection:
    /// reached through an unspecialized collection, the elements cost more
    /// to get at than to read.
    @inlinable
    public func withContiguousElements<R>(_ body: (UnsafeBufferPointer<Element>) -> R) -> R {
        if let result = withContiguousStorageIfAvailable(body) { return result }
        return Array(self).withUnsafeBufferPointer(body)
    }
}

extension Collection where Element == UInt8 {
    /// `withContiguousElements` for bytes, as raw memory.
    @inlinable
    public func withContiguousBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        withContiguousElements { body(UnsafeRawBufferPointer($0)) }
    }
}
