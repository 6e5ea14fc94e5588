import Foundation

/// A count of events in a window of time that starts with the first one:
/// a token's pushes per `tokenRateWindow`, an app's silent pushes on a device per hour.
public struct RateWindow: Sendable, Hashable {
    public var start: Date
    public var count: Int

    public init(start: Date, count: Int) {
        self.start = start
        self.count = count
    }

    /// A window never opened: it reads as ended.
    public static let unopened = RateWindow(start: .distantPast, count: 0)

    /// At least `length` old: the next count starts a new window.
    public func hasEnded(at now: Date, length: TimeInterval) -> Bool {
        now.timeIntervalSince(start) >= length
    }

    /// Counts one more unless `limit` is reached; a window that has ended
    /// starts again.
    public mutating func take(limit: Int, per length: TimeInterval, now: Date) -> Bool {
        if hasEnded(at: now, length: length) { self = RateWindow(start: now, count: 0) }
        guard count < limit else { return false }
        count += 1
        return true
    }
}

/// What can be wrong with a notification's device token once it was looked
/// at (docs/delivery.md, "Order of checks", 2 to 5); nil where a
/// `TokenProblem?` is asked for: the app's active registration.
public enum TokenProblem: Sendable, Hashable {
    /// It does not open under the environment's token key: altered,
    /// forged, or another environment's.
    case unopened
    /// It opens, but belongs to another app than the topic's, or is a Live
    /// Activity token for another topic than the app's Live Activities one
    /// (or a device token for that one).
    case ofAnotherApp
    /// The device does not hold it for the app now: an older generation
    /// (the device was reset), or an app never registered.
    case notHeld
    /// The app was removed from the device at this time.
    case removed(at: Date)
    /// A Live Activity's update token, whose activity ended at this time.
    case expired(at: Date)
}

/// Where the notification's device is when it is accepted.
public enum DevicePresence: Sendable, Hashable {
    case offline
    /// Connected, with a Filter that leaves the notification's app out.
    case appDisabled
    case online
    /// A virtual device that is online (docs/virtual-devices.md): it takes
    /// a notification at once, and nothing is held or sent.
    case virtual
}

/// The quality-of-service rules of docs/delivery.md as decisions: each
/// takes what is known (the notification, its token's standing, the rate
/// windows, the device's presence, the time) and returns what to do, with
/// the delivery-log events that say so. No store, no connection, no lock:
/// the dispatcher finds the facts and carries the decisions out.
public struct DeliveryRules: Sendable {
    public var qos: QoSConfiguration

    /// The silent-push budget's window.
    public static let silentWindow: TimeInterval = 3600

    public init(_ qos: QoSConfiguration) {
        self.qos = qos
    }

    // MARK: Before acceptance

    /// A refusal: the provider's answer, and whether a feedback entry is
    /// written (an app removed from the device).
    public struct Refusal: Sendable, Hashable {
        public var reason: Reason
        /// The removal time, for `Unregistered`.
        public var timestamp: Date?

        public init(_ reason: Reason, timestamp: Date? = nil) {
            self.reason = reason
            self.timestamp = timestamp
        }

        /// A feedback entry (environment, topic, token, removal time) goes with it.
        public var addsFeedback: Bool { reason == .unregistered }

        public var result: AcceptResult { .rejected(reason, timestamp: timestamp) }

        /// Its event in the delivery log, under the app the provider
        /// pushed to; nil for `TopicDisallowed`: the topic is
        /// not the provider's, so the refusal is no app's to log (the
        /// inbox keeps it, under the provider's team).
        public func event(for notification: PushNotification, of app: AppNumber, at now: Date) -> DeliveryEvent? {
            reason == .topicDisallowed ? nil : DeliveryEvent(notification, of: app, .rejected, at: now, detail: reason.rawValue)
        }
    }

    /// Check 1: the provider may push to the topic (its certificate's
    /// topics, or its team's apps).
    public func refusal(topicAllowed: Bool) -> Refusal? {
        topicAllowed ? nil : topicNotAllowed
    }

    /// Check 1's refusal.
    public var topicNotAllowed: Refusal { Refusal(.topicDisallowed) }

