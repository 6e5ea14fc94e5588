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
    private struct Subscriber: Sendable {
        let session: DeviceSession
        let bundleID: String
        /// The app's device token on that device.
        let token: [UInt8]
    }

    private struct State {
        var subscribers: [ChannelKey: [ObjectIdentifier: Subscriber]] = [:]
        /// Each connection's channels, to forget them when it ends.
        var channelsOf: [ObjectIdentifier: Set<ChannelKey>] = [:]

        /// Ends one connection's subscription to one channel.
        mutating func remove(_ key: ChannelKey, _ id: ObjectIdentifier) {
            subscribers[key]?[id] = nil
            if subscribers[key]?.isEmpty == true { subscribers[key] = nil }
            channelsOf[id]?.remove(key)
            if channelsOf[id]?.isEmpty == true { channelsOf[id] = nil }
        }
    }

    private let store: any Store
    private let registrations: Registrations
    private let clock: any WallClock
    /// Channels an app may have in one environment.
    let limit: Int
    private let logger: Logger
    private let state = Mutex(State())

    init(store: any Store, registrations: Registrations, clock: any WallClock, limit: Int, logger: Logger) {
        self.store = store
        self.registrations = registrations
        self.clock = clock
        self.limit = limit
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
        let key = ChannelKey(environment: channel.environment, id: channel.id)
        state.withLock { state in
            for id in state.subscribers[key]?.keys.map({ $0 }) ?? [] { state.remove(key, id) }
        }
        return deleted
    }

    // MARK: Sending

    /// Sends `notification` (its token empty) to the channel's subscribers
    /// connected now, once a channel that keeps its most recent broadcast
    /// has it in the store (a broadcast that may be stored). Returns how
    /// many connections it was sent to, and false for `channelExists` when
    /// the channel was deleted meanwhile (nothing is then sent).
    func send(_ notification: PushNotification, on channel: BroadcastChannel) async throws -> (sent: Int, channelExists: Bool) {
        if channel.storagePolicy == .mostRecent, notification.mayBeStored {
            let stored = StoredBroadcast(channelID: channel.id, environment: channel.environment, notification: notification, storedAt: clock.now())
            guard try await store.storeBroadcast(stored) else { return (0, false) }
        }
        let key = ChannelKey(environment: channel.environment, id: channel.id)
        let subscribers = state.withLock { state in state.subscribers[key].map { Array($0.values) } ?? [] }
        var sent = 0
        for subscriber in subscribers where deliver(notification, to: subscriber, channelID: channel.id) { sent += 1 }
        return (sent, true)
    }

    /// Sends one subscriber its copy: its own token in it. False when its
    /// app is switched off on the device (a Filter) or the device could
    /// not read it.
    private func deliver(_ notification: PushNotification, to subscriber: Subscriber, channelID: String) -> Bool {
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
    }

    /// Subscribes the session's app to a channel of that app; the channel's
    /// stored broadcast goes out at once, unless it is the one the device
    /// says it has (`lastDeliveryID`) or it expired.
    func subscribe(_ session: DeviceSession, bundleID: String, channelID: String, lastDeliveryID: UUID?) async throws -> Outcome {
        let environment = session.environment
        let key = RegistrationKey(deviceID: session.deviceID, bundleID: bundleID, environment: environment)
        guard let registration = try await registrations.registration(key), registration.active else { return .unknownApp }
        guard BroadcastChannel.isWellFormedID(channelID), let channel = try await channel(id: channelID, bundleID: bundleID, environment: environment) else {
            return .unknownChannel
        }
        let subscriber = Subscriber(session: session, bundleID: bundleID, token: registration.token)
        let channelKey = ChannelKey(environment: environment, id: channel.id)
        state.withLock { state in
            state.subscribers[channelKey, default: [:]][ObjectIdentifier(session)] = subscriber
            state.channelsOf[ObjectIdentifier(session), default: []].insert(channelKey)
        }
        if channel.storagePolicy == .mostRecent, let stored = try await store.storedBroadcast(channelID: channel.id, environment: environment),
            stored.notification.deliveryID != lastDeliveryID, stored.keptUntil > clock.now()
        {
            _ = deliver(stored.notification, to: subscriber, channelID: channel.id)
        }
        return .done
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

    /// The app was removed from the device: its subscriptions end.
    func appRemoved(_ bundleID: String, from session: DeviceSession) {
        let id = ObjectIdentifier(session)
        state.withLock { state in
            for key in state.channelsOf[id] ?? [] where state.subscribers[key]?[id]?.bundleID == bundleID { state.remove(key, id) }
        }
    }

    /// The connection ended: its subscriptions with it.
    func disconnected(_ session: DeviceSession) {
        let id = ObjectIdentifier(session)
        state.withLock { state in
            for key in state.channelsOf[id] ?? [] { state.remove(key, id) }
        }
    }

    /// Connections subscribed to the channel now.
    func subscriberCount(_ key: ChannelKey) -> Int {
        state.withLock { $0.subscribers[key]?.count ?? 0 }
    }
}
