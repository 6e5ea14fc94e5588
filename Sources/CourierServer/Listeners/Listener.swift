import CourierCore
import NIOCore
import NIOPosix
import NIOTLS
import ServiceLifecycle
import Synchronization

/// The channels of a listener that are open or whose last frames are still
/// being handled, so that shutdown can close them and wait for them.
final class OpenConnections: Sendable {
    /// A channel in the set, by its identity: 16 bytes a slot (a
    /// dictionary from its identifier would take 24).
    private struct Open: Hashable {
        let channel: any Channel

        static func == (left: Open, right: Open) -> Bool { left.channel === right.channel }
        func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(channel)) }
    }

    private struct State {
        var channels: Set<Open> = []
        var waiters: [CheckedContinuation<Void, Never>] = []
        /// `closeAll` was called: a channel accepted from now on is refused.
        var closing = false
    }

    private let state = Mutex(State())

    /// Throws once `closeAll` was called (the channel is then refused, and
    /// not kept).
    func add(_ channel: any Channel) throws {
        try state.withLock { state in
            if state.closing { throw ChannelError.ioOnClosedChannel }
            state.channels.insert(Open(channel: channel))
        }
    }

    /// Forgets the channel.
    func remove(_ channel: any Channel) {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.channels.remove(Open(channel: channel))
            guard state.channels.isEmpty else { return [] }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Refuses channels from now on and says farewell to each open one
    /// (by default: closes it).
    func closeAll(_ farewell: (any Channel) -> Void = { $0.close(promise: nil) }) {
        let channels = state.withLock { state in
            state.closing = true
            return state.channels.map(\.channel)
        }
        for channel in channels { farewell(channel) }
    }

    func waitUntilEmpty() async {
        await withCheckedContinuation { continuation in
            let empty = state.withLock { state -> Bool in
                guard state.channels.isEmpty else {
                    state.waiters.append(continuation)
                    return false
                }
                return true
            }
            if empty { continuation.resume() }
        }
    }
}

/// The bootstrap every listener binds with: address reuse, a listen
/// backlog, and no Nagle delay on the connections (answers are small).
/// Running out of file descriptors is prevented, not handled: the
/// listeners' limits are fitted to the open-file limit
/// (`CourierConfiguration.Connections.fitted`), because out of them an
/// event loop spins on the listening socket, NIO's `AcceptBackoffHandler`
/// or not.
func listenerBootstrap() -> ServerBootstrap {
    ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .serverChannelOption(.backlog, value: 256)
        .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
}

