import ArgumentParser
import CourierServer
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// A TLS server that does nothing but hold its connections: the floor of
/// what one idle device connection costs in SwiftNIO and NIOSSL, without
/// any of Courier. It uses the TLS context of Courier's device gateway
/// (`Provisioner.serverTLSContext()`: the data directory's server
/// certificate, a client certificate from its CA required) and, with
/// `--page-buffers`, Courier's page-mapped buffer allocator. Measure it
/// with `courier-load --mode tls-idle --device-port PORT --server-pid PID`.
///
/// By default, as Courier's device gateway, TLS keeps only a hash of each
/// client's certificate once the handshake is done;
/// `--keep-peer-certificates` keeps the certificates (as swift-nio-ssl
/// does by default), `--tls12` limits the connections to TLS 1.2, and
/// `--answer` writes one byte on each connection once its handshake is
/// done, as a server answers its client's first message (Courier's
/// device gateway its ConnectAck): TLS 1.3's session ticket, which
/// BoringSSL holds until the connection's first write, goes out then.
@main
struct TLSSink: AsyncParsableCommand {
    @Option(help: "A Courier data directory.")
    var data: String
    @Option
    var port = 5299
    @Flag(name: .customLong("page-buffers"), help: "Give the connections Courier's page-mapped buffer allocator, as its device gateway does.")
    var pageBuffers = false
    @Flag(name: .customLong("tls12"), help: "TLS 1.2 at most.")
    var tls12 = false
    @Flag(name: .customLong("keep-peer-certificates"), help: "Keep each client's certificate after the handshake (Courier's device gateway keeps only its hash).")
    var keepPeerCertificates = false
    @Flag(help: "Write one byte on each connection once its handshake is done.")
    var answer = false

    func run() async throws {
        ProcessorAffinity.fitSharedThreads()
        var configuration = CourierConfiguration(dataDirectory: data)
        configuration.demo.enabled = false
        let provisioner = try await Provisioner.open(configuration: configuration, logger: Logger(label: "tls-sink"))
        let context = try provisioner.serverTLSContext(maximumVersion: tls12 ? .tlsv12 : nil, keepingPeerCertificates: keepPeerCertificates)
        try await provisioner.close()
        var bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        if pageBuffers { bootstrap = bootstrap.childChannelOption(.allocator, value: PageBufferAllocator.allocator) }
        let server = try await bootstrap
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    if answer { try channel.pipeline.syncOperations.addHandler(AnswerAfterHandshake()) }
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        let notes = [pageBuffers ? "page buffers" : nil, tls12 ? "TLS 1.2" : nil, keepPeerCertificates ? "peer certificates kept" : nil, answer ? "one byte written" : nil]
            .compactMap { $0 }
        print("tls-sink listening on 127.0.0.1:\(port)\(notes.isEmpty ? "" : " (" + notes.joined(separator: ", ") + ")")")
        try await server.closeFuture.get()
    }
}

/// Writes one byte once the TLS handshake is done (`--answer`).
final class AnswerAfterHandshake: ChannelInboundHandler {
    typealias InboundIn = NIOAny

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            context.writeAndFlush(NIOAny(context.channel.allocator.buffer(bytes: [0])), promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
}
