import NIOCore
import NIOTLS

/// Completes a promise when the TLS handshake is done (fails it if the
/// connection closes first).
public final class HandshakeSignal: ChannelInboundHandler, Sendable {
    public typealias InboundIn = NIOAny
    public let promise: EventLoopPromise<Void>

    public init(promise: EventLoopPromise<Void>) {
        self.promise = promise
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent { promise.succeed() }
        context.fireUserInboundEventTriggered(event)
    }

    /// The handshake's own error (a certificate that did not verify, say),
    /// rather than the closed channel that follows it.
    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.fireErrorCaught(error)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        promise.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        promise.fail(ChannelError.ioOnClosedChannel)
    }
}
