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

/// The state of one binary connection: which notification was accepted
/// last (status 10 names it) and whether the connection has answered.
///
/// A notification counts as accepted once it and every one before it are
/// durable. Commits finish in the order they were queued, so the admitted
/// notifications form segments, each opened by one that waits for its
/// commit and followed by ones with nothing to commit; a commit that
/// finishes closes its segment.
final class BinaryConnectionState: Sendable {
    private struct Segment {
        /// The notification whose commit opens the segment.
        var first: UInt32
        /// The last notification admitted in it.
        var last: UInt32
    }

    private struct State {
        var lastAccepted: UInt32 = 0
        var answered = false
        var commitFailed = false
        /// Segments whose commit is still running, oldest first.
        var segments = CircularBuffer<Segment>()
    }

    private let state = Mutex(State())

    var lastAccepted: UInt32 { state.withLock { $0.lastAccepted } }

    /// An error packet or status 10 was sent: nothing more is processed.
    var isAnswered: Bool { state.withLock { $0.answered } }

    /// True the first time: only one error packet per connection.
    func answer() -> Bool {
        state.withLock { state in
            defer { state.answered = true }
            return !state.answered
        }
    }

    /// Records an admitted notification; `durable` is its commit, if it
    /// has one. `failed` runs (once, with the notification's identifier)
    /// if a commit fails.
    func admitted(_ identifier: UInt32, durable: Pending<Void>?, failed: @escaping @Sendable (UInt32) -> Void) {
        guard let durable else {
            state.withLock { state in
                if state.segments.isEmpty {
                    state.lastAccepted = identifier
                } else {
                    state.segments[state.segments.index(before: state.segments.endIndex)].last = identifier
                }
            }
            return
        }
        state.withLock { $0.segments.append(Segment(first: identifier, last: identifier)) }
        durable.whenResolved { result in
            let failure = self.state.withLock { state -> UInt32? in
                let segment = state.segments.removeFirst()
                guard !state.commitFailed else { return nil }
                if case .failure = result {
                    state.commitFailed = true
                    return segment.first
                }
                state.lastAccepted = segment.last
                return nil
            }
            if let failure { failed(failure) }
        }
    }
}

/// The legacy binary provider API of one environment (seeds 000–002,
/// DESIGN.md §5): TLS with the provider's certificate, commands 0, 1 and 2
/// processed strictly in order, the error-response packet for the first
/// bad notification, status 10 on graceful shutdown.
final class BinaryGateway: Service {
    let environment: Environment
    let configuration: CourierConfiguration
    let context: NIOSSLContext
    let authority: ServerTLS
    let dispatcher: Dispatcher
    let ports: BoundPorts
    let logger: Logger
    /// How long to keep reading (and discarding) after an error packet, so
    /// that closing is not a TCP reset that destroys the packet.
    let linger: TimeAmount = .milliseconds(250)
    private let open = Mutex<[ObjectIdentifier: (any Channel, BinaryConnectionState)]>([:])

    init(environment: Environment, configuration: CourierConfiguration, tls: ServerTLS, provisioner: Provisioner, dispatcher: Dispatcher, ports: BoundPorts, logger: Logger) throws {
        self.environment = environment
        self.configuration = configuration
        self.authority = tls
        // TLS 1.2 at most, as Apple's gateway spoke: TLS 1.3 session tickets
        // arrive after the handshake, and old clients take them for an error response.
        context = try ServerTLS.context(provisioner: provisioner, maximumVersion: .tlsv12)
        self.dispatcher = dispatcher
        self.ports = ports
        var logger = logger
        logger[metadataKey: "courier.listener"] = "binary.\(environment.rawValue)"
        self.logger = logger
    }

