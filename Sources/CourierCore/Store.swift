import Foundation

/// Where Courier keeps what must survive a restart. SQLite (embedded) and
/// PostgreSQL implement it; both pass the same conformance suite.
///
/// It is its roles together, one protocol each — provisioning,
/// registrations, broadcast channels, held notifications, feedback, the
/// delivery log, virtual tokens — and each part of the server is handed
/// only the roles it needs, so that the compiler holds the rule of who
/// reaches what (docs/architecture.md).
///
/// Times are kept to the millisecond.
public protocol Store: ProvisioningStore, RegistrationStore, ChannelStore, HeldNotificationStore, FeedbackStore, DeliveryLogStore,
    VirtualTokenStore
{
    /// The schema version after migrations.
    func schemaVersion() async throws -> Int
}

/// Teams, apps, auth keys and certificates.
public protocol ProvisioningStore: Sendable {
    // MARK: Teams and apps
    func createTeam(_ team: Team) async throws
    func team(id: String) async throws -> Team?
    func teams() async throws -> [Team]
    func createApp(_ app: App) async throws
    func app(bundleID: String) async throws -> App?
    func apps(teamID: String) async throws -> [App]

    // MARK: Auth keys
    func addAuthKey(_ key: AuthKeyRecord) async throws
    func authKey(id: String) async throws -> AuthKeyRecord?
    func authKeys(teamID: String) async throws -> [AuthKeyRecord]
    /// Marks the key revoked; false when there is no such key or it was
    /// revoked already.
    func revokeAuthKey(id: String, at: Date) async throws -> Bool

    // MARK: Certificates
    func addCertificate(_ certificate: CertificateRecord) async throws
    func certificate(serial: String) async throws -> CertificateRecord?
    func certificates(kind: CertificateKind?) async throws -> [CertificateRecord]
    func revokeCertificate(serial: String, at: Date) async throws -> Bool
    /// The serials of the certificates revoked at `date` or later (the
    /// revocation sweep asks for what is new since it last looked).
    func certificatesRevoked(since date: Date) async throws -> [String]

}

/// Devices, their apps' registrations and their Live Activities.
public protocol RegistrationStore: Sendable {
    /// How many Live Activity ends a store keeps per device, app and environment.
    var endedActivitiesKept: Int { get }

    // MARK: Devices and registrations
    func createDevice(_ device: Device) async throws
    func device(id: UInt64) async throws -> Device?
    /// Records a reset or restore of the device: its app registrations
    /// (whose tokens were of the older generation) and the notifications
    /// held for it (addressed to those tokens) end with it, in the same
    /// transaction; its apps register again. Returns the notifications
    /// removed.
    @discardableResult
    func setDeviceGeneration(id: UInt64, generation: UInt32) async throws -> [PendingNotification]
    func markDeviceSeen(id: UInt64, at: Date) async throws
    /// Records an app's registration (active) and returns it; registering
    /// again replaces the token and times.
    func register(_ registration: AppRegistration) async throws
    func registration(deviceID: UInt64, bundleID: String, environment: Environment) async throws -> AppRegistration?
    func registrations(deviceID: UInt64) async throws -> [AppRegistration]
    /// Marks the app as removed from the device; false when it was not
    /// registered (or already removed).
    func unregister(deviceID: UInt64, bundleID: String, environment: Environment, at: Date) async throws -> Bool
    /// Records that a Live Activity of an app on a device ended (its update
    /// token is expired from then on); false when it had ended already
    /// (the first end is kept). The most recent `endedActivitiesKept` ends
    /// per device, app and environment are kept (a device could otherwise
    /// grow the table without bound); a device's reset removes its ends
    /// with its tokens.
    func endActivity(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32, at: Date) async throws -> Bool
    /// When that Live Activity ended; nil while it has not.
    func activityEnd(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32) async throws -> Date?

}

/// Broadcast channels and their stored broadcasts.
public protocol ChannelStore: Sendable {
    // MARK: Broadcast channels
    /// Adds the channel unless its app has `limit` channels in its
    /// environment already (then false), in one transaction.
    func createChannel(_ channel: BroadcastChannel, limit: Int) async throws -> Bool
    func channel(id: String, environment: Environment) async throws -> BroadcastChannel?
    /// The app's channels in the environment, oldest first.
    func channels(bundleID: String, environment: Environment) async throws -> [BroadcastChannel]
    /// Deletes the channel and its stored broadcast; false when there was none.
    func deleteChannel(id: String, environment: Environment) async throws -> Bool
    /// Keeps `broadcast` as its channel's stored one, replacing the one
    /// before; false when the channel is gone.
    func storeBroadcast(_ broadcast: StoredBroadcast) async throws -> Bool
    func storedBroadcast(channelID: String, environment: Environment) async throws -> StoredBroadcast?

}

