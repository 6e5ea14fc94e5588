import CourierCore
import CourierDevice
import CourierPKI
@testable import CourierServer
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
import NIOTLS
import NIOSSL
import Testing

@Suite(.timeLimit(.minutes(2))) struct DeviceGatewayTests {
    func client(_ server: TestServer, directory: String) async throws -> DeviceClient {
        let port = try await server.devicePort()
        return try DeviceClient(
            credentials: try DeviceCredentials.load(from: directory), environment: .production,
            options: .init(host: "127.0.0.1", port: port, serverName: "localhost", attempts: 1), logger: server.logger)
    }

    @Test func revokedAndUnknownDeviceCertificatesFailTheHandshake() async throws {
        try await withTestServer { server in
            // Revoked.
            let path = server.directory + "/revoked-device"
            let (device, _) = try await server.application.provisioner.issueDeviceIdentity(directory: path)
            let record = try #require(try await server.application.provisioner.store.device(id: device.id))
            try await server.application.provisioner.revokeCertificate(serial: record.certificateSerial)
            let revoked = try await client(server, directory: path)
            let running = Task { await revoked.run() }
            await #expect(throws: DeviceClientError.self) { try await revoked.waitUntilConnected() }
            await running.value

            // Issued by another CA (same device id layout, unknown to this server).
            let stranger = server.directory + "/stranger"
            try await withTestServer { other in
                _ = try await other.application.provisioner.issueDeviceIdentity(directory: stranger)
                try FileManager.default.removeItem(atPath: stranger + "/ca.pem")
                try FileManager.default.copyItem(atPath: server.directory + "/pki/ca.pem", toPath: stranger + "/ca.pem")
                let unknown = try await client(server, directory: stranger)
                let runningUnknown = Task { await unknown.run() }
                await #expect(throws: DeviceClientError.self) { try await unknown.waitUntilConnected() }
                await runningUnknown.value
            }
        }
    }

    /// A device client backing off (its gateway gone) ends at once when
    /// stopped, however long the back-off (which is one timer, not a poll):
    /// within the suite's two minutes, against a back-off of an hour.
    @Test func aClientBackingOffStopsAtOnce() async throws {
        try await withTestServer { server in
            let directory = server.directory + "/backoff-device"
            _ = try await server.application.provisioner.issueDeviceIdentity(directory: directory)
            let (changes, change) = AsyncStream.makeStream(of: ConnectionChange.self)
            // A port nothing listens on: the first attempt fails and a back-off of an hour begins.
            let closed = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
            let port = closed.localAddress!.port!
            try await closed.close()
            let client = try DeviceClient(
                credentials: try DeviceCredentials.load(from: directory), environment: .production,
                options: .init(host: "127.0.0.1", port: port, initialBackoff: 3600, maximumBackoff: 3600, serverName: "localhost",
                               onChange: { change.yield($0) }),
                logger: server.logger)
            let running = Task { await client.run() }
            var seen = changes.makeAsyncIterator()
            guard case .unreachable? = await seen.next() else {
                Issue.record("the first attempt should fail")
                return
            }
            // Within the suite's time limit only if stop() ends the hour's back-off.
            await client.stop()
            await running.value
            #expect(await client.isConnected == false)
        }
    }

    @Test func aFreshDeviceLearnsALongerTokenLengthFromConnectAck() async throws {
        try await withTestServer(tokenLength: 64) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            #expect(token.count == 64)
            let (id, result) = await server.push(token)
            #expect(result == .accepted)
            #expect(await device.next()?.id == id)
            await server.disconnect(device)
        }
    }

    @Test func aResetDeviceGetsNewTokensAndOldOnesAreRefused() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let old = try await device.client.register("com.example.demo")
            // Pushed once first (expiration 0: nothing held for later): the
            // dispatcher then knows the old token as registered, and must forget that.
            let (first, accepted) = await server.push(old, expiration: Date(timeIntervalSince1970: 0))
            #expect(accepted == .accepted)
            let firstReceived = try #require(await device.next())
            #expect(firstReceived.id == first)
            try await device.client.acknowledge(firstReceived)
            await server.disconnect(device)
            // Held for the device while it is offline, to the old token.
            let (held, heldAccepted) = await server.push(old, payload: #"{"aps":{"alert":"held"}}"#, expiration: Date().addingTimeInterval(3600))
            #expect(heldAccepted == .accepted)
            // A reset: the generation goes up, the device forgets its tokens.
            var credentials = try DeviceCredentials.load(from: device.directory)
            credentials.file.generation += 1
            credentials.file.tokens = [:]
            try credentials.save()
            let reset = try await server.device(directory: device.directory)
            try await reset.client.waitUntilConnected()
            // The old token is refused from the reset on, before the app registers again.
            #expect(await server.push(old).1 == .rejected(.badDeviceToken))
            let new = try await reset.client.register("com.example.demo")
            #expect(new != old)
            #expect(await server.push(old).1 == .rejected(.badDeviceToken))
            let (id, result) = await server.push(new)
            #expect(result == .accepted)
            // The one held for the old token would have come at connect, before this one.
            #expect(await reset.next()?.id == id)
            #expect(try await server.events(held) == [.accepted, .stored, .discarded])
            await server.disconnect(reset)
        }
    }

    /// A raw TLS connection to the device gateway with a new device's
    /// certificate: frames in and out, no client library.
    /// A TLS connection with a device identity (a new one unless
    /// `directory` names one), speaking frames by hand.
    func rawConnection<Outbound: Sendable>(
        _ server: TestServer, directory: String? = nil, writing: Outbound.Type = DeviceFrame.self
    ) async throws -> NIOAsyncChannel<DeviceFrame, Outbound> {
        let path = directory ?? server.directory + "/raw-device-\(UUID().uuidString)"
        if directory == nil { _ = try await server.application.provisioner.issueDeviceIdentity(directory: path) }
        let port = try await server.devicePort()
        let context = try NIOSSLContext(configuration: DeviceCredentials.load(from: path).tlsConfiguration())
        return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([
                        try NIOSSLClientHandler(context: context, serverHostname: "localhost"),
                        ByteToMessageHandler(DeviceFrameDecoder()),
                    ])
                    // Frames are encoded; bytes go out as they are.
                    if Outbound.self == DeviceFrame.self { try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(DeviceFrameEncoder())) }
                    return try NIOAsyncChannel<DeviceFrame, Outbound>(wrappingChannelSynchronously: channel)
                }
            }
    }

    @Test func protocolErrorsAreAnsweredWithAnErrorFrame() async throws {
        try await withTestServer { server in
            // A raw TLS connection that sends Ack before Connect.
            let connection = try await rawConnection(server)
            let answers = try await connection.executeThenClose { inbound, outbound in
                try await outbound.write(DeviceMessage.ack(deliveryID: UUID(), status: 0).frame)
                var messages: [DeviceMessage] = []
                do {
                    for try await frame in inbound { messages.append(try DeviceMessage(frame: frame)) }
                } catch {
                    // The server closed after its answer.
                }
                return messages
            }
            #expect(answers.count == 1)
            guard case .error(let code, _) = answers.first else {
                Issue.record("expected an Error frame, got \(answers)")
                return
            }
            #expect(code == .notConnected)
        }
    }

    /// A device that sends KeepAlives as fast as it can is answered until
    /// its frame budget (2,000 at once, docs/device-protocol.md) is spent,
    /// then gets the Error `tooManyFrames` and is closed; another device's
    /// notifications still arrive. Its certificate is refused at Connect
    /// for `DeviceFrameCooldowns.seconds` (its address counted a failed
    /// authentication each time: past the limit, refused before the
    /// handshake), then connects again.
    @Test func aDeviceFloodingFramesIsRefusedAndClosed() async throws {
        try await withTestServer(configure: { $0.connections.maxFailedAuthenticationsPerAddress = 1 }) { server in
            let other = try await server.device()
            let token = try await other.client.register("com.example.demo")
            let identity = server.directory + "/flooding-device"
            _ = try await server.application.provisioner.issueDeviceIdentity(directory: identity)
            let connection = try await rawConnection(server, directory: identity)
            let flood = DeviceFrameBudget.capacity + 500
            let (answers, error) = try await connection.executeThenClose { inbound, outbound in
                try await outbound.write(DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: nil).frame)
                try await outbound.write(contentsOf: (0..<flood).map { _ in DeviceMessage.keepAlive.frame })
                var answers = 0
                var error: DeviceProtocolCode?
                do {
                    for try await received in inbound {
                        switch try DeviceMessage(frame: received) {
                        case .keepAliveAck: answers += 1
                        case .error(let code, _): error = code
                        default: break
                        }
                    }
                } catch {
                    // The server closed after its Error frame.
                }
                return (answers, error)
            }
            #expect(error == .tooManyFrames)
            #expect(answers >= DeviceFrameBudget.capacity - 10 && answers < flood, "\(answers) KeepAlives answered")
            let (id, result) = await server.push(token)
            #expect(result == .accepted)
            #expect(try await other.nextAcknowledged()?.id == id)

            /// Connects with the flooding device's certificate: what answers its Connect.
            func connectAgain() async throws -> DeviceMessage? {
                let again = try await rawConnection(server, directory: identity)
                return try await again.executeThenClose { inbound, outbound in
                    try await outbound.write(DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: nil).frame)
                    var iterator = inbound.makeAsyncIterator()
                    return try await iterator.next().map { try DeviceMessage(frame: $0) }
                }
            }
            server.clock.advance(by: 2)  // a new second for the address's failures
            guard case .error(.tooManyFrames, let message)? = try await connectAgain() else {
                Issue.record("a reconnection within the cooldown was not refused at Connect")
                return
            }
            #expect(message.contains("connect again in 58 s"), "\(message)")
            // One failed authentication a second for the address: the next is refused before its handshake.
            await #expect(throws: (any Error).self) { _ = try await connectAgain() }
            server.clock.advance(by: DeviceFrameCooldowns.seconds)
            guard case .connectAck(let status, _, _, _, _, _)? = try await connectAgain() else {
                Issue.record("no ConnectAck after the cooldown")
                return
            }
            #expect(status == .ok)
            await server.disconnect(other)
        }
    }

    /// The budget refills with time, up to what it holds at once.
    @Test func theFrameBudgetRefillsAtItsRate() {
        var budget = DeviceFrameBudget()
        func takes(_ count: Int, at now: NIODeadline) -> Int { (0..<count).count { _ in budget.take(at: now) } }
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        #expect(takes(DeviceFrameBudget.capacity + 1, at: start) == DeviceFrameBudget.capacity)
        let later = start + .milliseconds(1000 / Int64(DeviceFrameBudget.perSecond))
        #expect(takes(2, at: later) == 1, "one more after 1/perSecond s")
        let muchLater = later + .seconds(3600)
        #expect(takes(DeviceFrameBudget.capacity + 1, at: muchLater) == DeviceFrameBudget.capacity, "never more than the capacity")
    }

    /// A command only a server sends, sent by a connected device, is
    /// `unknownCommand` (3) as docs/device-protocol.md says, whatever its
    /// items (a ConnectAck without its required items included).
    @Test(arguments: [
        DeviceFrame(command: DeviceCommand.connectAck),
        DeviceMessage.noStorage.frame,
        DeviceMessage.keepAliveAck.frame,
        DeviceMessage.unregisterAck(requestID: 1, status: .ok).frame,
        DeviceMessage.error(code: .internal, message: "").frame,
        DeviceFrame(command: DeviceCommand.notification),
    ])
    func aServersCommandFromADeviceIsAnUnknownCommand(_ frame: DeviceFrame) async throws {
        try await withTestServer { server in
            let connection = try await rawConnection(server)
            let answers = try await connection.executeThenClose { inbound, outbound in
                try await outbound.write(DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: nil).frame)
                var messages: [DeviceMessage] = []
                do {
                    for try await received in inbound {
                        let message = try DeviceMessage(frame: received)
                        messages.append(message)
                        if message == .noStorage { try await outbound.write(frame) }
                    }
                } catch {
                    // The server closed after its answer.
                }
                return messages
            }
            guard case .error(let code, _) = answers.last else {
                Issue.record("expected an Error frame, got \(answers)")
                return
            }
            #expect(code == .unknownCommand)
        }
    }

    /// A frame cut in two, its start sent in one TLS record after a whole
    /// frame and its end only once that frame was answered (so the two
    /// halves are certainly two reads), is put together and answered; a
    /// frame that announces more than the frame limit is answered with
    /// frameTooLarge.
    @Test func aFrameAcrossReadsIsReadWholeAndAnOversizedOneIsRefused() async throws {
        try await withTestServer { server in
            let connection = try await rawConnection(server, writing: ByteBuffer.self)
            try await connection.executeThenClose { inbound, outbound in
                var answers = inbound.makeAsyncIterator()
                func next() async throws -> DeviceMessage? { try await answers.next().map { try DeviceMessage(frame: $0) } }
                func bytes(_ message: DeviceMessage) -> ByteBuffer {
                    var buffer = ByteBuffer()
                    message.write(to: &buffer)
                    return buffer
                }
                try await outbound.write(bytes(.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: nil)))
                guard case .connectAck(.ok, _, _, _, _, _) = try await next() else {
                    Issue.record("expected ConnectAck ok")
                    return
                }
                #expect(try await next() == .noStorage)

                let keepAlive = bytes(.keepAlive)
                var wholeAndStart = keepAlive
                wholeAndStart.writeImmutableBuffer(keepAlive.getSlice(at: 0, length: 2)!)
                try await outbound.write(wholeAndStart)
                #expect(try await next() == .keepAliveAck)
                try await outbound.write(keepAlive.getSlice(at: 2, length: keepAlive.readableBytes - 2)!)
                #expect(try await next() == .keepAliveAck, "the frame whose start came in the read before")

                var oversized = ByteBuffer()
                oversized.writeMultipleIntegers(keepAlive.getInteger(at: 0, as: UInt8.self)!, UInt32(server.application.configuration.limits.deviceMaxFrameLength + 1))
                try await outbound.write(oversized)
                guard case .error(let code, _) = try await next() else {
                    Issue.record("expected an Error frame")
                    return
                }
                #expect(code == .frameTooLarge)
            }
        }
    }

    /// Frames sent back to back, many more than the gateway lets wait
    /// before it stops reading, are all answered, in order; and shutting
    /// the server down with the device still connected closes it.
    @Test func pipelinedFramesAreAnsweredInOrderAndShutdownClosesTheConnection() async throws {
        try await withTestServer { server in
            let connection = try await rawConnection(server)
            let keepAlives = 300
            try await connection.executeThenClose { inbound, outbound in
                var frames = [DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: nil).frame]
                frames += Array(repeating: DeviceMessage.keepAlive.frame, count: keepAlives)
                frames.append(DeviceMessage.appTokenRequest(bundleID: "com.example.demo", requestID: 7).frame)
                try await outbound.write(contentsOf: frames)
                var answers: [DeviceMessage] = []
                var iterator = inbound.makeAsyncIterator()
                while answers.count < keepAlives + 3, let frame = try await iterator.next() {
                    answers.append(try DeviceMessage(frame: frame))
                }
                guard case .connectAck(let status, _, _, _, _, _) = answers.first else {
                    Issue.record("expected ConnectAck first, got \(answers.first.map { "\($0)" } ?? "nothing")")
                    return
                }
                #expect(status == .ok)
                // NoStorage follows the connect; then the answers in the order asked.
                #expect(answers.dropFirst().first == .noStorage)
                #expect(answers.dropFirst(2).prefix(keepAlives).allSatisfy { $0 == .keepAliveAck })
                guard case .appTokenResponse(let requestID, _, let token, let tokenStatus, _) = answers.last else {
                    Issue.record("expected AppTokenResponse last, got \(answers.last.map { "\($0)" } ?? "nothing")")
                    return
                }
                #expect(requestID == 7 && tokenStatus == .ok && token?.count == 32)

                await server.shutDown()
                var after: [DeviceFrame] = []
                do {
                    while let frame = try await iterator.next() { after.append(frame) }
                } catch {
                    // Closed by the server.
                }
                #expect(after.isEmpty)
            }
        }
    }

    /// A device that sends far more than the gateway lets wait while its
    /// frames cannot be handled (the store is slow): the gateway stops
    /// reading, starts again once it caught up, and every frame is
    /// handled in order. (Were reading never started again, the answers
    /// after the acknowledgements would not come and the test would run
    /// into its time limit.)
    @Test func aDeviceThatSendsFasterThanItsFramesAreHandledIsReadAgainOnceTheyAre() async throws {
        try await withFaultyStoreServer { server, store in
            let connection = try await rawConnection(server)
            store.appGate.close()
            try await connection.executeThenClose { inbound, outbound in
                var iterator = inbound.makeAsyncIterator()
                try await outbound.write(DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: nil).frame)
                // The token request waits for the store; 20,000 acknowledgements
                // (about 560 KB, more than one read cycle takes) queue behind it.
                var frames = [DeviceMessage.appTokenRequest(bundleID: "com.example.demo", requestID: 1).frame]
                frames += (0..<20_000).map { _ in DeviceMessage.ack(deliveryID: UUID(), status: 0).frame }
                frames += [DeviceMessage.appTokenRequest(bundleID: "com.example.demo", requestID: 2).frame, DeviceMessage.keepAlive.frame]
                try await outbound.write(contentsOf: frames)
                await store.appGate.waitUntilHolding()
                store.appGate.open()
                var answers: [DeviceMessage] = []
                while answers.count < 5, let frame = try await iterator.next() { answers.append(try DeviceMessage(frame: frame)) }
                #expect(answers.count == 5)
                guard answers.count == 5, case .connectAck = answers[0], case .appTokenResponse(1, _, _, .ok, _) = answers[2],
                    case .appTokenResponse(2, _, _, .ok, _) = answers[3]
                else {
                    Issue.record("unexpected answers \(answers)")
                    return
                }
                #expect(answers[1] == .noStorage)
                #expect(answers[4] == .keepAliveAck)
            }
        }
    }

    @Test func aConnectionThatNeverFinishesItsHandshakeIsClosed() throws {
        // Every listener has this after its TLS handler; on an embedded loop whose time the test moves.
        let loop = EmbeddedEventLoop()
        let silent = EmbeddedChannel(loop: loop)
        try silent.pipeline.syncOperations.addHandler(ConnectionTimeout(.handshake, timeout: .seconds(10)))
        try silent.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        loop.advanceTime(by: .seconds(9))
        #expect(silent.isActive)
        loop.advanceTime(by: .seconds(1))
        #expect(!silent.isActive, "10 s without a finished handshake")

        let prompt = EmbeddedChannel(loop: loop)
        try prompt.pipeline.syncOperations.addHandler(ConnectionTimeout(.handshake, timeout: .seconds(10)))
        try prompt.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        prompt.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        loop.advanceTime(by: .seconds(60))
        #expect(prompt.isActive, "a finished handshake keeps the connection")
        // Done after the handshake, it leaves the pipeline (reads no longer pass through it).
        #expect(throws: ChannelPipelineError.notFound) { try prompt.pipeline.syncOperations.context(handlerType: ConnectionTimeout.self) }
    }
}
