import Foundation

/// Who sent a notification, as the provider interface authenticated it.
public struct ProviderIdentity: Sendable, Hashable, CustomStringConvertible {
    /// For logs: "certificate 0a1b…" or "key ABCDE12345".
    public var name: String
    public var teamID: String?
    /// The topics this provider may push to.
    public var topics: Set<String> {
        didSet { apps = Self.apps(of: topics) }
    }
    /// Each of `topics` with its app's number, given here, where the
    /// provider's topics become known (once per certificate or token, not
    /// per push): a push finds its topic's app in one lookup.
    public private(set) var apps: [String: AppNumber]

    public init(name: String, teamID: String?, topics: Set<String>) {
        self.name = name
        self.teamID = teamID
        self.topics = topics
        apps = Self.apps(of: topics)
    }

    private static func apps(of topics: Set<String>) -> [String: AppNumber] {
        Dictionary(uniqueKeysWithValues: topics.map { ($0, AppNumber(Topic($0).bundleID)) })
    }

    public var description: String { name }
}

/// The dispatcher's answer to a provider.
public enum AcceptResult: Sendable, Hashable {
    /// Taken: delivered, queued, stored, or dropped as the quality-of-service
    /// rules say (expired and throttled notifications are not failures).
    case accepted
    /// Refused; `timestamp` is the unregistration time for `Unregistered`.
    case rejected(Reason, timestamp: Date?)

    public static func rejected(_ reason: Reason) -> AcceptResult { .rejected(reason, timestamp: nil) }
}

/// Quality-of-service settings of the dispatcher (docs/delivery.md).
public struct QoSConfiguration: Sendable, Hashable, Codable {
    /// Priority-5 notifications to an online device wait this long and go
    /// out together (seconds).
    public var burstWindow: Double
    /// Silent pushes a device takes per hour; more are dropped (throttled).
    public var silentBudgetPerHour: Int
    /// A device offline longer than this loses what was held for it (seconds).
    public var retention: Double
    /// Pushes one token takes per `tokenRateWindow` before 429 TooManyRequests.
    public var tokenRateLimit: Int
    /// The window of `tokenRateLimit` (seconds).
    public var tokenRateWindow: Double
    /// How often the dispatcher's timers (bursts, expiry, retention) run (seconds).
    public var tickInterval: Double
    /// The device keepalive interval (seconds); a device silent for two
    /// intervals is taken as dead and its connection closed.
    public var keepAlive: Int

    public init(
        burstWindow: Double = 10, silentBudgetPerHour: Int = 12, retention: Double = 30 * 86_400, tokenRateLimit: Int = 600,
        tokenRateWindow: Double = 60, tickInterval: Double = 1, keepAlive: Int = 60
    ) {
        self.keepAlive = keepAlive
        self.burstWindow = burstWindow
        self.silentBudgetPerHour = silentBudgetPerHour
        self.retention = retention
        self.tokenRateLimit = tokenRateLimit
        self.tokenRateWindow = tokenRateWindow
        self.tickInterval = tickInterval
    }
}

/// `identity.json` of a device identity directory (made by
/// `courier pki device-cert`, used by the device library).
public struct DeviceIdentityFile: Sendable, Hashable, Codable {
    /// The device id, hex.
    public var deviceID: String
    public var generation: UInt32
    /// The device gateway to connect to.
    public var host: String
    public var productionPort: Int
    public var sandboxPort: Int
    /// Tokens the device holds: environment, then bundle id, to hex token.
    public var tokens: [String: [String: String]]

    public init(deviceID: String, generation: UInt32, host: String, productionPort: Int, sandboxPort: Int, tokens: [String: [String: String]]) {
        self.deviceID = deviceID
        self.generation = generation
        self.host = host
        self.productionPort = productionPort
        self.sandboxPort = sandboxPort
        self.tokens = tokens
    }

    /// The file's text: pretty-printed JSON with sorted keys and a final newline.
    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(self) + Data("\n".utf8)
    }
}
