import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import CourierServer

/// After a flood of connections the allocator's free memory goes back to
/// the system once the open connections fell by half of
/// `MemoryReturn.floodSize` from their peak and stopped falling, or rose
/// by as many from their low and stopped rising (docs/reliability.md has
/// the figures).
@Suite struct MemoryReturnTests {
    @Test func memoryIsGivenBackOnceAFloodHasSettled() throws {
        let memory = MemoryReturn(logger: Logger(label: "test"))
        let limits = ListenerGuard(maxOpen: 10_000, maxPerAddress: 10_000, logInterval: 10, logger: Logger(label: "test"))
        memory.watch(limits)
        var channels: [EmbeddedChannel] = []
        func open(_ count: Int) throws {
            for _ in 0..<count {
                let channel = EmbeddedChannel()
                try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
                #expect(try limits.admit(channel) != nil)
                channels.append(channel)
            }
        }
        try open(MemoryReturn.floodSize / 2 - 1)
        #expect(!memory.afterFlood(), "rising")
        #expect(!memory.afterFlood(), "fewer than half of a flood opened")
        try open(MemoryReturn.floodSize / 2 + 1)
        #expect(limits.open == MemoryReturn.floodSize)
        #expect(!memory.afterFlood(), "rising")
        #expect(memory.afterFlood(), "a flood opened and settled: what its handshakes freed is given back")
        for _ in 1..<MemoryReturn.followUpTicks { #expect(!memory.afterFlood(), "not yet") }
        #expect(memory.afterFlood(), "given back again, \(MemoryReturn.followUpTicks) ticks on")
        #expect(!memory.afterFlood(), "the flood is still open")
        for channel in channels.prefix(MemoryReturn.floodSize / 2 - 1) { _ = try channel.finish() }
        #expect(!memory.afterFlood(), "fewer than half of a flood closed")
        _ = try channels[MemoryReturn.floodSize / 2 - 1].finish()
        #expect(!memory.afterFlood(), "half closed, but still falling")
        #expect(memory.afterFlood(), "half closed and settled: given back")
        // What the closed connections free later is given back a few ticks on, once.
        for _ in 1..<MemoryReturn.followUpTicks { #expect(!memory.afterFlood(), "not yet") }
        #expect(memory.afterFlood(), "given back again, \(MemoryReturn.followUpTicks) ticks on")
        #expect(!memory.afterFlood(), "once")
        for channel in channels.suffix(MemoryReturn.floodSize / 2) { _ = try channel.finish() }
        #expect(!memory.afterFlood(), "falling again")
        #expect(memory.afterFlood(), "the other half closed and settled: given back again")
        for _ in 1..<MemoryReturn.followUpTicks { #expect(!memory.afterFlood()) }
        #expect(memory.afterFlood())
        #expect(!memory.afterFlood())
        #expect(memory.returned == 3)
    }
}
