import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

/// The last handler of a device connection: decodes its frames from the
/// bytes TLS hands over and hands them (or a failure) to the connection's
/// `DeviceConnection`, and holds back reads while too many frames wait.
final class DeviceConnectionHandler: ChannelDuplexHandler, SilenceWatched {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer

    private let connection: DeviceConnection
    /// A device silent for two keepalive intervals is gone.
    private let silence: SilenceSweep<DeviceConnectionHandler>
    var silenceLinks = SilenceLinks<DeviceConnectionHandler>()
    // The two flags come here, in the bytes the links' alignment leaves:
    // the handler then takes 136 bytes, a 144-byte block of malloc's.
    /// The stream could not be read, or the connection reads no more
    /// (`DeviceConnection.stopReading`): everything after is discarded.
    private var failed = false
    /// A frame was handed on in the current read.
    private var progressed = false
    /// A device that does not read what waits for it is closed.
    private let unread: ListenerGuard
    private var decoder: DeviceFrameDecoder
    /// The start of a frame that a later read completes.
    private var received = ReceivedBytes()
    /// A frame begun must end in time.
    private var deadline: UnfinishedFrameDeadline

    init(_ connection: DeviceConnection, silence: SilenceSweep<DeviceConnectionHandler>, unread: ListenerGuard, maxFrameLength: Int, unfinishedFrameTimeout: TimeAmount) {
        self.connection = connection
        self.silence = silence
        self.unread = unread
        decoder = DeviceFrameDecoder(maxFrameLength: maxFrameLength)
        deadline = UnfinishedFrameDeadline(timeout: unfinishedFrameTimeout)
    }

    /// The channel has ended (NIO removes its handlers once it closed):
    /// the connection hears of it last.
    func handlerRemoved(context: ChannelHandlerContext) {
        silence.stop(self)
        connection.enqueue(.closed)
    }

    /// Nothing was read for two keepalive intervals.
    func silent() {
        connection.close()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        silence.heard(self)
        guard !failed else { return }
        progressed = false
        received.receive(unwrapInboundIn(data)) { handOn(&$0) }
        deadline.update(unfinished: !failed && !received.isEmpty, progressed: progressed, channel: context.channel)
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline.cancel()
        silence.stop(self)
        context.fireChannelInactive()
    }

    /// Hands on every whole frame in `buffer`; a malformed one ends the stream.
    private func handOn(_ buffer: inout ByteBuffer) {
        do {
            while let frame = try decoder.decode(buffer: &buffer) {
                progressed = true
                guard connection.enqueue(.frame(frame)) else {
                    // Over its frame budget: what the device sent after is not even decoded.
                    failed = true
                    buffer.moveReaderIndex(to: buffer.writerIndex)
                    return
                }
            }
        } catch {
            failed = true
            buffer.moveReaderIndex(to: buffer.writerIndex)
            connection.enqueue(.failed(error))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        connection.enqueue(.failed(error))
    }

    /// The device's certificate was revoked (`CertificateConnections`).
    struct Revoked: Sendable {}

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is Revoked {
            connection.enqueue(.revoked)
        } else {
            // Silence counts from the end of the handshake; until then the
            // handshake's own limit holds.
            if case .handshakeCompleted = event as? TLSUserEvent { silence.start(self) }
            context.fireUserInboundEventTriggered(event)
        }
    }

    func read(context: ChannelHandlerContext) {
        if !connection.shouldPauseReading() { context.read() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        unread.writabilityChanged(context)
        context.fireChannelWritabilityChanged()
    }
}

@available(*, unavailable)
extension DeviceConnectionHandler: Sendable {}
