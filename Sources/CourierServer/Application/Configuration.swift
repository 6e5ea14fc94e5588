import CourierCore
import Foundation

/// Everything `courier serve` can be told, with the defaults a newcomer
/// needs. Read from a JSON file (docs/configuration.md lists every key);
/// a key the file has and this struct does not is an error, so a typo
/// never passes silently.
public struct CourierConfiguration: Sendable, Hashable, Codable {
    /// Listeners of one environment. Port 0 picks a free port.
    public struct EnvironmentPorts: Sendable, Hashable, Codable {
        public var binary: Int
        public var feedback: Int
        public var http2: Int
        public var device: Int
        /// Broadcast channel management (Apple serves it on 2195 and 2196
        /// of other hosts; those numbers are the binary API's here).
        public var channels: Int

        public init(binary: Int, feedback: Int, http2: Int, device: Int, channels: Int) {
            self.binary = binary
            self.feedback = feedback
            self.http2 = http2
            self.device = device
            self.channels = channels
        }

        public static let production = EnvironmentPorts(binary: 2195, feedback: 2196, http2: 2197, device: 5223, channels: 2198)
        public static let sandbox = EnvironmentPorts(binary: 12195, feedback: 12196, http2: 12197, device: 15223, channels: 12198)
        /// Every port 0, for tests.
        public static let ephemeral = EnvironmentPorts(binary: 0, feedback: 0, http2: 0, device: 0, channels: 0)
    }

    /// Where the listeners bind and what the server certificate names.
    public struct Network: Sendable, Hashable, Codable {
        /// The address every listener binds to.
        public var host: String
        public var production: EnvironmentPorts
        public var sandbox: EnvironmentPorts
        /// Admin API and console: the port, and the address it binds to.
        public var adminPort: Int
        public var adminHost: String
        /// The admin API speaks HTTPS (the server certificate, from
        /// Courier's CA) even on a loopback address; on any other it always does.
        public var adminTLS: Bool
        /// DNS names of the server certificate made on first start.
        public var serverDNSNames: [String]
        /// IP addresses of the server certificate made on first start.
        public var serverIPAddresses: [String]
        /// A connection whose TLS handshake has not finished after this
        /// many seconds is closed.
        public var handshakeTimeout: Double

        public init(
            host: String = "127.0.0.1", production: EnvironmentPorts = .production, sandbox: EnvironmentPorts = .sandbox,
            adminPort: Int = 8080, serverDNSNames: [String] = ["localhost"], serverIPAddresses: [String] = ["127.0.0.1", "::1"],
            handshakeTimeout: Double = 10, adminHost: String = "127.0.0.1", adminTLS: Bool = false
        ) {
            self.adminTLS = adminTLS
            self.handshakeTimeout = handshakeTimeout
            self.adminHost = adminHost
            self.host = host
            self.production = production
            self.sandbox = sandbox
            self.adminPort = adminPort
            self.serverDNSNames = serverDNSNames
            self.serverIPAddresses = serverIPAddresses
        }

        public func ports(_ environment: Environment) -> EnvironmentPorts {
            environment == .production ? production : sandbox
        }

        /// HTTPS on the admin port: asked for, or needed (an address other
        /// machines can reach).
        public var adminUsesTLS: Bool { adminTLS || !Self.loopbackHosts.contains(adminHost) }

        static let loopbackHosts: Set<String> = ["127.0.0.1", "::1", "localhost"]

        /// The admin API's URL as a client on this machine reaches it (a
        /// wildcard address through the loopback).
        public func adminURL(port: Int) -> String {
            let host = Self.reachable(adminHost)
            return "\(adminUsesTLS ? "https" : "http")://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        }

        /// The address a client on this machine uses for a listener bound to
        /// `host`: a wildcard address is reached through the loopback.
        public static func reachable(_ host: String) -> String {
            switch host {
            case "0.0.0.0": "127.0.0.1"
            case "::": "::1"
            default: host
            }
        }
    }

