import CourierCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

/// What an interface (binary, feedback, HTTP/2, device) gives the one
/// listener of its port: the TLS of its connections, their handlers after
/// TLS, and what an open connection is told at graceful shutdown. The
/// listener does the rest, the same for every port (`PortListener`).
protocol ListenerInterface: Sendable {
    /// What a connection hands to `serve`, when it needs a task.
    associatedtype Connection: Sendable = Never

    /// What every port's interface has.
    var basics: PortBasics { get }

    /// The port's own bootstrap options (a backlog, an allocator).
    func configure(_ bootstrap: ServerBootstrap) -> ServerBootstrap

    /// Adds a new connection's handlers after TLS, on its event loop (the
    /// peer's identity goes into `peer` during the handshake); what they
    /// must wait for runs as the listener's `work`. Returns
    /// what `serve` needs if the connection needs a task of its own; nil
    /// when its handlers do all the work (a connection costs no task).
    /// `release` says the connection has ended, for shutdown to wait for
    /// it: the listener calls it when the channel closes, unless
    /// `releasesItself` (then the interface calls it, once the
    /// connection's last work is done).
    func setUp(_ channel: any Channel, peer: Peer, work: ConnectionWork, release: ConnectionRelease) throws -> Connection?

    /// What a new connection's handshake tells its peer's identity
    /// (`PeerVerifier`), made before TLS is added; `setUp` gets it back.
    associatedtype Peer: PeerIdentityHolder = PeerIdentityBox
    func peer(for channel: any Channel, work: ConnectionWork, release: ConnectionRelease) -> Peer

    /// A connection's work in a task of its own (one of the listener's
    /// child tasks).
    func serve(_ connection: Connection) async

    /// Graceful shutdown reached the listener: its socket is closed, open
    /// connections are about to get their `farewell`.
    func shuttingDown()

    /// What an open connection is told at graceful shutdown; by default it
    /// is closed.
    func farewell(_ channel: any Channel)

    /// The interface calls `release` itself (see `setUp`).
    static var releasesItself: Bool { get }

    /// The interface's own handler closes a connection whose peer does not
    /// read (`ListenerGuard.writabilityChanged`), so the listener adds no
    /// `UnreadLimit` handler of its own.
    static var closesUnreadItself: Bool { get }
}

extension ListenerInterface {
    var listener: BoundPorts.Listener { basics.listener }
    var environment: Environment { basics.environment }
    var configuration: CourierConfiguration { basics.configuration }
    /// What peers may hold, and who uses which certificate.
    var policy: ConnectionPolicy { basics.policy }
    var logger: Logger { basics.logger }
    var tlsContext: NIOSSLContext { basics.tlsContext }
    var verifier: PeerVerifier { basics.verifier }

    func configure(_ bootstrap: ServerBootstrap) -> ServerBootstrap { bootstrap }
    func shuttingDown() {}
    func farewell(_ channel: any Channel) { channel.close(promise: nil) }
    static var releasesItself: Bool { false }
    static var closesUnreadItself: Bool { false }
}

extension ListenerInterface where Connection == Never {
    func serve(_ connection: Never) async {}
}

extension ListenerInterface where Peer == PeerIdentityBox {
    func peer(for channel: any Channel, work: ConnectionWork, release: ConnectionRelease) -> PeerIdentityBox {
        PeerIdentityBox(verifier: verifier, closed: channel.closeFuture, work: work, release: release)
    }
}

/// What every port's interface has: which listener it is and its
/// environment, the configuration and connection policy, a logger that
/// names the listener, and the TLS of its connections with their peer
/// check.
struct PortBasics: Sendable {
    let listener: BoundPorts.Listener
    let environment: Environment
    let configuration: CourierConfiguration
    let policy: ConnectionPolicy
    let logger: Logger
    let tlsContext: NIOSSLContext
    let verifier: PeerVerifier
    /// What the port's peers may hold (connections, unread bytes).
    let guardian: ListenerGuard

    /// Whose certificates the port takes.
    enum Peers {
        /// Providers' (`checkingEnvironment`: the certificate must carry the
        /// port's environment at the handshake; the HTTP/2 port answers
        /// that per request instead).
        case providers(checkingEnvironment: Bool)
        case devices
    }

    init(
        _ listener: BoundPorts.Listener, _ environment: Environment, configuration: CourierConfiguration, policy: ConnectionPolicy,
        authority: ServerTLS, context: NIOSSLContext, peers: Peers, logger: Logger
    ) {
        self.listener = listener
        self.environment = environment
        self.configuration = configuration
        self.policy = policy
        var logger = logger
        logger[metadataKey: "courier.listener"] = "\(listener.rawValue).\(environment.rawValue)"
        self.logger = logger
        guardian = policy.guardFor(listener, environment, logger: logger)
        tlsContext = context
        verifier =
            switch peers {
            case .providers(let checkingEnvironment):
                PeerVerifier(
                    authority: authority.authority, certificates: policy.certificates, kind: .provider, logger: logger,
                    environment: checkingEnvironment ? environment : nil, providers: policy.providers, authorities: authority.providerAuthorities,
                    peerLog: policy.peerLog)
            case .devices:
                PeerVerifier(authority: authority.authority, certificates: policy.certificates, kind: .device, logger: logger, peerLog: policy.peerLog)
            }
    }
}

