import CourierCore
import Foundation
import Logging
import Synchronization

/// Broadcast channels (docs/protocol.md, "Broadcast channels"): the
/// channels themselves and their stored broadcasts are the store's; which
/// connected device listens to which channel is kept here, per connection
/// (a device subscribes again when it reconnects, as the device library
/// does). A broadcast goes to every subscriber connected when it is sent;
/// a channel of policy `mostRecent` keeps it for those that subscribe
/// later, until it expires.
final class Broadcasts: Sendable {
    struct ChannelKey: Hashable, Sendable {
        var environment: Environment
        var id: String
    }

    /// A subscribed connection, with what its broadcasts carry.
    fileprivate struct Subscriber: Sendable {
        let session: DeviceSession
        let bundleID: String
        /// The app's device token on that device.
        let token: [UInt8]
    }

    private struct State {
        var subscribers: [ChannelKey: [ObjectIdentifier: Subscriber]] = [:]
        /// Each connection's channels, to forget them when it ends.
        var channelsOf: [ObjectIdentifier: Set<ChannelKey>] = [:]
        /// Each channel's broadcasts in the current window (`qos.tokenRateLimit`
        /// per `qos.tokenRateWindow`, as for a device token).
        var rates: [ChannelKey: RateWindow] = [:]

        /// Ends one connection's subscription to one channel.
        mutating func remove(_ key: ChannelKey, _ id: ObjectIdentifier) {
            subscribers[key]?[id] = nil
            if subscribers[key]?.isEmpty == true { subscribers[key] = nil }
            channelsOf[id]?.remove(key)
            if channelsOf[id]?.isEmpty == true { channelsOf[id] = nil }
        }
    }

    private let store: any ChannelStore & ProvisioningStore
    private let registrations: Registrations
    private let clock: any WallClock
    /// Channels an app may have in one environment.
    let limit: Int
    /// Broadcasts one channel takes per `rateWindow` seconds before 429.
    private let rateLimit: Int
    private let rateWindow: TimeInterval
    private let logger: Logger
    private let state = Mutex(State())
    /// The other nodes, with several: broadcasts are relayed to their subscribers.
    private let cluster: Cluster?

    /// Channels one device connection may be subscribed to at once: a
    /// device cannot make the server keep more of it than this.
    static let maxSubscriptionsPerConnection = 1_000

    init(
        store: any ChannelStore & ProvisioningStore, registrations: Registrations, clock: any WallClock, limit: Int, qos: QoSConfiguration, cluster: Cluster? = nil,
        logger: Logger
    ) {
        self.cluster = cluster
        self.store = store
        self.registrations = registrations
        self.clock = clock
        self.limit = limit
        rateLimit = qos.tokenRateLimit
        rateWindow = qos.tokenRateWindow
        self.logger = logger
    }

    // MARK: Channel management

    /// Broadcasts are for Live Activities: an app without that topic kind
    /// has none (`FeatureNotEnabled`).
    func isEnabled(bundleID: String) async throws -> Bool {
        try await store.app(bundleID: bundleID)?.topicKinds.contains(.liveactivity) ?? false
    }

    /// A new channel of the app; nil when the app has `limit` channels in
    /// the environment already.
    func create(bundleID: String, environment: Environment, policy: MessageStoragePolicy) async throws -> BroadcastChannel? {
        let channel = BroadcastChannel(id: BroadcastChannel.newID(), bundleID: bundleID, environment: environment, storagePolicy: policy, createdAt: clock.now())
        return try await store.createChannel(channel, limit: limit) ? channel : nil
    }

    /// The channel, when it is this app's in this environment: another
    /// app's channel is not told apart from one that does not exist.
    func channel(id: String, bundleID: String, environment: Environment) async throws -> BroadcastChannel? {
        guard let channel = try await store.channel(id: id, environment: environment), channel.bundleID == bundleID else { return nil }
        return channel
    }

