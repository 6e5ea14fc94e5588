import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

/// How a connection's provider proved who it is.
enum ProviderTrust: Sendable {
    /// A client certificate from Courier's CA: topics and environments from it.
    case certificate(CertificateRecord, ProviderIdentity, defaultTopic: String?)
    /// A certificate the store knows but that is not a usable provider
    /// certificate (no topics): every request is `BadCertificate`.
    case unusableCertificate(CertificateRecord)
    /// No certificate: each request carries a JWT.
    case token(TokenTrust)

    var isCertificate: Bool {
        if case .token = self { return false }
        return true
    }
}

/// What the gateway keeps of one open connection, for sweeps and shutdown.
final class HTTP2ConnectionHandle: Sendable {
    let channel: any Channel
    let trust: ProviderTrust
    /// When its TLS handshake finished.
    let openedAt: Date
    /// The peer's address.
    let address: String?
    private let state: Mutex<(lastActivity: Date, endRequested: Bool, requests: Int)>

    init(channel: any Channel, trust: ProviderTrust, now: Date) {
        self.channel = channel
        self.trust = trust
        openedAt = now
        address = channel.remoteAddress?.description
        state = Mutex((now, false, 0))
    }

    /// A request began.
    func touch(_ now: Date) {
        state.withLock {
            $0.lastActivity = now
            $0.requests += 1
        }
    }

    /// What the admin API shows of it.
    func state(_ environment: Environment) -> ProviderConnectionState {
        let identity: ProviderIdentity? =
            switch trust {
            case .certificate(_, let identity, _): identity
            case .unusableCertificate(let record): ProviderIdentity(name: "certificate \(record.serial)", teamID: nil, topics: [])
            case .token(let trust): trust.identity
            }
        return ProviderConnectionState(
            interface: .http2, environment: environment, provider: identity?.name, teamID: identity?.teamID, address: address,
            since: openedAt, requests: state.withLock { $0.requests })
    }

    var idleSince: Date { state.withLock { $0.lastActivity } }

    /// Ends the connection (from any thread; the first reason stands):
    /// requests that arrive from now on are answered with `reason` (an
    /// idle connection's with `Shutdown`), those in flight finish, then
    /// GOAWAY carries `{"reason": …}` and the connection closes
    /// (`HTTP2ConnectionStateMachine`).
    func goAway(_ reason: Reason) {
        let first = state.withLock { state in
            defer { state.endRequested = true }
            return !state.endRequested
        }
        if first { channel.pipeline.fireUserInboundEventTriggered(HTTP2GoAwayRequest(reason: reason)) }
    }
}

/// Tells a connection's handler to end the connection.
struct HTTP2GoAwayRequest: Sendable {
    var reason: Reason
}

/// The answer to one request.
struct HTTP2Answer: Sendable {
    var status: Int
    var apnsID: String
    var body: [UInt8]?
    /// The connection's first valid provider token: lift the one-stream limit.
    var liftStreamLimit = false
    /// Why it was refused.
    var reason: Reason?
    /// The request's inbox entry, recorded on the connection's event loop
    /// (one thread per connection takes the inbox's lock, not every task's).
    var entry: InboxRecord?

    static func failure(_ reason: Reason, apnsID: String, timestamp: Date? = nil) -> HTTP2Answer {
        HTTP2Answer(status: reason.httpStatus, apnsID: apnsID, body: HTTP2ErrorBody(reason: reason, timestamp: timestamp).json, reason: reason)
    }
}

