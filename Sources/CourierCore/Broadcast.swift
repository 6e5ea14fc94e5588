import Foundation

/// What a broadcast channel keeps of the notifications sent on it
/// (`message-storage-policy` of Apple's channel management API).
public enum MessageStoragePolicy: Int, Sendable, Hashable, Codable, CaseIterable {
    /// Nothing: a broadcast reaches the devices subscribed and connected
    /// when it is sent, and no others.
    case noStorage = 0
    /// The most recent broadcast, for devices that subscribe later, until
    /// its expiration (at most `BroadcastChannel.storedMessageLifetime`).
    case mostRecent = 1
}

/// A broadcast channel of an app in one environment (Apple's "Sending
/// channel management requests to APNs"). Devices subscribe to it with
/// the channel id; a provider sends one broadcast and every subscriber
/// gets it.
public struct BroadcastChannel: Sendable, Hashable, Codable {
    /// Base64 of 16 random bytes, as APNs' channel ids are.
    public var id: String
    public var bundleID: String
    public var environment: Environment
    public var storagePolicy: MessageStoragePolicy
    public var createdAt: Date

    public init(id: String, bundleID: String, environment: Environment, storagePolicy: MessageStoragePolicy, createdAt: Date) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.storagePolicy = storagePolicy
        self.createdAt = createdAt
    }

    /// A new channel id: 16 random bytes in base64.
    public static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) }).base64EncodedString()
    }

    /// True for the form channel ids have: base64 (with its padding) of 16
    /// bytes. Anything else is `BadChannelId`, an id of that form that no
    /// channel has is `ChannelNotRegistered`.
    public static func isWellFormedID(_ text: String) -> Bool {
        text.utf8.count == 24 && Data(base64Encoded: text)?.count == 16
    }

    /// The longest a stored broadcast is kept (APNs keeps the most recent
    /// message "for up to 8 hours"), whatever its expiration.
    public static let storedMessageLifetime: TimeInterval = 8 * 3600

    /// The most channels an app may have in one environment (APNs: 10,000
    /// in development and in production each).
    public static let defaultLimit = 10_000
}

/// The broadcast a channel of policy `mostRecent` keeps.
public struct StoredBroadcast: Sendable, Hashable, Codable {
    public var channelID: String
    public var environment: Environment
    /// The broadcast as subscribers get it (`token` is empty: each
    /// subscriber's own app token is put in when it is sent).
    public var notification: PushNotification
    public var storedAt: Date

    public init(channelID: String, environment: Environment, notification: PushNotification, storedAt: Date) {
        self.channelID = channelID
        self.environment = environment
        self.notification = notification
        self.storedAt = storedAt
    }

    /// Until when a device that subscribes gets it: its expiration, and
    /// never beyond `BroadcastChannel.storedMessageLifetime` from when it was sent.
    public var keptUntil: Date {
        let longest = storedAt.addingTimeInterval(BroadcastChannel.storedMessageLifetime)
        guard let expiration = notification.expiration else { return longest }
        return min(expiration, longest)
    }
}
