import NIOCore
import NIOEmbedded
import Testing

@testable import CourierServer

/// A connection from which nothing is read for its silence timeout is
/// closed: a device's after two keepalive intervals (`SilenceWatch`, told
/// of each read by the device's handler), a binary provider's after
/// `connections.binaryIdle` (`ConnectionTimeout(.silence)`). On an
/// embedded event loop whose time the tests move.
@Suite struct SilenceWatchTests {
    @Test func aSilentDeviceConnectionIsClosedAfterTwoKeepaliveIntervals() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let watch = SilenceWatch(channel, timeout: .seconds(120))
        watch.start()
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive)
        watch.heard()  // a frame read counts as life
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive, "119 s after the last read")
        watch.heard()
        watch.start()  // a second start changes nothing
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive, "119 s after the last read, again")
        loop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "120 s of silence")
    }

    @Test func aStoppedWatchClosesNothing() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let watch = SilenceWatch(channel, timeout: .seconds(120))
        watch.start()
        loop.advanceTime(by: .seconds(60))
        watch.stop()
        loop.advanceTime(by: .seconds(600))
        #expect(channel.isActive, "its entry left the schedule")
        watch.start()
        loop.advanceTime(by: .seconds(600))
        #expect(channel.isActive, "a stopped watch does not start again")
    }

    @Test func aSilentProviderConnectionIsClosedAfterItsIdleTimeout() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        try channel.pipeline.syncOperations.addHandler(ConnectionTimeout(.silence, timeout: .seconds(120)))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive)
        try channel.writeInbound(ByteBuffer(bytes: [0x02, 0, 0, 0, 0]))  // any bytes read count as life
        _ = try channel.readInbound(as: ByteBuffer.self)
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive, "119 s after the read")
        loop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "120 s of silence")
    }
}
