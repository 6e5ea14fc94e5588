import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

/// Sends a device's frames straight into its channel: written and flushed
/// on the channel's event loop in the order they are sent, with no writer
/// task or queue of its own per connection.
final class ChannelDeviceLink: DeviceLink {
    let channel: any Channel

    init(channel: any Channel) {
        self.channel = channel
    }

    func send(_ message: DeviceMessage) {
        channel.writeAndFlush(message.frame, promise: nil)
    }

    /// Sends a last frame and waits until it is written (or the write failed).
    func sendLast(_ message: DeviceMessage) async {
        try? await channel.writeAndFlush(message.frame)
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// The device gateway of one environment: TLS with device certificates,
/// the courier device protocol (docs/device-protocol.md), keepalive.
final class DeviceGateway: Service {
    let environment: Environment
    let configuration: CourierConfiguration
    let tls: ServerTLS
    let dispatcher: Dispatcher
    let store: any Store
    let ports: BoundPorts
    let logger: Logger
    private let open = Mutex<[ObjectIdentifier: any Channel]>([:])

    init(environment: Environment, configuration: CourierConfiguration, tls: ServerTLS, dispatcher: Dispatcher, ports: BoundPorts, logger: Logger) {
        self.environment = environment
        self.configuration = configuration
        self.tls = tls
        self.dispatcher = dispatcher
        self.store = dispatcher.store
        self.ports = ports
        var logger = logger
        logger[metadataKey: "courier.listener"] = "device.\(environment.rawValue)"
        self.logger = logger
    }

    func run() async throws {
        let verifier = PeerVerifier(authority: tls.authority, store: store, kind: .device, logger: logger)
        let context = tls.context
        let maxFrame = configuration.limits.deviceMaxFrameLength
        let keepAlive = configuration.qos.keepAlive
        let timeout = configuration.handshakeTimeout
        let server = try await listenerBootstrap(backlog: 1024)
            .bind(host: configuration.network.host, port: configuration.network.ports(environment).device) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let box = PeerIdentityBox()
                    try channel.pipeline.syncOperations.addHandlers(
                        verifier.tlsHandlers(context: context, box: box, handshakeTimeout: timeout) + [
                            ConnectionTimeout(.silence, timeout: .seconds(Int64(2 * keepAlive))),
                            ByteToMessageHandler(DeviceFrameDecoder(maxFrameLength: maxFrame)),
                            MessageToByteHandler(DeviceFrameEncoder()),
                        ])
                    let connection = try NIOAsyncChannel<DeviceFrame, DeviceFrame>(wrappingChannelSynchronously: channel)
                    return (connection, box)
                }
            }
        ports.set(.device, environment, server.channel.localAddress?.port ?? 0)
        logger.info("listening", metadata: ["courier.port": "\(server.channel.localAddress?.port ?? 0)"])
        try await acceptConnections(on: server) {
            for channel in self.open.withLock({ Array($0.values) }) { channel.close(promise: nil) }
        } serve: { connection, box in
            await self.serve(connection, peer: box)
        }
    }

    private func serve(_ connection: NIOAsyncChannel<DeviceFrame, DeviceFrame>, peer: PeerIdentityBox) async {
        let channel = connection.channel
        let id = ObjectIdentifier(channel)
        open.withLock { $0[id] = channel }
        defer { _ = open.withLock { $0.removeValue(forKey: id) } }
        do {
            try await connection.executeThenClose { inbound, _ in
                await self.read(inbound, link: ChannelDeviceLink(channel: channel), peer: peer)
            }
        } catch {
            logger.debug("device connection ended", metadata: ["courier.error": "\(error)"])
        }
    }

