import CourierCore
import CourierPKI
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// A provider's right to push to one topic, and the topic's app and kind,
/// found once by the provider interface and handed to the dispatcher with
/// the notification: the topic is authorised in one place. A binary
/// connection pushes only to its certificate's topic, so it asks once per
/// connection; an HTTP/2 request once. A class, so that handing it to each
/// frame's admission costs one reference, not a copy of its strings.
public final class TopicGrant: Sendable {
    public let topic: String
    let bundleID: String
    let kind: TopicKind
    public let allowed: Bool
    /// The app, when the topic is the provider's (`ProviderIdentity.apps`;
    /// a topic that is not logs nothing).
    let app: AppNumber?

    public init(_ topic: String, for identity: ProviderIdentity) {
        self.topic = topic
        let parsed = Topic(topic)
        bundleID = parsed.bundleID
        kind = parsed.kind
        app = identity.apps[topic]
        allowed = app != nil
    }
}

/// The one entry point of every provider interface: for each notification
/// it finds what the quality-of-service rules (`DeliveryRules`, in
/// CourierCore) need to know — the token's standing and rate window
/// (`Registrations`), the device's presence and silent budget
/// (`DeviceSessions`) — and carries out what they decide (deliver / queue /
/// store / drop / reject): held notifications go to the store by group
/// commit, events to the delivery log (`DeliveryLogWriter`), feedback
/// entries to the `FeedbackList`.
public final class Dispatcher: Sendable {
    let store: any Store
    let clock: any WallClock
    let qos: QoSConfiguration
    let rules: DeliveryRules
    let log: DeliveryLogWriter
    let feedback: FeedbackList
    /// Which token is which device's app, and the tokens' rate windows.
    let registrations: Registrations
    /// Connected devices, their bursts and silent budgets.
    let sessions: DeviceSessions
    /// Broadcast channels and their subscribers.
    let broadcasts: Broadcasts
    /// Tokens Courier did not issue, registered to apps: virtual devices.
    let virtuals: VirtualDevices
    let logger: Logger
    /// Counts outcomes, deliveries and commits.
    let metrics: ServerMetrics
    /// When the idle rate windows were last forgotten.
    private let pruned = Mutex<Date?>(nil)
    private let pendingWriter: GroupCommit<PendingNotification, Void>
    let acknowledger: GroupCommit<PendingReference, Bool>
    /// The other nodes sharing the store, when there are (PostgreSQL).
    let cluster: Cluster?

    init(
        store: any Store, codecs: [Environment: DeviceTokenCodec], clock: any WallClock, qos: QoSConfiguration, log: DeliveryLogWriter,
        feedback: FeedbackList, metrics: ServerMetrics, channelLimit: Int = BroadcastChannel.defaultLimit, cluster: Cluster? = nil,
        acceptAnyToken: Set<VirtualDevices.AppKey> = [], logger: Logger
    ) {
        self.cluster = cluster
        self.metrics = metrics
        self.store = store
        self.feedback = feedback
        self.clock = clock
        self.qos = qos
        let rules = DeliveryRules(qos)
        self.rules = rules
        registrations = Registrations(store: store, codecs: codecs, rules: rules, clock: clock)
        sessions = DeviceSessions(rules: rules)
        virtuals = VirtualDevices(store: store, rules: rules, acceptAnyToken: acceptAnyToken)
        broadcasts = Broadcasts(
            store: store, registrations: registrations, clock: clock, limit: channelLimit, qos: qos, cluster: cluster, logger: logger)
        self.log = log
        self.logger = logger
        // One transaction per batch; the batch's replaced notifications (or its failure) go to the log here.
        pendingWriter = GroupCommit(observe: { [metrics] in metrics.committed(.pending, in: $0) }) { [logger] batch in
            do {
                let replaced = try await store.storePending(batch)
                log.append(
                    zip(batch, replaced).compactMap { new, old in
                        old.map { rules.replacement(of: $0.notification, by: new.notification, of: AppNumber(new.bundleID), at: new.acceptedAt) }
                    })
                return batch.map { _ in () }
            } catch {
                logger.error("store failed holding notifications", metadata: ["courier.error": "\(error)"])
                log.append(batch.map {
                    DeliveryEvent($0.notification, of: AppNumber($0.bundleID), .rejected, at: $0.acceptedAt, detail: Reason.internalServerError.rawValue)
                })
                throw error
            }
        }
        acknowledger = GroupCommit(observe: { [metrics] in metrics.committed(.acknowledgements, in: $0) }) {
            try await store.removePending($0)
        }
    }

