import CourierCore
import CourierPKI
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Devices and their apps' registrations, as the device gateway and the
/// admin API change them: registered, removed, reset, connected, handed
/// what is held for them, acknowledging.
extension Dispatcher {
    /// Issues (or returns again) the token of an app on a device and records
    /// the registration. Nil when there is no such app.
    public func register(deviceID: UInt64, generation: UInt32, bundleID: String, environment: Environment) async throws -> [UInt8]? {
        guard let (token, changed) = try await registrations.register(deviceID: deviceID, generation: generation, bundleID: bundleID, environment: environment)
        else { return nil }
        // The other nodes' caches forget only what changed (a device registers its apps again at each connection).
        if changed { cluster?.registrationChanged(deviceID: deviceID, bundleID: bundleID, environment: environment) }
        return token
    }

    /// The app was removed from the device. False when it was not registered.
    public func unregister(deviceID: UInt64, bundleID: String, environment: Environment) async throws -> Bool {
        guard try await registrations.unregister(deviceID: deviceID, bundleID: bundleID, environment: environment) else { return false }
        cluster?.registrationChanged(deviceID: deviceID, bundleID: bundleID, environment: environment)
        // Its broadcast subscriptions end with it.
        broadcasts.appRemoved(bundleID, deviceID: deviceID, environment: environment)
        return true
    }

    /// A Live Activity of the app on the device ended: its update token
    /// answers ExpiredToken from now on. False when the app is not
    /// registered on the device or the activity had ended already.
    func endActivity(_ activity: UInt32, deviceID: UInt64, bundleID: String, environment: Environment) async throws -> Bool {
        let key = RegistrationKey(deviceID: deviceID, bundleID: bundleID, environment: environment)
        guard activity != 0, activity != DeviceTokenContents.pushToStart, try await registrations.registration(key)?.active == true else { return false }
        guard try await store.endActivity(deviceID: deviceID, bundleID: bundleID, environment: environment, activity: activity, at: clock.now())
        else { return false }
        registrations.activityEnded(key, activity)
        // The other nodes forget the registration, and what they knew of its activities with it.
        cluster?.registrationChanged(deviceID: deviceID, bundleID: bundleID, environment: environment)
        return true
    }

