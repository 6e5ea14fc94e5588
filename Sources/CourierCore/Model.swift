import Foundation

/// A team: owns apps and auth keys. The id is ten characters A–Z/0–9.
public struct Team: Sendable, Hashable, Codable {
    public var id: String
    public var name: String
    public var createdAt: Date

    public init(id: String, name: String, createdAt: Date) {
        self.id = id
        self.name = name
        self.createdAt = createdAt
    }
}

/// An app of a team: a bundle id and the topic kinds it may be pushed on.
public struct App: Sendable, Hashable, Codable {
    public var bundleID: String
    public var teamID: String
    public var topicKinds: Set<TopicKind>
    public var createdAt: Date

    public init(bundleID: String, teamID: String, topicKinds: Set<TopicKind> = Set(TopicKind.allCases), createdAt: Date) {
        self.bundleID = bundleID
        self.teamID = teamID
        self.topicKinds = topicKinds
        self.createdAt = createdAt
    }

    /// The app's topics, app topic first.
    public var topics: [Topic] {
        TopicKind.allCases.filter(topicKinds.contains).map { Topic(bundleID: bundleID, kind: $0) }
    }
}

/// A provider auth key (ES256). Courier keeps only the public key.
///
/// Its scope, as Apple's keys have since 2025: the environments its tokens
/// are good for (a team-scoped key is one environment's; keys made before
/// are both), and for a topic-specific key the apps it may push to
/// (docs/protocol.md, "Key scoping").
public struct AuthKeyRecord: Sendable, Hashable, Codable {
    public var keyID: String
    public var teamID: String
    /// The P-256 public key, X9.63 uncompressed (65 bytes).
    public var publicKey: [UInt8]
    public var createdAt: Date
    public var revokedAt: Date?
    public var environments: Set<Environment>
    /// A topic-specific key's bundle ids (every topic of each); nil for a
    /// team-scoped key, which pushes to all of its team's apps.
    public var bundleIDs: Set<String>?

    public init(
        keyID: String, teamID: String, publicKey: [UInt8], createdAt: Date, revokedAt: Date? = nil,
        environments: Set<Environment> = Set(Environment.allCases), bundleIDs: Set<String>? = nil
    ) {
        self.keyID = keyID
        self.teamID = teamID
        self.publicKey = publicKey
        self.createdAt = createdAt
        self.revokedAt = revokedAt
        self.environments = environments
        self.bundleIDs = bundleIDs
    }

    /// Whether its tokens may push to this topic (of one of its team's apps).
    public func covers(_ topic: Topic) -> Bool {
        bundleIDs?.contains(topic.bundleID) ?? true
    }
}

/// What a certificate issued by Courier's CA is for.
public enum CertificateKind: String, Sendable, Hashable, Codable, CaseIterable {
    case authority
    case server
    case provider
    case device
}

/// A certificate Courier issued, as the store remembers it.
public struct CertificateRecord: Sendable, Hashable, Codable {
    /// The serial number in lowercase hex.
    public var serial: String
    public var kind: CertificateKind
    public var subject: String
    public var teamID: String?
    public var bundleID: String?
    public var deviceID: UInt64?
    /// The environments the certificate is good for (provider certificates).
    public var environments: Set<Environment>
    public var notAfter: Date
    public var createdAt: Date
    public var revokedAt: Date?
    public var pem: String

    public init(
        serial: String, kind: CertificateKind, subject: String, teamID: String? = nil, bundleID: String? = nil,
        deviceID: UInt64? = nil, environments: Set<Environment> = [], notAfter: Date, createdAt: Date,
        revokedAt: Date? = nil, pem: String
    ) {
        self.serial = serial
        self.kind = kind
        self.subject = subject
        self.teamID = teamID
        self.bundleID = bundleID
        self.deviceID = deviceID
        self.environments = environments
        self.notAfter = notAfter
        self.createdAt = createdAt
        self.revokedAt = revokedAt
        self.pem = pem
    }
}

/// A device known to Courier. Its id is in its certificate; a reset or
/// restore raises the generation, which changes all of its tokens.
public struct Device: Sendable, Hashable, Codable {
    public var id: UInt64
    public var certificateSerial: String
    public var generation: UInt32
    public var createdAt: Date
    public var lastSeen: Date?

    public init(id: UInt64, certificateSerial: String, generation: UInt32 = 1, createdAt: Date, lastSeen: Date? = nil) {
        self.id = id
        self.certificateSerial = certificateSerial
        self.generation = generation
        self.createdAt = createdAt
        self.lastSeen = lastSeen
    }
}