    func codec(_ environment: Environment) -> DeviceTokenCodec { registrations.codec(environment) }

    /// The device a token is for, when this server issued it.
    func device(of token: [UInt8], in environment: Environment) -> UInt64? {
        guard case .success(let contents) = codec(environment).open(token) else { return nil }
        return contents.deviceID
    }

    /// The store writers, as services to run after the store and the
    /// delivery log and before everything that hands them work (shutdown
    /// runs in reverse): the acknowledger after the writer of held
    /// notifications, whose commits it follows; the feedback list's.
    var writers: [any Service] { [feedback.writer, acknowledger, pendingWriter] }

    /// Notifications to hold that wait for the writer's next batch.
    var waitingToBeHeld: Int { pendingWriter.queued }

    // MARK: Accepting notifications

    /// What `admit` made of a notification.
    enum Admission: Sendable {
        /// Decided: `durable` completes once the notification is committed
        /// (or fails), when it is stored.
        case decided(AcceptResult, durable: Pending<Void>?)
        /// Has to wait — for room in the delivery log, or for the store (a
        /// registration not known yet, a feedback entry to write) —
        /// before it can be decided; nothing was done yet. `decide` waits
        /// and decides.
        case waits(decide: @Sendable () async -> (result: AcceptResult, durable: Pending<Void>?))

        /// The decision, waiting for it if it has to.
        func decided() async -> (result: AcceptResult, durable: Pending<Void>?) {
            switch self {
            case .decided(let result, let durable): (result, durable)
            case .waits(let decide): await decide()
            }
        }
    }

    /// Takes a notification for `environment` from an authenticated
    /// provider with its right to the topic (`grant`, for the
    /// notification's topic), at `now` (the binary gateway reads the clock
    /// once for the frames of one read). Decides at once, without waiting
    /// for the store, when it can: the delivery log has room and the app's
    /// registration is known and active. A notification that may be stored
    /// is queued for the next group commit (its place in the order fixed
    /// then) and `durable` completes once it is committed, so one
    /// connection's notifications keep flowing while earlier ones are
    /// committed; an interface answers "accepted" only once it is durable.
    func admit(_ notification: PushNotification, environment: Environment, grant: TopicGrant, now: Date) -> Admission {
        guard case .decided(let result, let durable) = decide(notification, environment: environment, grant: grant, now: now) else {
            return .waits { await self.decideAfterLoading(notification, environment: environment, grant: grant) }
        }
        return .decided(result, durable: durable)
    }

    /// A notification found to be its provider's: the provider may push to
    /// its topic, and its token opens under the environment's key as a
    /// token of the topic's app (checks 1 to 3 of docs/delivery.md). Only
    /// the dispatcher makes one, and what is matched against a request by
    /// rule (`FaultRequest`) is made only from one: no rule is reached by
    /// a team the request is not of (docs/security.md, "Tenant isolation").
    struct Owned: Sendable {
        let environment: Environment
        let token: [UInt8]
        let topic: String
        /// The topic's app.
        let app: AppNumber

        fileprivate init(environment: Environment, token: [UInt8], topic: String, app: AppNumber) {
            self.environment = environment
            self.token = token
            self.topic = topic
            self.app = app
        }
    }

    /// The notification as its provider's, when the checks that decide
    /// whose it is pass; nil when they do not (`admit` then refuses it
    /// with their reason). Reads no store.
    func owned(_ notification: PushNotification, environment: Environment, grant: TopicGrant, now: Date) -> Owned? {
        // Check 1: the topic is the provider's (then it has its app).
        guard let app = grant.app else { return nil }
        let key = TokenKey(environment: environment, bytes: notification.token)
        switch registrations.check(key, bundleID: grant.bundleID, liveActivity: grant.kind == .liveactivity, now: now) {
        case .success: break
        case .failure(let failure):
            // A virtual token is its app's (docs/virtual-devices.md).
            guard failure.problem == .unopened, virtuals.belongs(notification.token, environment: environment, app: app, bundleID: grant.bundleID)
            else { return nil }
        }
        return Owned(environment: environment, token: notification.token, topic: grant.topic, app: app)
    }

