import CourierCore
import CourierPKI
import CourierWire  // topicHash: a Filter names apps by the hash of their bundle id
import Foundation
import Logging
import Synchronization

/// Where the dispatcher sends a device's notifications: its connection,
/// which knows the device protocol (the dispatcher speaks only of
/// notifications).
public protocol DeviceLink: Sendable {
    /// Sends the notification; or, when a device could not read it (an
    /// item over the device protocol's bounds), sends nothing and says why:
    /// one notification must never end a device's connection.
    func deliver(_ notification: PushNotification) -> String?
    /// Everything held for the device was sent.
    func sentEverythingHeld()
    func close()
}

struct DeviceKey: Hashable, Sendable {
    var environment: Environment
    var deviceID: UInt64
}

struct RegistrationKey: Hashable, Sendable {
    var deviceID: UInt64
    var bundleID: String
    var environment: Environment
}

/// A device token (with its environment) as a dictionary key.
///
/// Hashed by its first eight bytes only: a token is an AES block's output
/// (DeviceTokens.swift), so those bytes are already spread evenly, and
/// only tokens that opened — which only the server's key can make — are
/// kept. Equality still compares every byte.
struct TokenKey: Hashable, Sendable {
    var environment: Environment
    var bytes: [UInt8]

    static func == (left: TokenKey, right: TokenKey) -> Bool {
        left.environment == right.environment && left.bytes.count == right.bytes.count
            && left.bytes.withUnsafeBytes { l in right.bytes.withUnsafeBytes { r in l.isEmpty || memcmp(l.baseAddress!, r.baseAddress!, l.count) == 0 } }
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(environment)
        bytes.withUnsafeBytes { raw in
            if raw.count >= 8 {
                hasher.combine(raw.loadUnaligned(as: UInt64.self))
            } else {
                hasher.combine(bytes: raw)
            }
        }
    }
}

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

    public init(_ topic: String, for identity: ProviderIdentity) {
        self.topic = topic
        let parsed = Topic(topic)
        bundleID = parsed.bundleID
        kind = parsed.kind
        allowed = identity.topics.contains(topic)
    }
}

/// What the dispatcher knows of a token that opened. A token's contents
/// depend only on its bytes and the environment's key, so it is opened
/// once (four AES blocks); the app it belongs to and whether it is that
/// app's active registration are kept beside them, with its rate window,
/// so that a notification to a known token costs one dictionary lookup.
struct TokenEntry {
    var contents: DeviceTokenContents
    /// The app the token was found to belong to.
    var bundleID: String?
    /// The `State.registrationEpoch` in which the token was found to be its
    /// app's active registration: a later change of any registration
    /// makes the mark stale.
    var registeredEpoch: Int?
    /// Its rate window; one never opened reads as ended.
    var window = RateWindow.unopened

    init(contents: DeviceTokenContents) {
        self.contents = contents
    }

    /// True when the window has ended (or was never opened): the entry
    /// holds nothing that cannot be found again.
    func isIdle(at now: Date, window length: TimeInterval) -> Bool {
        window.hasEnded(at: now, length: length)
    }

    /// For a token marked as `bundleID`'s active registration in `epoch`:
    /// its contents, and the refusal if its rate window did not take one
    /// more (`DeliveryRules`). Nil (and nothing counted) otherwise.
    mutating func take(ifRegisteredIn epoch: Int, for bundleID: String, rules: DeliveryRules, now: Date) -> (DeviceTokenContents, DeliveryRules.Refusal?)? {
        guard registeredEpoch == epoch, self.bundleID == bundleID else { return nil }
        return (contents, rules.refusal(takingFrom: &window, now: now))
    }

    /// Counts one more in the rate window (the refusal when it is full),
    /// and marks the token as `bundleID`'s active registration in `epoch`
    /// (unmarked when nil).
    mutating func take(markedRegisteredIn epoch: Int?, for bundleID: String, rules: DeliveryRules, now: Date) -> DeliveryRules.Refusal? {
        self.bundleID = bundleID
        registeredEpoch = epoch
        return rules.refusal(takingFrom: &window, now: now)
    }
}