/// The HTTP/2 provider API of one environment (seed 003, "Communicating
/// with APNs"; docs/protocol.md §2): TLS 1.2+ with ALPN `h2` (a client that
/// offers no ALPN speaks HTTP/2 all the same), certificate or token trust,
/// `POST /3/device/<token>`, every status and reason of docs/protocol.md §2.
public final class HTTP2Gateway: ListenerInterface, Sendable {
    let basics: PortBasics
    let dispatcher: Dispatcher
    let keys: ProviderKeys
    /// Every request that reached an answer, with the answer.
    let inbox: NotificationInbox
    /// The admin API's fault rules.
    let faults: FaultInjector
    private struct Connections {
        var open: [ObjectIdentifier: HTTP2ConnectionHandle] = [:]
        var shuttingDown = false
        var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let connections = Mutex(Connections())

    init(
        environment: Environment, configuration: CourierConfiguration, tls: ServerTLS, provisioner: Provisioner, dispatcher: Dispatcher,
        keys: ProviderKeys, inbox: NotificationInbox, faults: FaultInjector, policy: ConnectionPolicy, logger: Logger
    ) throws {
        self.inbox = inbox
        self.faults = faults
        // A certificate is optional here: without one, the provider uses tokens.
        basics = PortBasics(
            .http2, environment, configuration: configuration, policy: policy, authority: tls,
            context: try ServerTLS.context(provisioner: provisioner, alpn: ["h2"], verification: .optionalVerification),
            peers: .providers(checkingEnvironment: false), logger: logger)
        self.dispatcher = dispatcher
        self.keys = keys
    }

    var clock: any WallClock { dispatcher.clock }

    func setUp(_ channel: any Channel, peer: PeerIdentityBox, release: @escaping @Sendable () -> Void) throws -> Never? {
        try channel.pipeline.syncOperations.addHandler(HTTP2ConnectionSetup(gateway: self, peer: peer))
        return nil
    }

    /// Open connections answer `Shutdown` from now on, and get GOAWAY
    /// `Shutdown` once their streams are answered (one whose handshake
    /// ends later, when it registers).
    func shuttingDown() {
        let (open, waiters) = connections.withLock { state in
            state.shuttingDown = true
            defer { state.shutdownWaiters = [] }
            return (Array(state.open.values), state.shutdownWaiters)
        }
        for connection in open { connection.goAway(.shutdown) }
        for waiter in waiters { waiter.resume() }
    }

    /// Nothing more than `shuttingDown` said: each connection closes
    /// itself after its GOAWAY.
    func farewell(_ channel: any Channel) {}

    /// The open connections, for the admin API.
    func connectionStates() -> [ProviderConnectionState] {
        connections.withLock { Array($0.open.values) }.map { $0.state(environment) }
    }

    /// Called once a connection's TLS handshake is done.
    func register(_ handle: HTTP2ConnectionHandle) {
        let key = ObjectIdentifier(handle.channel)
        let shuttingDown = connections.withLock { state in
            state.open[key] = handle
            return state.shuttingDown
        }
        handle.channel.closeFuture.whenComplete { _ in _ = self.connections.withLock { $0.open.removeValue(forKey: key) } }
        if shuttingDown { handle.goAway(.shutdown) }
    }

    /// Returns once graceful shutdown has reached this gateway (its open
    /// connections answer `Shutdown` from then on).
    public func waitUntilShuttingDown() async {
        await withCheckedContinuation { continuation in
            let done = connections.withLock { state in
                if !state.shuttingDown { state.shutdownWaiters.append(continuation) }
                return state.shuttingDown
            }
            if done { continuation.resume() }
        }
    }

    /// The gateway's timer (every `qos.tickInterval`; tests call it after
    /// moving the clock): closes connections idle for `http2.idleTimeout`
    /// with GOAWAY `IdleTimeout`, and those whose auth key was revoked
    /// (those whose certificate was: `CertificateConnections`).
    public func sweep() async {
        await Self.sweep([self])
    }

    /// The sweep of gateways that share their keys (the application's
    /// timer, both environments): the keys are read again once, then each
    /// gateway closes what it must.
    static func sweep(_ gateways: [HTTP2Gateway]) async {
        guard let first = gateways.first else { return }
        do {
            try await first.keys.refresh()
        } catch {
            first.logger.error("store failed while reading auth keys", metadata: ["courier.error": "\(error)"])
        }
        for gateway in gateways { await gateway.closeIdleAndRevoked() }
    }

