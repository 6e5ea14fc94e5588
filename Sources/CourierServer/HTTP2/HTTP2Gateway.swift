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
    /// The request's id: its `apns-id`, or a broadcast API request's
    /// `apns-request-id` (`idHeader`).
    var apnsID: String
    var body: [UInt8]?
    /// The header that carries `apnsID`.
    var idHeader = HTTP2Answer.apnsIDHeader
    /// `apns-channel-id`: a channel management answer's channel.
    var channelID: String?
    /// The connection's first valid provider token: lift the one-stream limit.
    var liftStreamLimit = false
    /// Why it was refused.
    var reason: Reason?
    /// `apns-unique-id`: a sandbox notification's, once it was made (and
    /// logged), whatever the answer.
    var uniqueID: UUID?
    /// The request's inbox entry, recorded on the connection's event loop
    /// (one thread per connection takes the inbox's lock, not every task's).
    var entry: InboxRecord?
    /// The request's body is still coming and was refused for its size:
    /// once the answer is out, the stream is reset so the upload stops.
    var endsUpload = false

    static let apnsIDHeader = "apns-id"
    static let requestIDHeader = "apns-request-id"

    static func failure(_ reason: Reason, apnsID: String, timestamp: Date? = nil) -> HTTP2Answer {
        HTTP2Answer(status: reason.httpStatus, apnsID: apnsID, body: HTTP2ErrorBody(reason: reason, timestamp: timestamp).json, reason: reason)
    }

    /// A broadcast API request's refusal, under its `apns-request-id`.
    static func failure(_ reason: Reason, requestID: String) -> HTTP2Answer {
        var answer = failure(reason, apnsID: requestID)
        answer.idHeader = requestIDHeader
        return answer
    }
}

