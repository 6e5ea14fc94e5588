import CourierCore
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import ServiceLifecycle

/// The port on which the other nodes hand pushes over to this one
/// (`cluster.peerPort`, docs/operations.md): HTTP/2 with mutual TLS, where
/// only a certificate of the cluster authority opens a connection (every
/// node makes its own from the shared CA's key; a provider's or a
/// device's certificate does not chain to it). One route:
/// `POST /v1/handover`, kept open by the other node, a stream each way
/// (`HandOverFrames`): each frame the request's body brings, its pushes
/// sent to their devices (a device gone: as the database's queue treats
/// it) and its inbox entries recorded, is acknowledged in the answer's
/// body, in order; a frame that is not one ends the stream. A stop ends
/// the streams.
///
/// Bounded as the other ports are: at most `connections.maxPerListener`
/// open and `connections.maxPerAddress` from one address, at most
/// `connections.unauthenticatedShare` of them before their handshake,
/// which must end within `network.handshakeTimeout`, and an address whose
/// connections end unauthenticated `connections.maxFailedAuthenticationsPerAddress`
/// times in a second refused for the rest of it.
struct NodeListener: Service {
    static let handOverPath = "/v1/handover"
    /// At a stop: how long another node's connection is given to close.
    static let closeLimit: Duration = .seconds(2)

    let host: String
    let port: Int
    let tls: TLSConfiguration
    let connections: CourierConfiguration.Connections
    let handshakeTimeout: TimeAmount
    let dispatcher: Dispatcher
    /// Told the port once bound.
    let listening: @Sendable (Int) -> Void
    let logger: Logger

    func run() async throws {
        var logger = logger
        logger[metadataKey: "courier.listener"] = "nodes"
        let limits = ListenerGuard(
            maxOpen: connections.maxPerListener, maxPerAddress: connections.maxPerAddress, unauthenticatedShare: connections.unauthenticatedShare,
            maxUnauthenticatedPerAddress: connections.unauthenticatedPerAddress, maxFailuresPerAddress: connections.maxFailedAuthenticationsPerAddress,
            logInterval: connections.refusalLogInterval, logger: logger)
        let (tls, timeout) = (self.tls, handshakeTimeout)
        let server = HTTPServerBuilder { responder in
            NodeChannel(http2: try HTTP2UpgradeChannel(tlsConfiguration: tls, responder: responder), limits: limits, handshakeTimeout: timeout)
        }
        let app = Application(
            router: router(), server: server,
            configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: "Courier"),
            onServerRunning: { [listening] channel in listening(channel.localAddress?.port ?? 0) },
            logger: logger)
        do {
            try await app.run()
        } catch let error as IOError {
            throw ListenerBindError(listener: "nodes", host: host, port: port, reason: String(cString: strerror(error.errnoCode)), key: "cluster.peerPort")
        }
    }

    func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.post(RouterPath(Self.handOverPath)) { [dispatcher] request, _ -> Response in
            // Frames in as they come, each taken in order and acknowledged (`HandOverFrames`).
            Response(
                status: .ok, headers: [.contentType: "application/octet-stream"],
                body: ResponseBody { writer in
                    // The stream is the other node's for as long as it likes, and ends when this node stops
                    // (the server waits for its requests; the other node's do not end by themselves): the
                    // frames are read in a task that the stop cancels, and acknowledged here.
                    let (acknowledgements, acknowledge) = AsyncStream.makeStream(of: ByteBuffer.self)
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            defer { acknowledge.finish() }
                            try await cancelWhenGracefulShutdown {
                                var frames = HandOverFrames.Reader()
                                for try await part in request.body {
                                    frames.append(part)
                                    var taken = ByteBuffer()
                                    while let frame = try frames.next() {
                                        dispatcher.sendHandedOver(frame.notifications)
                                        dispatcher.cluster?.inboxExchange.take(frame.inbox)
                                        taken.writeInteger(frame.sequence)
                                    }
                                    if taken.readableBytes > 0 { acknowledge.yield(taken) }
                                }
                            }
                        }
                        for await taken in acknowledgements { try await writer.write(taken) }
                        // Cancelled by the stop: the stream ends as any does.
                        try? await group.waitForAll()
                    }
                    try await writer.finish(nil)
                })
        }
        return router
    }
}

/// A connection of the nodes' port: counted in (or closed at once), its
/// handshake timed, authenticated once the handshake verified its
/// certificate; then hummingbird's HTTP/2 channel, closed at the latest
/// `NodeListener.closeLimit` after a stop began.
private struct NodeChannel: ServerChildChannel {
    typealias Value = HTTP2UpgradeChannel.Value
    let http2: HTTP2UpgradeChannel
    let limits: ListenerGuard
    let handshakeTimeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture { () -> ListenerGuard.Admission? in
            try limits.admit(channel)
        }.flatMap { admission in
            http2.setup(channel: channel, logger: logger).flatMapThrowing { value in
                // After the TLS handler, whose handshake event they wait for.
                let operations = channel.pipeline.syncOperations
                let tls = try operations.handler(type: NIOSSLServerHandler.self)
                try operations.addHandler(HandshakeAuthenticates(admission), position: .after(tls))
                try operations.addHandler(ConnectionTimeout(.handshake, timeout: handshakeTimeout), position: .after(tls))
                return value
            }
        }
    }

    func handle(value: Value, logger: Logger) async {
        // At a stop, HTTP/2's graceful close waits for the other node to answer its PING; a node that does
        // not (stopped, or cut off) would hold this one's stop for ever: its connection is closed after a while.
        await withGracefulShutdownHandler {
            await http2.handle(value: value, logger: logger)
        } onGracefulShutdown: {
            let channel = value.channel
            channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(NodeListener.closeLimit / .nanoseconds(1)))) { channel.close(promise: nil) }
        }
    }
}

/// Moves the connection out of the unauthenticated share when its
/// handshake completes (its certificate verified during it).
private final class HandshakeAuthenticates: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = NIOAny
    private let admission: ListenerGuard.Admission?

    init(_ admission: ListenerGuard.Admission?) { self.admission = admission }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        context.fireUserInboundEventTriggered(event)
        if case .handshakeCompleted = event as? TLSUserEvent {
            admission?.authenticated()
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }
}
