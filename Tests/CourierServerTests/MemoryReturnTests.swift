import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import CourierServer

/// After a flood of connections the allocator's free memory goes back to
/// the system, once, when the open connections fell to half of a peak of
/// at least `MemoryReturn.floodSize` (docs/reliability.md has the figures).
@Suite struct MemoryReturnTests {
    @Test func memoryIsGivenBackOnceAfterAFlood() throws {
        let memory = MemoryReturn(logger: Logger(label: "test"))
        let limits = ListenerGuard(maxOpen: 10_000, maxPerAddress: 10_000, logInterval: 10, logger: Logger(label: "test"))
        memory.watch(limits)
        var channels: [EmbeddedChannel] = []
        for _ in 0..<MemoryReturn.floodSize {
            let channel = EmbeddedChannel()
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            try limits.admit(channel)
            channels.append(channel)
        }
        #expect(limits.open == MemoryReturn.floodSize)
        #expect(!memory.afterFlood(), "the flood is still open")
        for channel in channels.prefix(MemoryReturn.floodSize / 2 - 1) { _ = try channel.finish() }
        #expect(!memory.afterFlood(), "more than half still open")
        _ = try channels[MemoryReturn.floodSize / 2 - 1].finish()
        #expect(memory.afterFlood(), "half of the peak: given back")
        #expect(!memory.afterFlood(), "once")
        for channel in channels.suffix(MemoryReturn.floodSize / 2) { _ = try channel.finish() }
        #expect(!memory.afterFlood(), "the peak since is below a flood")
        #expect(memory.returned == 1)
    }
}
