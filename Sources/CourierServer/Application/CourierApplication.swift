import CourierCore
import CourierPKI
import Foundation
import Logging
import ServiceLifecycle

/// What the first start created (or found) in the data directory.
public struct BootstrapReport: Sendable {
    public var files: [ProvisionedFile]
    public var demoTeamID: String?
    public var demoBundleID: String?
    public var demoKeyID: String?
    public var demoCertificatePath: String?
    public var demoCertificateKeyPath: String?
    public var demoAuthKeyPath: String?
    public var demoDeviceDirectory: String?
    /// The demo device's token for the demo app (production), hex.
    public var demoDeviceToken: String?
    /// The admin API's bearer token, and the file that keeps it.
    public var adminToken = ""
    public var adminTokenPath = ""

    /// True when this start created the data directory's CA.
    public var isFirstStart: Bool { files.contains { $0.what == "CA certificate" && $0.created } }
    /// True when an earlier first start created the data directory and
    /// stopped before it was ready (a port in use, say): its banner, with
    /// what it made and the admin token, was never printed, so this start
    /// is still the newcomer's first (`firstStartMarker`).
    public var finishesAnEarlierFirstStart = false

    /// Written when a start creates the data directory's CA, removed once a
    /// start is ready (`firstStartFinished`): while it is there, starts
    /// count as the first.
    public static func firstStartMarker(dataDirectory: String) -> String { dataDirectory + "/first-start-unfinished" }

    /// A start is ready: later ones reuse the data directory.
    public static func firstStartFinished(dataDirectory: String) {
        try? FileManager.default.removeItem(atPath: firstStartMarker(dataDirectory: dataDirectory))
    }
}

/// The running service: every long-running part, built from one
/// configuration. `courier serve` and the tests both use `build`.
public struct CourierApplication: Sendable {
    public let configuration: CourierConfiguration
    public let provisioner: Provisioner
    public let report: BootstrapReport
    public let services: [any Service]
    /// The one entry point of the provider interfaces.
    public let dispatcher: Dispatcher
    /// The ports the listeners bound.
    public let ports: BoundPorts
    /// The listeners the services open.
    public let listeners: [(BoundPorts.Listener, Environment)]
    /// The HTTP/2 provider API of each environment.
    public let http2Gateways: [Environment: HTTP2Gateway]
    /// The channel management port of each environment.
    public let channelGateways: [Environment: HTTP2Gateway]
    /// What the provider interfaces received (the admin API reads it).
    public let inbox: NotificationInbox
    /// The admin API's fault rules.
    public let faults: FaultInjector
    /// What peers may hold, and the connections each certificate authenticated.
    let policy: ConnectionPolicy

    /// This node's id among several sharing a PostgreSQL store; nil with SQLite.
    public var node: String? { dispatcher.node }

    /// The connection sweep (the timer, every `qos.tickInterval`; tests
    /// call it after moving the clock): idle HTTP/2 connections, and the
    /// connections of revoked auth keys and certificates on every
    /// interface, are closed.
    public func sweep() async {
        await Self.sweep(Array(http2Gateways.values) + Array(channelGateways.values), policy)
    }

    private static func sweep(_ gateways: [HTTP2Gateway], _ policy: ConnectionPolicy) async {
        await HTTP2Gateway.sweep(gateways)
        await policy.certificates.sweep()
        policy.memory.afterFlood()
    }