/// One connected device, as the dispatcher sees it.
public final class DeviceSession: Sendable {
    let key: DeviceKey
    let link: any DeviceLink
    private struct State {
        /// SHA-1 of enabled bundle ids; nil until the device sends a Filter.
        var enabled: Set<[UInt8]>?
        /// Delivered, not yet acknowledged, by delivery id.
        var inFlight: [UUID: InFlight] = [:]
    }
    private let state = Mutex(State())

    public init(environment: Environment, deviceID: UInt64, link: any DeviceLink) {
        key = DeviceKey(environment: environment, deviceID: deviceID)
        self.link = link
    }

    public var deviceID: UInt64 { key.deviceID }
    public var environment: Environment { key.environment }

    func setFilter(_ hashes: [[UInt8]]) { state.withLock { $0.enabled = Set(hashes) } }

    func accepts(bundleID: String) -> Bool {
        guard let enabled = state.withLock({ $0.enabled }) else { return true }
        return enabled.contains(topicHash(of: bundleID))
    }

    /// A delivered notification awaiting its acknowledgement.
    struct InFlight {
        /// Its apns-id, for the delivery log.
        var notificationID: UUID
        var bundleID: String
        /// Held in the store (so the acknowledgement removes it there).
        var stored: Bool
        /// The commit that holds it, when it may still be running.
        var durable: Pending<Void>?
    }

    func track(_ deliveryID: UUID, _ inFlight: InFlight) { state.withLock { $0.inFlight[deliveryID] = inFlight } }

    func untrack(_ deliveryID: UUID) -> InFlight? { state.withLock { $0.inFlight.removeValue(forKey: deliveryID) } }

    func isInFlight(_ deliveryID: UUID) -> Bool { state.withLock { $0.inFlight[deliveryID] != nil } }
}

/// The one entry point of every provider interface: for each notification
/// it finds what the quality-of-service rules (`DeliveryRules`, in
/// CourierCore) need to know — the token's standing, its rate window, the
/// device's presence and silent budget — and carries out what they decide
/// (deliver / queue / store / drop / reject), writing their events to the
/// delivery log.
public final class Dispatcher: Sendable {
    struct Queued: Sendable {
        var notification: PushNotification
        var bundleID: String
        var durable: Pending<Void>? = nil
    }


    struct State {
        var sessions: [DeviceKey: DeviceSession] = [:]
        var registrations: [RegistrationKey: AppRegistration] = [:]
        var bursts: [DeviceKey: BurstQueue<Queued>] = [:]
        var silent: [DeviceKey: RateWindow] = [:]
        /// Tokens that opened (see `TokenEntry`).
        var tokens: [TokenKey: TokenEntry] = [:]
        /// Prune `tokens` of idle entries when it reaches this many.
        var tokensPruneAt = Dispatcher.tokenCapacity
        /// Apps' token hashes (`DeviceTokenContents.appHash(of:)`), by bundle id.
        var appHashes: [String: UInt64] = [:]
        /// Counts changes of `registrations` (see `TokenEntry.registeredEpoch`).
        var registrationEpoch = 0
        var offlineWaiters: [DeviceKey: [CheckedContinuation<Void, Never>]] = [:]
        /// When the rate windows were last pruned.
        var pruned: Date?

        /// Keeps a token that opened, and the app it belongs to when known.
        /// A full table first loses its idle entries.
        mutating func remember(_ key: TokenKey, _ contents: DeviceTokenContents, bundleID: String?, now: Date, window: TimeInterval) {
            if tokens[key] == nil, tokens.count >= tokensPruneAt {
                tokens = tokens.filter { !$0.value.isIdle(at: now, window: window) }
                tokensPruneAt = max(Dispatcher.tokenCapacity, 2 * tokens.count)
            }
            if let bundleID {
                tokens[key, default: TokenEntry(contents: contents)].bundleID = bundleID
            } else if tokens[key] == nil {
                tokens[key] = TokenEntry(contents: contents)
            }
        }
    }

