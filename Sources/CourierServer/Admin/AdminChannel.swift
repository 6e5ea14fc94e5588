import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

/// The admin server's connections: hummingbird's HTTP/1.1 channel, bounded
/// as the protocol ports are (docs/security.md):
/// - at most `connections.maxPerListener` open, and `connections.maxPerAddress`
///   from one source address; one more is closed as it opens (the
///   protocol listeners' `ListenerGuard`, counted and logged as theirs);
/// - a request's headers and body must arrive whole within the request
///   deadline of its first byte (`AdminRequestDeadline`): a peer that sends
///   a byte now and then is closed, however often it sends one;
/// - a connection idle between requests for `idleTimeout` is closed.
struct AdminChannel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    private let http1: HTTP1Channel
    private let limits: ListenerGuard

    init(responder: @escaping HTTPChannelHandler.Responder, limits: ListenerGuard, requestDeadline: TimeAmount, idleTimeout: TimeAmount) {
        http1 = HTTP1Channel(
            responder: responder,
            configuration: .init(additionalChannelHandlers: [AdminRequestDeadline(timeout: requestDeadline)], idleTimeout: idleTimeout))
        self.limits = limits
    }

    /// Admits the connection (or closes it at once) and puts the byte
    /// watch of its request deadline in front of the HTTP decoder: after
    /// the TLS handler, where there is one, so that it sees the request's
    /// own bytes.
    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            // Refused: a `CloseAtOnce` in front (the initializer must not
            // throw, or the accepted socket would be dropped unclosed).
            _ = try limits.admit(channel)
            try channel.pipeline.syncOperations.addHandler(AdminRequestDeadline.BytesWatch())
        }.flatMap {
            self.http1.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await http1.handle(value: value, logger: logger)
    }
}

/// A request part as the admin server's channel decodes it.
typealias AdminRequestPart = HTTPRequestPart

/// Closes an admin connection whose request has not arrived whole — its
/// head and its body, to the end — within `timeout` of its first byte, or
/// whose first request has not within `timeout` of the connection's start
/// (a TLS handshake included). The time is not restarted by what the peer
/// sends meanwhile, as an idle timer is: one byte every few seconds no
/// longer holds a connection (nor, after an answer such as a 401, the
/// draining of a body announced as a megabyte). Once a request has
/// arrived, the time stops: answering it may take as long as it takes (a
/// long poll), and the connection's idle timeout holds between requests.
///
/// Sits after the HTTP decoder, which tells it where a request ends; its
/// `BytesWatch`, in front of the decoder, tells it where the next one starts.
final class AdminRequestDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = AdminRequestPart

    /// Bytes of the connection arrived (from `BytesWatch`).
    struct BytesArrived: Sendable {}

    /// Tells the deadline, at every read, that bytes arrived: the start of
    /// a request's time when none is being received.
    final class BytesWatch: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            context.fireUserInboundEventTriggered(BytesArrived())
            context.fireChannelRead(data)
        }
    }

    private let timeout: TimeAmount
    /// Set while a request is being received: its time running.
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is BytesArrived else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        start(context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // A part read from the same bytes as the end of the one before
        // starts the next request's time itself.
        if case .end = unwrapInboundIn(data) { stop() } else { start(context) }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    /// Starts the request's time, unless it runs already.
    private func start(_ context: ChannelHandlerContext) {
        guard deadline == nil else { return }
        deadline = context.eventLoop.assumeIsolated().scheduleTask(deadline: context.eventLoop.now + timeout) { [weak self] in
            guard let self, self.deadline != nil else { return }
            self.deadline = nil
            context.close(promise: nil)
        }
    }

    private func stop() {
        deadline?.cancel()
        deadline = nil
    }
}

@available(*, unavailable)
extension AdminRequestDeadline: Sendable {}

@available(*, unavailable)
extension AdminRequestDeadline.BytesWatch: Sendable {}
