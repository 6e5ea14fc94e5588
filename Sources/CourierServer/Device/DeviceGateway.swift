import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

/// The device gateway of one environment: TLS with device certificates,
/// the courier device protocol (docs/device-protocol.md), keepalive.
///
/// A connection has no task of its own while it is idle: its frames are
/// handled by a `DeviceConnection`, whose task runs only while there are
/// frames to handle (see there). Ten thousand idle devices are ten
/// thousand channels, not ten thousand suspended tasks.
final class DeviceGateway: ListenerInterface {
    let basics: PortBasics
    let dispatcher: Dispatcher
    /// The device tokens' length in this environment (a Notification's item bound).
    fileprivate let tokenLength: Int
    /// A device silent for two keepalive intervals is gone.
    private let silence: SilenceSweeps<DeviceConnectionHandler>
    /// Certificates refused for a while after a connection closed for `tooManyFrames`.
    let frameCooldowns = DeviceFrameCooldowns()

    init(environment: Environment, configuration: CourierConfiguration, tls: ServerTLS, dispatcher: Dispatcher, policy: ConnectionPolicy, logger: Logger) {
        basics = PortBasics(
            .device, environment, configuration: configuration, policy: policy, authority: tls, context: tls.context, peers: .devices, logger: logger)
        self.dispatcher = dispatcher
        tokenLength = dispatcher.codec(environment).length
        silence = SilenceSweeps(timeout: .seconds(Int64(2 * configuration.qos.keepAlive)))
    }

    func configure(_ bootstrap: ServerBootstrap) -> ServerBootstrap {
        bootstrap
            .serverChannelOption(.backlog, value: 1024)
            .childChannelOption(.allocator, value: PageBufferAllocator.allocator)
    }

    /// A connection ends (for shutdown) once it was closed and its last
    /// frames were handled: the dispatcher was told it went offline.
    static var releasesItself: Bool { true }

    /// `DeviceConnectionHandler` closes a device that does not read.
    static var closesUnreadItself: Bool { true }

    /// The connection holds what its handshake learns of the device itself.
    func peer(for channel: any Channel, work: ConnectionWork, release: ConnectionRelease) -> DeviceConnection {
        DeviceConnection(gateway: self, channel: channel, work: work, release: release)
    }

    func setUp(_ channel: any Channel, peer connection: DeviceConnection, work: ConnectionWork, release: ConnectionRelease) throws -> Never? {
        // The handler tells the connection when the channel has ended
        // (`handlerRemoved`); a handler that could not be added leaves the
        // release to the listener.
        try channel.pipeline.syncOperations.addHandler(
            DeviceConnectionHandler(
                connection, silence: silence.sweep(on: channel.eventLoop), unread: basics.guardian,
                maxFrameLength: configuration.limits.deviceMaxFrameLength, unfinishedFrameTimeout: policy.connections.unfinishedFrame))
        return nil
    }

