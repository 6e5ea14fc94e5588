import CourierWire
import Dispatch
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import CourierServer

/// A device connection's frames leave in the order they were sent: one
/// sent on the channel's own event loop is written at once only when no
/// frame sent before still waits in the loop's queue.
@Suite struct DeviceFrameOrderTests {
    /// Collects what the server side of the connection wrote, and says
    /// when `expected` bytes have come.
    final class Received: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let bytes = NIOLockedValueBox<[UInt8]>([])
        let expected: Int
        let arrived: EventLoopPromise<Void>

        init(expected: Int, arrived: EventLoopPromise<Void>) {
            self.expected = expected
            self.arrived = arrived
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            let count = bytes.withLockedValue { bytes in
                bytes += buffer.readableBytesView
                return bytes.count
            }
            if count >= expected, count - buffer.readableBytes < expected { arrived.succeed() }
        }
    }

    /// Counts the writes that reach the server side's pipeline.
    final class Writes: ChannelOutboundHandler, Sendable {
        typealias OutboundIn = ByteBuffer
        let count = NIOLockedValueBox(0)

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            count.withLockedValue { $0 += 1 }
            context.write(data, promise: promise)
        }
    }

    /// The bytes of one frame as the connection writes it.
    private func encoded(_ message: DeviceMessage) -> [UInt8] {
        var buffer = ByteBuffer()
        message.write(to: &buffer)
        return Array(buffer.readableBytesView)
    }

    @Test func aFrameSentOnTheLoopDoesNotOvertakeOneQueuedBeforeIt() async throws {
        try await withTestServer { server in
            let application = server.application
            let gateway = DeviceGateway(
                environment: .production, configuration: application.configuration, tls: try ServerTLS(provisioner: application.provisioner),
                dispatcher: application.dispatcher, policy: application.policy, logger: Logger(label: "test"))
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            let accepted = group.next().makePromise(of: Channel.self)
            let writes = Writes()
            let listener = try await ServerBootstrap(group: group)
                .childChannelInitializer { channel in
                    accepted.succeed(channel)
                    return channel.pipeline.addHandler(writes)
                }
                .bind(host: "127.0.0.1", port: 0).get()
            let expected = encoded(.noStorage) + encoded(.keepAliveAck)
            let received = Received(expected: encoded(.noStorage).count + expected.count, arrived: group.next().makePromise())
            let peer = try await ClientBootstrap(group: group)
                .channelInitializer { $0.pipeline.addHandler(received) }
                .connect(to: listener.localAddress!).get()
            let channel = try await accepted.futureResult.get()
            let (work, _) = ConnectionWork.make()
            let connection = gateway.peer(for: channel, work: work, release: ConnectionRelease(open: OpenConnections()))

            // With nothing queued, a frame sent on the loop is written at once, before the job that sent it ends.
            let writtenAtOnce = try await channel.eventLoop.submit { () -> Int in
                connection.send(.noStorage)
                return writes.count.withLockedValue { $0 }
            }.get()
            #expect(writtenAtOnce == 1)

            // The loop is held inside a job while this thread sends a frame
            // (queued behind that job); the job then sends one on the loop.
            let held = DispatchSemaphore(value: 0)
            let onLoop = channel.eventLoop.submit { () -> Int in
                held.wait()
                connection.send(.keepAliveAck)
                return writes.count.withLockedValue { $0 }
            }
            connection.send(.noStorage)
            held.signal()
            #expect(try await onLoop.get() == 1, "the frame sent on the loop waits behind the queued one")
            try await received.arrived.futureResult.get()
            #expect(received.bytes.withLockedValue { $0 } == encoded(.noStorage) + expected, "the frame queued first is written first")
            try await peer.close()
            try await listener.close()
            try await group.shutdownGracefully()
        }
    }
}