    /// Sizes the protocols enforce.
    public struct Limits: Sendable, Hashable, Codable {
        public var payload: PayloadLimits
        /// Device-token length in bytes (even, 32 to 254).
        public var tokenLength: Int
        /// Largest courier device frame accepted.
        public var deviceMaxFrameLength: Int
        /// Broadcast channels an app may have in one environment.
        public var channelsPerApp: Int

        public init(
            payload: PayloadLimits = PayloadLimits(), tokenLength: Int = 32, deviceMaxFrameLength: Int = 16_384,
            channelsPerApp: Int = BroadcastChannel.defaultLimit
        ) {
            self.channelsPerApp = channelsPerApp
            self.payload = payload
            self.tokenLength = tokenLength
            self.deviceMaxFrameLength = deviceMaxFrameLength
        }
    }

    /// Files, relative to the data directory unless absolute.
    public struct Paths: Sendable, Hashable, Codable {
        public var database: String
        public var pki: String
        public var demo: String

        public init(database: String = "courier.sqlite", pki: String = "pki", demo: String = "demo") {
            self.database = database
            self.pki = pki
            self.demo = demo
        }
    }

    /// What the first start creates for a newcomer.
    public struct Demo: Sendable, Hashable, Codable {
        /// False: create only the CA, server certificate and token keys.
        public var enabled: Bool
        public var teamID: String
        public var teamName: String
        public var bundleID: String

        public init(enabled: Bool = true, teamID: String = "DEMOTEAM01", teamName: String = "Courier Demo", bundleID: String = "com.example.demo") {
            self.enabled = enabled
            self.teamID = teamID
            self.teamName = teamName
            self.bundleID = bundleID
        }
    }

    /// The HTTP/2 provider API's connection settings.
    public struct HTTP2: Sendable, Hashable, Codable {
        /// SETTINGS_MAX_CONCURRENT_STREAMS once a connection is
        /// authenticated (a token connection starts with 1).
        public var maxConcurrentStreams: Int
        /// A connection without a request for this long is closed with
        /// GOAWAY `IdleTimeout` (seconds).
        public var idleTimeout: Double

        public init(maxConcurrentStreams: Int = 1000, idleTimeout: Double = 3600) {
            self.maxConcurrentStreams = maxConcurrentStreams
            self.idleTimeout = idleTimeout
        }
    }