/// An app registered for remote notifications on a device, in one
/// environment, with the token Courier issued for it.
public struct AppRegistration: Sendable, Hashable, Codable {
    public var deviceID: UInt64
    public var bundleID: String
    public var environment: Environment
    public var token: [UInt8]
    /// False once the device reported the app as removed.
    public var active: Bool
    public var registeredAt: Date
    public var unregisteredAt: Date?

    public init(
        deviceID: UInt64, bundleID: String, environment: Environment, token: [UInt8], active: Bool = true,
        registeredAt: Date, unregisteredAt: Date? = nil
    ) {
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.environment = environment
        self.token = token
        self.active = active
        self.registeredAt = registeredAt
        self.unregisteredAt = unregisteredAt
    }
}

/// A notification as the dispatcher handles it, whatever interface it came
/// through.
public struct PushNotification: Sendable, Hashable, Codable {
    /// The apns-id (a UUID); binary notifications get a new one. Chosen by
    /// the provider when it gives one, so it decides nothing about
    /// delivery: two notifications may carry the same apns-id.
    public var id: UUID
    /// The server's own id of this notification (`UUID.deliveryID()`),
    /// never chosen by a provider (and seen by one only as a sandbox
    /// notification's `apns-unique-id`, random there): devices acknowledge
    /// and drop redelivered duplicates by it (docs/device-protocol.md),
    /// and the store names a held notification by it.
    public var deliveryID: UUID
    public var token: [UInt8]
    public var topic: String
    public var payload: [UInt8]
    /// Nil: none given (binary commands 0); `Date(0)`: never store.
    public var expiration: Date?
    public var priority: Priority
    /// `apns-collapse-id` and `apns-push-type`, kept in one value: with the
    /// two optional strings stored here directly, Swift copied every new
    /// notification once more where it was made (each field retained and
    /// released again; docs/benchmarks.md, 2026-11-29).
    private var labels: Labels
    public var collapseID: String? {
        get { labels.collapseID }
        set { labels.collapseID = newValue }
    }
    public var pushType: String? {
        get { labels.pushType }
        set { labels.pushType = newValue }
    }
    /// A background push (only `content-available`), as the payload rules
    /// found it; counts against the device's silent budget.
    public var isSilent: Bool
    /// Whether `deliveryID` is also its `uniqueID` (a sandbox
    /// notification's): a flag, not a second id, so that a notification
    /// is no larger to copy.
    public var hasUniqueID = false

    /// The id of this notification alone, the HTTP/2 API's
    /// `apns-unique-id`: in the sandbox only, as Apple gives it (its
    /// delivery id, random there; `identify(in:)`); its delivery-log
    /// events are logged under it too.
    public var uniqueID: UUID? { hasUniqueID ? deliveryID : nil }

    public init(
        id: UUID, token: [UInt8], topic: String, payload: [UInt8], expiration: Date?, priority: Priority,
        collapseID: String? = nil, pushType: String? = nil, isSilent: Bool = false, deliveryID: UUID = .deliveryID()
    ) {
        self.id = id
        self.deliveryID = deliveryID
        self.token = token
        self.topic = topic
        self.payload = payload
        self.expiration = expiration
        self.priority = priority
        labels = Labels(collapseID: collapseID, pushType: pushType)
        self.isSilent = isSilent
    }

    /// A notification accepted in `environment`, with its ids there
    /// (`identify(in:)`), made at once: nothing of it is copied to set them
    /// afterwards.
    public init(
        id: UUID, token: [UInt8], topic: String, payload: [UInt8], expiration: Date?, priority: Priority,
        collapseID: String? = nil, pushType: String? = nil, isSilent: Bool = false, in environment: Environment
    ) {
        let sandbox = environment == .sandbox
        self.init(
            id: id, token: token, topic: topic, payload: payload, expiration: expiration, priority: priority, collapseID: collapseID,
            pushType: pushType, isSilent: isSilent, deliveryID: sandbox ? .notificationID() : .deliveryID())
        hasUniqueID = sandbox
    }

    /// See `labels`.
    private struct Labels: Sendable, Hashable {
        var collapseID: String?
        var pushType: String?
    }

    /// Expiration 0: deliver now or never, never store.
    public var mayBeStored: Bool { expiration.map { $0.timeIntervalSince1970 > 0 } ?? true }

    /// Gives a notification accepted in `environment` its ids there: in
    /// the sandbox a random delivery id, which is also its unique id (so a
    /// provider that sees it can tell nothing of others from it).
    public mutating func identify(in environment: Environment) {
        guard environment == .sandbox else { return }
        deliveryID = .notificationID()
        hasUniqueID = true
    }
}