    /// `admit`, waiting for what it has to and for the commit: returns once
    /// the notification is durable when it may be stored (for callers that
    /// hold no connection: the demo's, tests').
    public func accept(_ notification: PushNotification, environment: Environment, grant: TopicGrant) async -> AcceptResult {
        await settled(admit(notification, environment: environment, grant: grant, now: clock.now()))
    }

    /// The result of an admission once it is decided and, when the
    /// notification is stored, committed (an internal error if the commit
    /// failed).
    func settled(_ admission: Admission) async -> AcceptResult {
        let (result, durable) = await admission.decided()
        guard let durable else { return result }
        do {
            try await durable.value
            return result
        } catch {
            return .rejected(.internalServerError)
        }
    }

    /// What a notification needs before it can be decided: the slow path
    /// (`decideAfterLoading`) loads it and decides again, with the same
    /// decision (`decide`).
    private enum Need {
        /// Room in the delivery log.
        case logRoom
        /// A checked token's registration (or its Live Activity's end), from
        /// the store. Boxed, so that a `Step`, which every decided
        /// notification returns through, is no larger than its decided case.
        indirect case registration(CheckedToken)
        /// The row of a token its app takes on first use.
        case firstUse
    }

    /// What `decide` came to: decided, or what it needs first (nothing was done then).
    private enum Step {
        case decided(result: AcceptResult, durable: Pending<Void>?)
        case needs(Need)
    }

    /// What the store said of a token's registration, loaded by the slow
    /// path: its problem, and the epoch read before it was loaded (a change
    /// meanwhile makes the token's mark stale).
    private struct Loaded {
        var problem: TokenProblem?
        var epoch: Int
    }

    /// The one decision of a notification, in the order of docs/delivery.md:
    /// the delivery log's room (unless the slow path waited for it), the
    /// topic (check 1), the token (a known registration, a virtual token,
    /// checks 2 to 5 with its registration from the cache or `loaded`), its
    /// rate window (check 6), then what the rules make of it. Decides
    /// without waiting when it can — a stored notification is queued for
    /// the next group commit and its `durable` completes once committed, a
    /// removed app's feedback entry likewise — else says what it needs.
    private func decide(
        _ notification: PushNotification, environment: Environment, grant: TopicGrant, now: Date, loaded: Loaded? = nil, waitedForRoom: Bool = false
    ) -> Step {
        assert(grant.topic == notification.topic, "a grant for another topic")
        guard waitedForRoom || log.hasRoom else { return .needs(.logRoom) }
        // Check 1: the topic is the provider's (then it has its app); a
        // topic that is not is no app's to log (`Refusal.event`).
        guard let app = grant.app else { return .decided(result: rules.topicNotAllowed.result, durable: nil) }
        let liveActivity = grant.kind == .liveactivity
        // A device token already found to be its app's active registration: one
        // lookup of its entry, which takes the rate window too.
        let key = TokenKey(environment: environment, bytes: notification.token)
        if !liveActivity, let (token, refusal) = registrations.takeKnown(key, bundleID: grant.bundleID, now: now) {
            if let refusal { return Self.step(reject(notification, of: app, refusal, now: now)) }
            return Self.step(carryOut(notification, of: app, token, now: now))
        }
        // One of the app's virtual tokens: found without opening it (a token that opens is never one).
        let virtual = virtuals.take(notification.token, environment: environment, app: app, bundleID: grant.bundleID, now: now)
        if case .found(let found) = virtual {
            return Self.step(carryOut(notification, of: app, to: found, bundleID: grant.bundleID, environment: environment, now: now))
        }
        let token: CheckedToken
        switch registrations.check(key, bundleID: grant.bundleID, liveActivity: liveActivity, now: now) {
        case .success(let checked): token = checked
        case .failure(let failure):
            // A token the app takes on first use needs its row first.
            if failure.problem == .unopened, case .firstUse = virtual { return .needs(.firstUse) }
            return Self.step(reject(notification, of: app, rules.refusal(failure.problem), now: now))
        }
        // The registration (or a Live Activity's end), from the cache or as loaded.
        guard let (problem, epoch) = registrations.cached(token, now: now) ?? loaded.map({ ($0.problem, $0.epoch) }) else {
            return .needs(.registration(token))
        }
        // Not held any more (an older generation), removed, or its activity ended.
        if let problem { return Self.step(reject(notification, of: app, tokenProblem: problem, environment: environment, now: now)) }
        if let refusal = registrations.takeRate(token, registeredIn: epoch, now: now) { return Self.step(reject(notification, of: app, refusal, now: now)) }
        return Self.step(carryOut(notification, of: app, token, now: now))
    }