    /// Token entries kept before idle ones are pruned; entries with an open
    /// rate window are never pruned, so the table may hold more (it is
    /// pruned again at twice what was left).
    static let tokenCapacity = 100_000

    private let store: any Store
    let clock: any WallClock
    let qos: QoSConfiguration
    let rules: DeliveryRules
    let log: DeliveryLogWriter
    let feedback: FeedbackList
    private let codecs: [Environment: DeviceTokenCodec]
    private let logger: Logger
    let state = Mutex(State())
    private let pendingWriter: GroupCommit<PendingNotification, Void>
    private let acknowledger: GroupCommit<PendingReference, Bool>

    init(
        store: any Store, codecs: [Environment: DeviceTokenCodec], clock: any WallClock, qos: QoSConfiguration, log: DeliveryLogWriter,
        feedback: FeedbackList, logger: Logger
    ) {
        self.store = store
        self.feedback = feedback
        self.codecs = codecs
        self.clock = clock
        self.qos = qos
        let rules = DeliveryRules(qos)
        self.rules = rules
        self.log = log
        self.logger = logger
        // One transaction per batch; the batch's replaced notifications (or its failure) go to the log here.
        pendingWriter = GroupCommit { [logger] batch in
            do {
                let replaced = try await store.storePending(batch)
                log.append(
                    zip(batch, replaced).compactMap { new, old in
                        old.map { rules.replacement(of: $0.notification, by: new.notification, at: new.acceptedAt) }
                    })
                return batch.map { _ in () }
            } catch {
                logger.error("store failed holding notifications", metadata: ["courier.error": "\(error)"])
                log.append(batch.map {
                    DeliveryEvent(notificationID: $0.notification.id, kind: .rejected, at: $0.acceptedAt, detail: Reason.internalServerError.rawValue)
                })
                throw error
            }
        }
        acknowledger = GroupCommit { try await store.removePending($0) }
    }

    func codec(_ environment: Environment) -> DeviceTokenCodec { codecs[environment]! }

    // MARK: Accepting notifications

    /// Takes a notification for `environment` from an authenticated
    /// provider with its right to the topic (`grant`, for the
    /// notification's topic). Returns once the notification is durable
    /// when it may be stored.
    ///
    /// The binary gateway calls its two halves itself (`admitAtOnce` on
    /// the event loop, then `admitAfterWaiting` only if that declined),
    /// which do not wait for the store: a notification that may be stored
    /// is queued for the next group commit (its place in the order fixed
    /// then) and `durable` completes once it is committed (or fails), so
    /// one connection's notifications keep flowing while earlier ones are
    /// committed; it counts a notification as accepted (status 10) only
    /// once it is durable.
    public func accept(_ notification: PushNotification, environment: Environment, grant: TopicGrant) async -> AcceptResult {
        let decided = admitAtOnce(notification, environment: environment, grant: grant, now: clock.now())
        let (result, durable) = if let decided { decided } else { await admitAfterWaiting(notification, environment: environment, grant: grant) }
        guard let durable else { return result }
        do {
            try await durable.value
            return result
        } catch {
            return .rejected(.internalServerError)
        }
    }