    /// Checks 2 to 5: a token that cannot take the notification.
    public func refusal(_ token: TokenProblem) -> Refusal {
        switch token {
        case .unopened, .notHeld: Refusal(.badDeviceToken)
        case .ofAnotherApp: Refusal(.deviceTokenNotForTopic)
        case .removed(let at): Refusal(.unregistered, timestamp: at)
        case .expired(let at): Refusal(.expiredToken, timestamp: at)
        }
    }

    /// Check 6: the token's rate window takes one more push, or the push
    /// is refused (`TooManyRequests`).
    public func refusal(takingFrom window: inout RateWindow, now: Date) -> Refusal? {
        window.take(limit: qos.tokenRateLimit, per: qos.tokenRateWindow, now: now) ? nil : Refusal(.tooManyRequests)
    }

    // MARK: After acceptance

    /// What becomes of an accepted notification.
    public enum Admission: Sendable, Hashable {
        /// Dropped: expired, or over the silent budget (the events say which).
        case dropped
        /// Kept: `stored` in the store until the device acknowledges it
        /// (queued for the next group commit, replacing what was held for
        /// the device and app); sent as `sending` says.
        case kept(stored: Bool, sending: Sending)
        /// Taken at once by a virtual device (`DevicePresence.virtual`).
        case takenByVirtualDevice
    }

    public enum Sending: Sendable, Hashable {
        /// Not now: the device is offline or the app disabled; a stored
        /// one goes out when the device connects (or enables the app).
        case later
        /// At once (priority 10).
        case now
        /// With the device's next burst (priority 5).
        case withBurst
    }

    /// The rules after acceptance: expiry, the silent budget (`silentWindow`,
    /// nil when the device has none yet; counted only for a silent push),
    /// store, deliver or queue. The events (accepted first) are appended
    /// to `events`.
    public func admit(
        _ notification: PushNotification, of app: AppNumber, presence: DevicePresence, silentWindow: inout RateWindow?, now: Date, events: inout [DeliveryEvent]
    ) -> Admission {
        events.append(DeliveryEvent(notification, of: app, .accepted, at: now))
        if let expiration = notification.expiration, notification.mayBeStored, expiration <= now {
            events.append(DeliveryEvent(notification, of: app, .expired, at: now, detail: "expired before it was accepted"))
            return .dropped
        }
        if notification.isSilent {
            var window = silentWindow ?? .unopened
            let taken = window.take(limit: qos.silentBudgetPerHour, per: Self.silentWindow, now: now)
            silentWindow = window
            guard taken else {
                events.append(DeliveryEvent(notification, of: app, .throttled, at: now, detail: "silent budget of \(qos.silentBudgetPerHour) per hour used up"))
                return .dropped
            }
        }
        if presence == .virtual {
            events.append(DeliveryEvent(notification, of: app, .deliveredToVirtualDevice, at: now))
            return .takenByVirtualDevice
        }
        let stored = notification.mayBeStored
        if stored { events.append(DeliveryEvent(notification, of: app, .stored, at: now)) }
        guard presence == .online else {
            guard stored else {
                events.append(DeliveryEvent(notification, of: app, .expired, at: now, detail: "device offline and expiration 0"))
                return .dropped
            }
            return .kept(stored: true, sending: .later)
        }
        return .kept(stored: stored, sending: notification.priority == .immediate ? .now : .withBurst)
    }

    /// A whole decision, in the order of docs/delivery.md: the checks, the
    /// token's rate window, then `admit`. The dispatcher takes the same
    /// steps one by one, as it finds the facts (some are in the store).
    public enum Decision: Sendable, Hashable {
        case refused(Refusal)
        case accepted(Admission)
    }

    public func decide(
        _ notification: PushNotification, of app: AppNumber, topicAllowed: Bool, tokenProblem: TokenProblem?, tokenWindow: inout RateWindow,
        presence: DevicePresence, silentWindow: inout RateWindow?, now: Date, events: inout [DeliveryEvent]
    ) -> Decision {
        if let refusal = refusal(topicAllowed: topicAllowed) ?? tokenProblem.map(refusal) ?? refusal(takingFrom: &tokenWindow, now: now) {
            if let event = refusal.event(for: notification, of: app, at: now) { events.append(event) }
            return .refused(refusal)
        }
        return .accepted(admit(notification, of: app, presence: presence, silentWindow: &silentWindow, now: now, events: &events))
    }

    // MARK: What is held and queued