    /// Reads one frame of a connection and does at once what needs no
    /// waiting: a KeepAlive's answer, the Ack of a notification not held in
    /// the store. Returns what is left to do (`perform`), if anything.
    fileprivate func receive(_ frame: DeviceFrame, _ conversation: inout DeviceConversation, link: DeviceConnection) -> DeviceStep? {
        let message: DeviceMessage
        do {
            // A server's command from a device is unknown here, whatever its items.
            guard DeviceCommand.sentByDevices.contains(frame.command) else {
                throw DeviceProtocolError(.unknownCommand, "command 0x\(String(frame.command, radix: 16)) is not one a device sends")
            }
            message = try DeviceMessage(frame: frame, tokenLength: configuration.limits.tokenLength)
        } catch let error as DeviceProtocolError {
            return .act(.fail(error))
        } catch {
            return .close(error)
        }
        // Acks answer what the server sent; any other frame is taken from the connection's budget.
        let isAck = if case .ack = message { true } else { false }
        if !isAck, !conversation.budget.take(at: .now()) {
            link.stopReading()
            if let certificate = conversation.certificate { frameCooldowns.start(certificate, now: dispatcher.clock.now()) }
            return .act(
                .fail(
                    DeviceProtocolError(
                        .tooManyFrames, "more than \(DeviceFrameBudget.capacity) frames, or \(DeviceFrameBudget.perSecond) a second, beside Acks")))
        }
        if case .connect = message, let serial = link.peerSerial,
            let wait = frameCooldowns.remaining(CertificateConnections.Key(serial: serial), now: dispatcher.clock.now())
        {
            // A device closed for too many frames, back within its cooldown: refused here, on the event
            // loop, so that nothing it sent after its Connect is even decoded.
            link.stopReading()
            link.failedAuthentication()
            return .act(.fail(DeviceProtocolError(.tooManyFrames, "this device's last connection sent too many frames; connect again in \(Int(wait.rounded(.up))) s")))
        }
        switch conversation.machine.receive(message) {
        case .keepAlive:
            link.send(.keepAliveAck)
            return nil
        case .acknowledge(let status, let deliveryID, let session):
            return dispatcher.acknowledge(deliveryID, unreadable: status == DeviceAckStatus.unreadable, by: session).map(DeviceStep.removeAcknowledged)
        case let action:
            return .act(action)
        }
    }

    /// Does what a frame left to do; false once the connection is over (an
    /// error frame sent, or a refused connect).
    fileprivate func perform(_ step: DeviceStep, _ conversation: inout DeviceConversation, link: DeviceConnection) async -> Bool {
        let action: DeviceConnectionStateMachine.Action
        switch step {
        case .close(let error):
            logger.debug("device connection ended", metadata: ["courier.error": "\(error)"])
            link.close()
            return false
        case .removeAcknowledged(let held):
            await dispatcher.removeAcknowledged(held)
            return true
        case .act(let next):
            action = next
        }
        do {
            switch action {
            case .fail(let error):
                await fail(error, link: link)
                return false
            case .connect(let tokens, let presentedGeneration):
                guard let (device, refused) = try await connect(link, &conversation, tokens: tokens, generation: presentedGeneration) else {
                    conversation.machine.connectRefused()
                    await link.sendLast(
                        .connectAck(status: .certificateRefused, serverTime: now(), keepAlive: 0, maxFrameLength: 0, refusedTokens: [], tokenLength: nil))
                    link.close()
                    return false
                }
                link.send(
                    .connectAck(
                        status: .ok, serverTime: now(), keepAlive: UInt16(clamping: configuration.qos.keepAlive),
                        maxFrameLength: UInt32(configuration.limits.deviceMaxFrameLength), refusedTokens: refused,
                        tokenLength: UInt8(configuration.limits.tokenLength)))
                let session = DeviceSession(environment: environment, deviceID: device.id, link: link, connectedAt: dispatcher.clock.now())
                conversation.machine.connectAccepted(session, generation: device.generation)
                await dispatcher.connected(session)
            case .requestToken(let bundleID, let requestID, .device, let session, let generation):
                let token = try await dispatcher.register(deviceID: session.deviceID, generation: generation, bundleID: bundleID, environment: environment)
                link.send(.appTokenResponse(requestID: requestID, bundleID: bundleID, token: token, status: token == nil ? .unknownApp : .ok))
            case .requestToken(let bundleID, let requestID, let kind, let session, let generation):
                let issued = try await dispatcher.issueLiveActivityToken(
                    deviceID: session.deviceID, generation: generation, bundleID: bundleID, environment: environment,
                    pushToStart: kind == .liveActivityPushToStart)
                link.send(
                    .appTokenResponse(
                        requestID: requestID, bundleID: bundleID, token: issued?.token, status: issued == nil ? .unknownApp : .ok,
                        activity: kind == .liveActivityUpdate ? issued?.activity : nil))
            case .unregister(let bundleID, let requestID, let activity?, let session):
                let ended = try await dispatcher.endActivity(activity, deviceID: session.deviceID, bundleID: bundleID, environment: environment)
                link.send(.unregisterAck(requestID: requestID, status: ended ? .ok : .unknownApp))
            case .unregister(let bundleID, let requestID, nil, let session):
                let done = try await dispatcher.unregister(deviceID: session.deviceID, bundleID: bundleID, environment: environment)
                link.send(.unregisterAck(requestID: requestID, status: done ? .ok : .unknownApp))
            case .subscribe(let bundleID, let requestID, let channelID, let lastDeliveryID, let session):
                let (outcome, replay) = try await dispatcher.subscribe(
                    session, bundleID: bundleID, channelID: channelID, lastDeliveryID: lastDeliveryID)
                link.send(.channelAck(requestID: requestID, status: Self.code(outcome)))
                // The channel's stored broadcast, after the answer.
                replay?.send()
            case .unsubscribe(let bundleID, let requestID, let channelID, let session):
                link.send(.channelAck(requestID: requestID, status: Self.code(dispatcher.unsubscribe(session, bundleID: bundleID, channelID: channelID))))
            case .filter(let hashes, let session):
                await dispatcher.filter(hashes, for: session)
            case .keepAlive, .acknowledge:
                break  // done in `receive`
            }
            return true
        } catch let error as StoreError {
            logger.error("store failed serving a device", metadata: ["courier.error": "\(error)"])
            await fail(DeviceProtocolError(.internal, "the server's store failed; try again later"), link: link)
            return false
        } catch {
            logger.debug("device connection ended", metadata: ["courier.error": "\(error)"])
            link.close()
            return false
        }
    }