    /// `admit` once `admitAtOnce` declined: waits for room in the delivery
    /// log and for the store, then decides.
    func admitAfterWaiting(_ notification: PushNotification, environment: Environment, grant: TopicGrant) async
        -> (result: AcceptResult, durable: Pending<Void>?)
    {
        assert(grant.topic == notification.topic, "a grant for another topic")
        // A delivery log that cannot keep up holds the providers back.
        await log.waitForRoom()
        let now = clock.now()
        if let refusal = rules.refusal(topicAllowed: grant.allowed) { return reject(notification, refusal, now: now) }
        let token: CheckedToken
        switch check(notification, TokenKey(environment: environment, bytes: notification.token), bundleID: grant.bundleID, now: now) {
        case .success(let checked): token = checked
        case .failure(let refusal): return refusal.decided
        }
        // Read before the registration: a change while it is loaded makes the token's mark stale.
        let epoch = state.withLock { $0.registrationEpoch }
        let registration: AppRegistration?
        do {
            registration = try await self.registration(token.key)
        } catch {
            logger.error("store failed reading a registration", metadata: ["courier.error": "\(error)"])
            return reject(notification, DeliveryRules.Refusal(.serviceUnavailable), now: now)
        }
        if let problem = problem(of: notification.token, in: registration, now: now) {
            let refusal = rules.refusal(problem)
            if refusal.addsFeedback {
                do {
                    try await feedback.add(
                        FeedbackEntry(environment: environment, topic: notification.topic, token: notification.token, timestamp: refusal.timestamp ?? now))
                } catch {
                    logger.error("store failed adding a feedback entry", metadata: ["courier.error": "\(error)"])
                }
            }
            return reject(notification, refusal, now: now)
        }
        if let refusal = takeTokenRate(token, registeredIn: epoch, now: now) { return reject(notification, refusal, now: now) }
        return admit(notification, token, now: now)
    }

    /// `admit` when nothing has to wait: the delivery log has room and the
    /// app's registration is known and active (no feedback entry to write).
    /// Nil when something has to wait; nothing was done then. The
    /// provider's right to the topic comes found (`grant.topic` is the
    /// notification's topic), and the time too (the binary gateway reads
    /// the clock once for the frames of one read).
    func admitAtOnce(_ notification: PushNotification, environment: Environment, grant: TopicGrant, now: Date)
        -> (result: AcceptResult, durable: Pending<Void>?)?
    {
        assert(grant.topic == notification.topic, "a grant for another topic")
        guard log.hasRoom else { return nil }
        if let refusal = rules.refusal(topicAllowed: grant.allowed) { return reject(notification, refusal, now: now) }
        // A token already found to be its app's active registration: one
        // lookup of its entry, which takes the rate window too.
        let bundleID = grant.bundleID
        let key = TokenKey(environment: environment, bytes: notification.token)
        let known = state.withLock { state in
            state.tokens[key]?.take(ifRegisteredIn: state.registrationEpoch, for: bundleID, rules: rules, now: now)
        }
        if let (contents, refusal) = known {
            if let refusal { return reject(notification, refusal, now: now) }
            let registrationKey = RegistrationKey(deviceID: contents.deviceID, bundleID: bundleID, environment: environment)
            return admit(notification, CheckedToken(contents: contents, key: registrationKey, tokenKey: key), now: now)
        }
        let token: CheckedToken
        switch check(notification, key, bundleID: bundleID, now: now) {
        case .success(let checked): token = checked
        case .failure(let refusal): return refusal.decided
        }
        let (registration, epoch) = state.withLock { ($0.registrations[token.key], $0.registrationEpoch) }
        // Not known, or removed (a feedback entry to write): decided after waiting.
        guard let registration, registration.active else { return nil }
        if let problem = problem(of: notification.token, in: registration, now: now) { return reject(notification, rules.refusal(problem), now: now) }
        if let refusal = takeTokenRate(token, registeredIn: epoch, now: now) { return reject(notification, refusal, now: now) }
        return admit(notification, token, now: now)
    }

    /// A token that opened and belongs to the notification's topic.
    private struct CheckedToken {
        var contents: DeviceTokenContents
        var key: RegistrationKey
        var tokenKey: TokenKey
    }

    /// A notification refused before its registration was looked at.
    private struct Refusal: Error {
        var decided: (result: AcceptResult, durable: Pending<Void>?)
    }

    /// Logs a refusal.
    private func reject(_ notification: PushNotification, _ refusal: DeliveryRules.Refusal, now: Date) -> (AcceptResult, Pending<Void>?) {
        log.append(refusal.event(for: notification.id, at: now))
        return (refusal.result, nil)
    }

    /// A token that opened for the topic's app, against the app's
    /// registration on the device (nil: never registered).
    private func problem(of token: [UInt8], in registration: AppRegistration?, now: Date) -> TokenProblem? {
        // A token the device no longer holds (an older generation) is not a device token any more.
        guard let registration, registration.token == token else { return .notHeld }
        return registration.active ? nil : .removed(at: registration.unregisteredAt ?? now)
    }