    /// The sweep after `keys.refresh()`.
    private func closeIdleAndRevoked() async {
        let now = clock.now()
        let open = connections.withLock { Array($0.open.values) }
        for connection in open {
            if now.timeIntervalSince(connection.idleSince) >= configuration.http2.idleTimeout {
                logger.info("closing an idle connection")
                connection.goAway(.idleTimeout)
            }
            guard case .token(let trust) = connection.trust else { continue }
            if let keyID = trust.keyID {
                guard keys.isRevoked(keyID) else { continue }
                logger.info("closing a connection whose auth key was revoked", metadata: ["courier.key": "\(keyID)"])
                connection.goAway(.invalidProviderToken)
            } else if now.timeIntervalSince(connection.openedAt) >= policy.connections.authenticationTimeout {
                // No certificate, and no valid token shown in time.
                logger.info("closing a connection that did not authenticate")
                connection.goAway(.missingProviderToken)
            }
        }
    }

    // MARK: Requests

    /// What a request was found to be on its way to its answer, for the inbox.
    struct Seen {
        var identity: ProviderIdentity?
        var topic: String?
        var token: [UInt8]?
        /// The fault rule that acted on it.
        var fault: String?
        /// The payload as the notification holds it.
        var payload: [UInt8]?
    }

    /// Answers one request whose headers parsed (`decide`) and records it
    /// in the inbox with its answer.
    func answer(_ head: HTTP2RequestHead, headers: HPACKHeaders, body: ByteBuffer, connection: HTTP2ConnectionHandle) async -> HTTP2Answer {
        var seen = Seen()
        var answer = await decide(head, body: body, connection: connection, seen: &seen)
        answer.entry = entry(headers, body: body, answer: answer, connection: connection, seen: seen)
        return answer
    }

    /// Counts a request's answer (`ServerMetrics`) and makes its inbox
    /// entry; nil when the inbox records nothing.
    func entry(_ headers: HPACKHeaders, body: ByteBuffer, answer: HTTP2Answer, connection: HTTP2ConnectionHandle, seen: Seen = Seen()) -> InboxRecord? {
        let outcome: InboxOutcome =
            answer.status == 200 ? .accepted : .refused(status: answer.status, reason: answer.reason?.rawValue ?? "status \(answer.status)")
        dispatcher.metrics.received(.http2, environment, outcome)
        guard inbox.isRecording else { return nil }
        var token = seen.token
        if token == nil, let path = headers.first(name: ":path"), path.hasPrefix("/3/device/") { token = Hex.decode(path.dropFirst("/3/device/".count)) }
        return InboxRecord(
            receivedAt: clock.now(), interface: .http2, environment: environment, id: .text(answer.apnsID), token: token,
            topic: seen.topic ?? headers.first(name: "apns-topic"), provider: seen.identity?.name, teamID: seen.identity?.teamID, connection: connection.address,
            received: .http2(headers), payload: seen.payload ?? Array(buffer: body), outcome: outcome, fault: seen.fault)
    }

