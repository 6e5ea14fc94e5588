import CourierCore
import CourierWire  // topicHash: a Filter names apps by the hash of their bundle id
import Foundation
import Synchronization

/// Where the dispatcher sends a device's notifications: its connection,
/// which knows the device protocol (the dispatcher speaks only of
/// notifications).
///
/// A class's: a session holds it in two words, not in an existential's five.
public protocol DeviceLink: AnyObject, Sendable {
    /// Sends the notification; or, when a device could not read it (an
    /// item over the device protocol's bounds), sends nothing and says why:
    /// one notification must never end a device's connection. With
    /// `channelID`, a broadcast the device gets as that channel's subscriber.
    func deliver(_ notification: PushNotification, channelID: String?) -> String?
    /// Everything held for the device was sent.
    func sentEverythingHeld()
    func close()
}

extension DeviceLink {
    /// Sends a notification addressed to the device's token.
    func deliver(_ notification: PushNotification) -> String? { deliver(notification, channelID: nil) }
}

struct DeviceKey: Hashable, Sendable {
    var environment: Environment
    var deviceID: UInt64
}

/// One app on one device (in one environment): the key of every piece of
/// state that pushes reach on a device — its silent budget, its burst —
/// so that one team's pushes never count against another team's app on a
/// shared device (docs/security.md, "Tenant isolation"). State that is
/// the device's alone (its connection, who waits for it) is keyed by
/// `DeviceKey`.
struct DeviceAppKey: Hashable, Sendable {
    var device: DeviceKey
    var bundleID: String
}

/// Values kept per app of each device, reached only through a
/// `DeviceAppKey`, and dropped for a whole device at once (when it goes
/// offline) without a look at every other device's.
struct PerDeviceApp<Value> {
    private var devices: [DeviceKey: [String: Value]] = [:]

    subscript(key: DeviceAppKey) -> Value? {
        get { devices[key.device]?[key.bundleID] }
        set {
            if let newValue {
                devices[key.device, default: [:]][key.bundleID] = newValue
            } else if devices[key.device]?.removeValue(forKey: key.bundleID) != nil, devices[key.device]?.isEmpty == true {
                devices[key.device] = nil
            }
        }
    }

    /// Every app's value on the device, taken out.
    mutating func removeAll(of device: DeviceKey) -> [Value] {
        devices.removeValue(forKey: device).map { Array($0.values) } ?? []
    }

    /// Takes out the values `isDone` picks, with their keys.
    mutating func remove(where isDone: (Value) -> Bool) -> [(key: DeviceAppKey, value: Value)] {
        var removed: [(key: DeviceAppKey, value: Value)] = []
        for (device, apps) in devices {
            for (bundleID, value) in apps where isDone(value) { removed.append((DeviceAppKey(device: device, bundleID: bundleID), value)) }
        }
        for (key, _) in removed { self[key] = nil }
        return removed
    }

    /// The devices with a value, in both environments, for the device id.
    func devices(withID deviceID: UInt64) -> [DeviceKey] { devices.keys.filter { $0.deviceID == deviceID } }
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

    /// When it connected (the admin API's device list).
    public let connectedAt: Date

    public init(environment: Environment, deviceID: UInt64, link: any DeviceLink, connectedAt: Date = Date()) {
        key = DeviceKey(environment: environment, deviceID: deviceID)
        self.link = link
        self.connectedAt = connectedAt
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
        /// Its app, for the delivery log.
        var app: AppNumber
        /// Held in the store (so the acknowledgement removes it there).
        var stored: Bool
        /// The commit that holds it, when it may still be running.
        var durable: Pending<Void>?
    }

    func track(_ deliveryID: UUID, _ inFlight: InFlight) { state.withLock { $0.inFlight[deliveryID] = inFlight } }

    func untrack(_ deliveryID: UUID) -> InFlight? { state.withLock { $0.inFlight.removeValue(forKey: deliveryID) } }

    func isInFlight(_ deliveryID: UUID) -> Bool { state.withLock { $0.inFlight[deliveryID] != nil } }
}

/// The connected devices' sessions by key: a table per environment, keyed
/// by the device id alone (16 bytes a slot, not 24 with the environment
/// beside it in the key).
struct SessionTable {
    private var production: [UInt64: DeviceSession] = [:]
    private var sandbox: [UInt64: DeviceSession] = [:]

    subscript(key: DeviceKey) -> DeviceSession? {
        get {
            switch key.environment {
            case .production: production[key.deviceID]
            case .sandbox: sandbox[key.deviceID]
            }
        }
        set {
            switch key.environment {
            case .production: production[key.deviceID] = newValue
            case .sandbox: sandbox[key.deviceID] = newValue
            }
        }
    }

    var count: Int { production.count + sandbox.count }

    var all: [DeviceSession] { Array(production.values) + Array(sandbox.values) }
}

/// A notification for an online device, on its way: waiting for the
/// device's burst, or being sent.
struct QueuedNotification: Sendable {
    var notification: PushNotification
    var bundleID: String
    /// Its app, for the delivery log (the same as `bundleID`, with no reference to count).
    var app: AppNumber
    /// When it was accepted (for the accept-to-device latency).
    var acceptedAt: Date
    /// The commit that holds it, when it may be stored.
    var durable: Pending<Void>? = nil
}