extension PushNotification {
    private enum CodingKeys: String, CodingKey {
        case id, deliveryID, token, topic, payload, expiration, priority, collapseID, pushType, isSilent, hasUniqueID
    }

    /// The fields as they read: `collapseID` and `pushType` beside the others.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            id: try container.decode(UUID.self, forKey: .id), token: try container.decode([UInt8].self, forKey: .token),
            topic: try container.decode(String.self, forKey: .topic), payload: try container.decode([UInt8].self, forKey: .payload),
            expiration: try container.decodeIfPresent(Date.self, forKey: .expiration), priority: try container.decode(Priority.self, forKey: .priority),
            collapseID: try container.decodeIfPresent(String.self, forKey: .collapseID), pushType: try container.decodeIfPresent(String.self, forKey: .pushType),
            isSilent: try container.decode(Bool.self, forKey: .isSilent), deliveryID: try container.decode(UUID.self, forKey: .deliveryID))
        hasUniqueID = try container.decode(Bool.self, forKey: .hasUniqueID)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(deliveryID, forKey: .deliveryID)
        try container.encode(token, forKey: .token)
        try container.encode(topic, forKey: .topic)
        try container.encode(payload, forKey: .payload)
        try container.encodeIfPresent(expiration, forKey: .expiration)
        try container.encode(priority, forKey: .priority)
        try container.encodeIfPresent(collapseID, forKey: .collapseID)
        try container.encodeIfPresent(pushType, forKey: .pushType)
        try container.encode(isSilent, forKey: .isSilent)
        try container.encode(hasUniqueID, forKey: .hasUniqueID)
    }
}

/// A notification held for an offline device: at most one per
/// (device, app, environment).
public struct PendingNotification: Sendable, Hashable, Codable {
    public var deviceID: UInt64
    public var bundleID: String
    public var environment: Environment
    public var notification: PushNotification
    public var acceptedAt: Date

    public init(deviceID: UInt64, bundleID: String, environment: Environment, notification: PushNotification, acceptedAt: Date) {
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.environment = environment
        self.notification = notification
        // What the store does not keep: a sandbox notification's unique id is its delivery id.
        self.notification.hasUniqueID = environment == .sandbox
        self.acceptedAt = acceptedAt
    }
}

/// A feedback-service entry: a push hit an app that was removed.
public struct FeedbackEntry: Sendable, Hashable, Codable {
    public var environment: Environment
    public var topic: String
    public var token: [UInt8]
    public var timestamp: Date

    public init(environment: Environment, topic: String, token: [UInt8], timestamp: Date) {
        self.environment = environment
        self.topic = topic
        self.token = token
        self.timestamp = timestamp
    }

    /// One entry for each (environment, topic, token) of `entries`, with
    /// the newest timestamp among them, in the order they first appear.
    public static func newest(of entries: [FeedbackEntry]) -> [FeedbackEntry] {
        struct Key: Hashable {
            var environment: Environment
            var topic: String
            var token: [UInt8]
        }
        var index: [Key: Int] = [:]
        var newest: [FeedbackEntry] = []
        for entry in entries {
            let key = Key(environment: entry.environment, topic: entry.topic, token: entry.token)
            if let at = index[key] {
                if entry.timestamp > newest[at].timestamp { newest[at].timestamp = entry.timestamp }
            } else {
                index[key] = newest.count
                newest.append(entry)
            }
        }
        return newest
    }
}