    /// A held notification replaced by a newer one for the same device and
    /// app: `coalesced` when both carry the same collapse id.
    public func replacement(of old: PushNotification, by new: PushNotification, of app: AppNumber, at now: Date) -> DeliveryEvent {
        let coalesced = old.collapseID != nil && old.collapseID == new.collapseID
        return DeliveryEvent(old, of: app, coalesced ? .coalesced : .replaced, at: now, detail: "by \(new.id.lowercasedString)")
    }

    /// A held notification, when its device connects: sent, or dropped as
    /// expired (with its event).
    public func onConnect(held notification: PushNotification, of app: AppNumber, now: Date) -> DeliveryEvent? {
        guard let expiration = notification.expiration, expiration < now else { return nil }
        return DeliveryEvent(notification, of: app, .expired, at: now)
    }

    /// Held notifications accepted before this time are dropped by the
    /// sweep (held longer than `qos.retention`).
    public func retentionCutoff(at now: Date) -> Date {
        now.addingTimeInterval(-qos.retention)
    }

    /// The sweep's event for a held notification that expired, or (`overRetention`) was held too long.
    public func swept(_ notification: PushNotification, of app: AppNumber, overRetention: Bool, at now: Date) -> DeliveryEvent {
        DeliveryEvent(notification, of: app, .expired, at: now, detail: overRetention ? "held longer than the retention limit" : nil)
    }

    /// A burst whose window passed goes out.
    public func burstIsDue(since: Date, at now: Date) -> Bool {
        now.timeIntervalSince(since) >= qos.burstWindow
    }

    /// A queued notification lost because its device went offline before
    /// its burst: one that may be stored is held and goes out on the next
    /// connection (nil); one with expiration 0 expires.
    public func wentOffline(queued notification: PushNotification, of app: AppNumber, at now: Date) -> DeliveryEvent? {
        notification.mayBeStored ? nil : DeliveryEvent(notification, of: app, .expired, at: now, detail: "device went offline and expiration 0")
    }

    /// The device's acknowledgement (or refusal, `unreadable`) of a
    /// delivered notification: it is no longer held either way.
    /// `alias`: its unique id, if it has one.
    public func acknowledgement(of id: UUID, of app: AppNumber, alias: UUID?, unreadable: Bool, at now: Date) -> DeliveryEvent {
        unreadable
            ? DeliveryEvent(notificationID: id, app: app, kind: .discarded, at: now, detail: "the device could not read it", alias: alias)
            : DeliveryEvent(notificationID: id, app: app, kind: .acknowledged, at: now, alias: alias)
    }

    /// One the server found a device could not read (`problem`), before
    /// sending it: never sent, no longer held.
    public func unreadable(_ notification: PushNotification, of app: AppNumber, problem: String, at now: Date) -> DeliveryEvent {
        DeliveryEvent(notification, of: app, .discarded, at: now, detail: "a device could not read it: \(problem)")
    }
}

/// The priority-5 notifications waiting for one device's burst: in
/// arrival order; a newer one with the same app and collapse id takes the
/// place of the one queued before (docs/delivery.md).
public struct BurstQueue<Element>: Sendable where Element: Sendable {
    public struct Entry: Sendable {
        public var element: Element
        public var notificationID: UUID
        public var uniqueID: UUID?
        public var app: AppNumber
        public var collapseID: String?
    }

    /// When the first of them was queued.
    public let since: Date
    public private(set) var entries: [Entry] = []

    public init(since: Date) {
        self.since = since
    }

    /// Queues a notification; returns the coalesced event of the one it
    /// replaced, if any.
    public mutating func add(_ element: Element, notification: PushNotification, app: AppNumber, at now: Date) -> DeliveryEvent? {
        var coalesced: DeliveryEvent?
        if let collapseID = notification.collapseID,
            let index = entries.firstIndex(where: { $0.app == app && $0.collapseID == collapseID })
        {
            coalesced = DeliveryEvent(
                notificationID: entries[index].notificationID, app: app, kind: .coalesced, at: now, detail: "by \(notification.id.lowercasedString)",
                alias: entries[index].uniqueID)
            entries.remove(at: index)
        }
        entries.append(
            Entry(element: element, notificationID: notification.id, uniqueID: notification.uniqueID, app: app, collapseID: notification.collapseID))
        return coalesced
    }

    public var elements: [Element] { entries.map(\.element) }
}
