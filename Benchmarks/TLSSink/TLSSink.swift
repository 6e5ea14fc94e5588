import ArgumentParser
import CourierServer
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// A TLS server that does nothing but hold its connections: the floor of
/// what one idle device connection costs in SwiftNIO and NIOSSL, without
/// any of Courier. It uses the TLS settings of Courier's device gateway
/// (the data directory's server certificate, a client certificate from
/// its CA required, TLS 1.2 to 1.3) and, with `--page-buffers`, Courier's
/// page-mapped buffer allocator. Measure it with
/// `courier-load --mode tls-idle --device-port PORT --server-pid PID`.
@main
struct TLSSink: ParsableCommand {
    @Option(help: "A Courier data directory (its pki/ folder is used).")
    var data: String
    @Option
    var port = 5299
    @Flag(name: .customLong("page-buffers"), help: "Give the connections Courier's page-mapped buffer allocator, as its device gateway does.")
    var pageBuffers = false

    func run() throws {
        ProcessorAffinity.fitSharedThreads()
        let pki = data + "/pki"
        let chain = try NIOSSLCertificate.fromPEMFile(pki + "/server.pem")
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(try NIOSSLPrivateKey(file: pki + "/server-key.pem", format: .pem)))
        configuration.minimumTLSVersion = .tlsv12
        configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(pki + "/ca.pem"))
        configuration.certificateVerification = .noHostnameVerification
        let context = try NIOSSLContext(configuration: configuration)
        var bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        if pageBuffers { bootstrap = bootstrap.childChannelOption(.allocator, value: PageBufferAllocator.allocator) }
        let server = try bootstrap
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context)) }
            }
            .bind(host: "127.0.0.1", port: port).wait()
        print("tls-sink listening on 127.0.0.1:\(port)\(pageBuffers ? " (page buffers)" : "")")
        try server.closeFuture.wait()
    }
}