/// One step in a notification's life, kept in the delivery log.
public struct DeliveryEvent: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        case accepted, stored, replaced, coalesced, delivered, acknowledged, expired, throttled, rejected
        /// Its device was reset before it was delivered: it was addressed
        /// to a token that ended with the reset.
        case discarded
        /// A fault rule of the admin API acted on it (the detail says which and how).
        case faultInjected
        /// Taken by a virtual device (docs/virtual-devices.md): its final
        /// state, as `acknowledged` is a real device's.
        case deliveredToVirtualDevice

        /// The kind's number: 0, 1, 2 ... with no gap, so also an index
        /// into a table of kinds. The SQLite store writes it, so it never
        /// changes; a new kind takes the next number.
        @inlinable public var code: UInt8 {
            switch self {
            case .accepted: 0
            case .stored: 1
            case .replaced: 2
            case .coalesced: 3
            case .delivered: 4
            case .acknowledged: 5
            case .expired: 6
            case .throttled: 7
            case .rejected: 8
            case .discarded: 9
            case .faultInjected: 10
            case .deliveredToVirtualDevice: 11
            }
        }
    }

    // In this order (Swift keeps it), the kind and the app take the bytes
    // between the alias and the time: an event is 64 bytes.
    public var notificationID: UUID
    /// The notification's unique id, under which the event is logged as
    /// well (`PushNotification.uniqueID`, sandbox notifications only).
    public var alias: UUID?
    public var kind: Kind
    /// `app`, `AppNumber.none` for none (no optional's extra byte).
    var appNumber: AppNumber
    public var at: Date
    /// `detail`, in a value of its own: an optional string stored here
    /// directly made Swift copy every new event once more as it was added
    /// to a list (as `PushNotification.labels` explains).
    private var note: Note

    /// A reason or note, e.g. the rejection reason.
    public var detail: String? {
        get { note.text }
        set { note.text = newValue }
    }

    /// See `note`.
    private struct Note: Sendable, Hashable {
        var text: String?
    }

    /// Whose notification it is: the app it was accepted (or refused) for,
    /// once the request was found to be that app's provider's. An apns-id
    /// is the provider's choice, so the log is keyed by the two
    /// (`NotificationKey`): another team reusing this apns-id writes under
    /// its own app. Nil only in events written before the log kept the
    /// app (`DeliveryLogBatch` version 2).
    public var app: AppNumber? {
        get { appNumber == .none ? nil : appNumber }
        set { appNumber = newValue ?? .none }
    }

    public init(notificationID: UUID, app: AppNumber?, kind: Kind, at: Date, detail: String? = nil, alias: UUID? = nil) {
        self.notificationID = notificationID
        self.appNumber = app ?? .none
        self.kind = kind
        self.at = at
        note = Note(text: detail)
        self.alias = alias
    }

    public init(notificationID: UUID, bundleID: String?, kind: Kind, at: Date, detail: String? = nil, alias: UUID? = nil) {
        self.init(notificationID: notificationID, app: bundleID.map(AppNumber.init), kind: kind, at: at, detail: detail, alias: alias)
    }

    /// An event of `notification`, an app's: logged under its apns-id, and
    /// under its unique id when it has one.
    public init(_ notification: PushNotification, of app: AppNumber, _ kind: Kind, at: Date, detail: String? = nil) {
        self.init(notificationID: notification.id, app: app, kind: kind, at: at, detail: detail, alias: notification.uniqueID)
    }

    /// The app's bundle id.
    public var bundleID: String? { app?.bundleID }

    /// Whether the event is of the notification `key` names: its id, and
    /// its app (or an app not kept, in an event written before apps were).
    public func isOf(_ key: NotificationKey) -> Bool {
        notificationID == key.id && (app == nil || app?.bundleID == key.bundleID)
    }

    /// The same event under its alias (none when it has none).
    public var underAlias: DeliveryEvent? {
        alias.map { DeliveryEvent(notificationID: $0, app: app, kind: kind, at: at, detail: detail) }
    }
}

/// A notification in the delivery log: its app and its apns-id (or
/// apns-unique-id). The apns-id alone names nothing: providers choose it,
/// and two teams may choose the same.
public struct NotificationKey: Sendable, Hashable {
    public var bundleID: String
    public var id: UUID

    public init(bundleID: String, id: UUID) {
        self.bundleID = bundleID
        self.id = id
    }
}

/// A device token Courier did not issue — one of Apple's, from a provider
/// team's fixtures — registered to one app in one environment: a virtual
/// device (docs/virtual-devices.md). Pushes to it pass every check a real
/// token's do and are taken at once ("delivered to a virtual device"),
/// held while it is `offline`, or refused `Unregistered` once it is
/// uninstalled.
public struct VirtualToken: Sendable, Hashable, Codable {
    public var environment: Environment
    public var bundleID: String
    public var token: [UInt8]
    /// Held (as for a device that is offline) rather than taken at once.
    public var offline: Bool
    public var registeredAt: Date
    /// When the app was uninstalled from the virtual device: pushes are
    /// refused `Unregistered` with this time.
    public var uninstalledAt: Date?

    public init(environment: Environment, bundleID: String, token: [UInt8], offline: Bool = false, registeredAt: Date, uninstalledAt: Date? = nil) {
        self.environment = environment
        self.bundleID = bundleID
        self.token = token
        self.offline = offline
        self.registeredAt = registeredAt
        self.uninstalledAt = uninstalledAt
    }

    /// Apple's device tokens are 32 bytes (64 hex digits).
    public static let length = 32
}
