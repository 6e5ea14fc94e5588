import CourierCore
import NIOCore
import NIOPosix
import NIOTLS
import ServiceLifecycle
import Synchronization

/// The channels of a listener that are open or whose last frames are still
/// being handled, so that shutdown can close them and wait for them.
final class OpenConnections: Sendable {
    private struct State {
        var channels: [ObjectIdentifier: any Channel] = [:]
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
            state.channels[ObjectIdentifier(channel)] = channel
        }
    }

    /// Forgets the channel whose `ObjectIdentifier` is `key`.
    func remove(_ key: ObjectIdentifier) {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.channels.removeValue(forKey: key)
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
            return Array(state.channels.values)
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
        .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
}

/// Closes a connection when its time is up, on the event loop's clock (a
/// test can move it):
/// - `.silence`: nothing was read for `timeout` (a `SilenceWatch` told of
///   every read) — an idle provider connection;
/// - `.handshake`: the TLS handshake has not finished within `timeout` — a
///   client that connects and says nothing must not hold a socket for
///   ever. Sits after the TLS handler, whose handshake event it waits for.
/// - `.lifetime`: the connection has `timeout` from its start, whatever it does.
public final class ConnectionTimeout: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = NIOAny

    public enum Kind: Sendable {
        case silence
        case handshake
        case lifetime
    }

    private let kind: Kind
    private let timeout: TimeAmount
    /// `.silence`'s watch, from the start.
    private var watch: SilenceWatch?
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

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        watch?.heard()
        context.fireChannelRead(data)
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
        stop()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    private func stop() {
        check?.cancel()
        watch?.stop()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard check == nil, watch == nil, !stopped else { return }
        if kind == .silence {
            watch = SilenceWatch(context.channel, timeout: timeout)
            watch?.start()
            return
        }
        check = context.eventLoop.assumeIsolated().scheduleTask(deadline: context.eventLoop.now + timeout) { [weak self] in
            guard let self, !self.stopped else { return }
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension ConnectionTimeout: Sendable {}

/// Closes a connection from which nothing was read for `timeout` (a dead
/// device: two keepalive intervals without a frame), on the event loop's
/// clock (a test can move it). It is no handler of its own: the
/// connection's handler tells it of each read (`heard`) and of the end
/// (`stop`). While the connection is idle it holds one entry in its event
/// loop's schedule, which comes due at most once per `timeout` and is
/// moved on if the connection was heard from since — no handler context,
/// task closure or promise per connection.
final class SilenceWatch: NIOScheduledCallbackHandler, Sendable {
    private let channel: any Channel
    private let timeout: TimeAmount
    /// The last read, on the event loop's clock (uptime nanoseconds).
    private let lastHeard = Atomic<UInt64>(0)
    private let started = Atomic<Bool>(false)
    /// Nil once stopped (or closed for silence).
    private let scheduled = Mutex<NIOScheduledCallback?>(nil)

    init(_ channel: any Channel, timeout: TimeAmount) {
        self.channel = channel
        self.timeout = timeout
    }

    /// Starts the watch, on the channel's event loop (once: a second
    /// start, or one after `stop`, does nothing).
    func start() {
        guard !started.exchange(true, ordering: .relaxed) else { return }
        heard()
        schedule(at: channel.eventLoop.now + timeout)
    }

    /// Something was read.
    func heard() {
        lastHeard.store(channel.eventLoop.now.uptimeNanoseconds, ordering: .relaxed)
    }

    /// The connection ended: its entry leaves the schedule.
    func stop() {
        started.store(true, ordering: .relaxed)
        scheduled.withLock { $0.take() }?.cancel()
    }

    func handleScheduledCallback(eventLoop: some EventLoop) {
        let due = NIODeadline.uptimeNanoseconds(lastHeard.load(ordering: .relaxed)) + timeout
        if eventLoop.now >= due {
            scheduled.withLock { $0 = nil }
            channel.close(promise: nil)
        } else {
            schedule(at: due)
        }
    }

    private func schedule(at deadline: NIODeadline) {
        // It throws only when the event loop is shutting down, which ends the connection anyway.
        let next = try? channel.eventLoop.scheduleCallback(at: deadline, handler: self)
        scheduled.withLock { $0 = next }
    }
}

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

    var description: String { "cannot listen for \(listener) on \(host):\(port): \(reason)" }
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
        throw ListenerBindError(listener: "\(listener.rawValue).\(environment.rawValue)", host: network.host, port: port, reason: reason)
    }
}