    /// The checks of the token itself, once the provider may push to the
    /// topic: it opens in its environment (`key`), and is the app's
    /// (`bundleID`, the topic's).
    private func check(_ notification: PushNotification, _ key: TokenKey, bundleID: String, now: Date) -> Result<CheckedToken, Refusal> {
        let environment = key.environment
        let known = state.withLock { $0.tokens[key].map { (contents: $0.contents, ofTheApp: $0.bundleID == bundleID) } }
        let contents: DeviceTokenContents
        if let known {
            contents = known.contents
        } else {
            guard case .success(let opened) = codecs[environment]!.open(notification.token) else {
                return .failure(Refusal(decided: reject(notification, rules.refusal(.unopened), now: now)))
            }
            contents = opened
        }
        let belongs = known?.ofTheApp ?? false || appHash(of: bundleID) == contents.appHash
        if known?.ofTheApp != true {
            state.withLock { $0.remember(key, contents, bundleID: belongs ? bundleID : nil, now: now, window: qos.tokenRateWindow) }
        }
        guard belongs else { return .failure(Refusal(decided: reject(notification, rules.refusal(.ofAnotherApp), now: now))) }
        return .success(CheckedToken(contents: contents, key: RegistrationKey(deviceID: contents.deviceID, bundleID: bundleID, environment: environment), tokenKey: key))
    }

    /// `DeviceTokenContents.appHash(of:)`, computed once per app.
    private func appHash(of bundleID: String) -> UInt64 {
        if let hash = state.withLock({ $0.appHashes[bundleID] }) { return hash }
        let hash = DeviceTokenContents.appHash(of: bundleID)
        state.withLock { state in
            if state.appHashes.count >= Self.tokenCapacity { state.appHashes.removeAll() }
            state.appHashes[bundleID] = hash
        }
        return hash
    }

    /// Once the token's registration is known to be active and its rate
    /// window took the notification: finds the device's presence and
    /// silent budget, and carries out what the rules decide (store,
    /// deliver now, queue for the burst, or drop).
    private func admit(_ notification: PushNotification, _ token: CheckedToken, now: Date) -> (result: AcceptResult, durable: Pending<Void>?) {
        let environment = token.key.environment
        let bundleID = token.key.bundleID
        // Room for every event one notification can get, in one allocation.
        var events: [DeliveryEvent] = []
        events.reserveCapacity(4)
        defer { log.append(events) }
        let deviceKey = DeviceKey(environment: environment, deviceID: token.contents.deviceID)
        let (admission, session) = state.withLock { state -> (DeliveryRules.Admission, DeviceSession?) in
            let session = state.sessions[deviceKey]
            let presence: DevicePresence = session.map { $0.accepts(bundleID: bundleID) ? .online : .appDisabled } ?? .offline
            // Only a silent push counts against (and makes) the device's budget.
            var silentWindow = notification.isSilent ? state.silent[deviceKey] : nil
            let admission = rules.admit(notification, presence: presence, silentWindow: &silentWindow, now: now, events: &events)
            if notification.isSilent { state.silent[deviceKey] = silentWindow }
            return (admission, session)
        }
        guard case .kept(let stored, let sending) = admission else { return (.accepted, nil) }
        var durable: Pending<Void>?
        if stored {
            durable = pendingWriter.enqueue(
                PendingNotification(deviceID: token.contents.deviceID, bundleID: bundleID, environment: environment, notification: notification, acceptedAt: now))
        }
        guard let session else { return (.accepted, durable) }
        let queued = Queued(notification: notification, bundleID: bundleID, durable: durable)
        switch sending {
        case .later: break
        case .now: deliverOrDrop(queued, to: session, now: now, events: &events)
        case .withBurst: enqueueBurst(queued, for: deviceKey, now: now, events: &events)
        }
        return (.accepted, durable)
    }