    private static func step(_ decided: (result: AcceptResult, durable: Pending<Void>?)) -> Step {
        .decided(result: decided.result, durable: decided.durable)
    }

    /// `decide` once it needed something: waits for room in the delivery
    /// log (a log that cannot keep up holds the providers back), loads
    /// what the decision needs, and decides again — each need at most once,
    /// since what was loaded is handed in.
    private func decideAfterLoading(_ notification: PushNotification, environment: Environment, grant: TopicGrant) async
        -> (result: AcceptResult, durable: Pending<Void>?)
    {
        await log.waitForRoom()
        var loaded: Loaded?
        var registeredOnFirstUse = false
        while true {
            let now = clock.now()
            switch decide(notification, environment: environment, grant: grant, now: now, loaded: loaded, waitedForRoom: true) {
            case .decided(let result, let durable):
                return (result, durable)
            case .needs(.logRoom):
                await log.waitForRoom()
            case .needs(.registration(let token)):
                let epoch = registrations.epoch
                do {
                    loaded = Loaded(problem: try await registrations.problem(of: token, now: now), epoch: epoch)
                } catch {
                    logger.error("store failed reading a registration", metadata: ["courier.error": "\(error)"])
                    return refusedForTheStore(notification, grant: grant, now: now)
                }
            case .needs(.firstUse):
                // Registered, yet not found (its app's limit reached meanwhile): a token it does not take.
                if registeredOnFirstUse, let app = grant.app { return reject(notification, of: app, rules.refusal(.unopened), now: now) }
                registeredOnFirstUse = true
                do {
                    try await virtuals.registerOnFirstUse(notification.token, environment: environment, bundleID: grant.bundleID, now: now)
                } catch {
                    logger.error("store failed registering a virtual token", metadata: ["courier.error": "\(error)"])
                    return refusedForTheStore(notification, grant: grant, now: now)
                }
            }
        }
    }

    /// `ServiceUnavailable` for a notification whose decision needed the store, which failed.
    private func refusedForTheStore(_ notification: PushNotification, grant: TopicGrant, now: Date) -> (result: AcceptResult, durable: Pending<Void>?) {
        guard let app = grant.app else { return (rules.topicNotAllowed.result, nil) }
        return reject(notification, of: app, DeliveryRules.Refusal(.serviceUnavailable), now: now)
    }

    /// Carries out a push to a virtual device: refused (uninstalled: with
    /// its feedback entry; over its rate limit), taken at once while it is
    /// online, held while it is offline (docs/virtual-devices.md).
    private func carryOut(
        _ notification: PushNotification, of app: AppNumber, to virtual: VirtualDevices.Found, bundleID: String, environment: Environment, now: Date
    ) -> (result: AcceptResult, durable: Pending<Void>?) {
        if let problem = virtual.problem { return reject(notification, of: app, tokenProblem: problem, environment: environment, now: now) }
        if let refusal = virtual.refusal { return reject(notification, of: app, refusal, now: now) }
        var events: [DeliveryEvent] = []
        events.reserveCapacity(3)
        defer { log.append(events) }
        let appKey = DeviceAppKey(device: DeviceKey(environment: environment, deviceID: virtual.deviceID), bundleID: bundleID)
        let (admission, _) = sessions.admit(notification, of: app, to: appKey, virtual: virtual.offline ? .offline : .virtual, now: now, events: &events)
        guard case .kept(stored: true, _) = admission else { return (.accepted, nil) }
        let held = PendingNotification(deviceID: virtual.deviceID, bundleID: bundleID, environment: environment, notification: notification, acceptedAt: now)
        return (.accepted, pendingWriter.enqueue(held))
    }