    private static func code(_ outcome: Broadcasts.Outcome) -> DeviceProtocolCode {
        switch outcome {
        case .done: .ok
        case .unknownApp: .unknownApp
        case .unknownChannel: .unknownChannel
        case .tooManySubscriptions: .tooManySubscriptions
        }
    }

    /// Sends the Error frame and closes: under TLS at once for a device
    /// that sent too many frames (it is read no more, `stopReading`).
    fileprivate func fail(_ error: DeviceProtocolError, link: DeviceConnection) async {
        policy.peerLog.log(.info, "device protocol error", metadata: ["courier.code": "\(error.code.name)", "courier.detail": "\(error.message)"], to: logger)
        await link.sendLast(.error(code: error.code, message: error.message))
        if error.code == .tooManyFrames { link.closeBelowTLS() } else { link.close() }
    }

    private func now() -> UInt64 { UInt64(max(0, dispatcher.clock.now().timeIntervalSince1970 * 1000)) }

    /// Identifies the device from its certificate (whose revocation will
    /// end the connection), records a newer generation, and sorts out the
    /// presented tokens that are not its own.
    private func connect(
        _ connection: DeviceConnection, _ conversation: inout DeviceConversation, tokens: [[UInt8]], generation: UInt32?
    ) async throws -> (Device, [[UInt8]])? {
        guard let record = connection.takePeerRecord(), let deviceID = record.deviceID else { return nil }
        let certificate = CertificateConnections.Key(serial: record.serial)
        policy.certificates.register(certificate, connection: connection)
        conversation.certificate = certificate
        guard let device = try await dispatcher.deviceConnected(id: deviceID, generation: generation) else { return nil }
        let codec = dispatcher.codec(environment)
        let refused = tokens.filter { token in
            guard case .success(let contents) = codec.open(token) else { return true }
            return contents.deviceID != deviceID || contents.generation != device.generation
        }
        return (device, refused)
    }
}

/// What is left of a frame once `DeviceGateway.receive` did what needed
/// no waiting.
enum DeviceStep {
    /// The state machine's answer: connect, register, unregister, filter, or fail.
    case act(DeviceConnectionStateMachine.Action)
    /// An acknowledged notification to remove from the store.
    case removeAcknowledged(Dispatcher.HeldAcknowledgement)
    /// The frame could not be read for another reason than the protocol's.
    case close(any Error)
}