    /// Answers one request whose headers parsed: trust, topic, header
    /// values, payload, then the dispatcher (docs/protocol.md §2).
    private func decide(_ head: HTTP2RequestHead, body: ByteBuffer, connection: HTTP2ConnectionHandle, seen: inout Seen) async -> HTTP2Answer {
        let newID = UUID.notificationID()
        let apnsID = head.apnsID ?? newID.lowercasedString
        var identity: ProviderIdentity
        var defaultTopic: String?
        var liftStreamLimit = false
        var tokenTrust: TokenTrust?
        switch connection.trust {
        case .unusableCertificate:
            return .failure(.badCertificate, apnsID: apnsID)
        case .certificate(let record, let certified, let topic):
            guard record.environments.contains(environment) else { return .failure(.badCertificateEnvironment, apnsID: apnsID) }
            identity = certified
            defaultTopic = topic
        case .token(let trust):
            switch await trust.authenticate(head.authorization, now: clock.now(), keys: keys) {
            case .rejected(let reason): return .failure(reason, apnsID: apnsID)
            case .valid(let valid, let first):
                // A key whose connections come and go too fast, or that holds
                // too many, is refused (and this connection ends).
                if first, let keyID = trust.keyID {
                    let admission = policy.providers.admit("key " + keyID, until: connection.channel.closeFuture)
                    if admission != .admitted {
                        logger.warning(
                            admission == .tooFast ? "refusing a provider that reconnects too fast" : "refusing a provider that holds its connections",
                            metadata: ["courier.key": "\(keyID)"])
                        connection.goAway(.tooManyRequests)
                        return .failure(.tooManyRequests, apnsID: apnsID)
                    }
                }
                identity = valid
                liftStreamLimit = first
                tokenTrust = trust
            }
        }
        seen.identity = identity
        var answer = await deliver(
            head, body: body, identity: &identity, defaultTopic: defaultTopic, tokenTrust: tokenTrust, id: newID, apnsID: apnsID, connection: connection,
            seen: &seen)
        answer.liftStreamLimit = liftStreamLimit
        return answer
    }

    private func deliver(
        _ head: HTTP2RequestHead, body: ByteBuffer, identity: inout ProviderIdentity, defaultTopic: String?, tokenTrust: TokenTrust?, id: UUID,
        apnsID: String, connection: HTTP2ConnectionHandle, seen: inout Seen
    ) async -> HTTP2Answer {
        guard let topic = head.topic ?? defaultTopic else { return .failure(.missingTopic, apnsID: apnsID) }
        seen.topic = topic
        guard HTTP2RequestHead.isTopic(topic) else { return .failure(.badTopic, apnsID: apnsID) }
        var grant = TopicGrant(topic, for: identity)
        // A team's app added since the token was verified.
        if !grant.allowed, let tokenTrust, let refreshed = await tokenTrust.refreshTopics(keys: keys) {
            identity = refreshed
            grant = TopicGrant(topic, for: refreshed)
        }
        guard grant.allowed else { return .failure(.topicDisallowed, apnsID: apnsID) }
        let fields: HTTP2RequestHead.Fields
        switch head.fields(tokenLength: configuration.limits.tokenLength, newID: id) {
        case .failure(let reason): return .failure(reason, apnsID: apnsID)
        case .success(let checked): fields = checked
        }
        seen.token = fields.token
        if faults.isActive,
            let rule = faults.take(
                FaultRequest(interface: .http2, environment: environment, token: fields.token, topic: topic, identity: identity), now: clock.now())
        {
            seen.fault = rule.id
            dispatcher.logFault(rule, notificationID: fields.id)
            switch rule.action {
            case .reject(let reason, let timestamp, _):
                return .failure(reason, apnsID: apnsID, timestamp: reason == .unregistered ? timestamp ?? clock.now() : nil)
            case .delay(let milliseconds):
                try? await Task.sleep(for: .milliseconds(milliseconds))
            case .close(let reason):
                connection.goAway(reason)
                return .failure(reason, apnsID: apnsID)
            }
        }
        let channel: PayloadChannel = grant.kind == .voip ? .http2VoIP : .http2
        let summary: PayloadSummary
        switch PayloadRules.check(body.readableBytesView, priority: fields.priority, channel: channel, limits: configuration.limits.payload) {
        case .failure(let error): return .failure(error.reason, apnsID: apnsID)
        case .success(let result): summary = result
        }
        let priority = fields.priority.flatMap(Priority.init(rawValue:)) ?? (summary.isSilent ? .conservePower : .immediate)
        let notification = PushNotification(
            id: fields.id, token: fields.token, topic: topic, payload: Array(buffer: body), expiration: fields.expiration, priority: priority,
            collapseID: fields.collapseID, pushType: fields.pushType, isSilent: summary.isSilent)
        seen.payload = notification.payload
        switch await dispatcher.accept(notification, environment: environment, grant: grant) {
        case .accepted: return HTTP2Answer(status: 200, apnsID: apnsID, body: nil)
        case .rejected(let reason, let timestamp): return .failure(reason, apnsID: apnsID, timestamp: timestamp)
        }
    }
}

/// Waits for the TLS handshake, then decides the connection's trust (a
/// client certificate, or tokens) and sets up HTTP/2: a token connection
/// starts with one concurrent stream until a valid token is seen.
final class HTTP2ConnectionSetup: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    let gateway: HTTP2Gateway
    let peer: PeerIdentityBox