    /// Prepares the data directory (creating on first start what a
    /// newcomer needs) and builds the services.
    /// With `timers` false the dispatcher's timers run only when a test
    /// calls `dispatcher.tick()` (after moving its clock).
    public static func build(
        configuration: CourierConfiguration, clock: any WallClock = SystemWallClock(), timers: Bool = true,
        wrapStore: (@Sendable (any Store) -> any Store)? = nil, logger: Logger
    ) async throws -> CourierApplication {
        try configuration.validate()
        var configuration = configuration
        if let descriptors = DescriptorLimit.current {
            configuration.connections = configuration.connections.fitted(toDescriptorLimit: descriptors)
        }
        let provisioner = try await Provisioner.open(configuration: configuration, clock: clock, wrapStore: wrapStore, logger: logger)
        do {
            var report = try await bootstrap(provisioner)
            let admin = try AdminToken.loadOrCreate(inDataDirectory: configuration.dataDirectory)
            report.adminToken = admin.token
            report.adminTokenPath = admin.path
            report.files.append(ProvisionedFile(what: "admin token", path: admin.path, created: admin.created))
            // Several nodes: a store that coordinates them (PostgreSQL's).
            let node = provisioner.coordination == nil ? nil : configuration.cluster.node.isEmpty ? Cluster.makeNodeID() : configuration.cluster.node
            let inbox = NotificationInbox(capacity: configuration.inbox.capacity, maxAge: configuration.inbox.maxAge, clock: clock, node: node)
            let faults = FaultInjector()
            let metrics = ServerMetrics()
            let log = DeliveryLogWriter(store: provisioner.store, logger: logger, metrics: metrics)
            var codecs: [Environment: DeviceTokenCodec] = [:]
            for environment in Environment.allCases { codecs[environment] = try provisioner.tokenCodec(environment) }
            let feedback = FeedbackList(store: provisioner.store, metrics: metrics, logger: logger)
            // Direct hand-overs between nodes: mutual TLS with the cluster authority's certificates.
            let nodeTLS = try node.flatMap { node in
                configuration.cluster.directHandOver ? try NodeTLS(authority: try provisioner.authority(), node: node, now: clock.now()) : nil
            }
            let cluster = (provisioner.coordination).map {
                Cluster(
                    node: node!, coordination: $0, faults: faults, inbox: inbox,
                    heartbeatInterval: configuration.cluster.heartbeatInterval, nodeTimeout: configuration.cluster.nodeTimeout, clock: clock,
                    linkTLS: nodeTLS?.client, metrics: metrics, logger: logger)
            }
            let dispatcher = Dispatcher(
                store: provisioner.store, codecs: codecs, clock: clock, qos: configuration.qos, log: log, feedback: feedback, metrics: metrics,
                channelLimit: configuration.limits.channelsPerApp, cluster: cluster, acceptAnyToken: configuration.virtualDevices.apps, logger: logger)
            try await dispatcher.loadVirtualDevices()
            if let directory = report.demoDeviceDirectory, let bundleID = report.demoBundleID {
                report.demoDeviceToken = try await registerDemoApp(bundleID, deviceDirectory: directory, dispatcher: dispatcher, store: provisioner.store)
            }
            let tls = try ServerTLS(provisioner: provisioner)
            let ports = BoundPorts()
            // Shutdown runs in reverse: listeners first, the store last.
            var services: [any Service] = [StoreService(provisioner: provisioner, logger: logger), log] + dispatcher.writers
            if let cluster {
                services.append(ClusterService(cluster: cluster, dispatcher: dispatcher, logger: logger))
                services.append(cluster.handOvers)
                // Stops before the store's queue it falls back to.
                if let links = cluster.links { services.append(links) }
                faults.shareHits { [cluster] in cluster.counted($0) }
                if let nodeTLS {
                    let host = configuration.network.host
                    let settings = configuration.cluster
                    services.append(
                        NodeListener(
                            host: host, port: settings.peerPort, tls: nodeTLS.server, connections: configuration.connections,
                            handshakeTimeout: .milliseconds(Int64(configuration.network.handshakeTimeout * 1000)), dispatcher: dispatcher,
                            listening: { [cluster, logger] port in
                                guard let address = settings.peerAddress(boundOn: host, port: port) else {
                                    logger.warning("'network.host' is a wildcard and 'cluster.peerHost' is empty: the other nodes hand pushes over through the store only")
                                    return
                                }
                                cluster.listening(at: address)
                            }, logger: logger))
                }
            }
            let keys = ProviderKeys(store: provisioner.store)
            let certificates = CertificateConnections(store: provisioner.store, clock: clock, logger: logger)
            let policy = ConnectionPolicy(
                connections: configuration.connections, certificates: certificates,
                providers: ProviderLimits(
                    limit: configuration.connections.reconnectLimit, window: configuration.connections.reconnectWindow,
                    maxOpen: configuration.connections.maxPerIdentity, clock: clock),
                memory: MemoryReturn(logger: logger), clock: clock, peerLog: PeerLog(interval: configuration.connections.refusalLogInterval))
            var http2Gateways: [Environment: HTTP2Gateway] = [:]
            var channelGateways: [Environment: HTTP2Gateway] = [:]
            for environment in Environment.allCases {
                http2Gateways[environment] = try HTTP2Gateway(
                    environment: environment, configuration: configuration, tls: tls, provisioner: provisioner, dispatcher: dispatcher,
                    broadcasts: dispatcher.broadcasts, metrics: metrics, keys: keys,
                    inbox: inbox, faults: faults, policy: policy, logger: logger)
                channelGateways[environment] = try HTTP2Gateway(
                    environment: environment, configuration: configuration, tls: tls, provisioner: provisioner, dispatcher: dispatcher,
                    broadcasts: dispatcher.broadcasts, metrics: metrics, keys: keys,
                    inbox: inbox, faults: faults, policy: policy, managesChannels: true, logger: logger)
            }
            // Both ports of both environments: swept together, listed together.
            let allHTTP2 = Array(http2Gateways.values) + Array(channelGateways.values)
            if timers {
                services.append(TimerService(interval: configuration.qos.tickInterval) { await dispatcher.tick() })
                services.append(
                    TimerService(interval: configuration.qos.tickInterval) {
                        await Self.sweep(allHTTP2, policy)
                    })
            }
            // One listener a port, each with its interface.
            var binaryGateways: [BinaryGateway] = []
            for environment in Environment.allCases {
                let device = DeviceGateway(
                    environment: environment, configuration: configuration, tls: tls, dispatcher: dispatcher, policy: policy, logger: logger)
                let feedbackService = try FeedbackService(
                    environment: environment, configuration: configuration, tls: tls, provisioner: provisioner, policy: policy, feedback: feedback,
                    logger: logger)
                let binary = try BinaryGateway(
                    environment: environment, configuration: configuration, tls: tls, provisioner: provisioner, dispatcher: dispatcher, metrics: metrics,
                    inbox: inbox, faults: faults, policy: policy, logger: logger)
                binaryGateways.append(binary)
                services += [
                    PortListener(device, configuration: configuration, policy: policy, ports: ports, metrics: metrics),
                    PortListener(feedbackService, configuration: configuration, policy: policy, ports: ports, metrics: metrics),
                    PortListener(binary, configuration: configuration, policy: policy, ports: ports, metrics: metrics),
                    PortListener(http2Gateways[environment]!, configuration: configuration, policy: policy, ports: ports, metrics: metrics),
                    PortListener(channelGateways[environment]!, configuration: configuration, policy: policy, ports: ports, metrics: metrics),
                ]
            }
            let listeners: [(BoundPorts.Listener, Environment)] = Environment.allCases.flatMap {
                [(.device, $0), (.feedback, $0), (.binary, $0), (.http2, $0), (.channels, $0)]
            }
            // Stops first at shutdown; its long polls end at once (NotificationInbox.close).
            services.append(
                AdminServer(
                    configuration: configuration, token: admin.token, inbox: inbox, faults: faults, dispatcher: dispatcher, metrics: metrics,
                    cluster: cluster, connections: policy.open,
                    ports: ports, provisioner: provisioner,
                    afterRevocation: { await Self.sweep(allHTTP2, policy) },
                    providerConnections: { [binaryGateways] in
                        binaryGateways.flatMap { $0.connections.states($0.environment) } + allHTTP2.flatMap { $0.connectionStates() }
                    },
                    ready: { [store = provisioner.store] in
                        guard ports.all.count > listeners.count else { return false }
                        return (try? await store.schemaVersion()) != nil
                    }, logger: logger))
            return CourierApplication(
                configuration: configuration, provisioner: provisioner, report: report, services: services, dispatcher: dispatcher, ports: ports,
                listeners: listeners, http2Gateways: http2Gateways, channelGateways: channelGateways, inbox: inbox, faults: faults, policy: policy)
        } catch {
            try? await provisioner.close()
            throw error
        }
    }