/// What one device connection has said so far.
struct DeviceConversation {
    var machine = DeviceConnectionStateMachine()
    /// What frames it may still send (Acks aside).
    var budget = DeviceFrameBudget()
    /// An error frame was sent or the connect refused: later frames are
    /// not handled.
    var over = false
    /// The certificate the connection is registered under, for its revocation.
    var certificate: CertificateConnections.Key?
}

/// One device connection's frames, handled in arrival order. A frame into
/// an empty intake is read at once on the event loop; what it needs no
/// waiting for (a KeepAlive, the Ack of a notification not held in the
/// store) is done there. Anything that waits (the store, a connect) runs in
/// a task of the listener's `ConnectionWork` that exists only while there
/// are frames waiting and ends when the intake is empty again. The conversation lives in the intake's lock
/// while neither runs.
///
/// It is also the device's link for the dispatcher (`DeviceLink`): its
/// frames are written and flushed straight into the channel, on the
/// channel's event loop, in the order they are sent, with no writer task or
/// queue of its own.
final class DeviceConnection: DeviceLink, RevocableConnection, PeerIdentityHolder, Sendable {
    enum Item {
        case frame(DeviceFrame)
        /// The frame decoder or the channel failed.
        case failed(any Error)
        /// The device's certificate was revoked.
        case revoked
        /// The channel closed: the last item.
        case closed
    }

    /// Frames waiting before reads pause, and the count at which they resume.
    static let pauseAt = 64
    static let resumeAt = 16

    /// The flags and the count last, in the bytes the conversation's
    /// alignment leaves after it: the connection then takes 152 bytes, a
    /// 160-byte block of malloc's.
    private struct Intake {
        var items = WaitingItems<Item>()
        /// What the handshake learned of the device, until Connect takes it.
        var peer: HeldRecord?
        var conversation = DeviceConversation()
        var running = false
        var paused = false
        /// Reads nothing more (`stopReading`).
        var stopped = false
        /// Frames sent through the event loop's queue and not yet written
        /// (`send`).
        var queuedSends: UInt32 = 0
    }

    let channel: any Channel
    private let gateway: DeviceGateway
    /// Tells the listener the connection has ended.
    private let release: ConnectionRelease
    /// Where the frames that wait are handled (`handleWaiting`).
    private let work: ConnectionWork
    private let intake = Mutex(Intake())

    init(gateway: DeviceGateway, channel: any Channel, work: ConnectionWork, release: ConnectionRelease) {
        self.gateway = gateway
        self.channel = channel
        self.work = work
        self.release = release
    }

    // MARK: The device's identity

    func verificationCallback() -> NIOSSLCustomVerificationCallback {
        { [self] chain, promise in gateway.verifier.verify(chain, into: self, closed: channel.closeFuture, work: work, promise: promise) }
    }

    func set(_ record: CertificateRecord) {
        intake.withLock { $0.peer = HeldRecord(record) }
        // A device authenticates in its handshake.
        release.authenticated()
    }

    /// The certificate's serial, until Connect takes the record.
    fileprivate var peerSerial: String? { intake.withLock { $0.peer?.record.serial } }

    /// Counts the connection as a failed authentication of its address
    /// (`ListenerGuard`), though its certificate passed: it is refused.
    fileprivate func failedAuthentication() { release.failedAuthentication() }

    /// The record, forgotten here: Connect needs it once, an idle
    /// connection does not keep it.
    fileprivate func takePeerRecord() -> CertificateRecord? { intake.withLock { $0.peer.take()?.record } }

    // MARK: The device's link

    /// A Notification frame, unless an item is beyond what the device
    /// protocol carries (held by an older version, say): then why, and
    /// nothing is sent.
    func deliver(_ notification: PushNotification, channelID: String?) -> String? {
        let n = notification
        let expiration = n.expiration.map { UInt32(clamping: Int64($0.timeIntervalSince1970)) }
        let frame = DeviceNotification(
            token: n.token, payload: n.payload, id: n.id, deliveryID: n.deliveryID, expiration: expiration, priority: n.priority.rawValue,
            topic: n.topic, collapseID: n.collapseID, pushType: n.pushType, channelID: channelID)
        if let problem = frame.problem(tokenLength: gateway.tokenLength) { return "\(problem)" }
        send(.notification(frame))
        return nil
    }