    func channels(bundleID: String, environment: Environment) async throws -> [BroadcastChannel] {
        try await store.channels(bundleID: bundleID, environment: environment)
    }

    /// Deletes the channel; its subscribers hear nothing more from it.
    func delete(_ channel: BroadcastChannel) async throws -> Bool {
        let deleted = try await store.deleteChannel(id: channel.id, environment: channel.environment)
        forget(channelID: channel.id, environment: channel.environment)
        if deleted { cluster?.channelDeleted(channel.id, environment: channel.environment) }
        return deleted
    }

    /// The channel was deleted (here, or on another node): its subscribers here are dropped.
    func forget(channelID: String, environment: Environment) {
        let key = ChannelKey(environment: environment, id: channelID)
        state.withLock { state in
            for id in state.subscribers[key]?.keys.map({ $0 }) ?? [] { state.remove(key, id) }
            state.rates[key] = nil
        }
    }

    // MARK: Sending

    /// Counts a broadcast on the channel; false when the channel had its
    /// `qos.tokenRateLimit` broadcasts in the current window (429
    /// `TooManyRequests`: one request reaches every subscriber, so a
    /// channel is limited as one device token is).
    func admit(_ channel: BroadcastChannel) -> Bool {
        let now = clock.now()
        let key = ChannelKey(environment: channel.environment, id: channel.id)
        return state.withLock { state in
            if state.rates.count >= 1_024, state.rates[key] == nil {
                state.rates = state.rates.filter { !$0.value.hasEnded(at: now, length: rateWindow) }
            }
            return state.rates[key, default: .unopened].take(limit: rateLimit, per: rateWindow, now: now)
        }
    }

    /// Sends `notification` (its token empty) to the channel's subscribers
    /// connected now, once a channel that keeps its most recent broadcast
    /// has it in the store (one of expiration 0 too: it replaces the one
    /// before and is never sent again). Returns how many connections it
    /// was sent to, and false for `channelExists` when the channel was
    /// deleted meanwhile (nothing is then sent).
    func send(_ notification: PushNotification, on channel: BroadcastChannel) async throws -> (sent: Int, channelExists: Bool) {
        if channel.storagePolicy == .mostRecent {
            let stored = StoredBroadcast(channelID: channel.id, environment: channel.environment, notification: notification, storedAt: clock.now())
            guard try await store.storeBroadcast(stored) else { return (0, false) }
        }
        // The other nodes' subscribers get it from them.
        cluster?.relay(StoredBroadcast(channelID: channel.id, environment: channel.environment, notification: notification, storedAt: clock.now()))
        return (sendHere(notification, channelID: channel.id, environment: channel.environment), true)
    }

    /// Sends a broadcast to the channel's subscribers connected to this
    /// node; how many it was sent to.
    func sendHere(_ notification: PushNotification, channelID: String, environment: Environment) -> Int {
        let key = ChannelKey(environment: environment, id: channelID)
        let subscribers = state.withLock { state in state.subscribers[key].map { Array($0.values) } ?? [] }
        var sent = 0
        for subscriber in subscribers where deliver(notification, to: subscriber, channelID: channelID) { sent += 1 }
        return sent
    }

    /// Sends one subscriber its copy: its own token in it. False when its
    /// app is switched off on the device (a Filter) or the device could
    /// not read it.
    fileprivate func deliver(_ notification: PushNotification, to subscriber: Subscriber, channelID: String) -> Bool {
        guard subscriber.session.accepts(bundleID: subscriber.bundleID) else { return false }
        var copy = notification
        copy.token = subscriber.token
        if let problem = subscriber.session.link.deliver(copy, channelID: channelID) {
            logger.warning("a broadcast could not be sent to a device", metadata: ["courier.problem": "\(problem)"])
            return false
        }
        return true
    }

    // MARK: Subscriptions