/// Tells a port's listener that one of its connections authenticated
/// (it leaves the share of the listener that connections still
/// authenticating may hold: `ListenerGuard`), and that it has ended (see
/// `ListenerInterface.setUp`), which counts it out of the port's guard.
/// Not a closure: a connection that keeps it while idle keeps no
/// allocation of its own for it; and told the channel rather than keeping
/// it, which the connection has already.
struct ConnectionRelease: Sendable {
    private let open: OpenConnections
    private let admission: ListenerGuard.Admission?
    /// The interface `releasesItself`: its end counts the admission out
    /// (there is no close callback on its channel for it).
    private let countsOut: Bool

    init(open: OpenConnections, admission: ListenerGuard.Admission? = nil, countsOut: Bool = false) {
        self.open = open
        self.admission = admission
        self.countsOut = countsOut
    }

    /// The peer showed its credentials: a client certificate the server
    /// knows, or its first valid provider token.
    func authenticated() { admission?.authenticated() }

    /// The peer's credentials passed, but it is refused (a device in its
    /// `DeviceFrameCooldowns`): a failed authentication of its address.
    func failedAuthentication() { admission?.failedAuthentication() }

    /// `channel` has ended.
    func callAsFunction(_ channel: any Channel) {
        open.remove(channel)
        if countsOut { admission?.end() }
    }
}

/// The one listener every port runs, in the manner of hummingbird's
/// `Server`: it binds the port, admits each connection through the
/// port's `ListenerGuard` (limits, unread bytes), adds TLS with the
/// interface's peer check and handshake timeout, then the interface's
/// handlers. Connections that need a task, and the work connections start
/// (`ConnectionWork`), run in the listener's task group. Graceful shutdown is one path for every port: the listening
/// socket closes, each open connection gets the interface's farewell
/// (binary status 10, HTTP/2 GOAWAY, a device's close), and `run` returns
/// once all of them and their work have ended. Cancellation closes them at
/// once.
struct PortListener<Interface: ListenerInterface>: Service {
    let interface: Interface
    let network: CourierConfiguration.Network
    let guardian: ListenerGuard
    let handshakeTimeout: TimeAmount
    let ports: BoundPorts
    let metrics: ServerMetrics

    init(_ interface: Interface, configuration: CourierConfiguration, policy: ConnectionPolicy, ports: BoundPorts, metrics: ServerMetrics) {
        self.metrics = metrics
        self.interface = interface
        network = configuration.network
        guardian = interface.basics.guardian
        handshakeTimeout = configuration.handshakeTimeout
        self.ports = ports
    }

    func run() async throws {
        let interface = self.interface
        let guardian = self.guardian
        let timeout = handshakeTimeout
        let failed: @Sendable () -> Void = { [metrics] in metrics.handshakeFailed(interface.listener.rawValue, interface.environment) }
        let open = OpenConnections()
        let (work, runner) = ConnectionWork.make()
        let server = try await bindListener(interface.listener, interface.environment, network) { host, port in
            try await interface.configure(listenerBootstrap())
                .bind(host: host, port: port) { channel in
                    // Never fails: NIO's async listener drops a child whose
                    // initializer failed without closing its socket. A
                    // connection that cannot be set up is closed here.
                    channel.eventLoop.makeCompletedFuture { () -> Interface.Connection? in
                        var admitted: ConnectionRelease?
                        do {
                            // Refused: CloseAtOnce closes it as it becomes active.
                            guard
                                let admission = try guardian.admit(
                                    channel, addingUnreadLimit: !Interface.closesUnreadItself, countedOutOnClose: !Interface.releasesItself)
                            else { return nil }
                            let release = ConnectionRelease(open: open, admission: admission, countsOut: Interface.releasesItself)
                            admitted = release
                            try open.add(channel)
                            if !Interface.releasesItself { channel.closeFuture.whenComplete { _ in release(channel) } }
                            let peer = interface.peer(for: channel, work: work, release: release)
                            try channel.pipeline.syncOperations.addHandlers(
                                PeerVerifier.tlsHandlers(context: interface.tlsContext, peer: peer, handshakeTimeout: timeout, failed: failed))
                            return try interface.setUp(channel, peer: peer, work: work, release: release)
                        } catch {
                            // Whatever the interface took on ends with the channel.
                            if Interface.releasesItself { admitted?(channel) }
                            interface.logger.debug("closing a connection that could not be set up", metadata: ["courier.error": "\(error)"])
                            channel.close(promise: nil)
                            return nil
                        }
                    }
                }
        }
        ports.listening(interface.listener, interface.environment, on: server.channel, logger: interface.logger)
        await withDiscardingTaskGroup { tasks in
            tasks.addTask { await runner.run() }
            await withGracefulShutdownHandler {
                await withTaskCancellationHandler {
                    do {
                        try await server.executeThenClose { inbound in
                            for try await connection in inbound {
                                guard let connection else { continue }
                                tasks.addTask { await interface.serve(connection) }
                            }
                        }
                    } catch {
                        interface.logger.debug("listener stopped", metadata: ["courier.error": "\(error)"])
                    }
                } onCancel: {
                    server.channel.close(promise: nil)
                }
            } onGracefulShutdown: {
                server.channel.close(promise: nil)
            }
            if Task.isCancelled {
                open.closeAll()
            } else {
                interface.shuttingDown()
                open.closeAll(interface.farewell)
            }
            await open.waitUntilEmpty()
            // No connection is left to start work: what runs ends the group.
            work.finish()
        }
    }
}