    func sentEverythingHeld() {
        send(.noStorage)
    }

    /// On the channel's event loop, written at once when no frame sent
    /// before is still in the loop's queue: a notification a provider
    /// connection on the same loop admitted goes out before the rest of
    /// that connection's read is handled. Otherwise (another thread, or
    /// frames queued: the connection's task sent them just before) through
    /// the queue, behind them, so that frames leave in the order sent.
    func send(_ message: DeviceMessage) {
        let channel = self.channel
        if channel.eventLoop.inEventLoop, intake.withLock({ $0.queuedSends == 0 }) {
            channel.writeAndFlush(Self.encode(message, channel), promise: nil)
            return
        }
        intake.withLock { $0.queuedSends += 1 }
        channel.eventLoop.execute { [self] in
            channel.writeAndFlush(Self.encode(message, channel), promise: nil)
            intake.withLock { $0.queuedSends -= 1 }
        }
    }

    /// Sends a last frame and waits until it is written (or the write
    /// failed); counted as queued meanwhile, as `send` counts.
    func sendLast(_ message: DeviceMessage) async {
        intake.withLock { $0.queuedSends += 1 }
        try? await channel.writeAndFlush(Self.encode(message, channel))
        intake.withLock { $0.queuedSends -= 1 }
    }

    /// The frame's bytes, written straight into one buffer.
    private static func encode(_ message: DeviceMessage, _ channel: any Channel) -> ByteBuffer {
        var buffer = channel.allocator.buffer(capacity: message.capacityHint)
        message.write(to: &buffer)
        return buffer
    }

    func close() {
        channel.close(promise: nil)
    }

    /// Closes the socket under the TLS handler, without TLS's closing
    /// exchange: for a device told it sent too many frames, which NIOSSL
    /// would otherwise go on reading and decrypting, while it waits for
    /// the device's close_notify, for its whole shutdown timeout (5 s: a
    /// flooding device kept a core busy that long per connection).
    func closeBelowTLS() {
        let channel = channel
        channel.eventLoop.execute {
            let cut = CloseBelowTLS()
            do {
                let operations = channel.pipeline.syncOperations
                try operations.addHandler(cut, position: .first)
                try operations.context(handler: cut).close(promise: nil)
            } catch {
                channel.close(promise: nil)
            }
        }
    }

    /// The device's certificate was revoked (`CertificateConnections`):
    /// the connection's handler hands it on, unless the channel has ended.
    func revoke() {
        channel.pipeline.fireUserInboundEventTriggered(DeviceConnectionHandler.Revoked())
    }

    // MARK: Frames

    /// Takes a frame or event, on the channel's event loop. A frame that
    /// finds nothing waiting is read at once, there: a KeepAlive or an Ack
    /// needs no task at all, and anything else starts the task with it.
    /// False when the connection reads no more (`stopReading`): the frame
    /// is dropped, and so should be whatever the same read holds after it.
    @discardableResult
    func enqueue(_ item: Item) -> Bool {
        enum Start {
            case none
            case task
            case atOnce(DeviceFrame, DeviceConversation)
            case dropped
        }
        let start = intake.withLock { intake -> Start in
            if intake.stopped, case .frame = item { return .dropped }
            if !intake.running, intake.items.isEmpty, case .frame(let frame) = item {
                intake.running = true
                return .atOnce(frame, intake.conversation)
            }
            intake.items.append(item)
            guard !intake.running else { return .none }
            intake.running = true
            return .task
        }
        switch start {
        case .dropped:
            return false
        case .none:
            return true
        case .task:
            work.start { await self.handleWaiting() }
        case .atOnce(let frame, var conversation):
            if !conversation.over, let step = gateway.receive(frame, &conversation, link: self) {
                let handed = conversation
                work.start { await self.handleWaiting(handed, first: step) }
                return true
            }
            let more = intake.withLock { intake -> Bool in
                intake.conversation = conversation
                intake.running = !intake.items.isEmpty
                return intake.running
            }
            if more { work.start { await self.handleWaiting() } }
        }
        return true
    }