    /// What one peer may hold: connections, and time before it
    /// authenticates, finishes a frame or says anything. Beyond a limit a
    /// connection is closed, counted and logged (docs/security.md).
    public struct Connections: Sendable, Hashable, Codable {
        /// Open connections on one provider listener (binary, feedback,
        /// HTTP/2, each environment); a new one beyond it is closed at accept.
        public var maxPerListener: Int
        /// Open connections on one device listener.
        public var maxPerDeviceListener: Int
        /// Open connections on the sandbox's device listener when it should
        /// differ (a server whose devices are nearly all production's);
        /// 0: `maxPerDeviceListener`.
        public var maxPerSandboxDeviceListener: Int
        /// Open connections from one source address on one listener.
        public var maxPerAddress: Int
        /// Seconds after its TLS handshake within which an HTTP/2
        /// connection without a client certificate must send a valid
        /// provider token; otherwise GOAWAY `MissingProviderToken`.
        public var authenticationTimeout: Double
        /// Seconds a binary provider connection may stay silent.
        public var binaryIdleTimeout: Double
        /// Seconds a binary or device frame, or an admin request (its
        /// headers and body), may take from its first byte to its last.
        public var unfinishedFrameTimeout: Double
        /// Seconds a feedback connection may last, whatever is still to write.
        public var feedbackTimeout: Double
        /// Connections one provider identity (a certificate, an auth key)
        /// may open per `reconnectWindow` seconds; beyond it its handshakes
        /// (or, with a token, its first request) are refused until the
        /// window has passed.
        public var reconnectLimit: Int
        public var reconnectWindow: Double
        /// Connections one provider identity may hold open at once, on all
        /// listeners together; beyond it a new one is refused like one
        /// over `reconnectLimit`.
        public var maxPerIdentity: Int
        /// Refusals are logged at most once per this many seconds per
        /// listener (with their count), so a flood cannot flood the log.
        public var refusalLogInterval: Double
        /// Bytes (headers and body) one HTTP/2 connection may hold in
        /// requests it has not received whole; the stream that would go
        /// over is reset with ENHANCE_YOUR_CALM.
        public var maxUnfinishedRequestBytes: Int
        /// Bytes that may wait, unsent, for a peer that does not read what
        /// Courier writes to it (a device, or a provider not reading its
        /// answers); beyond it the connection is closed. A device's held
        /// notifications stay held; the kernel's socket buffers come on top.
        public var maxUnreadBytes: Int
        /// Of each listener's connections, the share (0 to 1) that may be
        /// open without having authenticated yet (no client certificate
        /// checked, no valid provider token): the rest is kept for peers
        /// that showed their credentials.
        public var unauthenticatedShare: Double
        /// Connections from one source address that may be open on one
        /// listener without having authenticated yet (a TLS handshake under
        /// way, an HTTP/2 connection before its first valid token); 0: a
        /// fifth of `maxPerAddress`, at least 100 (`unauthenticatedPerAddress`).
        public var maxUnauthenticatedPerAddress: Int
        /// Connections from one source address that may end without having
        /// authenticated (a failed or stalled handshake, no valid token in
        /// time) per second on one listener; beyond it the address's new
        /// connections are refused at accept until that second has passed.
        public var maxFailedAuthenticationsPerAddress: Int

        public init(
            maxPerListener: Int = 1000, maxPerDeviceListener: Int = 6000, maxPerAddress: Int = 500, authenticationTimeout: Double = 10,
            binaryIdleTimeout: Double = 3600, unfinishedFrameTimeout: Double = 10, feedbackTimeout: Double = 30, reconnectLimit: Int = 100,
            reconnectWindow: Double = 60, refusalLogInterval: Double = 10, maxUnfinishedRequestBytes: Int = 262_144,
            maxUnreadBytes: Int = 1_048_576, maxPerIdentity: Int = 100, maxPerSandboxDeviceListener: Int = 0, unauthenticatedShare: Double = 0.5,
            maxUnauthenticatedPerAddress: Int = 0, maxFailedAuthenticationsPerAddress: Int = 50
        ) {
            self.unauthenticatedShare = unauthenticatedShare
            self.maxUnauthenticatedPerAddress = maxUnauthenticatedPerAddress
            self.maxFailedAuthenticationsPerAddress = maxFailedAuthenticationsPerAddress
            self.maxPerSandboxDeviceListener = maxPerSandboxDeviceListener
            self.maxPerIdentity = maxPerIdentity
            self.maxUnfinishedRequestBytes = maxUnfinishedRequestBytes
            self.maxUnreadBytes = maxUnreadBytes
            self.maxPerListener = maxPerListener
            self.maxPerDeviceListener = maxPerDeviceListener
            self.maxPerAddress = maxPerAddress
            self.authenticationTimeout = authenticationTimeout
            self.binaryIdleTimeout = binaryIdleTimeout
            self.unfinishedFrameTimeout = unfinishedFrameTimeout
            self.feedbackTimeout = feedbackTimeout
            self.reconnectLimit = reconnectLimit
            self.reconnectWindow = reconnectWindow
            self.refusalLogInterval = refusalLogInterval
        }

        /// `maxUnauthenticatedPerAddress` in force: as configured, or a
        /// fifth of `maxPerAddress` but at least 100; never more than `maxPerAddress`.
        public var unauthenticatedPerAddress: Int {
            min(maxPerAddress, maxUnauthenticatedPerAddress > 0 ? maxUnauthenticatedPerAddress : max(100, maxPerAddress / 5))
        }

