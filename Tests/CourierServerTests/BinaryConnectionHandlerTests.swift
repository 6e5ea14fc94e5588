import CourierCore
import CourierTestSupport
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOTLS
import Testing

@testable import CourierServer

/// `BinaryConnectionHandler` on NIO's testing channel: frames in, error
/// responses out, no socket and no TLS (the real-server tests stay beside
/// it). The gateway's parts are a test server's; the certificate is the
/// demo app's, as if its handshake had just completed.
@Suite(.timeLimit(.minutes(1))) struct BinaryConnectionHandlerTests {
    struct Connection {
        let channel: NIOAsyncTestingChannel
        let work: ConnectionWork
        let running: Task<Void, Never>

        init(_ server: TestServer) async throws {
            let application = server.application
            let gateway = try BinaryGateway(
                environment: .production, configuration: application.configuration, tls: try ServerTLS(provisioner: application.provisioner),
                provisioner: application.provisioner, dispatcher: application.dispatcher, metrics: application.dispatcher.metrics,
                inbox: application.inbox, faults: application.faults, policy: application.policy, logger: Logger(label: "test"))
            let record = try #require(
                try await application.provisioner.store.certificates(kind: .provider).first {
                    $0.bundleID == "com.example.demo" && $0.environments.contains(.production)
                })
            channel = NIOAsyncTestingChannel()
            // Active, as a connection is (its close is then seen).
            try await channel.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 2195))
            let (work, runner) = ConnectionWork.make()
            self.work = work
            running = Task { await runner.run() }
            let peer = gateway.peer(for: channel, work: work, release: ConnectionRelease(open: OpenConnections()))
            peer.set(record)
            let limits = application.configuration.limits
            let handler = BinaryConnectionHandler(
                gateway: gateway, peer: peer, work: work,
                limits: BinaryDecoderLimits(
                    tokenLength: limits.tokenLength, legacyPayload: limits.payload.binaryLegacy, command2Payload: limits.payload.binaryCommand2))
            try await channel.pipeline.addHandler(handler)
            channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        }

        /// Command-2 frames, all in one read.
        func send(_ frames: [(token: [UInt8], identifier: UInt32)]) async throws {
            var buffer = ByteBuffer()
            for frame in frames {
                buffer.writeBinaryNotification(
                    token: frame.token, payload: Array(#"{"aps":{"alert":"frames"}}"#.utf8), identifier: frame.identifier, expiry: 0, priority: 10)
            }
            try await channel.writeInbound(buffer)
        }

        /// The next error response written.
        func errorResponse() async throws -> BinaryErrorResponse {
            var buffer = try await channel.waitForOutboundWrite(as: ByteBuffer.self)
            return try #require(try BinaryErrorResponse.read(from: &buffer))
        }

        func close() async {
            work.finish()
            _ = try? await channel.finish()
            await running.value
        }
    }

    /// Frames decided at once in one read: the accepted ones unanswered,
    /// the first bad one answered with its status and identifier; what
    /// follows it is read and dropped, and the connection closes after
    /// its linger.
    @Test func theFirstBadFrameIsAnsweredAndEndsTheConnection() async throws {
        try await withTestServer { server in
            let virtual = appleToken()
            try await server.addVirtualTokens([virtual])
            let connection = try await Connection(server)
            try await connection.send([(virtual, 1), (virtual, 2), (appleToken(), 3), (virtual, 4)])
            #expect(try await connection.errorResponse() == BinaryErrorResponse(status: .invalidToken, identifier: 3))
            try await connection.send([(virtual, 5)])
            #expect(try await connection.channel.readOutbound(as: ByteBuffer.self) == nil, "nothing more is answered")
            #expect(connection.channel.isActive)
            await connection.channel.testingEventLoop.advanceTime(by: .milliseconds(250))
            try await connection.channel.closeFuture.get()
            await connection.close()
        }
    }

    /// A frame the dispatcher cannot decide at once (its registration is
    /// not cached: the store is read in the listener's work) holds the
    /// frames after it, undecoded: the bad one after it is answered only
    /// once it is accepted, so the answer names the bad one.
    @Test func aFrameThatWaitsHoldsTheFramesAfterIt() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            await server.disconnect(device)
            server.dispatcher.registrations.forgetAll()
            let connection = try await Connection(server)
            try await connection.send([(token, 1), (appleToken(), 2)])
            #expect(try await connection.errorResponse() == BinaryErrorResponse(status: .invalidToken, identifier: 2))
            await connection.close()
        }
    }

    /// Graceful shutdown: status 10 with the last identifier accepted.
    @Test func shutdownNamesTheLastAcceptedIdentifier() async throws {
        try await withTestServer { server in
            let virtual = appleToken()
            try await server.addVirtualTokens([virtual])
            let connection = try await Connection(server)
            try await connection.send([(virtual, 7), (virtual, 8)])
            connection.channel.pipeline.fireUserInboundEventTriggered(BinaryConnectionHandler.ShuttingDown())
            #expect(try await connection.errorResponse() == BinaryErrorResponse(status: .shutdown, identifier: 8))
            await connection.close()
        }
    }
}
