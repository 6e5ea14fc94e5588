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
    /// The channel port's channels (`BroadcastRequests.swift`).
    let broadcasts: Broadcasts
    /// Counts every request's answer.
    let metrics: ServerMetrics
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
        broadcasts: Broadcasts, metrics: ServerMetrics, keys: ProviderKeys, inbox: NotificationInbox, faults: FaultInjector, policy: ConnectionPolicy, managesChannels: Bool = false, logger: Logger
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
        self.broadcasts = broadcasts
        self.metrics = metrics
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

    /// A request on its way to its decision.
    private struct Request: Sendable {
        let head: HTTP2RequestHead
        let headers: HPACKHeaders
        let body: ByteBuffer
        let connection: HTTP2ConnectionHandle
        /// The notification's id when `apns-id` names none.
        let id: UUID
        let apnsID: String

        init(head: HTTP2RequestHead, headers: HPACKHeaders, body: ByteBuffer, connection: HTTP2ConnectionHandle) {
            (self.head, self.headers, self.body, self.connection) = (head, headers, body, connection)
            id = .notificationID()
            apnsID = head.apnsID ?? id.lowercasedString
        }
    }

    /// What a request's decision has to load before it can be made
    /// (`decideAfterLoading` loads it).
    private enum Need {
        /// The token's key, from the store.
        case key(TokenTrust)
        /// The provider's team's topics, read again: an app added since
        /// its token was verified.
        case topics(Provider)
    }

    /// What was loaded for a request's decision.
    private enum Loaded {
        case nothing
        /// The request's token, checked with its key from the store.
        case authenticated(TokenTrust.Outcome)
        /// The provider, its team's topics read again.
        case provider(Provider)
    }

    /// A decision, or what it needs first (nothing was done yet).
    private enum Step {
        case decided(Decision)
        case needs(Need)
    }

    /// Decides one request whose headers parsed, without waiting when
    /// nothing has to (docs/protocol.md §2). What has to be loaded first
    /// — a key, a team's topics — is loaded in the listener's work, and
    /// the same decision is made again with it (`decideAfterLoading`).
    func decide(_ head: HTTP2RequestHead, headers: HPACKHeaders, body: ByteBuffer, connection: HTTP2ConnectionHandle) -> Decision {
        let request = Request(head: head, headers: headers, body: body, connection: connection)
        switch decide(request, loaded: .nothing) {
        case .decided(let decision): return decision
        case .needs(let need): return .waits { await self.decideAfterLoading(request, need: need) }
        }
    }

    /// Loads what a request's decision needs and makes it again, until it
    /// is made (twice at most: a key, then a team's topics).
    private func decideAfterLoading(_ request: Request, need: Need) async -> HTTP2Answer {
        var need = need
        while true {
            let loaded: Loaded
            switch need {
            case .key(let trust):
                loaded = .authenticated(await trust.authenticate(request.head.authorization, now: clock.now(), keys: keys))
            case .topics(var provider):
                // Not read (the store failed): the topic stays disallowed.
                if let refreshed = await provider.tokenTrust?.refreshTopics(keys: keys) { provider.identity = refreshed }
                provider.tokenTrust = nil
                loaded = .provider(provider)
            }
            switch decide(request, loaded: loaded) {
            case .needs(let next): need = next
            case .decided(.answered(let answer)): return answer
            case .decided(.waits(let answer)): return await answer()
            case .decided(.committing(let durable, let answer)):
                do {
                    try await durable.value
                    return answer(true)
                } catch {
                    return answer(false)
                }
            }
        }
    }

    /// The one decision of a request, with what was loaded for it: trust,
    /// topic, header values, payload, fault rules, then the dispatcher.
    /// A fault's delay and a dispatcher that has to wait go on from the
    /// notification (`dispatchAfterWaiting`).
    private func decide(_ request: Request, loaded: Loaded) -> Step {
        let apnsID = request.apnsID
        var seen = Seen()
        var provider: Provider
        switch loaded {
        case .provider(let known): provider = known
        case .nothing, .authenticated:
            let found: Result<Provider, Refused>
            switch request.connection.trust {
            case .token(let trust):
                let outcome: TokenTrust.Outcome
                if case .authenticated(let checked) = loaded {
                    outcome = checked
                } else {
                    guard let checked = trust.authenticateAtOnce(request.head.authorization, now: clock.now(), keys: keys) else { return .needs(.key(trust)) }
                    outcome = checked
                }
                found = admit(outcome, trust: trust, connection: request.connection, apnsID: apnsID)
            case .certificate, .unusableCertificate:
                found = certified(request.connection.trust, apnsID: apnsID)
            }
            switch found {
            case .failure(let refused): return .decided(.answered(recorded(refused.answer, request, seen)))
            case .success(let known): provider = known
            }
        }
        seen.identity = provider.identity
        let notification: PushNotification
        let grant: TopicGrant
        switch prepare(request.head, body: request.body, provider: provider, id: request.id, apnsID: apnsID, seen: &seen) {
        case .refused(var answer):
            answer.liftStreamLimit = provider.first
            return .decided(.answered(recorded(answer, request, seen)))
        case .refreshTopics: return .needs(.topics(provider))
        case .notification(let n, let g): (notification, grant) = (n, g)
        }
        let first = provider.first
        var delay: Duration?
        switch fault(notification, grant: grant, first: first, apnsID: apnsID, connection: request.connection, seen: &seen) {
        case .answered(let answer): return .decided(.answered(recorded(answer, request, seen)))
        case .delay(let duration): delay = duration
        case .none: break
        }
        let admission = delay == nil ? dispatcher.admit(notification, environment: environment, grant: grant, now: clock.now()) : nil
        guard case .decided(let result, let decidedDurable) = admission else {
            let (waiting, delayed) = (seen, delay)
            return .decided(
                .waits {
                    await self.dispatchAfterWaiting(notification, grant: grant, delay: delayed, admission: admission, first: first, request: request, seen: waiting)
                })
        }
        var answer = Self.answer(result, apnsID: apnsID)
        answer.liftStreamLimit = first
        guard let durable = decidedDurable else { return .decided(.answered(recorded(answer, request, seen))) }
        let (accepted, committed) = (answer, seen)
        return .decided(
            .committing(durable) { done in
                self.recorded(done ? accepted : .failure(.internalServerError, apnsID: apnsID), request, committed)
            })
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
        _ notification: PushNotification, grant: TopicGrant, delay: Duration?, admission: Dispatcher.Admission?, first: Bool, request: Request, seen: Seen
    ) async -> HTTP2Answer {
        if let delay { try? await Task.sleep(for: delay) }
        let admission = admission ?? dispatcher.admit(notification, environment: environment, grant: grant, now: clock.now())
        var answer = Self.answer(await dispatcher.settled(admission), apnsID: request.apnsID)
        answer.liftStreamLimit = first
        return recorded(answer, request, seen)
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
        let notification = PushNotification(
            id: fields.id, token: fields.token, topic: topic, payload: Array(buffer: body), expiration: fields.expiration, priority: priority,
            collapseID: fields.collapseID, pushType: fields.pushType, isSilent: summary.isSilent, in: environment)
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

    private func recorded(_ answer: HTTP2Answer, _ request: Request, _ seen: Seen) -> HTTP2Answer {
        recorded(answer, request.headers, request.body, request.connection, seen)
    }

    /// Counts a request's answer (`ServerMetrics`) and makes its inbox
    /// entry; nil when the inbox records nothing.
    func entry(_ headers: HPACKHeaders, body: ByteBuffer, answer: HTTP2Answer, connection: HTTP2ConnectionHandle, seen: Seen = Seen()) -> InboxRecord? {
        // 201 and 204: a channel created or deleted.
        let outcome: InboxOutcome =
            (200..<300).contains(answer.status)
            ? .accepted : .refused(status: answer.status, reason: answer.reason?.rawValue ?? "status \(answer.status)")
        metrics.received(.http2, environment, outcome)
        guard inbox.isRecording else { return nil }
        var token = seen.token
        if token == nil, let path = headers.first(name: ":path"), path.hasPrefix("/3/device/") { token = Hex.decode(path.dropFirst("/3/device/".count)) }
        return InboxRecord(
            receivedAt: clock.now(), interface: .http2, environment: environment, id: .text(answer.apnsID), token: token,
            topic: seen.topic ?? headers.first(name: "apns-topic"), provider: seen.identity?.name, teamID: seen.identity?.teamID, connection: connection.address,
            received: .http2(headers), payload: seen.payload ?? Array(buffer: body), outcome: outcome, fault: seen.fault, uniqueID: seen.uniqueID)
    }
}
