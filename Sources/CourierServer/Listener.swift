import NIOCore
import NIOPosix
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