    /// `reject` for what keeps a token from its device. One that adds a
    /// feedback entry (an app removed: Unregistered) queues the entry, and
    /// is answered once it is written (`durable`, which does not fail: a
    /// failed write is logged and the refusal stands).
    private func reject(_ notification: PushNotification, of app: AppNumber, tokenProblem problem: TokenProblem, environment: Environment, now: Date) -> (AcceptResult, Pending<Void>?) {
        let refusal = rules.refusal(problem)
        let (result, _) = reject(notification, of: app, refusal, now: now)
        guard refusal.addsFeedback else { return (result, nil) }
        let entry = FeedbackEntry(environment: environment, topic: notification.topic, token: notification.token, timestamp: refusal.timestamp ?? now)
        return (result, feedback.written(entry))
    }

    /// Logs a refusal, under the app.
    private func reject(_ notification: PushNotification, of app: AppNumber, _ refusal: DeliveryRules.Refusal, now: Date) -> (AcceptResult, Pending<Void>?) {
        if let event = refusal.event(for: notification, of: app, at: now) { log.append(event) }
        return (refusal.result, nil)
    }

    /// Once the token's registration is known to be active and its rate
    /// window took the notification: carries out what the rules decide
    /// with the device's presence and silent budget (store, deliver now,
    /// queue for the burst, or drop).
    private func carryOut(_ notification: PushNotification, of app: AppNumber, _ token: CheckedToken, now: Date) -> (result: AcceptResult, durable: Pending<Void>?) {
        let environment = token.key.environment
        let bundleID = token.key.bundleID
        // Room for every event one notification can get, in one allocation.
        var events: [DeliveryEvent] = []
        events.reserveCapacity(4)
        defer { log.append(events) }
        let appKey = DeviceAppKey(device: DeviceKey(environment: environment, deviceID: token.contents.deviceID), bundleID: bundleID)
        let remote = cluster?.remoteNode(of: appKey.device)
        let (admission, session) = sessions.admit(notification, of: app, to: appKey, elsewhere: remote != nil, now: now, events: &events)
        guard case .kept(let stored, let sending) = admission else { return (.accepted, nil) }
        func held() -> PendingNotification {
            PendingNotification(deviceID: token.contents.deviceID, bundleID: bundleID, environment: environment, notification: notification, acceptedAt: now)
        }
        var durable: Pending<Void>?
        if stored { durable = pendingWriter.enqueue(held()) }
        guard let session else {
            guard let cluster else { return (.accepted, durable) }
            let pending = held()
            if let durable {
                // Handed over once held (to the device's node then), or remembered.
                durable.whenResolved { result in
                    if case .success = result { cluster.held(pending) }
                }
            } else if let remote {
                // Expiration 0 to a device on another node: handed over at once.
                cluster.handOver(pending, to: remote)
            }
            return (.accepted, durable)
        }
        let queued = QueuedNotification(notification: notification, bundleID: bundleID, app: app, acceptedAt: now, durable: durable)
        switch sending {
        case .later: break
        case .now: deliverOrDrop(queued, to: session, now: now, events: &events)
        case .withBurst: if let coalesced = sessions.queueForBurst(queued, for: appKey, now: now) { events.append(coalesced) }
        }
        return (.accepted, durable)
    }

    /// `deliver`, and a notification held in the store that the device
    /// could not read is removed from it (without waiting).
    func deliverOrDrop(_ queued: QueuedNotification, to session: DeviceSession, now: Date, events: inout [DeliveryEvent]) {
        if let unreadable = deliver(queued, to: session, now: now, events: &events) { removeHeld(unreadable, after: queued.durable) }
    }

