import Logging
import NIOCore
import NIOEmbedded
import NIOTLS
import Testing

@testable import CourierServer

/// A connection from which nothing is read for its silence timeout is
/// closed: a device's after two keepalive intervals, a binary provider's
/// after `connections.binaryIdle`. Every connection of an event loop is
/// watched by the loop's one `SilenceSweep`. On an embedded event loop
/// whose time the tests move.
@Suite struct SilenceSweepTests {
    /// A connection as the sweep sees it.
    final class Watched: SilenceWatched {
        let channel: EmbeddedChannel
        var silenceLinks = SilenceLinks<Watched>()

        init(_ loop: EmbeddedEventLoop) throws {
            channel = EmbeddedChannel(loop: loop)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        }

        func silent() { channel.close(promise: nil) }
    }

    @Test func eachConnectionIsClosedAtItsOwnDeadline() throws {
        let loop = EmbeddedEventLoop()
        let sweep = SilenceSweep<Watched>(eventLoop: loop, timeout: .seconds(120))
        let first = try Watched(loop)
        let second = try Watched(loop)
        let third = try Watched(loop)
        sweep.start(first)
        loop.advanceTime(by: .seconds(10))
        sweep.start(second)
        sweep.start(third)
        loop.advanceTime(by: .seconds(90))
        sweep.heard(first)  // a read counts as life: at 100 s, first is now the last to be due
        loop.advanceTime(by: .seconds(29))
        #expect(first.channel.isActive && second.channel.isActive && third.channel.isActive, "119 s after the second's start")
        sweep.heard(third)
        loop.advanceTime(by: .seconds(1))
        #expect(!second.channel.isActive, "120 s of silence")
        #expect(first.channel.isActive && third.channel.isActive)
        loop.advanceTime(by: .seconds(89))
        #expect(first.channel.isActive, "119 s after its read")
        loop.advanceTime(by: .seconds(1))
        #expect(!first.channel.isActive, "120 s after its read")
        #expect(third.channel.isActive)
        loop.advanceTime(by: .seconds(28))
        #expect(third.channel.isActive, "119 s after its read")
        loop.advanceTime(by: .seconds(1))
        #expect(!third.channel.isActive, "120 s after its read")
    }

    @Test func aStoppedConnectionIsNotClosedNorWatchedAgain() throws {
        let loop = EmbeddedEventLoop()
        let sweep = SilenceSweep<Watched>(eventLoop: loop, timeout: .seconds(120))
        let stopped = try Watched(loop)
        let other = try Watched(loop)
        sweep.start(stopped)
        sweep.start(other)
        loop.advanceTime(by: .seconds(60))
        sweep.stop(stopped)
        sweep.start(stopped)  // a start after stop does nothing
        sweep.heard(stopped)
        loop.advanceTime(by: .seconds(60))
        #expect(!other.channel.isActive)
        loop.advanceTime(by: .seconds(600))
        #expect(stopped.channel.isActive, "it left the sweep")
    }

    @Test func aSecondStartChangesNothing() throws {
        let loop = EmbeddedEventLoop()
        let sweep = SilenceSweep<Watched>(eventLoop: loop, timeout: .seconds(120))
        let watched = try Watched(loop)
        sweep.start(watched)
        loop.advanceTime(by: .seconds(100))
        sweep.start(watched)
        loop.advanceTime(by: .seconds(20))
        #expect(!watched.channel.isActive, "120 s after the first start")
    }

    @Test func aSilentProviderConnectionIsClosedAfterItsIdleTimeout() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let sweeps = SilenceSweeps<SilenceTimeout>(timeout: .seconds(120))
        try channel.pipeline.syncOperations.addHandler(SilenceTimeout(sweeps))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        // A slow handshake is the handshake limit's to end, not silence.
        loop.advanceTime(by: .seconds(300))
        #expect(channel.isActive, "no silence counted before the handshake ends")
        channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive)
        try channel.writeInbound(ByteBuffer(bytes: [0x02, 0, 0, 0, 0]))  // any bytes read count as life
        _ = try channel.readInbound(as: ByteBuffer.self)
        loop.advanceTime(by: .seconds(119))
        #expect(channel.isActive, "119 s after the read")
        loop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "120 s of silence")
    }

    /// The device gateway's handler is watched by its loop's sweep: a
    /// device that sends nothing is closed after two keepalive intervals,
    /// and bytes read put it off.
    @Test func aSilentDeviceConnectionIsClosedAfterTwoKeepaliveIntervals() async throws {
        // A frame begun may wait longer than the silence here, so that one byte read is only life.
        try await withTestServer(configure: { $0.connections.unfinishedFrameTimeout = 3600 }) { server in
            let application = server.application
            let gateway = DeviceGateway(
                environment: .production, configuration: application.configuration, tls: try ServerTLS(provisioner: application.provisioner),
                dispatcher: application.dispatcher, policy: application.policy, logger: Logger(label: "test"))
            let silence = TimeAmount.seconds(Int64(2 * application.configuration.qos.keepAlive))
            // A loop whose time the test moves, and that other threads may
            // use: the connection's end is handled by its task.
            let loop = NIOAsyncTestingEventLoop()
            let channel = NIOAsyncTestingChannel(loop: loop)
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1))
            let (work, _) = ConnectionWork.make()
            let release = ConnectionRelease(open: OpenConnections())
            try await loop.executeInContext {
                _ = try gateway.setUp(channel, peer: gateway.peer(for: channel, work: work, release: release), work: work, release: release)
            }
            await loop.advanceTime(by: silence + .seconds(60))
            #expect(channel.isActive, "no silence counted before the handshake ends")
            try await loop.executeInContext { channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil)) }
            await loop.advanceTime(by: silence - .seconds(1))
            #expect(channel.isActive)
            try await channel.writeInbound(ByteBuffer(bytes: [0x01]))  // the start of a frame: bytes read
            await loop.advanceTime(by: silence - .seconds(1))
            #expect(channel.isActive, "a keepalive interval and more after the read")
            await loop.advanceTime(by: .seconds(1))
            #expect(!channel.isActive, "two keepalive intervals of silence")
            try await loop.shutdownGracefully()
        }
    }
}