    /// Reads the device's frames until it leaves or breaks the protocol.
    private func read(_ inbound: NIOAsyncChannelInboundStream<DeviceFrame>, link: ChannelDeviceLink, peer: PeerIdentityBox) async {
        var machine = DeviceConnectionStateMachine()
        var session: DeviceSession?
        var generation: UInt32 = 0
        let tokenLength = configuration.limits.tokenLength
        defer { if let session { dispatcher.disconnected(session) } }
        do {
            for try await frame in inbound {
                let message: DeviceMessage
                do {
                    message = try DeviceMessage(frame: frame, tokenLength: tokenLength)
                } catch let error as DeviceProtocolError {
                    return await fail(error, link: link)
                }
                switch machine.receive(message) {
                case .fail(let error):
                    return await fail(error, link: link)
                case .connect(let tokens, let presentedGeneration):
                    guard let (device, refused) = try await connect(peer: peer, tokens: tokens, generation: presentedGeneration) else {
                        machine.connectRefused()
                        await link.sendLast(
                            .connectAck(status: .certificateRefused, serverTime: now(), keepAlive: 0, maxFrameLength: 0, refusedTokens: [], tokenLength: nil))
                        return
                    }
                    generation = device.generation
                    link.send(
                        .connectAck(
                            status: .ok, serverTime: now(), keepAlive: UInt16(clamping: configuration.qos.keepAlive),
                            maxFrameLength: UInt32(configuration.limits.deviceMaxFrameLength), refusedTokens: refused,
                            tokenLength: UInt8(tokenLength)))
                    machine.connectAccepted()
                    let newSession = DeviceSession(environment: environment, deviceID: device.id, link: link)
                    session = newSession
                    await dispatcher.connected(newSession)
                case .requestToken(let bundleID, let requestID):
                    let token = try await dispatcher.register(deviceID: session!.deviceID, generation: generation, bundleID: bundleID, environment: environment)
                    link.send(.appTokenResponse(requestID: requestID, bundleID: bundleID, token: token, status: token == nil ? .unknownApp : .ok))
                case .unregister(let bundleID, let requestID):
                    let done = try await dispatcher.unregister(deviceID: session!.deviceID, bundleID: bundleID, environment: environment)
                    link.send(.unregisterAck(requestID: requestID, status: done ? .ok : .unknownApp))
                case .acknowledge(_, let idBytes):
                    let id = idBytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
                    await dispatcher.acknowledged(id, by: session!)
                case .filter(let hashes):
                    await dispatcher.filter(hashes, for: session!)
                case .keepAlive:
                    link.send(.keepAliveAck)
                }
            }
        } catch let error as DeviceProtocolError {
            await fail(error, link: link)
        } catch let error as StoreError {
            logger.error("store failed serving a device", metadata: ["courier.error": "\(error)"])
            await fail(DeviceProtocolError(.internal, "the server's store failed; try again later"), link: link)
        } catch {
            logger.debug("device connection ended", metadata: ["courier.error": "\(error)"])
        }
    }

    private func fail(_ error: DeviceProtocolError, link: ChannelDeviceLink) async {
        logger.info("device protocol error", metadata: ["courier.code": "\(error.code.name)", "courier.detail": "\(error.message)"])
        await link.sendLast(.error(code: error.code, message: error.message))
    }

    private func now() -> UInt64 { UInt64(max(0, dispatcher.clock.now().timeIntervalSince1970 * 1000)) }

    /// Identifies the device from its certificate, records a newer
    /// generation, and sorts out the presented tokens that are not its own.
    private func connect(peer: PeerIdentityBox, tokens: [[UInt8]], generation: UInt32?) async throws -> (Device, [[UInt8]])? {
        guard let record = peer.record, let deviceID = record.deviceID, var device = try await store.device(id: deviceID) else { return nil }
        if let generation, generation > device.generation {
            try await store.setDeviceGeneration(id: deviceID, generation: generation)
            dispatcher.forgetRegistrations(deviceID: deviceID)
            device.generation = generation
        }
        try await store.markDeviceSeen(id: deviceID, at: dispatcher.clock.now())
        let codec = dispatcher.codec(environment)
        let refused = tokens.filter { token in
            guard case .success(let contents) = codec.open(token) else { return true }
            return contents.deviceID != deviceID || contents.generation != device.generation
        }
        return (device, refused)
    }
}

/// Runs a periodic job (the dispatcher's timers, the HTTP/2 gateways'
/// sweeps) every `interval` seconds until graceful shutdown.
struct TimerService: Service {
    let interval: Double
    let tick: @Sendable () async -> Void

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(interval))
                await tick()
            }
        }
    }
}
