import CourierDevice
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Testing

@testable import CourierServer

/// What TLS keeps of a client's certificate once the handshake is over:
/// the device gateway's context only its hash (about 6 KiB less per idle
/// device, docs/benchmarks.md), the provider listeners' the certificate;
/// and what the peer check keeps of a device's. Real TLS on loopback, with
/// a device identity from the test server's CA.
@Suite(.timeLimit(.minutes(2))) struct ServerTLSTests {
    @Test func theDeviceGatewayKeepsNoPeerCertificateAfterTheHandshake() async throws {
        try await withTestServer { server in
            let provisioner = server.application.provisioner
            let directory = server.directory + "/tls-device"
            _ = try await provisioner.issueDeviceIdentity(directory: directory)
            let credentials = try DeviceCredentials.load(from: directory)

            let device = try await peerCertificateAfterHandshake(server: try ServerTLS(provisioner: provisioner).context, credentials)
            #expect(device == false, "the device gateway keeps only the certificate's hash")
            let provider = try await peerCertificateAfterHandshake(server: try ServerTLS.context(provisioner: provisioner), credentials)
            #expect(provider == true, "a provider listener keeps the certificate")
        }
    }

    /// The peer check leaves a device's connection its certificate's
    /// serial and device id, not the certificate's text, which a
    /// connection that never sends Connect would keep.
    @Test func aDevicesPeerBoxKeepsItsIdentityNotItsCertificate() async throws {
        try await withTestServer { server in
            let provisioner = server.application.provisioner
            let directory = server.directory + "/box-device"
            let (device, _) = try await provisioner.issueDeviceIdentity(directory: directory)
            let credentials = try DeviceCredentials.load(from: directory)
            let verifier = PeerVerifier(
                authority: try provisioner.authority().certificate, certificates: server.application.policy.certificates, kind: .device,
                logger: server.logger)
            let (work, runner) = ConnectionWork.make()
            let running = Task { await runner.run() }
            let loop = MultiThreadedEventLoopGroup.singleton.any()
            let closed = loop.makePromise(of: Void.self)
            let box = PeerIdentityBox(verifier: verifier, closed: closed.futureResult, work: work, release: ConnectionRelease(open: OpenConnections()))
            let verified = loop.makePromise(of: NIOSSLVerificationResult.self)
            box.verify(try NIOSSLCertificate.fromPEMFile(credentials.certificatePath), promise: verified)
            #expect(try await verified.futureResult.get() == .certificateVerified)
            let record = try #require(box.record)
            #expect(record.deviceID == device.id)
            #expect(record.serial == device.certificateSerial)
            #expect(record.pem.isEmpty && record.subject.isEmpty)
            closed.succeed()
            work.finish()
            await running.value
        }
    }

    /// Whether the server's TLS handler still has the client's certificate
    /// when it reports the handshake done.
    private func peerCertificateAfterHandshake(server context: NIOSSLContext, _ credentials: DeviceCredentials) async throws -> Bool {
        let seen = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Bool.self)
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers(NIOSSLServerHandler(context: context), HandshakeWatcher(seen))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let clientContext = try NIOSSLContext(configuration: credentials.tlsConfiguration())
        let client = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: clientContext, serverHostname: "localhost"))
                }
            }
            .connect(host: "127.0.0.1", port: listener.localAddress!.port!).get()
        let kept = try await seen.futureResult.get()
        try await client.close()
        try await listener.close()
        return kept
    }
}

/// Reports, at the end of the handshake, whether the TLS handler before it
/// has the peer's certificate.
private final class HandshakeWatcher: ChannelInboundHandler {
    typealias InboundIn = NIOAny
    private let seen: EventLoopPromise<Bool>

    init(_ seen: EventLoopPromise<Bool>) { self.seen = seen }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            let tls = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
            seen.succeed(tls?.peerCertificate != nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        seen.fail(error)
        context.fireErrorCaught(error)
    }
}