        /// The device listener's limit in `environment`.
        public func maxPerDeviceListener(_ environment: Environment) -> Int {
            environment == .sandbox && maxPerSandboxDeviceListener > 0 ? maxPerSandboxDeviceListener : maxPerDeviceListener
        }

        /// Every connection the listeners may hold at once (two device
        /// listeners, eight provider listeners, and the admin port with
        /// `maxPerListener` of its own): what the process's descriptor
        /// limit must leave room for.
        public var capacity: Int { maxPerDeviceListener(.production) + maxPerDeviceListener(.sandbox) + 9 * maxPerListener }
    }

    /// How the server's threads are scheduled.
    public struct Threads: Sendable, Hashable, Codable {
        /// 0: the event loops are ordinary threads. 1 to 99: they run under
        /// Linux's real-time round-robin policy at this priority, ahead of
        /// every ordinary thread (`RealtimeScheduling`).
        public var realtimePriority: Int

        public init(realtimePriority: Int = 0) {
            self.realtimePriority = realtimePriority
        }
    }

    /// What the admin API's inbox keeps of the notifications received.
    public struct InboxSettings: Sendable, Hashable, Codable {
        /// Entries kept at most (the oldest go first); 0 records nothing.
        public var capacity: Int
        /// Seconds an entry is kept.
        public var maxAge: Double

        public init(capacity: Int = 10_000, maxAge: Double = 3600) {
            self.capacity = capacity
            self.maxAge = maxAge
        }
    }

    /// Which store keeps what must survive a restart: the SQLite file
    /// (`paths.database`), or a PostgreSQL database shared by several nodes.
    public struct StoreSettings: Sendable, Hashable, Codable {
        public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
            case sqlite
            case postgresql
        }

        public var kind: Kind
        /// PostgreSQL's address, database and user.
        public var host: String
        public var port: Int
        public var database: String
        public var user: String
        /// A file whose first line is the user's password (relative to the
        /// data directory unless absolute); "" when it is not in a file.
        public var passwordFile: String
        /// An environment variable holding the password; "" when it is not in
        /// one. When it is set it is taken over `passwordFile`.
        public var passwordEnvironment: String
        /// Connections the node keeps open to PostgreSQL at most.
        public var connections: Int
        /// "disable", or "require": TLS to PostgreSQL, its certificate checked
        /// against `caFile` (or the system's CAs) and `host`.
        public var tls: String
        /// The CA certificates (PEM) PostgreSQL's certificate is checked
        /// against, relative to the data directory unless absolute; "": the system's.
        public var caFile: String

        public init(
            kind: Kind = .sqlite, host: String = "127.0.0.1", port: Int = 5432, database: String = "courier", user: String = "courier",
            passwordFile: String = "", passwordEnvironment: String = "", connections: Int = 8, tls: String = "disable", caFile: String = ""
        ) {
            self.tls = tls
            self.caFile = caFile
            self.kind = kind
            self.host = host
            self.port = port
            self.database = database
            self.user = user
            self.passwordFile = passwordFile
            self.passwordEnvironment = passwordEnvironment
            self.connections = connections
        }
    }

    /// Several nodes on one PostgreSQL store (`store.kind` postgresql).
    public struct ClusterSettings: Sendable, Hashable, Codable {
        /// This node's id among them (a-z, 0-9 and '-', 1 to 40); "" makes
        /// one at each start.
        public var node: String
        /// Seconds between the node's heartbeats.
        public var heartbeatInterval: Double
        /// Seconds without a heartbeat after which a node is taken for dead
        /// and its devices' presence removed.
        public var nodeTimeout: Double
        /// Whether a push for a device on another node is handed to that
        /// node directly (on its `peerPort`); false: through the database's
        /// queue only, as before direct hand-overs.
        public var directHandOver: Bool
        /// The port this node takes direct hand-overs on (mutual TLS with
        /// the cluster's certificates, docs/operations.md); 0: any free one.
        public var peerPort: Int
        /// The address the other nodes reach that port at; "" is
        /// `network.host`, unless that is a wildcard (0.0.0.0, ::): then
        /// this node takes no direct hand-overs until it is given one.
        public var peerHost: String