/// The HTTP/2 provider API of one environment (seed 003, "Communicating
/// with APNs"; docs/protocol.md §2): TLS 1.2+ with ALPN `h2` (a client that
/// offers no ALPN speaks HTTP/2 all the same), certificate or token trust,
/// `POST /3/device/<token>` and `POST /4/broadcasts/apps/<bundle>`, every
/// status and reason of docs/protocol.md §2. With `managesChannels` it is
/// the environment's channel management port instead (`/1/apps/…`, the
/// same trust; `BroadcastRequests.swift`).
public final class HTTP2Gateway: ListenerInterface, Sendable {
    let basics: PortBasics
    /// The channel management port: only `/1/apps/…` requests.
    let managesChannels: Bool
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
        keys: ProviderKeys, inbox: NotificationInbox, faults: FaultInjector, policy: ConnectionPolicy, managesChannels: Bool = false, logger: Logger
    ) throws {
        self.inbox = inbox
        self.faults = faults
        self.managesChannels = managesChannels
        // A certificate is optional here: without one, the provider uses tokens.
        basics = PortBasics(
            managesChannels ? .channels : .http2, environment, configuration: configuration, policy: policy, authority: tls,
            context: try ServerTLS.context(provisioner: provisioner, alpn: ["h2"], verification: .optionalVerification),
            peers: .providers(checkingEnvironment: false), logger: logger)
        self.dispatcher = dispatcher
        self.keys = keys
    }

    var clock: any WallClock { dispatcher.clock }

    func setUp(_ channel: any Channel, peer: PeerIdentityBox, work: ConnectionWork, release: ConnectionRelease) throws -> Never? {
        try channel.pipeline.syncOperations.addHandler(HTTP2ConnectionSetup(gateway: self, peer: peer, work: work, release: release))
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
                policy.peerLog.log(.info, "closing an idle connection", to: logger)
                connection.goAway(.idleTimeout)
            }
            guard case .token(let trust) = connection.trust else { continue }
            if let keyID = trust.keyID {
                guard keys.isRevoked(keyID) else { continue }
                policy.peerLog.log(.info, "closing a connection whose auth key was revoked", metadata: ["courier.key": "\(keyID)"], to: logger)
                connection.goAway(.invalidProviderToken)
            } else if now.timeIntervalSince(connection.openedAt) >= policy.connections.authenticationTimeout {
                // No certificate, and no valid token shown in time.
                policy.peerLog.log(.info, "closing a connection that did not authenticate", to: logger)
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
        /// The notification's `apns-unique-id` (sandbox only).
        var uniqueID: UUID?
    }

    /// What a request comes to without waiting (`decide`).
    enum Decision: Sendable {
        /// Answered now (its inbox entry made).
        case answered(HTTP2Answer)
        /// Answered once `durable` is committed — an accepted push's 200, or
        /// a removed app's 410 once its feedback entry is — an internal
        /// error if the commit fails (`answer` makes either, with its entry).
        case committing(Pending<Void>, answer: @Sendable (_ committed: Bool) -> HTTP2Answer)
        /// Has to wait (a key or a registration from the store, room in the
        /// delivery log, a fault rule's delay): `answer` decides it, as the
        /// listener's work.
        case waits(answer: @Sendable () async -> HTTP2Answer)
    }

    /// Who sent a request, once its trust was checked.
    struct Provider {
        var identity: ProviderIdentity
        /// A certificate's only topic, for a request without `apns-topic`.
        var defaultTopic: String?
        /// Token trust, whose team's topics can be read again (nil once they were).
        var tokenTrust: TokenTrust?
        /// The connection's first valid token (`HTTP2Answer.liftStreamLimit`).
        var first = false
        /// Token trust, not a certificate: the token-only topic kinds are its.
        let byToken: Bool

        init(identity: ProviderIdentity, defaultTopic: String? = nil, tokenTrust: TokenTrust? = nil, first: Bool = false) {
            self.identity = identity
            self.defaultTopic = defaultTopic
            self.tokenTrust = tokenTrust
            self.first = first
            byToken = tokenTrust != nil
        }
    }

    /// What a request whose provider is known comes to before the
    /// dispatcher (`prepare`).
    private enum Prepared {
        case refused(HTTP2Answer)
        /// The topic is not the provider's: its team's topics are read again first.
        case refreshTopics
        case notification(PushNotification, TopicGrant)
    }

    /// Decides one request whose headers parsed, without waiting when
    /// nothing has to (docs/protocol.md §2): trust, topic, header values,
    /// payload, fault rules, then the dispatcher. What does have to wait
    /// starts over in `answerAfterWaiting` (nothing was done yet), or
    /// goes on from the notification (`dispatchAfterWaiting`: a fault's
    /// delay, the store).
    func decide(_ head: HTTP2RequestHead, headers: HPACKHeaders, body: ByteBuffer, connection: HTTP2ConnectionHandle) -> Decision {
        let id = UUID.notificationID()
        let apnsID = head.apnsID ?? id.lowercasedString
        var seen = Seen()
        func waitsFromTheStart() -> Decision {
            .waits { await self.answerAfterWaiting(head, headers: headers, body: body, connection: connection, id: id) }
        }
        var provider: Provider
        switch connection.trust {
        case .token(let trust):
            guard let outcome = trust.authenticateAtOnce(head.authorization, now: clock.now(), keys: keys) else { return waitsFromTheStart() }
            switch admit(outcome, trust: trust, connection: connection, apnsID: apnsID) {
            case .failure(let refused): return .answered(recorded(refused.answer, headers, body, connection, seen))
            case .success(let known): provider = known
            }
        case .certificate, .unusableCertificate:
            switch certified(connection.trust, apnsID: apnsID) {
            case .failure(let refused): return .answered(recorded(refused.answer, headers, body, connection, seen))
            case .success(let known): provider = known
            }
        }
        seen.identity = provider.identity
        let notification: PushNotification
        let grant: TopicGrant
        switch prepare(head, body: body, provider: provider, id: id, apnsID: apnsID, seen: &seen) {
        case .refused(var answer):
            answer.liftStreamLimit = provider.first
            return .answered(recorded(answer, headers, body, connection, seen))
        case .refreshTopics: return waitsFromTheStart()
        case .notification(let n, let g): (notification, grant) = (n, g)
        }
        let first = provider.first
        var delay: Duration?
        switch fault(notification, grant: grant, first: first, apnsID: apnsID, connection: connection, seen: &seen) {
        case .answered(let answer): return .answered(recorded(answer, headers, body, connection, seen))
        case .delay(let duration): delay = duration
        case .none: break
        }
        let admission = delay == nil ? dispatcher.admit(notification, environment: environment, grant: grant, now: clock.now()) : nil
        guard case .decided(let result, let decidedDurable) = admission else {
            let (waiting, delayed) = (seen, delay)
            return .waits {
                await self.dispatchAfterWaiting(
                    notification, grant: grant, delay: delayed, admission: admission, first: first, apnsID: apnsID, headers: headers, body: body,
                    connection: connection, seen: waiting)
            }
        }
        var answer = Self.answer(result, apnsID: apnsID)
        answer.liftStreamLimit = first
        guard let durable = decidedDurable else { return .answered(recorded(answer, headers, body, connection, seen)) }
        let (accepted, committed) = (answer, seen)
        return .committing(durable) { done in
            self.recorded(done ? accepted : .failure(.internalServerError, apnsID: apnsID), headers, body, connection, committed)
        }
    }

    /// `decide` for a request that has to wait before its provider or its
    /// topic is known.
    private func answerAfterWaiting(_ head: HTTP2RequestHead, headers: HPACKHeaders, body: ByteBuffer, connection: HTTP2ConnectionHandle, id: UUID) async
        -> HTTP2Answer
    {
        let apnsID = head.apnsID ?? id.lowercasedString
        var seen = Seen()
        var provider: Provider
        switch await knownProvider(head.authorization, connection: connection, apnsID: apnsID) {
        case .failure(let refused): return recorded(refused.answer, headers, body, connection, seen)
        case .success(let found): provider = found
        }
        seen.identity = provider.identity
        var prepared = prepare(head, body: body, provider: provider, id: id, apnsID: apnsID, seen: &seen)
        if case .refreshTopics = prepared {
            // A team's app added since the token was verified.
            guard let refreshed = await provider.tokenTrust?.refreshTopics(keys: keys) else {
                return recorded(.failure(.topicDisallowed, apnsID: apnsID), headers, body, connection, seen)
            }
            provider.identity = refreshed
            provider.tokenTrust = nil
            seen.identity = refreshed
            prepared = prepare(head, body: body, provider: provider, id: id, apnsID: apnsID, seen: &seen)
        }
        switch prepared {
        case .refused(var answer):
            answer.liftStreamLimit = provider.first
            return recorded(answer, headers, body, connection, seen)
        case .refreshTopics:
            return recorded(.failure(.topicDisallowed, apnsID: apnsID), headers, body, connection, seen)
        case .notification(let notification, let grant):
            var delay: Duration?
            switch fault(notification, grant: grant, first: provider.first, apnsID: apnsID, connection: connection, seen: &seen) {
            case .answered(let answer): return recorded(answer, headers, body, connection, seen)
            case .delay(let duration): delay = duration
            case .none: break
            }
            return await dispatchAfterWaiting(
                notification, grant: grant, delay: delay, admission: nil, first: provider.first, apnsID: apnsID, headers: headers, body: body,
                connection: connection, seen: seen)
        }
    }

    /// What a fault rule that matches a notification does to its request.
    private enum FaultStep {
        case none
        /// Refused, or the connection ends (GOAWAY asked for).
        case answered(HTTP2Answer)
        /// Decided after this long.
        case delay(Duration)
    }

    /// Takes the first fault rule that matches the notification, as the
    /// binary API does once a frame's payload passed its checks, and only
    /// once the dispatcher found the notification to be its provider's.
    private func fault(
        _ notification: PushNotification, grant: TopicGrant, first: Bool, apnsID: String, connection: HTTP2ConnectionHandle, seen: inout Seen
    ) -> FaultStep {
        guard faults.isActive, let owned = dispatcher.owned(notification, environment: environment, grant: grant, now: clock.now()),
            let rule = faults.take(FaultRequest(owned, interface: .http2, identity: seen.identity), now: clock.now())
        else { return .none }
        seen.fault = rule.id
        dispatcher.logFault(rule, notification: notification, owned: owned)
        var answer: HTTP2Answer
        switch rule.action {
        case .reject(let reason, let timestamp, _):
            answer = .failure(reason, apnsID: apnsID, timestamp: reason.httpStatus == 410 ? timestamp ?? clock.now() : nil)
        case .delay(let milliseconds):
            return .delay(.milliseconds(milliseconds))
        case .close(let reason):
            connection.goAway(reason)
            answer = .failure(reason, apnsID: apnsID)
        }
        answer.liftStreamLimit = first
        return .answered(answer)
    }

    /// The rest of `decide` for a notification that waits: a fault rule's
    /// `delay`, then the dispatcher's `admission` (made here after a
    /// delay), and its commit.
    private func dispatchAfterWaiting(
        _ notification: PushNotification, grant: TopicGrant, delay: Duration?, admission: Dispatcher.Admission?, first: Bool, apnsID: String,
        headers: HPACKHeaders, body: ByteBuffer, connection: HTTP2ConnectionHandle, seen: Seen
    ) async -> HTTP2Answer {
        if let delay { try? await Task.sleep(for: delay) }
        let admission = admission ?? dispatcher.admit(notification, environment: environment, grant: grant, now: clock.now())
        var answer = Self.answer(await dispatcher.settled(admission), apnsID: apnsID)
        answer.liftStreamLimit = first
        return recorded(answer, headers, body, connection, seen)
    }

    /// Who sent a request: its connection's certificate, or the token in
    /// `authorization` (waiting for its key from the store if need be).
    func knownProvider(_ authorization: String?, connection: HTTP2ConnectionHandle, apnsID: String) async -> Result<Provider, Refused> {
        guard case .token(let trust) = connection.trust else { return certified(connection.trust, apnsID: apnsID) }
        return admit(await trust.authenticate(authorization, now: clock.now(), keys: keys), trust: trust, connection: connection, apnsID: apnsID)
    }

    /// A refusal before the provider is known.
    struct Refused: Error {
        var answer: HTTP2Answer
    }

    /// The provider of a certificate connection.
    func certified(_ trust: ProviderTrust, apnsID: String) -> Result<Provider, Refused> {
        switch trust {
        case .certificate(let record, let identity, let topic):
            guard record.environments.contains(environment) else { return .failure(Refused(answer: .failure(.badCertificateEnvironment, apnsID: apnsID))) }
            return .success(Provider(identity: identity, defaultTopic: topic))
        case .unusableCertificate, .token:
            return .failure(Refused(answer: .failure(.badCertificate, apnsID: apnsID)))
        }
    }

    /// The provider of a token connection, from its request's token. A
    /// key whose connections come and go too fast, or that holds too many,
    /// is refused at its first valid token (and this connection ends).
    func admit(_ outcome: TokenTrust.Outcome, trust: TokenTrust, connection: HTTP2ConnectionHandle, apnsID: String) -> Result<Provider, Refused> {
        switch outcome {
        case .rejected(let reason): return .failure(Refused(answer: .failure(reason, apnsID: apnsID)))
        case .valid(let identity, let first):
            if first, let keyID = trust.keyID {
                let admission = policy.providers.admit("key " + keyID, until: connection.channel.closeFuture)
                if admission != .admitted {
                    policy.peerLog.log(
                        .warning, admission == .tooFast ? "refusing a provider that reconnects too fast" : "refusing a provider that holds its connections",
                        metadata: ["courier.key": "\(keyID)"], to: logger)
                    connection.goAway(.tooManyRequests)
                    return .failure(Refused(answer: .failure(.tooManyRequests, apnsID: apnsID)))
                }
            }
            return .success(Provider(identity: identity, tokenTrust: trust, first: first))
        }
    }

    /// The notification a request carries, from its topic, header values
    /// and payload, or the refusal; nothing is done.
    private func prepare(
        _ head: HTTP2RequestHead, body: ByteBuffer, provider: Provider, id: UUID, apnsID: String, seen: inout Seen
    ) -> Prepared {
        guard let topic = head.topic ?? provider.defaultTopic else { return .refused(.failure(.missingTopic, apnsID: apnsID)) }
        seen.topic = topic
        guard HTTP2RequestHead.isTopic(topic) else { return .refused(.failure(.badTopic, apnsID: apnsID)) }
        let grant = TopicGrant(topic, for: provider.identity)
        guard grant.allowed else { return provider.tokenTrust == nil ? .refused(.failure(.topicDisallowed, apnsID: apnsID)) : .refreshTopics }
        // Token-only kinds (location, Live Activities, widgets, controls),
        // whatever a certificate lists.
        guard provider.byToken || grant.kind.allowsCertificates else { return .refused(.failure(.topicDisallowed, apnsID: apnsID)) }
        let fields: HTTP2RequestHead.Fields
        switch head.fields(tokenLength: configuration.limits.tokenLength, newID: id) {
        case .failure(let reason): return .refused(.failure(reason, apnsID: apnsID))
        case .success(let checked): fields = checked
        }
        let pushType = fields.pushType.flatMap(PushType.init(rawValue:))
        if let reason = PushTypeRules.refusal(pushType: pushType, kind: grant.kind, priority: fields.priority.flatMap(Priority.init(rawValue:))) {
            return .refused(.failure(reason, apnsID: apnsID))
        }
        seen.token = fields.token
        let channel: PayloadChannel = grant.kind == .voip ? .http2VoIP : .http2
        let summary: PayloadSummary
        switch PayloadRules.check(body.readableBytesView, priority: fields.priority, channel: channel, limits: configuration.limits.payload) {
        case .failure(let error): return .refused(.failure(error.reason, apnsID: apnsID))
        case .success(let result): summary = result
        }
        // Without a priority: 5 for a background push (silent, or of type
        // background), else 10.
        let priority = fields.priority.flatMap(Priority.init(rawValue:)) ?? (summary.isSilent || pushType == .background ? .conservePower : .immediate)
        var notification = PushNotification(
            id: fields.id, token: fields.token, topic: topic, payload: Array(buffer: body), expiration: fields.expiration, priority: priority,
            collapseID: fields.collapseID, pushType: fields.pushType, isSilent: summary.isSilent)
        notification.identify(in: environment)
        seen.payload = notification.payload
        seen.uniqueID = notification.uniqueID
        return .notification(notification, grant)
    }

    private static func answer(_ result: AcceptResult, apnsID: String) -> HTTP2Answer {
        switch result {
        case .accepted: HTTP2Answer(status: 200, apnsID: apnsID, body: nil)
        case .rejected(let reason, let timestamp): .failure(reason, apnsID: apnsID, timestamp: timestamp)
        }
    }

    /// The answer with its inbox entry (`entry`).
    func recorded(_ answer: HTTP2Answer, _ headers: HPACKHeaders, _ body: ByteBuffer, _ connection: HTTP2ConnectionHandle, _ seen: Seen)
        -> HTTP2Answer
    {
        var answer = answer
        answer.uniqueID = seen.uniqueID
        answer.entry = entry(headers, body: body, answer: answer, connection: connection, seen: seen)
        return answer
    }

    /// Counts a request's answer (`ServerMetrics`) and makes its inbox
    /// entry; nil when the inbox records nothing.
    func entry(_ headers: HPACKHeaders, body: ByteBuffer, answer: HTTP2Answer, connection: HTTP2ConnectionHandle, seen: Seen = Seen()) -> InboxRecord? {
        // 201 and 204: a channel created or deleted.
        let outcome: InboxOutcome =
            (200..<300).contains(answer.status)
            ? .accepted : .refused(status: answer.status, reason: answer.reason?.rawValue ?? "status \(answer.status)")
        dispatcher.metrics.received(.http2, environment, outcome)
        guard inbox.isRecording else { return nil }
        var token = seen.token
        if token == nil, let path = headers.first(name: ":path"), path.hasPrefix("/3/device/") { token = Hex.decode(path.dropFirst("/3/device/".count)) }
        return InboxRecord(
            receivedAt: clock.now(), interface: .http2, environment: environment, id: .text(answer.apnsID), token: token,
            topic: seen.topic ?? headers.first(name: "apns-topic"), provider: seen.identity?.name, teamID: seen.identity?.teamID, connection: connection.address,
            received: .http2(headers), payload: seen.payload ?? Array(buffer: body), outcome: outcome, fault: seen.fault, uniqueID: seen.uniqueID)
    }
}