    init(gateway: HTTP2Gateway, peer: PeerIdentityBox) {
        self.gateway = gateway
        self.peer = peer
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case .handshakeCompleted = event as? TLSUserEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        let trust: ProviderTrust
        if let record = peer.record {
            if let (identity, info) = try? ProviderIdentity.certificate(record), !identity.topics.isEmpty {
                // The default topic: the only one, when the certificate has one (seeds, table 8-2).
                trust = .certificate(record, identity, defaultTopic: info.topics.count == 1 ? info.topics.first?.description : nil)
            } else {
                trust = .unusableCertificate(record)
            }
        } else {
            trust = .token(TokenTrust())
        }
        let options = gateway.configuration.http2
        let handle = HTTP2ConnectionHandle(channel: context.channel, trust: trust, now: gateway.clock.now())
        let settings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: trust.isCertificate ? options.maxConcurrentStreams : 1),
            HTTP2Setting(parameter: .maxHeaderListSize, value: HPACKDecoder.defaultMaxHeaderListSize),
        ]
        do {
            let operations = context.pipeline.syncOperations
            try operations.addHandler(HTTP2ProviderHandler(gateway: gateway, connection: handle), position: .after(self))
            try operations.addHandler(NIOHTTP2Handler(mode: .server, initialSettings: settings), position: .after(self))
            operations.removeHandler(context: context, promise: nil)
        } catch {
            context.close(promise: nil)
            return
        }
        gateway.register(handle)
        if let record = peer.record {
            gateway.policy.certificates.register(serial: record.serial, channel: context.channel) { handle.goAway(.badCertificate) }
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// One connection's streams: collects each request's headers and body,
/// answers the header rows at once and the rest through the gateway, and
/// writes the answers. Runs on the connection's event loop; it speaks to
/// the HTTP/2 state machine in frames (no child channel per stream).
final class HTTP2ProviderHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct OpenStream {
        var headers: HPACKHeaders
        var body: ByteBuffer?
        /// What it holds, counted in `unfinishedBytes`.
        var bytes: Int
    }

    let gateway: HTTP2Gateway
    let connection: HTTP2ConnectionHandle
    /// The largest body kept; beyond it a request is `PayloadTooLarge`.
    private let bodyLimit: Int
    /// Bytes held by requests not received whole, and the most allowed.
    private var unfinishedBytes = 0
    private let unfinishedLimit: Int
    private var streams: [HTTP2StreamID: OpenStream] = [:]
    /// What the connection's life allows now (`HTTP2ConnectionStateMachine`).
    private var machine = HTTP2ConnectionStateMachine()
    private var flushScheduled = false
    private var context: ChannelHandlerContext?

    init(gateway: HTTP2Gateway, connection: HTTP2ConnectionHandle) {
        self.gateway = gateway
        self.connection = connection
        bodyLimit = max(gateway.configuration.limits.payload.http2, gateway.configuration.limits.payload.http2VoIP)
        unfinishedLimit = gateway.configuration.connections.maxUnfinishedRequestBytes
    }

    /// Forgets a stream's request and what it held.
    @discardableResult
    private func remove(_ streamID: HTTP2StreamID) -> OpenStream? {
        guard let stream = streams.removeValue(forKey: streamID) else { return nil }
        unfinishedBytes -= stream.bytes
        return stream
    }

    /// Counts `count` more bytes held by the unfinished request `stream`;
    /// when that would go over the limit the stream is reset
    /// (ENHANCE_YOUR_CALM) and forgotten instead, and false returned.
    private func hold(_ count: Int, in stream: inout OpenStream, _ streamID: HTTP2StreamID, context: ChannelHandlerContext) -> Bool {
        guard unfinishedBytes + count <= unfinishedLimit else {
            remove(streamID)
            gateway.logger.info("reset a stream: the connection holds too much unfinished", metadata: ["courier.bytes": "\(unfinishedBytes)"])
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.enhanceYourCalm))), promise: nil)
            scheduleFlush(context: context)
            return false
        }
        unfinishedBytes += count
        stream.bytes += count
        return true
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            if streams[frame.streamID] == nil {
                // Trailers on a known stream add nothing; a new stream starts a request.
                var stream = OpenStream(headers: headers.headers, bytes: 0)
                machine.requestBegan(on: frame.streamID)
                connection.touch(gateway.clock.now())
                if !headers.endStream {
                    let size = headers.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
                    guard hold(size, in: &stream, frame.streamID, context: context) else { return }
                }
                streams[frame.streamID] = stream
            }
            if headers.endStream { complete(frame.streamID, context: context) }
        case .data(let data):
            guard var stream = streams[frame.streamID], case .byteBuffer(var bytes) = data.data else { return }
            let kept = stream.body?.readableBytes ?? 0
            if kept + bytes.readableBytes > bodyLimit {
                // Too large whatever the topic: answer now and stop the upload.
                remove(frame.streamID)
                // The reset goes once the answer is out: it would drop the answer's DATA still queued.
                let written = context.eventLoop.makePromise(of: Void.self)
                let answer = HTTP2Answer.failure(.payloadTooLarge, apnsID: Self.apnsID(in: stream.headers))
                // Recorded with the part of the body that came (the inbox cuts it).
                if let entry = gateway.entry(stream.headers, body: stream.body ?? bytes, answer: answer, connection: connection) { gateway.inbox.record(entry) }
                write(answer, on: frame.streamID, context: context, promise: written)
                let reset = HTTP2Frame(streamID: frame.streamID, payload: .rstStream(.noError))
                let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
                written.futureResult.whenComplete { _ in
                    guard let context = bound.value.context else { return }
                    context.writeAndFlush(bound.value.wrapOutboundOut(reset), promise: nil)
                }
                return
            }
            if data.endStream {
                if stream.body == nil {
                    stream.body = bytes
                } else {
                    stream.body!.writeBuffer(&bytes)
                }
                streams[frame.streamID] = stream
                complete(frame.streamID, context: context)
                return
            }
            // Kept for a later frame: in a buffer of its own, not a slice
            // that would pin (and make the TLS handler copy) its read buffer.
            guard hold(bytes.readableBytes, in: &stream, frame.streamID, context: context) else { return }
            if stream.body == nil {
                var own = context.channel.allocator.buffer(capacity: bytes.readableBytes)
                own.writeBuffer(&bytes)
                stream.body = own
            } else {
                stream.body!.writeBuffer(&bytes)
            }
            streams[frame.streamID] = stream
        case .rstStream:
            remove(frame.streamID)
        default:
            // SETTINGS, PING and WINDOW_UPDATE are the HTTP/2 handler's; PRIORITY is ignored.
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent {
            replenish(window, context: context)
        } else if let request = event as? HTTP2GoAwayRequest {
            if let reason = machine.goAwayRequested(request.reason) { sendGoAway(reason, context: context) }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream error costs the stream (the HTTP/2 handler reset it); anything else the connection.
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            remove(streamError.streamID)
            return
        }
        gateway.logger.debug("HTTP/2 connection failed", metadata: ["courier.error": "\(error)"])
        context.close(promise: nil)
    }

    /// The connection window is ours to manage (no child channels): once
    /// the peer may send less than half of the default window, give back
    /// what was read — counted by the HTTP/2 handler, so DATA of streams
    /// already answered counts too.
    private func replenish(_ event: NIOHTTP2WindowUpdatedEvent, context: ChannelHandlerContext) {
        guard event.streamID == .rootStream, let window = event.inboundWindowSize, window <= Self.connectionWindow / 2 else { return }
        let frame = HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - window))
        context.write(wrapOutboundOut(frame), promise: nil)
        scheduleFlush(context: context)
    }

    private static let connectionWindow = 65_535

    private static func apnsID(in headers: HPACKHeaders) -> String {
        headers.first(name: "apns-id") ?? UUID.notificationID().lowercasedString
    }

    private func complete(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = remove(streamID) else { return }
        let empty = context.channel.allocator.buffer(capacity: 0)
        if case .refuse(let reason) = machine.requestComplete() {
            let answer = HTTP2Answer.failure(reason, apnsID: Self.apnsID(in: stream.headers))
            if let entry = gateway.entry(stream.headers, body: stream.body ?? empty, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
            return
        }
        let head: HTTP2RequestHead
        switch HTTP2RequestHead.parse(stream.headers) {
        case .failure(let reason):
            let answer = HTTP2Answer.failure(reason, apnsID: Self.apnsID(in: stream.headers))
            if let entry = gateway.entry(stream.headers, body: stream.body ?? empty, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
            return
        case .success(let parsed): head = parsed
        }
        machine.dispatched()
        let body = stream.body ?? empty
        let gateway = self.gateway
        let connection = self.connection
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        Task {
            let answer = await gateway.answer(head, headers: stream.headers, body: body, connection: connection)
            handler.eventLoop.execute { handler.value.finish(answer, on: streamID) }
        }
    }

    private func finish(_ answer: HTTP2Answer, on streamID: HTTP2StreamID) {
        if let entry = answer.entry { gateway.inbox.record(entry) }
        let action = machine.answered(firstValidToken: answer.liftStreamLimit)
        guard let context else { return }
        if action.liftStreamLimit {
            let settings = [HTTP2Setting(parameter: .maxConcurrentStreams, value: gateway.configuration.http2.maxConcurrentStreams)]
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings)))), promise: nil)
        }
        write(answer, on: streamID, context: context)
        if let reason = action.goAway { sendGoAway(reason, context: context) }
    }

    private func write(_ answer: HTTP2Answer, on streamID: HTTP2StreamID, context: ChannelHandlerContext, promise: EventLoopPromise<Void>? = nil) {
        // The apns-id differs on every answer: kept out of the HPACK table.
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: answer.status == 200 ? "200" : String(answer.status))
        headers.add(name: "apns-id", value: answer.apnsID, indexing: .nonIndexable)
        if let body = answer.body {
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(body.count))
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers)))), promise: nil)
            let buffer = context.channel.allocator.buffer(bytes: body)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true)))), promise: promise)
        } else {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: true)))), promise: promise)
        }
        scheduleFlush(context: context)
    }

    /// One flush for every answer finished in the same turn of the loop.
    private func scheduleFlush(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            handler.value.flushScheduled = false
            handler.value.context?.flush()
        }
    }

    private func sendGoAway(_ reason: Reason, context: ChannelHandlerContext) {
        let data = context.channel.allocator.buffer(bytes: HTTP2ErrorBody(reason: reason).json)
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: machine.lastStream, errorCode: .noError, opaqueData: data))
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in channel.close(promise: nil) }
    }
}