    /// A service group for the services, with SIGTERM and SIGINT as
    /// graceful shutdown. `onReady` runs once the group is up, its signal
    /// handlers included.
    public func serviceGroup(logger: Logger, signals: Bool = true, onReady: (@Sendable ([String: Int]) -> Void)? = nil) -> ServiceGroup {
        var all = services
        if let onReady { all.append(ReadinessService(ports: ports, listeners: listeners, announce: onReady)) }
        return ServiceGroup(
            configuration: ServiceGroupConfiguration(
                // A service that fails (a port already taken) stops the
                // others in order, as SIGTERM does: the store closes last.
                services: all.map { ServiceGroupConfiguration.ServiceConfiguration(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup) },
                gracefulShutdownSignals: signals ? [.sigterm, .sigint] : [],
                logger: logger))
    }

    static func bootstrap(_ provisioner: Provisioner) async throws -> BootstrapReport {
        let configuration = provisioner.configuration
        let marker = BootstrapReport.firstStartMarker(dataDirectory: configuration.dataDirectory)
        let unfinished = Files.exists(marker)
        var files = try await provisioner.createAuthority()
        let caCreated = files.contains { $0.created }
        if caCreated { try Files.write("A first start made this data directory and was not ready yet.\n", to: marker) }
        if caCreated || !Files.exists(provisioner.serverCertificatePath) || !Files.exists(provisioner.serverKeyPath) {
            files += try await provisioner.issueServerCertificate(
                dnsNames: configuration.network.serverDNSNames, ipAddresses: configuration.network.serverIPAddresses,
                certificatePath: provisioner.serverCertificatePath, keyPath: provisioner.serverKeyPath)
        } else {
            files.append(ProvisionedFile(what: "server certificate", path: provisioner.serverCertificatePath, created: false))
            files.append(ProvisionedFile(what: "server key", path: provisioner.serverKeyPath, created: false))
        }
        for environment in Environment.allCases {
            files.append(try provisioner.createTokenKey(environment))
        }
        var report = BootstrapReport(files: files)
        report.finishesAnEarlierFirstStart = unfinished && !caCreated
        guard configuration.demo.enabled else { return report }

        let demo = configuration.demo
        let demoDirectory = configuration.resolve(configuration.paths.demo)
        report.demoTeamID = demo.teamID
        report.demoBundleID = demo.bundleID
        let store = provisioner.store
        if try await store.team(id: demo.teamID) == nil {
            _ = try await provisioner.createTeam(id: demo.teamID, name: demo.teamName)
        }
        if try await store.app(bundleID: demo.bundleID) == nil {
            _ = try await provisioner.createApp(bundleID: demo.bundleID, teamID: demo.teamID)
        }
        let keys = try await store.authKeys(teamID: demo.teamID).filter { $0.revokedAt == nil }
        if let key = keys.first(where: { Files.exists(demoDirectory + "/AuthKey_\($0.keyID).p8") }) {
            report.demoKeyID = key.keyID
            report.demoAuthKeyPath = demoDirectory + "/AuthKey_\(key.keyID).p8"
            report.files.append(ProvisionedFile(what: "demo auth key \(key.keyID)", path: report.demoAuthKeyPath!, created: false))
        } else {
            let (key, file) = try await provisioner.createAuthKey(teamID: demo.teamID, directory: demoDirectory)
            report.demoKeyID = key.keyID
            report.demoAuthKeyPath = file.path
            report.files.append(file)
        }
        let certificatePath = demoDirectory + "/\(demo.bundleID).pem"
        let keyPath = demoDirectory + "/\(demo.bundleID)-key.pem"
        if Files.exists(certificatePath), Files.exists(keyPath) {
            report.files.append(ProvisionedFile(what: "demo provider certificate", path: certificatePath, created: false))
            report.files.append(ProvisionedFile(what: "demo provider key", path: keyPath, created: false))
        } else {
            let (_, files) = try await provisioner.issueProviderCertificate(
                bundleID: demo.bundleID, environments: Set(Environment.allCases), directory: demoDirectory)
            report.files += files
        }
        report.demoCertificatePath = certificatePath
        report.demoCertificateKeyPath = keyPath
        let deviceDirectory = demoDirectory + "/device"
        if Files.exists(deviceDirectory + "/identity.json") {
            try followConfiguredPorts(deviceDirectory + "/identity.json", configuration.network)
            report.files.append(ProvisionedFile(what: "demo device identity", path: deviceDirectory, created: false))
        } else {
            _ = try await provisioner.issueDeviceIdentity(directory: deviceDirectory)
            report.files.append(ProvisionedFile(what: "demo device identity", path: deviceDirectory, created: true))
        }
        report.demoDeviceDirectory = deviceDirectory
        return report
    }
}