    private func registration(_ key: RegistrationKey) async throws -> AppRegistration? {
        if let cached = state.withLock({ $0.registrations[key] }) { return cached }
        let loaded = try await store.registration(deviceID: key.deviceID, bundleID: key.bundleID, environment: key.environment)
        if let loaded { state.withLock { $0.registrations[key] = $0.registrations[key] ?? loaded } }
        return loaded
    }

    /// Counts the notification in its token's rate window, and marks the
    /// token as its app's active registration (as of `epoch`, when no
    /// registration changed since).
    private func takeTokenRate(_ token: CheckedToken, registeredIn epoch: Int, now: Date) -> DeliveryRules.Refusal? {
        state.withLock { state in
            let current = state.registrationEpoch
            // Found (or made again, if pruned since the check) and updated in place: the token is hashed once.
            return state.tokens[token.tokenKey, default: TokenEntry(contents: token.contents)].take(
                markedRegisteredIn: epoch == current ? epoch : nil, for: token.key.bundleID, rules: rules, now: now)
        }
    }

    private func enqueueBurst(_ queued: Queued, for key: DeviceKey, now: Date, events: inout [DeliveryEvent]) {
        let coalesced = state.withLock { state in
            state.bursts[key, default: BurstQueue(since: now)].add(queued, notification: queued.notification, bundleID: queued.bundleID, at: now)
        }
        if let coalesced { events.append(coalesced) }
    }

    /// `deliver`, and a notification held in the store that the device
    /// could not read is removed from it (without waiting).
    private func deliverOrDrop(_ queued: Queued, to session: DeviceSession, now: Date, events: inout [DeliveryEvent]) {
        if let unreadable = deliver(queued, to: session, now: now, events: &events) { removeHeld(unreadable, after: queued.durable) }
    }