/// Waits for the TLS handshake, then decides the connection's trust (a
/// client certificate, or tokens) and sets up HTTP/2: a token connection
/// starts with one concurrent stream until a valid token is seen.
final class HTTP2ConnectionSetup: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    let gateway: HTTP2Gateway
    let peer: PeerIdentityBox
    let work: ConnectionWork
    let release: ConnectionRelease

    init(gateway: HTTP2Gateway, peer: PeerIdentityBox, work: ConnectionWork, release: ConnectionRelease) {
        self.gateway = gateway
        self.peer = peer
        self.work = work
        self.release = release
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
            trust = .token(TokenTrust(environment: gateway.environment))
        }
        let options = gateway.configuration.http2
        let handle = HTTP2ConnectionHandle(channel: context.channel, trust: trust, now: gateway.clock.now())
        let settings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: trust.isCertificate ? options.maxConcurrentStreams : 1),
            HTTP2Setting(parameter: .maxHeaderListSize, value: HPACKDecoder.defaultMaxHeaderListSize),
        ]
        do {
            let operations = context.pipeline.syncOperations
            try operations.addHandler(HTTP2ProviderHandler(gateway: gateway, connection: handle, work: work, release: release), position: .after(self))
            var http2 = NIOHTTP2Handler.ConnectionConfiguration()
            http2.initialSettings = settings
            // Every stream the server resets in a window is remembered, so
            // that DATA the client sent before it read the reset (held by
            // flow control, say) is dropped, not taken for DATA on a long
            // closed stream: NIO's 32 made that a connection error
            // (GOAWAY STREAM_CLOSED) once a connection had more resets
            // outstanding than that, before the server's own limit.
            http2.maximumRecentlyResetStreams = HTTP2ProviderHandler.serverResetLimit + 1
            try operations.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: http2), position: .after(self))
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
    /// Where requests that wait are answered.
    let work: ConnectionWork
    /// Told of the connection's first valid provider token.
    let release: ConnectionRelease
    /// The requests the current read completed (`decideReceived`).
    private var received: [HTTP2Request] = []
    private let deciding = HTTP2DecisionQueue()
    /// Durable pushes whose commit has finished, answered on the loop
    /// together: one hop per commit, not one per push.
    private let committedAnswers = HTTP2CommittedAnswers()
    /// Answers written since the last flush (`scheduleFlush`).
    private var unflushed = 0
    private let eventLoop: any EventLoop
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

    init(gateway: HTTP2Gateway, connection: HTTP2ConnectionHandle, work: ConnectionWork, release: ConnectionRelease) {
        self.gateway = gateway
        self.connection = connection
        self.work = work
        self.release = release
        eventLoop = connection.channel.eventLoop
        let limits = gateway.configuration.limits.payload
        bodyLimit = max(limits.http2, limits.http2VoIP, limits.broadcast)
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
            gateway.policy.peerLog.log(
                .info, "reset a stream: the connection holds too much unfinished", metadata: ["courier.bytes": "\(unfinishedBytes)"], to: gateway.logger)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.enhanceYourCalm))), promise: nil)
            scheduleFlush(context: context)
            countServerReset(context: context)
            return false
        }
        unfinishedBytes += count
        stream.bytes += count
        return true
    }

    /// Streams this side reset, in the current window: counted as the
    /// peer's own resets are by NIO's rapid-reset limit (200 per 30 s), so
    /// a peer that makes the server reset its streams — and write a log
    /// line for each — gets GOAWAY (ENHANCE_YOUR_CALM) as one that resets
    /// them itself does. Half NIO's count: a client on NIO's defaults
    /// takes 200 resets from the server as an attack of the server's and
    /// closes the connection itself, before it would read the GOAWAY.
    private var serverResets = (count: 0, since: NIODeadline.distantPast)
    private var closingForResets = false
    static let serverResetLimit = 100
    static let serverResetWindow = TimeAmount.seconds(30)

    private func countServerReset(context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        if now - serverResets.since >= Self.serverResetWindow { serverResets = (0, now) }
        serverResets.count += 1
        guard serverResets.count > Self.serverResetLimit, !closingForResets else { return }
        closingForResets = true
        gateway.policy.peerLog.log(
            .info, "closing a connection that made the server reset too many of its streams", metadata: ["courier.resets": "\(serverResets.count)"],
            to: gateway.logger)
        sendGoAway(nil, errorCode: .enhanceYourCalm, context: context)
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
                remove(frame.streamID)
                if gateway.managesChannels || HTTP2ChannelRequestHead.isBroadcast(stream.headers) {
                    // A broadcast API request: refused for its size once its trust and route are known, under its apns-request-id.
                    stream.body = nil
                    decideChannelRequest(stream, on: frame.streamID, management: gateway.managesChannels, oversized: true, context: context)
                    return
                }
                // Too large whatever the topic: answer now and stop the upload.
                var answer = HTTP2Answer.failure(.payloadTooLarge, apnsID: Self.apnsID(in: stream.headers))
                answer.endsUpload = true
                // Recorded with the part of the body that came (the inbox cuts it).
                if let entry = gateway.entry(stream.headers, body: stream.body ?? bytes, answer: answer, connection: connection) { gateway.inbox.record(entry) }
                write(answer, on: frame.streamID, context: context)
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

    /// A broadcast API request's `apns-request-id`, or a new one.
    private static func requestID(in headers: HPACKHeaders) -> String {
        headers.first(name: HTTP2Answer.requestIDHeader) ?? UUID.notificationID().lowercasedString
    }

    private func complete(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = remove(streamID) else { return }
        let empty = context.channel.allocator.buffer(capacity: 0)
        if case .refuse(let reason) = machine.requestComplete() {
            var answer = HTTP2Answer.failure(reason, apnsID: Self.apnsID(in: stream.headers))
            if gateway.managesChannels || HTTP2ChannelRequestHead.isBroadcast(stream.headers) {
                answer = .failure(reason, requestID: Self.requestID(in: stream.headers))
            }
            if let entry = gateway.entry(stream.headers, body: stream.body ?? empty, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
            return
        }
        if gateway.managesChannels {
            decideChannelRequest(stream, on: streamID, management: true, context: context)
            return
        }
        let head: HTTP2RequestHead
        switch HTTP2RequestHead.parse(stream.headers) {
        // Only a refused path or method can be a broadcast's: the other /3/device requests pay nothing for the route.
        case .failure(.badPath) where HTTP2ChannelRequestHead.isBroadcast(stream.headers),
            .failure(.methodNotAllowed) where HTTP2ChannelRequestHead.isBroadcast(stream.headers):
            decideChannelRequest(stream, on: streamID, management: false, context: context)
            return
        case .failure(let reason):
            let answer = HTTP2Answer.failure(reason, apnsID: Self.apnsID(in: stream.headers))
            if let entry = gateway.entry(stream.headers, body: stream.body ?? empty, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
            return
        case .success(let parsed): head = parsed
        }
        machine.dispatched()
        received.append(HTTP2Request(streamID: streamID, head: head, headers: stream.headers, body: stream.body ?? empty))
    }

    /// A request of the broadcast API: answered through the listener's
    /// work (it needs the store), or refused now when its method or path is wrong.
    /// `oversized`: its body went over the limit (and was not kept).
    private func decideChannelRequest(
        _ stream: OpenStream, on streamID: HTTP2StreamID, management: Bool, oversized: Bool = false, context: ChannelHandlerContext
    ) {
        let body = stream.body ?? context.channel.allocator.buffer(capacity: 0)
        switch HTTP2ChannelRequestHead.parse(stream.headers, management: management) {
        case .failure(let reason):
            var answer = HTTP2Answer.failure(reason, requestID: Self.requestID(in: stream.headers))
            answer.endsUpload = oversized
            if let entry = gateway.entry(stream.headers, body: body, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
        case .success(let head):
            machine.dispatched()
            let (gateway, connection, headers) = (self.gateway, self.connection, stream.headers)
            settle(.waits { await gateway.answer(head, headers: headers, body: body, oversized: oversized, connection: connection) }, on: streamID)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        decideReceived(context: context)
        context.fireChannelReadComplete()
    }

    /// Decides the requests one read completed. A request alone in flight
    /// is decided here, on the event loop. A busy connection's go to its
    /// `HTTP2DecisionQueue`, decided in order by one task of the listener's
    /// work while there are any, answered in one hop back to the loop per
    /// batch: its requests are decided on another core than the one its
    /// TLS and HTTP/2 framing take, at a task per busy spell, not per
    /// request.
    private func decideReceived(context: ChannelHandlerContext) {
        guard !received.isEmpty else { return }
        if received.count == 1, machine.inFlight == 1 {
            let request = received.removeLast()
            settle(gateway.decide(request.head, headers: request.headers, body: request.body, connection: connection), on: request.streamID)
            return
        }
        let start = deciding.add(received)
        received.removeAll(keepingCapacity: true)
        guard start else { return }
        let (gateway, connection, deciding) = (self.gateway, self.connection, self.deciding)
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        work.start {
            while let requests = deciding.next() {
                let decided = requests.map { ($0.streamID, gateway.decide($0.head, headers: $0.headers, body: $0.body, connection: connection)) }
                handler.eventLoop.execute {
                    for (streamID, decision) in decided { handler.value.settle(decision, on: streamID) }
                }
            }
        }
    }

    /// Answers a decided request, on the event loop: now, after its
    /// commit, or after what it waits for (in the listener's work).
    private func settle(_ decision: HTTP2Gateway.Decision, on streamID: HTTP2StreamID) {
        switch decision {
        case .answered(let answer):
            finish(answer, on: streamID)
        case .committing(let durable, let answer):
            let handler = NIOLoopBound(self, eventLoop: eventLoop)
            let answers = committedAnswers
            durable.whenResolved { result in
                let committed = if case .success = result { true } else { false }
                // A commit resolves its pushes one after another on its own
                // thread: the first of them to find nothing waiting hops.
                guard answers.add(answer(committed), on: streamID) else { return }
                handler.eventLoop.execute {
                    for (streamID, answer) in answers.take() { handler.value.finish(answer, on: streamID) }
                }
            }
        case .waits(let answer):
            let handler = NIOLoopBound(self, eventLoop: eventLoop)
            work.start {
                let decided = await answer()
                handler.eventLoop.execute { handler.value.finish(decided, on: streamID) }
            }
        }
    }

    private func finish(_ answer: HTTP2Answer, on streamID: HTTP2StreamID) {
        if let entry = answer.entry { gateway.inbox.record(entry) }
        let action = machine.answered(firstValidToken: answer.liftStreamLimit)
        guard let context else { return }
        if action.liftStreamLimit {
            // The first valid token: the connection authenticated.
            release.authenticated()
            let settings = [HTTP2Setting(parameter: .maxConcurrentStreams, value: gateway.configuration.http2.maxConcurrentStreams)]
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings)))), promise: nil)
        }
        write(answer, on: streamID, context: context)
        if let reason = action.goAway { sendGoAway(reason, context: context) }
    }

    /// Writes an answer; one that `endsUpload` is followed by a reset of
    /// its stream once it is out (sent sooner, the reset would drop the
    /// answer's DATA still queued).
    private func write(_ answer: HTTP2Answer, on streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard answer.endsUpload else {
            write(answer, on: streamID, context: context, promise: nil)
            return
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        write(answer, on: streamID, context: context, promise: written)
        let reset = HTTP2Frame(streamID: streamID, payload: .rstStream(.noError))
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in
            guard let context = bound.value.context else { return }
            context.writeAndFlush(bound.value.wrapOutboundOut(reset), promise: nil)
        }
    }

    private func write(_ answer: HTTP2Answer, on streamID: HTTP2StreamID, context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        // The apns-id differs on every answer: kept out of the HPACK table.
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: answer.status == 200 ? "200" : String(answer.status))
        headers.add(name: answer.idHeader, value: answer.apnsID, indexing: .nonIndexable)
        if let channelID = answer.channelID { headers.add(name: "apns-channel-id", value: channelID, indexing: .nonIndexable) }
        if let uniqueID = answer.uniqueID { headers.add(name: "apns-unique-id", value: uniqueID.lowercasedString, indexing: .nonIndexable) }
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

    /// One flush for the answers finished in the same turn of the loop,
    /// and one every `flushEvery` of them: a batch of a busy connection's
    /// answers goes out in parts, so that the provider sends its next
    /// requests while the rest are written, not after.
    private static let flushEvery = 32

    private func scheduleFlush(context: ChannelHandlerContext) {
        unflushed += 1
        if unflushed >= Self.flushEvery {
            unflushed = 0
            context.flush()
        }
        guard !flushScheduled else { return }
        flushScheduled = true
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            handler.value.flushScheduled = false
            handler.value.unflushed = 0
            handler.value.context?.flush()
        }
    }

    /// GOAWAY, then the close: with an APNs `reason` in its data (NO_ERROR),
    /// or with the HTTP/2 `errorCode` alone.
    private func sendGoAway(_ reason: Reason?, errorCode: HTTP2ErrorCode = .noError, context: ChannelHandlerContext) {
        let data = reason.map { context.channel.allocator.buffer(bytes: HTTP2ErrorBody(reason: $0).json) }
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: machine.lastStream, errorCode: errorCode, opaqueData: data))
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in channel.close(promise: nil) }
    }
}


