import CourierCore
import CourierPKI
import CourierProvider
@testable import CourierServer
import CourierWire
import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import NIOSSL
import NIOTLS
import Testing

/// What a peer may hold (docs/security.md, docs/configuration.md
/// `connections.*`): connections per listener and per address, time to
/// authenticate, to finish a frame, to read feedback; and how often one
/// provider identity may connect.
@Suite(.timeLimit(.minutes(2))) struct ConnectionLimitTests {
    /// A plain TCP connection from `source` (a loopback address), open
    /// until the server closes it; `closed` completes then.
    func tcpConnection(port: Int, from source: String) async throws -> any Channel {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .connect(host: "127.0.0.1", port: port).get()
    }

    /// Beyond `connections.maxPerAddress` a new connection from that
    /// address is closed at accept; one that closes makes room again.
    @Test func connectionsBeyondAnAddresssLimitAreClosedAtAccept() async throws {
        try await withTestServer(configure: { $0.connections.maxPerAddress = 2 }) { server in
            let first = try await server.http2Connection()
            let second = try await server.http2Connection()
            await #expect(throws: (any Error).self) { _ = try await server.http2Connection() }
            // Another listener counts its own.
            let device = try await server.device()
            await first.close()
            // Room again once the server has seen it close (a moment later: retried, boundedly).
            var again: HTTP2Connection?
            for _ in 0..<200 where again == nil { again = try? await server.http2Connection() }
            let reopened = try #require(again)
            #expect(reopened.isUsable)
            await reopened.close()
            await second.close()
            await server.disconnect(device)
        }
    }

    /// A device connection counts itself out of its listener's guard when
    /// it ends (it has no close callback on its channel for it).
    @Test func aDeviceConnectionIsCountedOutWhenItEnds() async throws {
        try await withTestServer { server in
            let open = { server.application.policy.open.counts()["device.production"] }
            let device = try await server.device()
            #expect(open() == 1)
            await server.disconnect(device)
            try await waitUntil(limit: 10) { open() == 0 }
        }
    }

    /// A TLS connection from `source`, returned once its handshake is
    /// done: the server has admitted it.
    func tlsConnection(port: Int, from source: String, caPath: String) async throws -> any Channel {
        let context = try NIOSSLContext(configuration: try ProviderTLS(certificatePath: nil, keyPath: nil, caPath: caPath).configuration())
        let (channel, handshake) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let signal = HandshakeSignal(promise: channel.eventLoop.makePromise())
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    try channel.pipeline.syncOperations.addHandler(signal)
                    return (channel, signal.promise.futureResult)
                }
            }
        try await handshake.get()
        return channel
    }

    /// Beyond `connections.maxPerListener` a new connection is closed at
    /// accept, whatever its address (other loopback addresses here).
    @Test func connectionsBeyondAListenersLimitAreClosedAtAccept() async throws {
        // Every connection may be unauthenticated here: the share for those is tested on its own.
        try await withTestServer(configure: {
            $0.connections.maxPerListener = 3
            $0.connections.unauthenticatedShare = 1
        }) { server in
            let port = try await server.http2Port()
            // Each held connection finishes its handshake before the next
            // one connects: connections accepted together are admitted in
            // whatever order their event loops run them.
            var held: [any Channel] = []
            for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
                held.append(try await tlsConnection(port: port, from: source, caPath: server.caPath))
            }
            // The fourth, from a fifth address, is closed by the server at once.
            let refused = try await tcpConnection(port: port, from: "127.0.0.5")
            try await refused.closeFuture.get()
            for channel in held { #expect(channel.isActive, "the first three stay") }
            // The provider listener of the other environment, and the device listener, have their own limits.
            let sandbox = try await server.http2Connection(.sandbox)
            #expect(sandbox.isUsable)
            let device = try await server.device()
            for channel in held { try await channel.close() }
            await sandbox.close()
            await server.disconnect(device)
        }
    }

    /// An HTTP/2 connection without a client certificate that sends no
    /// valid provider token within `connections.authenticationTimeout` gets
    /// GOAWAY MissingProviderToken; one that authenticated stays.
    @Test func anHTTP2ConnectionThatDoesNotAuthenticateIsClosed() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let silent = try await server.http2Connection()
            let authenticated = try await server.http2Connection()
            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            #expect(try await RawPush(token: token, authorization: authorization).send(on: authenticated).status == 200)
            let unauthenticated = try await server.http2Connection()
            #expect(try await RawPush(token: token).send(on: unauthenticated).reason == "MissingProviderToken")

            server.clock.advance(by: 9)
            await server.application.sweep()
            #expect(silent.isUsable, "9 s: still in time")
            server.clock.advance(by: 1)
            await server.application.sweep()
            #expect(try #require(await silent.closed()).reason == .missingProviderToken)
            #expect(try #require(await unauthenticated.closed()).reason == .missingProviderToken)
            #expect(authenticated.isUsable)
            await authenticated.close()
            await server.disconnect(device)
        }
    }

    /// A provider certificate that connects more than
    /// `connections.reconnectLimit` times per window is refused at the
    /// handshake until the window has passed; so is an auth key (its
    /// first request: 429 TooManyRequests).
    @Test func aProviderThatReconnectsTooFastIsRefusedForAWhile() async throws {
        try await withTestServer(configure: { $0.connections.reconnectLimit = 3 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let payload = Array(#"{"aps":{"alert":"again"}}"#.utf8)
            for _ in 0..<3 {
                let client = try await server.binaryClient()
                _ = try await client.send(token: token, payload: payload, expiry: 0)
                #expect(await device.next() != nil)
                await client.close()
            }
            let fourth = try await server.binaryClient()
            await #expect(throws: (any Error).self) { _ = try await fourth.send(token: token, payload: payload, expiry: 0) }
            await fourth.close()

            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            for _ in 0..<3 {
                let connection = try await server.http2Connection()
                #expect(try await RawPush(token: token, authorization: authorization).send(on: connection).status == 200)
                await connection.close()
            }
            let tooFast = try await server.http2Connection()
            let refused = try await RawPush(token: token, authorization: authorization).send(on: tooFast)
            #expect((refused.status, refused.reason) == (429, "TooManyRequests"))
            #expect(try #require(await tooFast.closed()).reason == .tooManyRequests)

            server.clock.advance(by: 60)
            let later = try await server.binaryClient()
            _ = try await later.send(token: token, payload: payload, expiry: 0)
            #expect(await device.next() != nil, "the window passed")
            await later.close()
            await server.disconnect(device)
        }
    }

    /// One provider identity holds at most `connections.maxPerIdentity`
    /// connections open: beyond it a certificate's handshake is refused and
    /// a key's first request gets 429 TooManyRequests; another identity is
    /// not touched, and once one closes there is room again.
    @Test func aProviderIdentityHoldsAtMostItsConnections() async throws {
        try await withTestServer(configure: { $0.connections.maxPerIdentity = 2 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let tokenB = try await device.client.register(try await Self.otherApp(server))
            let payload = Array(#"{"aps":{"alert":"held"}}"#.utf8)
            var held: [BinaryProviderClient] = []
            for _ in 0..<2 {
                let client = try await server.binaryClient()
                _ = try await client.send(token: token, payload: payload, expiry: 0)
                #expect(await device.next() != nil)
                held.append(client)
            }
            let third = try await server.binaryClient()
            await #expect(throws: (any Error).self) { _ = try await third.send(token: token, payload: payload, expiry: 0) }
            await third.close()

            // Another team's certificate still connects while the first holds its two.
            let other = try await server.binaryClient(certificate: server.directory + "/b/com.example.b.pem", key: server.directory + "/b/com.example.b-key.pem")
            _ = try await other.send(token: tokenB, payload: payload, expiry: 0)
            #expect(await device.next() != nil)
            await other.close()

            // A key: its two connections, then 429 on the first request of a third.
            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            var connections: [HTTP2Connection] = []
            for _ in 0..<2 {
                let connection = try await server.http2Connection()
                #expect(try await RawPush(token: token, authorization: authorization).send(on: connection).status == 200)
                connections.append(connection)
            }
            let tooMany = try await server.http2Connection()
            let refused = try await RawPush(token: token, authorization: authorization).send(on: tooMany)
            // Required: a connection that was not refused would never close.
            try #require((refused.status, refused.reason) == (429, "TooManyRequests"))
            #expect(try #require(await tooMany.closed()).reason == .tooManyRequests)

            // Closing one makes room (the server counts it out when it sees the close).
            await held.removeFirst().close()
            var admitted = false
            for _ in 0..<50 where !admitted {
                let again = try await server.binaryClient()
                if (try? await again.send(token: token, payload: payload, expiry: 0)) != nil, await device.next(limit: 2) != nil { admitted = true }
                await again.close()
            }
            #expect(admitted)
            for client in held { await client.close() }
            for connection in connections { await connection.close() }
            await server.disconnect(device)
        }
    }

    /// An app of another team, with a provider certificate in `b/`.
    private static func otherApp(_ server: TestServer) async throws -> String {
        let provisioner = server.application.provisioner
        _ = try await provisioner.createTeam(id: "OTHERTEAM1", name: "Other")
        _ = try await provisioner.createApp(bundleID: "com.example.b", teamID: "OTHERTEAM1")
        _ = try await provisioner.issueProviderCertificate(bundleID: "com.example.b", environments: [.production], directory: server.directory + "/b")
        return "com.example.b"
    }

    /// A binary connection that sends half a frame is closed after
    /// `connections.unfinishedFrameTimeout`; one that says nothing, after
    /// `connections.binaryIdleTimeout`. (Silence counts from the server's
    /// end of the handshake, which comes before the client's: the idle
    /// limit leaves the client time for its first write however slow the
    /// machine running the suite is.)
    @Test func binaryConnectionsWithHalfAFrameOrNothingAreClosed() async throws {
        try await withTestServer(configure: {
            $0.connections.unfinishedFrameTimeout = 0.2
            $0.connections.binaryIdleTimeout = 5
        }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            var frame = ByteBuffer()
            frame.writeBinaryNotification(token: token, payload: Array(#"{"aps":{"alert":"half"}}"#.utf8), identifier: 1, expiry: 0, priority: 10)
            let half = try await server.binaryClient()
            try await half.sendRaw(frame.getSlice(at: 0, length: 20)!, identifier: 1)
            await half.waitForDisconnect()

            // Connected (nothing written), then silent: closed by the server
            // (which may have done so before the client's write of nothing).
            let idle = try await server.binaryClient()
            do {
                try await idle.sendRaw(ByteBuffer(), identifier: 0)
            } catch ChannelError.ioOnClosedChannel {}
            await idle.waitForDisconnect()
            await server.disconnect(device)
        }
    }

    /// A device connection that sends half a frame is closed after
    /// `connections.unfinishedFrameTimeout`, though its bytes keep coming
    /// within the keepalive.
    @Test func aDeviceConnectionWithHalfAFrameIsClosed() async throws {
        try await withTestServer(configure: { $0.connections.unfinishedFrameTimeout = 0.2 }) { server in
            let connection = try await DeviceGatewayTests().rawConnection(server, writing: ByteBuffer.self)
            let answers = try await connection.executeThenClose { inbound, outbound in
                var connect = ByteBuffer()
                DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: nil).write(to: &connect)
                try await outbound.write(connect)
                var messages: [DeviceMessage] = []
                do {
                    for try await frame in inbound {
                        messages.append(try DeviceMessage(frame: frame))
                        // A KeepAlive's first two bytes, and no more.
                        if messages.last == .noStorage { try await outbound.write(ByteBuffer(bytes: [DeviceCommand.keepAlive, 0])) }
                    }
                } catch {
                    // Closed by the server.
                }
                return messages
            }
            #expect(answers.last == .noStorage, "closed with nothing more said")
        }
    }

    /// A feedback connection has `connections.feedbackTimeout` from its
    /// start, whatever it does (a client that does not read cannot keep
    /// the server writing to it); on a loop whose time the test moves.
    @Test func aFeedbackConnectionHasALifetime() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        try channel.pipeline.syncOperations.addHandler(ConnectionTimeout(.lifetime, timeout: .seconds(30)))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        loop.advanceTime(by: .seconds(20))
        try channel.writeInbound(ByteBuffer(bytes: [1, 2, 3]))
        _ = try channel.readInbound(as: ByteBuffer.self)
        loop.advanceTime(by: .seconds(9))
        #expect(channel.isActive, "29 s")
        loop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "30 s from the start, though bytes came")
    }

    /// The listeners' limits fitted to an open-file limit: in proportion,
    /// with room kept for the store and files; unchanged where they fit.
    /// The banner says whose limits were lowered: the defaults', or those
    /// the configuration set.
    @Test func theBannerSaysWhoseLimitsWereLowered() {
        let defaults = CourierConfiguration.Connections()
        #expect(defaults.fitted(toDescriptorLimit: 1024).describe(descriptorLimit: 1024, configured: defaults).contains("Lowered from the default 21000"))
        var set = defaults
        set.maxPerListener = 2_000
        let text = set.fitted(toDescriptorLimit: 1024).describe(descriptorLimit: 1024, configured: set)
        #expect(text.contains("Lowered from the configured \(set.capacity) to fit"), "\(text)")
        #expect(!defaults.describe(descriptorLimit: 1_000_000, configured: defaults).contains("Lowered"))
    }

    @Test func limitsAreFittedToTheOpenFileLimit() {
        let configured = CourierConfiguration.Connections()
        // Two device listeners of 6,000, eight provider listeners and the admin port of 1,000 each, and 256 kept.
        #expect(configured.capacity == 21_000)
        #expect(configured.fitted(toDescriptorLimit: 21_256) == configured)
        #expect(configured.fitted(toDescriptorLimit: 1_000_000) == configured)
        let small = configured.fitted(toDescriptorLimit: 1024)
        #expect(small.capacity <= 1024 - 256)
        #expect(small.maxPerDeviceListener == 6000 * 768 / 21000)
        #expect(small.maxPerListener == 1000 * 768 / 21000)
        #expect(small.maxPerAddress <= small.maxPerDeviceListener)
        let tiny = configured.fitted(toDescriptorLimit: 64)
        #expect(tiny.capacity <= 48 && tiny.maxPerListener >= 1)
        // A sandbox device listener of its own size counts as its size, and is fitted too.
        var mostlyProduction = configured
        mostlyProduction.maxPerDeviceListener = 10_000
        mostlyProduction.maxPerSandboxDeviceListener = 100
        mostlyProduction.maxPerListener = 50
        #expect(mostlyProduction.capacity == 10_000 + 100 + 9 * 50)
        #expect(mostlyProduction.fitted(toDescriptorLimit: 20_000) == mostlyProduction)
        #expect(mostlyProduction.maxPerDeviceListener(.sandbox) == 100)
        #expect(mostlyProduction.fitted(toDescriptorLimit: 5_000).maxPerDeviceListener(.sandbox) == 100 * 4_744 / 10_550)
    }

    /// An HTTP/2 connection may hold `connections.maxUnfinishedRequestBytes`
    /// in requests not received whole: the stream that would go over is
    /// reset with ENHANCE_YOUR_CALM (11); the connection goes on, and the
    /// bytes of the reset streams are free again.
    @Test func unfinishedRequestsAreBoundedPerConnection() async throws {
        try await withTestServer(configure: { $0.connections.maxUnfinishedRequestBytes = 40_000 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let connection = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            let part = [UInt8](repeating: UInt8(ascii: " "), count: 4_000)
            var resets: [Task<Int?, Never>] = []
            for _ in 0..<12 {
                resets.append(try await connection.startUnfinishedRequest(RawPush(token: token).all, bodyStart: part))
            }
            // Nine fit (4,000 bytes and their headers each); the rest do not.
            for reset in resets.suffix(3) { #expect(await reset.value == 11, "reset ENHANCE_YOUR_CALM") }
            let answer = try await RawPush(token: token).send(on: connection)
            #expect(answer.status == 200, "the connection goes on")
            #expect(connection.isUsable)
            await connection.close()
            for reset in resets { _ = await reset.value }
            await server.disconnect(device)
        }
    }

    /// Streams the server resets count as the peer's own resets do: a
    /// connection that makes it reset more than 100 in 30 s gets GOAWAY
    /// ENHANCE_YOUR_CALM; and the reset's log line is written once per
    /// interval, the rest counted (`PeerLog`).
    @Test func resetsTheServerMakesEndTheConnectionAndLogOnce() async throws {
        try await withTestServer(configure: { $0.connections.maxUnfinishedRequestBytes = 16_384 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let connection = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            let part = [UInt8](repeating: UInt8(ascii: " "), count: 4_000)
            var resets: [Task<Int?, Never>] = []
            for _ in 0..<(HTTP2ProviderHandler.serverResetLimit + 10) {
                guard let started = try? await connection.startUnfinishedRequest(RawPush(token: token).all, bodyStart: part) else { break }
                resets.append(started)
            }
            let goAway = try #require(await connection.closed())
            #expect(goAway.errorCode == 11, "ENHANCE_YOUR_CALM")
            for reset in resets { _ = await reset.value }
            let suppressed = server.application.policy.peerLog.suppressed("reset a stream: the connection holds too much unfinished")
            #expect(suppressed >= HTTP2ProviderHandler.serverResetLimit - 10, "\(suppressed) lines left out")
            await server.disconnect(device)
        }
    }

    /// Connections that have not authenticated hold at most
    /// `connections.unauthenticatedShare` of a listener and
    /// `connections.maxUnauthenticatedPerAddress` from one address: two
    /// addresses that keep anonymous TLS connections open take neither the
    /// room of a provider from a third address (its connections are
    /// accepted and its pushes answered) nor, once it authenticated, the
    /// room it holds.
    @Test func anonymousConnectionsHoldOnlyTheirShareOfAListener() async throws {
        try await withTestServer(configure: {
            $0.connections.maxPerListener = 20  // 10 of them not authenticated
            $0.connections.maxUnauthenticatedPerAddress = 4
        }) { server in
            let port = try await server.http2Port()
            func open(_ count: Int, from source: String) async -> [any Channel] {
                var admitted: [any Channel] = []
                for _ in 0..<count {
                    if let channel = try? await tlsConnection(port: port, from: source, caPath: server.caPath) { admitted.append(channel) }
                }
                return admitted
            }
            var anonymous = await open(8, from: "127.0.0.2")
            anonymous += await open(8, from: "127.0.0.3")
            #expect(anonymous.count == 8, "four from each address")
            // The provider, from 127.0.0.1: each connection is accepted, authenticates with its first push, and leaves the share.
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            var providers: [HTTP2ProviderClient] = []
            for _ in 0..<6 {
                let client = try await server.http2Client()
                #expect(try await client.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), topic: "com.example.demo")).status == 200)
                _ = try #require(await device.next())
                providers.append(client)
            }
            // What is left of the share (10 - 8) for a third anonymous address: the providers took none of it.
            let third = await open(4, from: "127.0.0.4")
            #expect(third.count == 2)
            for channel in anonymous + third { try? await channel.close() }
            for client in providers { await client.close() }
            await server.disconnect(device)
        }
    }

    /// A device authenticates in its handshake: connections that never
    /// start theirs hold at most `maxUnauthenticatedPerAddress` of the
    /// device listener from one address, and a device from another
    /// address connects beside them.
    @Test func stalledDeviceHandshakesHoldOnlyTheirShare() async throws {
        try await withTestServer(configure: { $0.connections.maxUnauthenticatedPerAddress = 4 }) { server in
            let port = try await server.devicePort()
            let open = { server.application.policy.open.counts()["device.production"] ?? -1 }
            var stalled: [any Channel] = []
            for _ in 0..<8 { stalled.append(try await tcpConnection(port: port, from: "127.0.0.2")) }
            // The four beyond the share are closed by the server at once.
            try await waitUntil(limit: 10) { stalled.filter(\.isActive).count == 4 }
            #expect(open() == 4)
            let device = try await server.device()
            #expect(open() == 5)
            for channel in stalled { try? await channel.close() }
            await server.disconnect(device)
        }
    }

    /// An address whose connections ended without authenticating
    /// `connections.maxFailedAuthenticationsPerAddress` times in the last
    /// second is refused at accept until that second has passed.
    @Test func anAddressThatKeepsFailingToAuthenticateIsRefusedForASecond() async throws {
        try await withTestServer(configure: { $0.connections.maxFailedAuthenticationsPerAddress = 2 }) { server in
            let port = try await server.http2Port()
            // Connections that end without a token: each is a failure once the server has seen it close.
            var admitted = 0
            var refused = false
            for _ in 0..<50 {
                guard let channel = try? await tlsConnection(port: port, from: "127.0.0.2", caPath: server.caPath) else {
                    refused = true
                    break
                }
                admitted += 1
                try await channel.close()
            }
            #expect(refused, "still accepted after \(admitted) failures")
            #expect(admitted >= 2)
            // Another address is not refused; nor is this one once the second has passed.
            let other = try await tlsConnection(port: port, from: "127.0.0.3", caPath: server.caPath)
            server.clock.advance(by: 1)
            let again = try await tlsConnection(port: port, from: "127.0.0.2", caPath: server.caPath)
            try await other.close()
            try await again.close()
        }
    }
}