    func run() async throws {
        let verifier = PeerVerifier(authority: authority.authority, store: dispatcher.store, kind: .provider, logger: logger, environment: environment)
        let context = self.context
        let limits = BinaryDecoderLimits(
            tokenLength: configuration.limits.tokenLength, legacyPayload: configuration.limits.payload.binaryLegacy,
            command2Payload: configuration.limits.payload.binaryCommand2)
        let timeout = configuration.handshakeTimeout
        let server = try await bindListener(.binary, environment, configuration.network) { host, port in
            try await listenerBootstrap()
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let connection: (NIOAsyncChannel<BinaryProviderInbound, ByteBuffer>, PeerIdentityBox, EventLoopFuture<Void>) =
                            try verifier.handshakingConnection(
                                channel, context: context, handshakeTimeout: timeout, handlers: [ByteToMessageHandler(BinaryProviderDecoder(limits: limits))])
                        return connection
                    }
                }
        }
        ports.listening(.binary, environment, on: server.channel, logger: logger)
        try await acceptConnections(on: server) {
            // Each open connection learns the last notification accepted: status 10.
            for (channel, state) in self.open.withLock({ Array($0.values) }) where state.answer() {
                var packet = channel.allocator.buffer(capacity: BinaryErrorResponse.length)
                BinaryErrorResponse(status: .shutdown, identifier: state.lastAccepted).write(to: &packet)
                channel.writeAndFlush(packet).whenComplete { _ in self.linger(channel) }
            }
        } serve: { connection, box, handshake in
            await self.serve(connection, peer: box, handshake: handshake)
        }
    }

    private func linger(_ channel: any Channel) {
        channel.eventLoop.scheduleTask(in: linger) { channel.close(promise: nil) }
    }

    private func serve(_ connection: NIOAsyncChannel<BinaryProviderInbound, ByteBuffer>, peer: PeerIdentityBox, handshake: EventLoopFuture<Void>) async {
        let channel = connection.channel
        let key = ObjectIdentifier(channel)
        let state = BinaryConnectionState()
        open.withLock { $0[key] = (channel, state) }
        defer { _ = open.withLock { $0.removeValue(forKey: key) } }
        do {
            try await connection.executeThenClose { inbound, outbound in
                try await handshake.get()
                guard let record = peer.record else { return }
                let (identity, info) = try ProviderIdentity.certificate(record)
                guard let topic = info.bundleID ?? info.topics.first?.description else { return }
                // Notifications are admitted strictly in order; their commits to the
                // store run behind (group commit), and one counts as accepted (for
                // status 10) once it is durable. A failed commit is answered with
                // status 1 as soon as it is known.
                let commitFailure = Mutex<Task<Void, Never>?>(nil)
                let commitFailed: @Sendable (UInt32) -> Void = { identifier in
                    commitFailure.withLock {
                        $0 = Task { try? await self.finish(.processingError, identifier, state: state, outbound: outbound, channel: channel) }
                    }
                }
                var failed = false
                // Commits finish in order, so the last one done means all are: an error
                // response tells the provider everything before it was taken, so it
                // waits for that.
                var lastDurable: Pending<Void>?
                for try await message in inbound {
                    // After the first bad notification (or status 10) everything is discarded.
                    if failed || state.isAnswered { continue }
                    switch message {
                    case .failure(let failure):
                        failed = true
                        _ = try? await lastDurable?.value
                        logger.info("malformed notification", metadata: ["courier.status": "\(failure.status)", "courier.detail": "\(failure.detail)"])
                        try await finish(failure.answers ? failure.status : nil, failure.identifier, state: state, outbound: outbound, channel: channel)
                    case .notification(let frame):
                        let outcome: Result<Pending<Void>?, Refusal>
                        switch admitAtOnce(frame, topic: topic, identity: identity) {
                        case .decided(let decided):
                            outcome = decided
                        case .waits(let notification):
                            outcome = self.outcome(await dispatcher.admitAfterWaiting(notification, environment: environment, from: identity))
                        }
                        switch outcome {
                        case .success(let durable):
                            state.admitted(frame.identifier, durable: durable, failed: commitFailed)
                            if let durable { lastDurable = durable }
                        case .failure(let refusal):
                            failed = true
                            _ = try? await lastDurable?.value
                            logger.info("refused notification", metadata: ["courier.status": "\(refusal.status)", "courier.identifier": "\(frame.identifier)"])
                            try await finish(refusal.status, frame.identifier, state: state, outbound: outbound, channel: channel, answers: frame.command != 0)
                        }
                    }
                }
                // The provider stopped sending: its last commits may still fail (status 1).
                _ = try? await lastDurable?.value
                await commitFailure.withLock({ $0 })?.value
            }
        } catch {
            logger.debug("binary connection ended", metadata: ["courier.error": "\(error)"])
        }
    }

    /// Writes the error packet (if the command has one), then reads and
    /// discards for a moment and closes.
    private func finish(
        _ status: BinaryStatus?, _ identifier: UInt32, state: BinaryConnectionState, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>,
        channel: any Channel, answers: Bool = true
    ) async throws {
        if let status, answers, state.answer() {
            var packet = channel.allocator.buffer(capacity: BinaryErrorResponse.length)
            BinaryErrorResponse(status: status, identifier: identifier).write(to: &packet)
            try await outbound.write(packet)
            linger(channel)
        } else {
            channel.close(promise: nil)
        }
    }

    struct Refusal: Error {
        var status: BinaryStatus
    }

    /// The notification a frame carries, or the status to answer when its
    /// payload breaks the rules.
    private func notification(_ frame: BinaryNotificationFrame, topic: String) -> Result<PushNotification, Refusal> {
        let channel: PayloadChannel = frame.command == 2 ? .binaryCommand2 : .binaryLegacy
        let summary: PayloadSummary
        switch PayloadRules.check(frame.payload.readableBytesView, priority: frame.priority, channel: channel, limits: configuration.limits.payload) {
        case .failure(let error): return .failure(Refusal(status: error.binaryStatus))
        case .success(let result): summary = result
        }
        let priority = frame.priority.flatMap(Priority.init(rawValue:)) ?? (summary.isSilent ? .conservePower : .immediate)
        let expiration = frame.expiry.map { Date(timeIntervalSince1970: TimeInterval($0)) }
        return .success(
            PushNotification(
                id: .notificationID(), token: Array(frame.token.readableBytesView), topic: topic, payload: Array(frame.payload.readableBytesView),
                expiration: expiration, priority: priority, isSilent: summary.isSilent))
    }

    /// A frame's outcome — its pending commit when admitted, or the status
    /// to answer — or its notification when the dispatcher has to wait for
    /// the store before it can decide.
    private enum Admission {
        case decided(Result<Pending<Void>?, Refusal>)
        case waits(PushNotification)
    }

    /// Hands one notification to the dispatcher, without waiting.
    private func admitAtOnce(_ frame: BinaryNotificationFrame, topic: String, identity: ProviderIdentity) -> Admission {
        switch notification(frame, topic: topic) {
        case .failure(let refusal):
            return .decided(.failure(refusal))
        case .success(let notification):
            guard let decided = dispatcher.admitAtOnce(notification, environment: environment, from: identity) else { return .waits(notification) }
            return .decided(outcome(decided))
        }
    }

    private func outcome(_ decided: (result: AcceptResult, durable: Pending<Void>?)) -> Result<Pending<Void>?, Refusal> {
        switch decided.result {
        case .accepted: return .success(decided.durable)
        case .rejected(let reason, _):
            // The binary API reports nothing for some refusals (Unregistered).
            guard let status = reason.binaryStatus else { return .success(nil) }
            return .failure(Refusal(status: status))
        }
    }
}