/// The demo device's `identity.json` names the device ports the
/// configuration gives now: a port changed since its activation is not
/// kept in it. A port of 0 (chosen when bound) leaves it as it is.
private func followConfiguredPorts(_ path: String, _ network: CourierConfiguration.Network) throws {
    guard let data = FileManager.default.contents(atPath: path), var identity = try? JSONDecoder().decode(DeviceIdentityFile.self, from: data)
    else { return }
    let before = identity
    if network.production.device != 0 { identity.productionPort = network.production.device }
    if network.sandbox.device != 0 { identity.sandboxPort = network.sandbox.device }
    guard identity != before else { return }
    try identity.encoded().write(to: URL(fileURLWithPath: path), options: .atomic)
}

/// Registers the demo app on the demo device (production) the first time,
/// and writes the token into the device's `identity.json`, so that the
/// start-up banner can print ready-to-paste push commands. Registering
/// again gives the same token, so the device finds it valid when it
/// connects. A registration the store already has is never changed: an
/// app uninstalled from the demo device stays uninstalled across restarts
/// (no demo token then).
private func registerDemoApp(_ bundleID: String, deviceDirectory: String, dispatcher: Dispatcher, store: any Store) async throws -> String? {
    let path = deviceDirectory + "/identity.json"
    guard let data = FileManager.default.contents(atPath: path),
        var identity = try? JSONDecoder().decode(DeviceIdentityFile.self, from: data),
        let deviceID = UInt64(identity.deviceID, radix: 16)
    else { return nil }
    if let registration = try await store.registration(deviceID: deviceID, bundleID: bundleID, environment: .production) {
        return registration.active ? Hex.encode(registration.token) : nil
    }
    guard let token = try await dispatcher.register(deviceID: deviceID, generation: identity.generation, bundleID: bundleID, environment: .production)
    else { return nil }
    identity.tokens[Environment.production.rawValue, default: [:]][bundleID] = Hex.encode(token)
    try identity.encoded().write(to: URL(fileURLWithPath: path), options: .atomic)
    return Hex.encode(token)
}

/// Holds the store open while the service runs and closes it after every
/// other part has stopped.
struct StoreService: Service {
    let provisioner: Provisioner
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        logger.info("closing the store")
        try await provisioner.close()
    }
}

/// Calls `announce` with the bound ports once every listener is
/// listening, then waits.
struct ReadinessService: Service {
    let ports: BoundPorts
    let listeners: [(BoundPorts.Listener, Environment)]
    let announce: @Sendable ([String: Int]) -> Void

    func run() async throws {
        // A listener that fails to bind never reports its port: the wait
        // ends with the group's shutdown.
        do {
            try await cancelWhenGracefulShutdown {
                for (listener, environment) in listeners { _ = try await ports.port(listener, environment) }
                _ = try await ports.adminPort()
            }
        } catch {
            return
        }
        announce(ports.all)
        try? await gracefulShutdown()
    }
}