    /// Sends the notification to the device, unless the device could not
    /// read it: then it is logged as discarded, and returned when it is
    /// held in the store (to be removed from there).
    private func deliver(_ queued: Queued, to session: DeviceSession, now: Date, events: inout [DeliveryEvent]) -> PendingReference? {
        let n = queued.notification
        // In flight before it is sent: the acknowledgement may come back at once.
        session.track(n.deliveryID, DeviceSession.InFlight(notificationID: n.id, bundleID: queued.bundleID, stored: n.mayBeStored, durable: queued.durable))
        guard let problem = session.link.deliver(n) else {
            events.append(DeliveryEvent(notificationID: n.id, kind: .delivered, at: now))
            return nil
        }
        // One the device could not read (held by an older version, say) is dropped.
        _ = session.untrack(n.deliveryID)
        events.append(rules.unreadable(n.id, problem: problem, at: now))
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

    // MARK: Devices

    /// Issues (or returns again) the token of an app on a device and records
    /// the registration. Nil when there is no such app.
    public func register(deviceID: UInt64, generation: UInt32, bundleID: String, environment: Environment) async throws -> [UInt8]? {
        guard try await store.app(bundleID: bundleID) != nil else { return nil }
        let token = codec(environment).issue(DeviceTokenContents(deviceID: deviceID, generation: generation, bundleID: bundleID))
        let key = RegistrationKey(deviceID: deviceID, bundleID: bundleID, environment: environment)
        let existing = try await registration(key)
        if let existing, existing.active, existing.token == token { return token }
        let registration = AppRegistration(deviceID: deviceID, bundleID: bundleID, environment: environment, token: token, registeredAt: clock.now())
        try await store.register(registration)
        state.withLock { state in
            state.registrations[key] = registration
            state.registrationEpoch += 1
        }
        return token
    }

    /// A device connected with its certificate (`id`): its record, once a
    /// newer `generation` (a reset or restore: `resetDevice`) and the time
    /// it was seen are recorded. Nil for a device the store does not know.
    func deviceConnected(id deviceID: UInt64, generation: UInt32?) async throws -> Device? {
        guard var device = try await store.device(id: deviceID) else { return nil }
        if let generation, generation > device.generation {
            try await resetDevice(id: deviceID, generation: generation)
            device.generation = generation
        }
        try await store.markDeviceSeen(id: deviceID, at: clock.now())
        return device
    }

    /// The app was removed from the device. False when it was not registered.
    public func unregister(deviceID: UInt64, bundleID: String, environment: Environment) async throws -> Bool {
        let now = clock.now()
        guard try await store.unregister(deviceID: deviceID, bundleID: bundleID, environment: environment, at: now) else { return false }
        let key = RegistrationKey(deviceID: deviceID, bundleID: bundleID, environment: environment)
        let updated = try await store.registration(deviceID: deviceID, bundleID: bundleID, environment: environment)
        state.withLock { state in
            state.registrations[key] = updated
            state.registrationEpoch += 1
        }
        return true
    }

    /// The device was reset (it connected with a higher generation): its
    /// registrations end, and so do the notifications held or queued for
    /// it, which were addressed to the tokens that ended (logged as
    /// discarded).
    func resetDevice(id deviceID: UInt64, generation: UInt32) async throws {
        let held = try await store.setDeviceGeneration(id: deviceID, generation: generation)
        let queued: [Queued] = state.withLock { state in
            state.registrations = state.registrations.filter { $0.key.deviceID != deviceID }
            state.registrationEpoch += 1
            let keys = state.bursts.keys.filter { $0.deviceID == deviceID }
            return keys.flatMap { state.bursts.removeValue(forKey: $0)?.elements ?? [] }
        }
        let now = clock.now()
        // A queued notification that may be stored is among the held ones too.
        let ids = held.map(\.notification.id) + queued.filter { !$0.notification.mayBeStored }.map(\.notification.id)
        log.append(ids.map { DeliveryEvent(notificationID: $0, kind: .discarded, at: now, detail: "the device was reset; its tokens ended") })
    }

    /// A device connected: it replaces an older connection of the same
    /// device, gets everything held for it, then NoStorage.
    public func connected(_ session: DeviceSession) async {
        let previous = state.withLock { state -> DeviceSession? in
            defer { state.sessions[session.key] = session }
            return state.sessions[session.key]
        }
        if let previous, previous !== session { previous.link.close() }
        await drain(session)
    }

    /// Sends a device what is held for it (apps it enabled), then NoStorage.
    func drain(_ session: DeviceSession) async {
        let now = clock.now()
        var events: [DeliveryEvent] = []
        do {
            let held = try await store.pending(deviceID: session.deviceID, environment: session.environment)
            // Expired, or unreadable by the device.
            var dropped: [PendingReference] = []
            for pending in held where session.accepts(bundleID: pending.bundleID) && !session.isInFlight(pending.notification.deliveryID) {
                if let expired = rules.onConnect(held: pending.notification, now: now) {
                    dropped.append(PendingReference(pending))
                    events.append(expired)
                    continue
                }
                if let unreadable = deliver(Queued(notification: pending.notification, bundleID: pending.bundleID), to: session, now: now, events: &events) {
                    dropped.append(unreadable)
                }
            }
            if !dropped.isEmpty { _ = try await store.removePending(dropped) }
        } catch {
            logger.error("store failed reading held notifications", metadata: ["courier.error": "\(error)"])
        }
        log.append(events)
        session.link.sentEverythingHeld()
    }

    public func disconnected(_ session: DeviceSession) {
        let (dropped, waiters): ([Queued], [CheckedContinuation<Void, Never>]) = state.withLock { state in
            guard state.sessions[session.key] === session else { return ([], []) }
            state.sessions[session.key] = nil
            return (state.bursts.removeValue(forKey: session.key)?.elements ?? [], state.offlineWaiters.removeValue(forKey: session.key) ?? [])
        }
        for waiter in waiters { waiter.resume() }
        // Queued priority-5 notifications that may be stored are held in the
        // store and go out on the next connection; the others are lost.
        let now = clock.now()
        log.append(dropped.compactMap { rules.wentOffline(queued: $0.notification, at: now) })
    }

    /// A stored notification the device acknowledged (or refused): its
    /// removal from the store is still to be done (`removeAcknowledged`).
    struct HeldAcknowledgement: Sendable {
        var reference: PendingReference
        /// The commit that holds it, when it may still be running.
        var durable: Pending<Void>?
        /// What the delivery log says once it is removed (its time is then).
        var event: DeliveryEvent
    }

    /// The device handled a notification, or could not read it
    /// (`unreadable`: dropped, never sent again): either way it is no
    /// longer in flight. `deliveryID` is the server's id, so
    /// no provider's choice of apns-id can acknowledge another's
    /// notification. What needs no store is done at once; a notification
    /// held in the store is returned, for `removeAcknowledged`.
    func acknowledge(_ deliveryID: UUID, unreadable: Bool, by session: DeviceSession) -> HeldAcknowledgement? {
        guard let inFlight = session.untrack(deliveryID) else { return nil }
        let event = rules.acknowledgement(of: inFlight.notificationID, unreadable: unreadable, at: clock.now())
        // A notification that was never stored (expiration 0) has nothing to remove.
        guard inFlight.stored else {
            log.append(event)
            return nil
        }
        let reference = PendingReference(deviceID: session.deviceID, bundleID: inFlight.bundleID, environment: session.environment, deliveryID: deliveryID)
        return HeldAcknowledgement(reference: reference, durable: inFlight.durable, event: event)
    }

    /// Removes an acknowledged notification from the store.
    func removeAcknowledged(_ held: HeldAcknowledgement) async {
        do {
            // An acknowledgement can outrun the commit that holds the notification.
            try await held.durable?.value
            _ = try await acknowledger.submit(held.reference)
        } catch {
            logger.error("store failed removing an acknowledged notification", metadata: ["courier.error": "\(error)"])
        }
        var event = held.event
        event.at = clock.now()
        log.append(event)
    }

    /// The device sent a Filter.
    public func filter(_ hashes: [[UInt8]], for session: DeviceSession) async {
        session.setFilter(hashes)
        await drain(session)
    }

    /// Returns once the device has no connection in the environment.
    public func waitUntilOffline(deviceID: UInt64, environment: Environment) async {
        let key = DeviceKey(environment: environment, deviceID: deviceID)
        await withCheckedContinuation { continuation in
            let online = state.withLock { state -> Bool in
                guard state.sessions[key] != nil else { return false }
                state.offlineWaiters[key, default: []].append(continuation)
                return true
            }
            if !online { continuation.resume() }
        }
    }

    // MARK: Timers

    /// Runs the timers at the clock's present time: priority-5 bursts whose
    /// window passed go out, expired and over-retention notifications are
    /// dropped, and (once a minute) the rate windows of tokens and devices
    /// that went quiet are forgotten.
    public func tick() async {
        let now = clock.now()
        var events: [DeliveryEvent] = []
        let due: [(DeviceSession?, [Queued])] = state.withLock { state in
            if now.timeIntervalSince(state.pruned ?? .distantPast) >= 60 {
                state.pruned = now
                state.tokens = state.tokens.filter { !$0.value.isIdle(at: now, window: qos.tokenRateWindow) }
                state.silent = state.silent.filter { !$0.value.hasEnded(at: now, length: DeliveryRules.silentWindow) }
            }
            var due: [(DeviceSession?, [Queued])] = []
            for (key, burst) in state.bursts where rules.burstIsDue(since: burst.since, at: now) {
                due.append((state.sessions[key], burst.elements))
                state.bursts[key] = nil
            }
            return due
        }
        for (session, queue) in due {
            guard let session else { continue }
            for queued in queue { deliverOrDrop(queued, to: session, now: now, events: &events) }
        }
        do {
            for pending in try await store.removeExpiredPending(before: now) {
                events.append(rules.swept(pending.notification.id, overRetention: false, at: now))
            }
            for pending in try await store.removePending(acceptedBefore: rules.retentionCutoff(at: now)) {
                events.append(rules.swept(pending.notification.id, overRetention: true, at: now))
            }
        } catch {
            logger.error("store failed sweeping held notifications", metadata: ["courier.error": "\(error)"])
        }
        log.append(events)
    }

    /// Writes the delivery log's buffered events.
    public func flushLog() async {
        await log.flush()
    }
}