    /// Reads nothing more from the device (what it sent beyond its frame
    /// budget is not even decrypted): it is being told so and closed.
    func stopReading() {
        intake.withLock { intake in
            intake.paused = true
            intake.stopped = true
        }
    }

    /// True when the channel should read no more for now (too many frames
    /// wait); the task asks for a read again once it caught up.
    func shouldPauseReading() -> Bool {
        intake.withLock { intake in
            if intake.items.count >= Self.pauseAt { intake.paused = true }
            return intake.paused
        }
    }

    /// Handles the frames waiting, in order, starting with what is left of
    /// one read by `enqueue`, if any.
    private func handleWaiting(_ conversation: DeviceConversation? = nil, first: DeviceStep? = nil) async {
        var conversation = conversation ?? intake.withLock { $0.conversation }
        if let first {
            conversation.over = await !gateway.perform(first, &conversation, link: self)
        }
        while true {
            let (next, resume) = intake.withLock { intake -> (Item?, Bool) in
                guard let item = intake.items.popFirst() else {
                    intake.conversation = conversation
                    intake.running = false
                    return (nil, false)
                }
                let resume = intake.paused && !intake.stopped && intake.items.count <= Self.resumeAt
                if resume { intake.paused = false }
                return (item, resume)
            }
            if resume { channel.read() }
            guard let next else { return }
            await handle(next, &conversation)
        }
    }

    private func handle(_ item: Item, _ conversation: inout DeviceConversation) async {
        switch item {
        case .frame(let frame):
            guard !conversation.over, let step = gateway.receive(frame, &conversation, link: self) else { return }
            conversation.over = await !gateway.perform(step, &conversation, link: self)
        case .failed(let error):
            guard !conversation.over else { return }
            conversation.over = true
            if let error = error as? DeviceProtocolError {
                await gateway.fail(error, link: self)
            } else {
                gateway.logger.debug("device connection ended", metadata: ["courier.error": "\(error)"])
                close()
            }
        case .revoked:
            guard !conversation.over else { return }
            conversation.over = true
            await gateway.fail(DeviceProtocolError(.certificateRefused, "the device certificate was revoked"), link: self)
        case .closed:
            conversation.over = true
            if let certificate = conversation.certificate { gateway.policy.certificates.forget(certificate, connection: ObjectIdentifier(self)) }
            if let session = conversation.machine.end() { gateway.dispatcher.disconnected(session) }
            release(channel)
        }
    }
}

/// A queue that holds no storage while it is empty: an idle connection's
/// intake costs nothing, and a burst's room is not kept after it.
struct WaitingItems<Element> {
    private var buffer: CircularBuffer<Element>?

    var isEmpty: Bool { buffer?.isEmpty ?? true }
    var count: Int { buffer?.count ?? 0 }

    mutating func append(_ element: Element) {
        if buffer == nil { buffer = CircularBuffer(initialCapacity: 4) }
        buffer?.append(element)
    }

    /// The first element; nil, and the storage released, once none is left.
    mutating func popFirst() -> Element? {
        guard let first = buffer?.popFirst() else {
            buffer = nil
            return nil
        }
        return first
    }
}

/// Put first in a pipeline to close the socket from there, under the TLS
/// handler (`DeviceConnection.closeBelowTLS`).
final class CloseBelowTLS: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = NIOAny
}

@available(*, unavailable)
extension CloseBelowTLS: Sendable {}

/// Runs a periodic job (the dispatcher's timers, the HTTP/2 gateways'
/// sweeps) every `interval` seconds until graceful shutdown.
struct TimerService: Service {
    let interval: Double
    let tick: @Sendable () async -> Void

    func run() async throws {
        await cancelWhenGracefulShutdown {
            // A sleep cut short by shutdown ends the loop: no tick then.
            while (try? await Task.sleep(for: .seconds(interval))) != nil {
                await tick()
            }
        }
    }
}
