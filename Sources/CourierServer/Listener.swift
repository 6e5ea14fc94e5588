import NIOCore
import NIOPosix
import NIOTLS
import ServiceLifecycle

/// The accept loop every listener shares (swift-nio's structured server
/// style): each connection in its own child task, catching its own errors;
/// on graceful shutdown the listening socket closes, `onShutdown` tells the
/// open connections, and the loop returns once they have all ended.
func acceptConnections<Connection: Sendable>(
    on server: NIOAsyncChannel<Connection, Never>,
    onShutdown: @escaping @Sendable () -> Void = {},
    serve: @escaping @Sendable (Connection) async -> Void
) async throws {
    try await withGracefulShutdownHandler {
        try await server.executeThenClose { inbound in
            try await withThrowingDiscardingTaskGroup { group in
                for try await connection in inbound {
                    group.addTask { await serve(connection) }
                }
            }
        }
    } onGracefulShutdown: {
        server.channel.close(promise: nil)
        onShutdown()
    }
}

/// The bootstrap every listener binds with: address reuse, a listen
/// backlog, and no Nagle delay on the connections (answers are small).
func listenerBootstrap(backlog: Int32 = 256) -> ServerBootstrap {
    ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .serverChannelOption(.backlog, value: backlog)
        .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
}

/// Closes a connection whose TLS handshake has not finished within
/// `timeout`: a client that connects and says nothing must not hold a
/// socket for ever. Time is the event loop's, so a test can move it. Sits
/// after the TLS handler, whose handshake event it waits for.
public final class HandshakeTimeout: ChannelInboundHandler {
    public typealias InboundIn = NIOAny

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?
    private var done = false

    public init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            done = true
            deadline?.cancel()
        }
        context.fireUserInboundEventTriggered(event)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard deadline == nil, !done else { return }
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) { bound.value.close(promise: nil) }
    }
}

extension CourierConfiguration {
    /// The TLS handshake limit as the event loop counts time.
    var handshakeTimeout: TimeAmount { .milliseconds(Int64(network.handshakeTimeout * 1000)) }
}