/// A request whose headers parsed, on its way to its decision.
struct HTTP2Request: Sendable {
    var streamID: HTTP2StreamID
    var head: HTTP2RequestHead
    var headers: HPACKHeaders
    var body: ByteBuffer
}

/// A busy connection's requests waiting for their decision, in arrival
/// order, and whether a task is deciding them (`HTTP2ProviderHandler`).
final class HTTP2DecisionQueue: Sendable {
    private struct State {
        var requests: [HTTP2Request] = []
        var deciding = false
    }

    private let state = Mutex(State())

    /// Queues requests; true when no task is deciding (the caller starts one).
    func add(_ requests: [HTTP2Request]) -> Bool {
        state.withLock { state in
            state.requests += requests
            guard !state.deciding else { return false }
            state.deciding = true
            return true
        }
    }

    /// Everything queued, in order; nil once nothing is (the task ends).
    func next() -> [HTTP2Request]? {
        state.withLock { state in
            guard !state.requests.isEmpty else {
                state.deciding = false
                return nil
            }
            defer { state.requests = [] }
            return state.requests
        }
    }
}

/// Answers of a connection's durable pushes, from their commits' thread to
/// the connection's event loop.
final class HTTP2CommittedAnswers: Sendable {
    private let answers = Mutex<[(HTTP2StreamID, HTTP2Answer)]>([])

    /// Adds an answer; true when none was waiting (the caller hops to the
    /// loop to `take` them).
    func add(_ answer: HTTP2Answer, on streamID: HTTP2StreamID) -> Bool {
        answers.withLock { answers in
            answers.append((streamID, answer))
            return answers.count == 1
        }
    }

    /// Everything added, in order.
    func take() -> [(HTTP2StreamID, HTTP2Answer)] {
        answers.withLock { answers in
            defer { answers = [] }
            return answers
        }
    }
}