/// Closes a connection when its time is up, on the event loop's clock (a
/// test can move it):
/// - `.handshake`: the TLS handshake has not finished within `timeout` — a
///   client that connects and says nothing must not hold a socket for
///   ever. Sits after the TLS handler, whose handshake event it waits for.
/// - `.lifetime`: the connection has `timeout` from its start, whatever it does.
///
/// A connection's silence is watched by its event loop's `SilenceSweep`.
public final class ConnectionTimeout: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = NIOAny

    public enum Kind: Sendable {
        case handshake
        case lifetime
    }

    private let kind: Kind
    private let timeout: TimeAmount
    private var check: Scheduled<Void>?
    private var stopped = false

    public init(_ kind: Kind, timeout: TimeAmount) {
        self.kind = kind
        self.timeout = timeout
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard kind == .handshake, case .handshakeCompleted = event as? TLSUserEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        stopped = true
        check?.cancel()
        context.fireUserInboundEventTriggered(event)
        // Its work is done: every later read would only pass through it.
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        check?.cancel()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        check?.cancel()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard check == nil, !stopped else { return }
        check = context.eventLoop.assumeIsolated().scheduleTask(deadline: context.eventLoop.now + timeout) { [weak self] in
            guard let self, !self.stopped else { return }
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension ConnectionTimeout: Sendable {}

/// A connection whose silence its event loop's `SilenceSweep` watches:
/// it keeps its place in the sweep's list (`silenceLinks`) itself, so that
/// watching an idle connection costs a few words in an object it has
/// anyway — no object, scheduled task or timer entry of its own.
protocol SilenceWatched: AnyObject {
    var silenceLinks: SilenceLinks<Self> { get set }
    /// Nothing was read for the sweep's timeout: the connection closes.
    func silent()
}

/// A connection's place in its `SilenceSweep`: when it was last heard
/// from, and its neighbours in the sweep's list.
struct SilenceLinks<Watched: AnyObject> {
    fileprivate var lastHeard = NIODeadline.uptimeNanoseconds(0)
    fileprivate var next: Watched?
    /// Held by the list itself (its own previous's `next`) while linked.
    fileprivate unowned(unsafe) var previous: Watched?
    fileprivate var state = State.new

    fileprivate enum State {
        case new
        case watched
        /// Stopped (or closed for silence): never watched again.
        case over
    }

    init() {}
}

/// Closes the connections of one event loop from which nothing was read
/// for `timeout` (a dead device: two keepalive intervals without a frame;
/// an idle binary provider), on the event loop's clock (a test can move
/// it). The connections are kept in a list in the order they were last
/// heard from — a read moves its connection to the end — so the first is
/// always the one whose time is up first, and one scheduled task, at its
/// deadline, serves them all.
///
/// Everything is done on `eventLoop`: by the connections' handlers
/// (`start`, `heard`, `stop`) and by the task.
final class SilenceSweep<Watched: SilenceWatched>: @unchecked Sendable {
    let eventLoop: any EventLoop
    let timeout: TimeAmount
    private var first: Watched?
    private unowned(unsafe) var last: Watched?
    private var scheduled: Scheduled<Void>?

    init(eventLoop: any EventLoop, timeout: TimeAmount) {
        self.eventLoop = eventLoop
        self.timeout = timeout
    }

    /// Starts watching `watched` (once: a second start, or one after `stop`, does nothing).
    func start(_ watched: Watched) {
        eventLoop.preconditionInEventLoop()
        guard case .new = watched.silenceLinks.state else { return }
        watched.silenceLinks.state = .watched
        watched.silenceLinks.lastHeard = eventLoop.now
        append(watched)
        scheduleForFirst()
    }

    /// Something was read from `watched`.
    func heard(_ watched: Watched) {
        guard case .watched = watched.silenceLinks.state else { return }
        watched.silenceLinks.lastHeard = eventLoop.now
        guard watched !== last else { return }
        unlink(watched)
        append(watched)
    }

    /// The connection ended: it leaves the list.
    func stop(_ watched: Watched) {
        let state = watched.silenceLinks.state
        watched.silenceLinks.state = .over
        guard case .watched = state else { return }
        unlink(watched)
        if first == nil {
            scheduled?.cancel()
            scheduled = nil
        }
    }

    private func append(_ watched: Watched) {
        watched.silenceLinks.previous = last
        watched.silenceLinks.next = nil
        if let last { last.silenceLinks.next = watched } else { first = watched }
        last = watched
    }

    private func unlink(_ watched: Watched) {
        let next = watched.silenceLinks.next
        let previous = watched.silenceLinks.previous
        if let previous { previous.silenceLinks.next = next } else { first = next }
        if let next { next.silenceLinks.previous = previous } else { last = previous }
        watched.silenceLinks.next = nil
        watched.silenceLinks.previous = nil
    }

    /// The task: closes every connection whose time is up, and waits for the next one's.
    private func sweep() {
        scheduled = nil
        let now = eventLoop.now
        while let watched = first, watched.silenceLinks.lastHeard + timeout <= now {
            unlink(watched)
            watched.silenceLinks.state = .over
            watched.silent()
        }
        scheduleForFirst()
    }

    /// One task, at the first connection's deadline (a task already
    /// waiting stays: when it comes early, it waits again).
    private func scheduleForFirst() {
        guard scheduled == nil, let first else { return }
        // It fails only when the event loop is shutting down, which ends the connections anyway.
        scheduled = eventLoop.assumeIsolated().scheduleTask(deadline: first.silenceLinks.lastHeard + timeout) { [self] in sweep() }
    }
}

/// The `SilenceSweep`s of a kind of connection (one timeout), one per
/// event loop, each made when a connection of its loop first needs it.
final class SilenceSweeps<Watched: SilenceWatched>: Sendable {
    let timeout: TimeAmount
    private let sweeps = Mutex<[ObjectIdentifier: SilenceSweep<Watched>]>([:])

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func sweep(on eventLoop: any EventLoop) -> SilenceSweep<Watched> {
        sweeps.withLock { sweeps in
            if let sweep = sweeps[ObjectIdentifier(eventLoop)] { return sweep }
            let sweep = SilenceSweep<Watched>(eventLoop: eventLoop, timeout: timeout)
            sweeps[ObjectIdentifier(eventLoop)] = sweep
            return sweep
        }
    }
}

/// Closes a connection from which nothing was read for its sweep's
/// timeout (an idle binary provider's, `connections.binaryIdle`), counted
/// from the end of its TLS handshake: until then the handshake's own limit
/// holds (`ConnectionTimeout(.handshake)`), so that a handshake slowed by
/// its certificate's lookup is not taken for silence.
final class SilenceTimeout: ChannelInboundHandler, SilenceWatched {
    typealias InboundIn = NIOAny

    private let sweeps: SilenceSweeps<SilenceTimeout>
    private var sweep: SilenceSweep<SilenceTimeout>?
    private var context: ChannelHandlerContext?
    var silenceLinks = SilenceLinks<SilenceTimeout>()

    init(_ sweeps: SilenceSweeps<SilenceTimeout>) {
        self.sweeps = sweeps
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent { start(context) }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        sweep?.heard(self)
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        sweep?.stop(self)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        sweep?.stop(self)
        self.context = nil
    }

    func silent() {
        context?.close(promise: nil)
    }

    private func start(_ context: ChannelHandlerContext) {
        if sweep == nil { sweep = sweeps.sweep(on: context.eventLoop) }
        sweep?.start(self)
    }
}

@available(*, unavailable)
extension SilenceTimeout: Sendable {}

/// The bytes a connection handler reads its frames from. A read's bytes
/// are read where they are, in the buffer the TLS handler hands over; what
/// the reading leaves (the start of a frame that a later read completes,
/// or frames left for later) is copied into a buffer of its own, to which
/// the next read's bytes are appended. Keeping a reference to the TLS
/// handler's buffer instead would make it copy that buffer on its next read.
struct ReceivedBytes {
    private var carried = ByteBuffer()

    /// Reads frames off the front of `bytes`, preceded by what is carried,
    /// with `read`, and carries what it leaves. `read` must not reach this
    /// value again (a handler's state that is reset on close, say).
    mutating func receive(_ bytes: ByteBuffer, _ read: (inout ByteBuffer) -> Void) {
        var bytes = bytes
        guard carried.readableBytes > 0 else {
            // The usual case: whole frames read in place, only the rest copied.
            read(&bytes)
            // Nothing left (the usual case) allocates nothing.
            if bytes.readableBytes > 0 { carried.writeBuffer(&bytes) }
            return
        }
        carried.writeBuffer(&bytes)
        readCarried(read)
    }

    /// Reads on in what is carried, with `read` (one that stopped early).
    mutating func readCarried(_ read: (inout ByteBuffer) -> Void) {
        read(&carried)
        if carried.readableBytes == 0 {
            carried.clear()
        } else if carried.readerIndex >= 4096 {
            carried.discardReadBytes()
        }
    }

    /// Nothing is carried: no frame was left unfinished.
    var isEmpty: Bool { carried.readableBytes == 0 }

    /// Forgets what is carried: nothing more will be read.
    mutating func discard() {
        carried.clear()
    }
}

extension CourierConfiguration {
    /// The TLS handshake limit as the event loop counts time.
    var handshakeTimeout: TimeAmount { .milliseconds(Int64(network.handshakeTimeout * 1000)) }
}

/// A listener could not have its address (taken, not this machine's, a
/// privileged port): the message names the listener, the address and why.
struct ListenerBindError: Error, CustomStringConvertible {
    let listener: String
    let host: String
    let port: Int
    let reason: String
    /// The configuration key of the port.
    let key: String

    var description: String {
        "cannot listen for \(listener) on \(host):\(port): \(reason); set '\(key)' in the configuration to another port (0: any free one)"
    }
}

/// Binds the listener `listener` of `environment` at its configured
/// address with `bind(host, port)`, so that a failure says which one.
func bindListener<Server>(
    _ listener: BoundPorts.Listener, _ environment: Environment, _ network: CourierConfiguration.Network,
    _ bind: (_ host: String, _ port: Int) async throws -> Server
) async throws -> Server {
    let ports = network.ports(environment)
    let port =
        switch listener {
        case .device: ports.device
        case .binary: ports.binary
        case .feedback: ports.feedback
        case .http2: ports.http2
        case .channels: ports.channels
        }
    do {
        return try await bind(network.host, port)
    } catch {
        let reason = (error as? IOError).map { String(cString: strerror($0.errnoCode)) } ?? "\(error)"
        throw ListenerBindError(
            listener: "\(listener.rawValue).\(environment.rawValue)", host: network.host, port: port, reason: reason,
            key: "network.\(environment.rawValue).\(listener.rawValue)")
    }
}
