import ArgumentParser
import CourierCore
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

/// The floor of Courier's HTTP/2 provider API: a server on the same
/// swift-nio-ssl and swift-nio-http2, with Courier's settings (TLS 1.2 and
/// up with ALPN h2, the data directory's server certificate, at most 1,000
/// concurrent streams, NIO's default header list size), answering every
/// request `200` with a new `apns-id` as APNs does (made as Courier makes
/// it), and checking nothing.
/// `Benchmarks/h2load/compare.sh` runs it beside nginx and Courier.
///
/// `--mode multiplexer`: NIO's stream multiplexer, a child channel per
/// stream, each answer written and flushed by its stream. `--mode
/// connection`: the frames taken on the connection's channel, as
/// Courier's own handler takes them (no child channels), the answers of
/// one read flushed together.
@main
struct H2Floor: AsyncParsableCommand {
    enum Mode: String, ExpressibleByArgument, CaseIterable {
        case multiplexer
        case connection
    }

    @Option(help: "A Courier data directory (its pki/server.pem and pki/server-key.pem).")
    var data: String
    @Option
    var port = 48444
    @Option(help: "multiplexer or connection.")
    var mode = Mode.multiplexer

    func run() async throws {
        let chain = try NIOSSLCertificate.fromPEMFile(data + "/pki/server.pem")
        let key = try NIOSSLPrivateKey(file: data + "/pki/server-key.pem", format: .pem)
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        var settings = NIOHTTP2Handler.ConnectionConfiguration()
        settings.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 1000),
            HTTP2Setting(parameter: .maxHeaderListSize, value: HPACKDecoder.defaultMaxHeaderListSize),
        ]
        let (mode, http2) = (self.mode, settings)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let operations = channel.pipeline.syncOperations
                    try operations.addHandler(NIOSSLServerHandler(context: context))
                    switch mode {
                    case .multiplexer:
                        _ = try operations.configureHTTP2Pipeline(mode: .server, connectionConfiguration: http2, streamConfiguration: .init()) { stream in
                            stream.eventLoop.makeCompletedFuture { try stream.pipeline.syncOperations.addHandler(StreamAnswers()) }
                        }
                    case .connection:
                        try operations.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: http2))
                        try operations.addHandler(ConnectionAnswers())
                    }
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        print("h2-floor listening on 127.0.0.1:\(port) (\(mode.rawValue))")
        try await server.closeFuture.get()
    }
}

/// The answer to every request: its `apns-id` made as Courier makes one
/// (`UUID.notificationID()`; Foundation's `UUID()` reads the kernel's
/// random source on each call here, and its text is formatted by printf).
private func answer() -> HPACKHeaders {
    HPACKHeaders([(":status", "200"), ("apns-id", UUID.notificationID().lowercasedString)])
}

/// One stream's child channel: answers once the request ended.
private final class StreamAnswers: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let ended =
            switch unwrapInboundIn(data) {
            case .headers(let headers): headers.endStream
            case .data(let data): data.endStream
            default: false
            }
        guard ended else { return }
        context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: answer(), endStream: true))), promise: nil)
    }
}

/// The connection's frames: each request answered once it ended, the
/// answers of one read flushed together.
private final class ConnectionAnswers: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame
    private var unflushed = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let ended =
            switch frame.payload {
            case .headers(let headers): headers.endStream
            case .data(let data): data.endStream
            default: false
            }
        guard ended else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: frame.streamID, payload: .headers(.init(headers: answer(), endStream: true)))), promise: nil)
        unflushed = true
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if unflushed {
            unflushed = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    /// The connection's window is this handler's to give back (no child
    /// channels do it), as Courier's: once the peer may send less than half
    /// of the default window, what was read.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream, let size = window.inboundWindowSize, size <= 65_535 / 2 {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: 65_535 - size))), promise: nil)
            unflushed = true
        }
        context.fireUserInboundEventTriggered(event)
    }
}