    /// What a Subscribe or an Unsubscribe came to.
    enum Outcome: Sendable, Equatable {
        case done
        /// The app is not registered on the device.
        case unknownApp
        /// The app has no such channel (or, unsubscribing, the connection is not subscribed).
        case unknownChannel
        /// The connection has `maxSubscriptionsPerConnection` subscriptions.
        case tooManySubscriptions
    }

    /// Subscribes the session's app to a channel of that app. With it, the
    /// channel's stored broadcast to send once the device has its answer
    /// (`replay`), unless that is the one the device says it has
    /// (`lastDeliveryID`) or it expired.
    func subscribe(_ session: DeviceSession, bundleID: String, channelID: String, lastDeliveryID: UUID?) async throws -> (Outcome, Replay?) {
        let environment = session.environment
        let key = RegistrationKey(deviceID: session.deviceID, bundleID: bundleID, environment: environment)
        guard let registration = try await registrations.registration(key), registration.active else { return (.unknownApp, nil) }
        guard BroadcastChannel.isWellFormedID(channelID), let channel = try await channel(id: channelID, bundleID: bundleID, environment: environment) else {
            return (.unknownChannel, nil)
        }
        let subscriber = Subscriber(session: session, bundleID: bundleID, token: registration.token)
        let channelKey = ChannelKey(environment: environment, id: channel.id)
        let id = ObjectIdentifier(session)
        let added = state.withLock { state -> Bool in
            let channels = state.channelsOf[id, default: []]
            guard channels.contains(channelKey) || channels.count < Self.maxSubscriptionsPerConnection else { return false }
            state.subscribers[channelKey, default: [:]][id] = subscriber
            state.channelsOf[id, default: []].insert(channelKey)
            return true
        }
        guard added else { return (.tooManySubscriptions, nil) }
        guard channel.storagePolicy == .mostRecent, let stored = try await store.storedBroadcast(channelID: channel.id, environment: environment),
            stored.notification.deliveryID != lastDeliveryID, stored.keptUntil > clock.now()
        else { return (.done, nil) }
        return (.done, Replay(broadcasts: self, notification: stored.notification, subscriber: subscriber, channelID: channel.id))
    }

    /// A channel's stored broadcast for one new subscriber. Sent after the
    /// subscription's answer; a broadcast sent at the same moment may
    /// overtake it (APNs, too, may reorder a channel's broadcasts).
    struct Replay: Sendable {
        fileprivate let broadcasts: Broadcasts
        fileprivate let notification: PushNotification
        fileprivate let subscriber: Subscriber
        fileprivate let channelID: String

        func send() { _ = broadcasts.deliver(notification, to: subscriber, channelID: channelID) }
    }

    func unsubscribe(_ session: DeviceSession, bundleID: String, channelID: String) -> Outcome {
        let key = ChannelKey(environment: session.environment, id: channelID)
        let id = ObjectIdentifier(session)
        return state.withLock { state in
            guard state.subscribers[key]?[id]?.bundleID == bundleID else { return .unknownChannel }
            state.remove(key, id)
            return .done
        }
    }

    /// The app was removed from the device (by the device, or marked so
    /// through the admin API): its subscriptions end, on every connection
    /// of the device in that environment.
    func appRemoved(_ bundleID: String, deviceID: UInt64, environment: Environment) {
        state.withLock { state in
            let ended = state.subscribers.flatMap { key, subscribers in
                subscribers.filter {
                    key.environment == environment && $0.value.bundleID == bundleID && $0.value.session.deviceID == deviceID
                }.map { (key, $0.key) }
            }
            for (key, id) in ended { state.remove(key, id) }
        }
    }

    /// The connection ended: its subscriptions with it.
    func disconnected(_ session: DeviceSession) {
        let id = ObjectIdentifier(session)
        state.withLock { state in
            for key in state.channelsOf[id] ?? [] { state.remove(key, id) }
        }
    }
}