    /// Sends the notification to the device, unless the device could not
    /// read it: then it is logged as discarded, and returned when it is
    /// held in the store (to be removed from there).
    func deliver(_ queued: QueuedNotification, to session: DeviceSession, now: Date, events: inout [DeliveryEvent]) -> PendingReference? {
        let n = queued.notification
        // In flight before it is sent: the acknowledgement may come back at once.
        session.track(n.deliveryID, DeviceSession.InFlight(notificationID: n.id, bundleID: queued.bundleID, app: queued.app, stored: n.mayBeStored, durable: queued.durable))
        guard let problem = session.link.deliver(n) else {
            events.append(DeliveryEvent(n, of: queued.app, .delivered, at: now))
            metrics.delivered(after: now.timeIntervalSince(queued.acceptedAt))
            return nil
        }
        // One the device could not read (held by an older version, say) is dropped.
        _ = session.untrack(n.deliveryID)
        events.append(rules.unreadable(n, of: queued.app, problem: problem, at: now))
        guard n.mayBeStored else { return nil }
        return PendingReference(deviceID: session.deviceID, bundleID: queued.bundleID, environment: session.environment, deliveryID: n.deliveryID)
    }

    /// Removes a held notification from the store once the commit that
    /// holds it (if still running) is done, without waiting for either.
    private func removeHeld(_ reference: PendingReference, after durable: Pending<Void>?) {
        guard let durable else {
            _ = acknowledger.enqueue(reference)
            return
        }
        durable.whenResolved { [acknowledger] result in
            if case .success = result { _ = acknowledger.enqueue(reference) }
        }
    }

    // MARK: Timers

    /// Runs the timers at the clock's present time: priority-5 bursts whose
    /// window passed go out, expired and over-retention notifications are
    /// dropped, and (once a minute) the rate windows of tokens and devices
    /// that went quiet are forgotten.
    public func tick() async {
        let now = clock.now()
        let prune = pruned.withLock { last in
            guard now.timeIntervalSince(last ?? .distantPast) >= 60 else { return false }
            last = now
            return true
        }
        if prune {
            registrations.pruneIdle(at: now)
            virtuals.pruneIdle(at: now)
            sessions.pruneBudgets(at: now)
        }
        var events: [DeliveryEvent] = []
        for (session, queue) in sessions.dueBursts(at: now) {
            guard let session else { continue }
            for queued in queue { deliverOrDrop(queued, to: session, now: now, events: &events) }
        }
        do {
            for pending in try await store.removeExpiredPending(before: now) {
                events.append(rules.swept(pending.notification, of: AppNumber(pending.bundleID), overRetention: false, at: now))
            }
            for pending in try await store.removePending(acceptedBefore: rules.retentionCutoff(at: now)) {
                events.append(rules.swept(pending.notification, of: AppNumber(pending.bundleID), overRetention: true, at: now))
            }
        } catch {
            logger.error("store failed sweeping held notifications", metadata: ["courier.error": "\(error)"])
        }
        log.append(events)
    }

    /// A fault rule acted on a notification: its delivery log says which and how.
    func logFault(_ rule: FaultRule, notification: PushNotification, owned: Owned) {
        let what: String
        switch rule.action {
        case .reject(let reason, _, let status): what = "refused with \(reason)" + (status.map { " (binary status \($0.rawValue))" } ?? "")
        case .delay(let milliseconds): what = "answer delayed \(milliseconds) ms"
        case .close(let reason): what = "connection closed (\(reason))"
        }
        log.append(DeliveryEvent(notification, of: owned.app, .faultInjected, at: clock.now(), detail: "fault \(rule.id): \(what)"))
    }

    /// Notifications held in the store now.
    func heldCount() async throws -> Int {
        try await store.pendingCount()
    }

    /// A device's app registrations, as the store has them.
    func registrations(ofDevice deviceID: UInt64) async throws -> [AppRegistration] {
        try await store.registrations(deviceID: deviceID)
    }

    /// What the delivery log has under an apns-id (or apns-unique-id),
    /// with what was appended until now (written first): read by app.
    func deliveryLog(of notificationID: UUID) async throws -> NotificationLog {
        await log.flush()
        return NotificationLog(id: notificationID, events: try await store.deliveryEvents(notificationID: notificationID))
    }

    /// The team an app belongs to; nil for an app there is none of.
    func team(ofApp bundleID: String) async throws -> String? {
        try await store.app(bundleID: bundleID)?.teamID
    }

    /// Writes the delivery log's buffered events.
    public func flushLog() async {
        await log.flush()
    }
}