        public init(
            node: String = "", heartbeatInterval: Double = 1, nodeTimeout: Double = 10, directHandOver: Bool = true, peerPort: Int = 2199,
            peerHost: String = ""
        ) {
            self.node = node
            self.heartbeatInterval = heartbeatInterval
            self.nodeTimeout = nodeTimeout
            self.directHandOver = directHandOver
            self.peerPort = peerPort
            self.peerHost = peerHost
        }

        /// The address other nodes are told for `port` (the one bound),
        /// given the host it is bound on; nil when none can be said.
        func peerAddress(boundOn host: String, port: Int) -> String? {
            let named = peerHost.isEmpty ? host : peerHost
            guard !["0.0.0.0", "::", ""].contains(named) else { return nil }
            return named.contains(":") ? "[\(named)]:\(port)" : "\(named):\(port)"
        }

        static func isNodeID(_ id: String) -> Bool {
            (1...40).contains(id.utf8.count) && id.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
        }
    }

    /// Virtual devices (docs/virtual-devices.md): the apps that take any
    /// token of Apple's format on first use, by environment (off for every
    /// app unless listed). Every node of several must list the same.
    public struct VirtualDevicesSettings: Sendable, Hashable, Codable {
        /// Bundle ids, per environment.
        public var acceptAnyToken: [String: [String]]

        public init(acceptAnyToken: [String: [String]] = ["production": [], "sandbox": []]) {
            self.acceptAnyToken = acceptAnyToken
        }

        /// The apps listed, by environment.
        var apps: Set<VirtualDevices.AppKey> {
            Set(
                acceptAnyToken.flatMap { name, bundleIDs in
                    Environment(rawValue: name).map { environment in bundleIDs.map { VirtualDevices.AppKey(environment: environment, bundleID: $0) } } ?? []
                })
        }
    }

    public var dataDirectory: String
    public var network: Network
    public var connections: Connections
    public var http2: HTTP2
    public var limits: Limits
    public var paths: Paths
    public var store: StoreSettings
    public var cluster: ClusterSettings
    public var demo: Demo
    /// Quality of service: bursts, budgets, retention, rates, keepalive.
    public var qos: QoSConfiguration
    public var threads: Threads
    public var inbox: InboxSettings
    public var virtualDevices: VirtualDevicesSettings
    /// swift-log level: trace, debug, info, notice, warning, error, critical.
    public var logLevel: String

    public init(
        dataDirectory: String = "./courier-data", network: Network = Network(), connections: Connections = Connections(), http2: HTTP2 = HTTP2(),
        limits: Limits = Limits(), paths: Paths = Paths(), store: StoreSettings = StoreSettings(),
        cluster: ClusterSettings = ClusterSettings(), demo: Demo = Demo(), qos: QoSConfiguration = QoSConfiguration(), threads: Threads = Threads(),
        inbox: InboxSettings = InboxSettings(), virtualDevices: VirtualDevicesSettings = VirtualDevicesSettings(), logLevel: String = "info"
    ) {
        self.inbox = inbox
        self.virtualDevices = virtualDevices
        self.connections = connections
        self.qos = qos
        self.threads = threads
        self.dataDirectory = dataDirectory
        self.network = network
        self.http2 = http2
        self.limits = limits
        self.paths = paths
        self.store = store
        self.cluster = cluster
        self.demo = demo
        self.logLevel = logLevel
    }

    /// A path from `paths`, resolved against the data directory.
    public func resolve(_ path: String) -> String {
        path.hasPrefix("/") ? path : (dataDirectory as NSString).appendingPathComponent(path)
    }
}