    /// The admin API marks a token unregistered at `date`, as if its app
    /// had been removed then, without its device: pushes to it get 410
    /// with that time (and a feedback entry). False when the token is not
    /// the topic's app's registration in `environment`.
    func markUnregistered(token: [UInt8], topic: String, environment: Environment, at date: Date) async throws -> Bool {
        let bundleID = Topic(topic).bundleID
        if device(of: token, in: environment) == nil {
            return try await markVirtualUninstalled(token: token, bundleID: bundleID, environment: environment, at: date)
        }
        guard case .success(let checked) = registrations.check(TokenKey(environment: environment, bytes: token), bundleID: bundleID, now: clock.now()),
            try await registrations.problem(of: checked, now: clock.now()) == nil
        else { return false }
        let deviceID = checked.contents.deviceID
        guard try await registrations.unregister(deviceID: deviceID, bundleID: bundleID, environment: environment, at: date) else { return false }
        cluster?.registrationChanged(deviceID: deviceID, bundleID: bundleID, environment: environment)
        broadcasts.appRemoved(bundleID, deviceID: deviceID, environment: environment)
        return true
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

    /// The device was reset (it connected with a higher generation): its
    /// registrations end, and so do the notifications held or queued for
    /// it, which were addressed to the tokens that ended (logged as
    /// discarded).
    func resetDevice(id deviceID: UInt64, generation: UInt32) async throws {
        let held = try await store.setDeviceGeneration(id: deviceID, generation: generation)
        registrations.forgetDevice(deviceID)
        cluster?.deviceReset(deviceID)
        let queued = sessions.removeBursts(ofDevice: deviceID)
        let now = clock.now()
        // A queued notification that may be stored is among the held ones too.
        let ended = held.map { ($0.notification, AppNumber($0.bundleID)) } + queued.filter { !$0.notification.mayBeStored }.map { ($0.notification, $0.app) }
        log.append(ended.map { DeliveryEvent($0, of: $1, .discarded, at: now, detail: "the device was reset; its tokens ended") })
    }

    /// A device connected: it replaces an older connection of the same
    /// device, gets everything held for it, then NoStorage.
    public func connected(_ session: DeviceSession) async {
        if let previous = sessions.connected(session), previous !== session { previous.link.close() }
        // Announced to the other nodes before what is held is read.
        await cluster?.connected(session)
        await drain(session)
    }

    /// Sends what other nodes handed over to this one to its devices; one
    /// whose device has left meanwhile stays held when it may be stored
    /// (its device gets it where it connects next), else it expires as for
    /// a device gone offline.
    func takeHandedOver() async {
        guard let cluster else { return }
        let handed: [PendingNotification]
        do {
            handed = try await cluster.coordination.takeHandedOver(node: cluster.node)
        } catch {
            logger.error("store failed reading the notifications handed over", metadata: ["courier.error": "\(error)"])
            return
        }
        sendHandedOver(handed)
    }

    /// Sends what another node handed over (through the store's queue, or
    /// directly: `NodeListener`) to its devices, in order.
    func sendHandedOver(_ handed: [PendingNotification]) {
        let now = clock.now()
        var events: [DeliveryEvent] = []
        for pending in handed {
            let n = pending.notification
            let key = DeviceKey(environment: pending.environment, deviceID: pending.deviceID)
            // Expired while it waited in the queue: not sent (the store's sweep drops and logs it).
            let app = AppNumber(pending.bundleID)
            if n.mayBeStored, rules.onConnect(held: n, of: app, now: now) != nil { continue }
            guard let session = sessions.session(key), session.accepts(bundleID: pending.bundleID) else {
                if let offline = rules.wentOffline(queued: n, of: app, at: now) { events.append(offline) }
                continue
            }
            // Sent already (what is held goes out when the device connects).
            guard !session.isInFlight(n.deliveryID) else { continue }
            let queued = QueuedNotification(notification: n, bundleID: pending.bundleID, app: app, acceptedAt: pending.acceptedAt)
            deliverOrDrop(queued, to: session, now: now, events: &events)
        }
        log.append(events)
    }

    /// What another node asks (`Cluster.apply`).
    func perform(_ action: Cluster.Action) async {
        switch action {
        case .drain(let key):
            if let session = sessions.session(key) { await drain(session) }
        case .takeHandedOver:
            await takeHandedOver()
        case .reloadFaults:
            await cluster?.reloadFaults()
        case .readInbox:
            await cluster?.readInbox()
        case .forgetRegistration(let key):
            registrations.forget(key)
        case .forgetDevice(let deviceID):
            registrations.forgetDevice(deviceID)
        case .sendBroadcast(let broadcast):
            _ = broadcasts.sendHere(broadcast.notification, channelID: broadcast.channelID, environment: broadcast.environment)
        case .forgetChannel(let id, let environment):
            broadcasts.forget(channelID: id, environment: environment)
        case .reloadVirtualTokens(let app, let token):
            do {
                if let token { try await virtuals.reload(app, token: token) } else { try await virtuals.reload(app) }
            } catch {
                logger.error("store failed reading virtual tokens", metadata: ["courier.error": "\(error)"])
            }
        }
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
                let app = AppNumber(pending.bundleID)
                if let expired = rules.onConnect(held: pending.notification, of: app, now: now) {
                    dropped.append(PendingReference(pending))
                    events.append(expired)
                    continue
                }
                let queued = QueuedNotification(notification: pending.notification, bundleID: pending.bundleID, app: app, acceptedAt: pending.acceptedAt)
                if let unreadable = deliver(queued, to: session, now: now, events: &events) { dropped.append(unreadable) }
            }
            if !dropped.isEmpty { _ = try await store.removePending(dropped) }
        } catch {
            logger.error("store failed reading held notifications", metadata: ["courier.error": "\(error)"])
        }
        log.append(events)
        session.link.sentEverythingHeld()
    }

    public func disconnected(_ session: DeviceSession) {
        // Queued priority-5 notifications that may be stored are held in the
        // store and go out on the next connection; the others are lost.
        let dropped = sessions.disconnected(session)
        broadcasts.disconnected(session)
        cluster?.disconnected(session)
        let now = clock.now()
        log.append(dropped.compactMap { rules.wentOffline(queued: $0.notification, of: $0.app, at: now) })
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
        // A sandbox notification's unique id is its delivery id.
        let alias = session.environment == .sandbox ? deliveryID : nil
        let event = rules.acknowledgement(of: inFlight.notificationID, of: inFlight.app, alias: alias, unreadable: unreadable, at: clock.now())
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
        await sessions.waitUntilOffline(DeviceKey(environment: environment, deviceID: deviceID))
    }
}