/// Notifications held for devices that are offline (store and forward).
public protocol HeldNotificationStore: Sendable {
    // MARK: Pending notifications (store and forward)
    /// Stores each notification, replacing the one held for the same
    /// (device, app, environment), all in one transaction (group commit).
    /// Returns, for each notification in order, the one it replaced.
    func storePending(_ notifications: [PendingNotification]) async throws -> [PendingNotification?]
    func pending(deviceID: UInt64, environment: Environment) async throws -> [PendingNotification]
    /// Removes each held notification that is still the one with its
    /// delivery id (acknowledged ones), in one transaction; true where one
    /// was removed.
    func removePending(_ references: [PendingReference]) async throws -> [Bool]
    /// Removes and returns every held notification whose expiration is
    /// before `date`.
    func removeExpiredPending(before date: Date) async throws -> [PendingNotification]
    /// Removes and returns every held notification accepted before `date`.
    func removePending(acceptedBefore date: Date) async throws -> [PendingNotification]
    /// Notifications held now, for every device (the admin API's status).
    func pendingCount() async throws -> Int

}

/// The feedback service's entries.
public protocol FeedbackStore: Sendable {
    // MARK: Feedback
    /// Adds entries in one transaction; an entry for the same
    /// (environment, topic, token) as one held, or as another of them,
    /// takes the newer timestamp.
    func addFeedback(_ entries: [FeedbackEntry]) async throws
    func feedback(environment: Environment, topic: String) async throws -> [FeedbackEntry]
    /// Removes the given entries, each only if its timestamp is unchanged
    /// (a newer failure recorded meanwhile stays).
    func removeFeedback(_ entries: [FeedbackEntry]) async throws

}

/// Virtual tokens (docs/virtual-devices.md).
public protocol VirtualTokenStore: Sendable {
    // MARK: Virtual tokens
    /// Adds the tokens not there yet (one there keeps its state), in one
    /// transaction; the tokens added.
    @discardableResult
    func addVirtualTokens(_ tokens: [VirtualToken]) async throws -> [[UInt8]]
    /// One virtual token, nil when there is none.
    func virtualToken(environment: Environment, bundleID: String, token: [UInt8]) async throws -> VirtualToken?
    /// Virtual tokens in (environment, bundle id, token) order: an app's in
    /// an environment (every one when `bundleID` is nil), those after
    /// `after`'s token, at most `limit` (every one when nil).
    func virtualTokens(environment: Environment?, bundleID: String?, after: [UInt8]?, limit: Int?) async throws -> [VirtualToken]
    /// How many virtual tokens the app has in the environment.
    func virtualTokenCount(environment: Environment, bundleID: String) async throws -> Int
    /// Sets a virtual token offline or online, and (`uninstalled`, when
    /// given) its uninstall time, nil to install it again. The token as it
    /// is now; nil when there is none.
    func updateVirtualToken(
        environment: Environment, bundleID: String, token: [UInt8], offline: Bool?, uninstalled: Date??
    ) async throws -> VirtualToken?
    /// Removes the given tokens of the app in the environment (every one
    /// when nil); how many were removed.
    func removeVirtualTokens(environment: Environment, bundleID: String, tokens: [[UInt8]]?) async throws -> Int

}

/// The delivery log.
public protocol DeliveryLogStore: Sendable {
    // MARK: Delivery log
    func appendDeliveryEvents(_ events: [DeliveryEvent]) async throws
    func deliveryEvents(notificationID: UUID) async throws -> [DeliveryEvent]
}

/// Names one held notification: (device, app, environment) and its
/// delivery id (`PushNotification.deliveryID`, the server's own, never the
/// provider's apns-id).
public struct PendingReference: Sendable, Hashable {
    public var deviceID: UInt64
    public var bundleID: String
    public var environment: Environment
    public var deliveryID: UUID

    public init(deviceID: UInt64, bundleID: String, environment: Environment, deliveryID: UUID) {
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.environment = environment
        self.deliveryID = deliveryID
    }

    /// The reference of a held notification.
    public init(_ pending: PendingNotification) {
        self.init(deviceID: pending.deviceID, bundleID: pending.bundleID, environment: pending.environment, deliveryID: pending.notification.deliveryID)
    }
}

/// Failures a store reports.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        case duplicate
        case notFound
        case corrupt
        case unavailable
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }

    public static func == (lhs: StoreError, rhs: StoreError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}