/// The devices that are connected, what waits for their apps' bursts,
/// their apps' silent-push budgets, and whoever waits for one to go
/// offline. One lock: a notification finds its device's presence and its
/// app's budget in one take.
final class DeviceSessions: Sendable {
    private struct State {
        var sessions = SessionTable()
        var bursts = PerDeviceApp<BurstQueue<QueuedNotification>>()
        var silent: [DeviceAppKey: RateWindow] = [:]
        var offlineWaiters: [DeviceKey: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = Mutex(State())
    private let rules: DeliveryRules

    init(rules: DeliveryRules) {
        self.rules = rules
    }

    /// Devices connected now (each environment's connection counts once).
    var online: Int { state.withLock { $0.sessions.count } }

    /// The sessions connected now, longest connected first, at most `limit`.
    func sessions(limit: Int) -> [DeviceSession] {
        let all = state.withLock { $0.sessions.all }
        return Array(all.sorted { ($0.connectedAt, $0.deviceID) < ($1.connectedAt, $1.deviceID) }.prefix(limit))
    }

    /// The rules after acceptance (`DeliveryRules.admit`) for a
    /// notification to the device app `key`, with the device's presence and
    /// the app's silent budget as they are now; the device's session when
    /// it is connected.
    func admit(
        _ notification: PushNotification, of app: AppNumber, to key: DeviceAppKey, elsewhere: Bool = false, virtual: DevicePresence? = nil, now: Date,
        events: inout [DeliveryEvent]
    ) -> (DeliveryRules.Admission, DeviceSession?) {
        state.withLock { state in
            // A virtual device (`virtual`: its presence) never connects.
            let session = virtual == nil ? state.sessions[key.device] : nil
            // Connected to another node (`elsewhere`): online, handed over there.
            let presence: DevicePresence =
                virtual ?? session.map { $0.accepts(bundleID: key.bundleID) ? .online : .appDisabled } ?? (elsewhere ? .online : .offline)
            // Only a silent push counts against (and makes) the app's budget on the device.
            var silentWindow = notification.isSilent ? state.silent[key] : nil
            let admission = rules.admit(notification, of: app, presence: presence, silentWindow: &silentWindow, now: now, events: &events)
            if notification.isSilent { state.silent[key] = silentWindow }
            return (admission, session)
        }
    }

    /// Queues a priority-5 notification for the device app's burst; the
    /// coalesced event of one it replaced, if any.
    func queueForBurst(_ queued: QueuedNotification, for key: DeviceAppKey, now: Date) -> DeliveryEvent? {
        state.withLock { state in
            var burst = state.bursts[key] ?? BurstQueue(since: now)
            defer { state.bursts[key] = burst }
            return burst.add(queued, notification: queued.notification, app: queued.app, at: now)
        }
    }

    /// The bursts whose window passed, taken out, each with its device's
    /// session (nil: gone offline meanwhile).
    func dueBursts(at now: Date) -> [(DeviceSession?, [QueuedNotification])] {
        state.withLock { state in
            state.bursts.remove { rules.burstIsDue(since: $0.since, at: now) }.map { key, burst in (state.sessions[key.device], burst.elements) }
        }
    }

    /// What was queued for a device's bursts (in both environments), taken out.
    func removeBursts(ofDevice deviceID: UInt64) -> [QueuedNotification] {
        state.withLock { state in
            state.bursts.devices(withID: deviceID).flatMap { state.bursts.removeAll(of: $0).flatMap(\.elements) }
        }
    }

    /// The device's session here, if it is connected here.
    func session(_ key: DeviceKey) -> DeviceSession? {
        state.withLock { $0.sessions[key] }
    }

    /// The device connected: returns the session it replaces, if any.
    func connected(_ session: DeviceSession) -> DeviceSession? {
        state.withLock { state -> DeviceSession? in
            defer { state.sessions[session.key] = session }
            return state.sessions[session.key]
        }
    }

    /// The session ended: unless a newer one replaced it, the device is
    /// offline, those waiting for that hear of it, and what was queued for
    /// its burst is returned.
    func disconnected(_ session: DeviceSession) -> [QueuedNotification] {
        let (dropped, waiters): ([QueuedNotification], [CheckedContinuation<Void, Never>]) = state.withLock { state in
            guard state.sessions[session.key] === session else { return ([], []) }
            state.sessions[session.key] = nil
            return (state.bursts.removeAll(of: session.key).flatMap(\.elements), state.offlineWaiters.removeValue(forKey: session.key) ?? [])
        }
        for waiter in waiters { waiter.resume() }
        return dropped
    }

    /// Returns once the device has no connection in the environment.
    func waitUntilOffline(_ key: DeviceKey) async {
        await withCheckedContinuation { continuation in
            let online = state.withLock { state -> Bool in
                guard state.sessions[key] != nil else { return false }
                state.offlineWaiters[key, default: []].append(continuation)
                return true
            }
            if !online { continuation.resume() }
        }
    }

    /// Forgets the apps' silent budgets whose hour ended.
    func pruneBudgets(at now: Date) {
        state.withLock { state in state.silent = state.silent.filter { !$0.value.hasEnded(at: now, length: DeliveryRules.silentWindow) } }
    }
}
