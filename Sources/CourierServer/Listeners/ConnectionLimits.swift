import CourierCore
import Foundation
import Logging
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What one listener lets peers hold: open connections in all and from one
/// source address, and — of those — connections that have not
/// authenticated yet (no client certificate checked, no valid provider
/// token seen): at most `connections.unauthenticatedShare` of the
/// listener and `connections.maxUnauthenticatedPerAddress` from one
/// address, and an address whose connections ended without
/// authenticating `connections.maxFailedAuthenticationsPerAddress` times
/// in the last second is refused until that second has passed. Anonymous
/// peers, however many times they reconnect, never take the room of
/// authenticated ones, nor of a provider on another address still
/// handshaking. A connection beyond any of these is closed at accept (by a
/// `CloseAtOnce` in front of its pipeline: the channel initializer must
/// not throw, as NIO's async listener would drop the accepted socket
/// without closing it), counted,
/// and logged at most once per
/// `connections.refusalLogInterval` with the count since the last line —
/// so that a flood can neither lock out the other listeners nor flood the
/// log (docs/security.md).
///
/// It also bounds what waits, unsent, for a peer that does not read:
/// beyond `connections.maxUnreadBytes` the connection is closed
/// (`UnreadLimit`), counted and logged the same way.
final class ListenerGuard: Sendable {
    private struct State {
        var open = 0
        var byAddress: [String: Int] = [:]
        /// Open and not authenticated yet, in all and by address.
        var unauthenticated = 0
        var unauthenticatedByAddress: [String: Int] = [:]
        /// Connections that ended without authenticating, by address, in
        /// the current second.
        var failures: [String: RateWindow] = [:]
        var refused = 0
        /// Refusals since the last log line.
        var unlogged = 0
        var lastLog: NIODeadline?
        var closedUnread = 0
        var unloggedUnread = 0
        var lastUnreadLog: NIODeadline?

        /// A failure of `address` in the second of `now`.
        mutating func countFailure(_ address: String, now: Date) {
            // Ended windows forgotten now and then, so that the table stays small; when none has ended
            // (as many failing addresses in one second), all are: the table never grows past its bound.
            if failures.count >= 10_000 {
                failures = failures.filter { !$0.value.hasEnded(at: now, length: 1) }
                if failures.count >= 10_000 { failures.removeAll(keepingCapacity: true) }
            }
            _ = failures[address, default: .unopened].take(limit: .max, per: 1, now: now)
        }

        mutating func leaveUnauthenticated(_ address: String) {
            unauthenticated -= 1
            let left = unauthenticatedByAddress[address, default: 1] - 1
            unauthenticatedByAddress[address] = left > 0 ? left : nil
        }
    }

    let maxOpen: Int
    let maxPerAddress: Int
    let maxUnauthenticated: Int
    let maxUnauthenticatedPerAddress: Int
    let maxFailuresPerAddress: Int
    private let clock: any WallClock
    /// Nil: no bound (feedback, which writes a topic's whole list at once
    /// and has its own time limit).
    let maxUnread: Int?
    /// SO_SNDBUF of a connection with `maxUnread` (the kernel holds twice
    /// this at most): ample for notifications and answers, which are small.
    static let sendBuffer: SocketOptionValue = 65_536
    private let logInterval: TimeAmount
    private let logger: Logger
    private let state = Mutex(State())

    /// `unauthenticatedShare`: of `maxOpen`, what connections not
    /// authenticated yet may hold (at least one).
    init(
        maxOpen: Int, maxPerAddress: Int, unauthenticatedShare: Double = 1, maxUnauthenticatedPerAddress: Int = .max,
        maxFailuresPerAddress: Int = .max, maxUnread: Int? = nil, logInterval: Double, clock: any WallClock = SystemWallClock(), logger: Logger
    ) {
        self.maxOpen = maxOpen
        self.maxPerAddress = maxPerAddress
        maxUnauthenticated = max(1, Int(Double(maxOpen) * min(1, max(0, unauthenticatedShare))))
        self.maxUnauthenticatedPerAddress = min(maxPerAddress, maxUnauthenticatedPerAddress)
        self.maxFailuresPerAddress = maxFailuresPerAddress
        self.clock = clock
        self.maxUnread = maxUnread
        self.logInterval = .milliseconds(Int64(logInterval * 1000))
        self.logger = logger
    }

    convenience init(
        _ listener: BoundPorts.Listener, _ environment: Environment, _ connections: CourierConfiguration.Connections, clock: any WallClock, logger: Logger
    ) {
        self.init(
            maxOpen: listener == .device ? connections.maxPerDeviceListener(environment) : connections.maxPerListener,
            maxPerAddress: connections.maxPerAddress, unauthenticatedShare: connections.unauthenticatedShare,
            maxUnauthenticatedPerAddress: connections.unauthenticatedPerAddress, maxFailuresPerAddress: connections.maxFailedAuthenticationsPerAddress,
            maxUnread: listener == .feedback ? nil : connections.maxUnreadBytes, logInterval: connections.refusalLogInterval, clock: clock, logger: logger)
    }

    /// A connection counted in, as not authenticated yet: `authenticated`
    /// moves it out of that share, `end` counts it out; each once, in
    /// whatever order and from whatever thread they come.
    final class Admission: Sendable {
        fileprivate let guardian: ListenerGuard
        fileprivate let address: String
        /// 0: not authenticated, 1: authenticated, 2: ended.
        private let stage = Atomic<UInt8>(0)

        fileprivate init(guardian: ListenerGuard, address: String) {
            self.guardian = guardian
            self.address = address
        }

        func authenticated() {
            guard stage.compareExchange(expected: 0, desired: 1, ordering: .relaxed).exchanged else { return }
            guardian.authenticated(address)
        }

        /// Counts a failure of the address in the current second, whatever
        /// the connection's stage: it authenticated, and is refused all the same.
        func failedAuthentication() {
            guardian.countFailure(address)
        }

        func end() {
            switch stage.exchange(2, ordering: .relaxed) {
            case 0: guardian.countOut(address, authenticated: false)
            case 1: guardian.countOut(address, authenticated: true)
            default: break
            }
        }
    }

    /// Counts a new connection in, or refuses it: `CloseAtOnce` goes in
    /// its pipeline and nil is returned (the listener adds nothing
    /// else). Call first in the child channel initializer.
    /// `addingUnreadLimit` false: the connection's own handler calls
    /// `writabilityChanged` (one handler fewer per connection).
    /// `countedOutOnClose` false: the caller ends the admission (for a
    /// connection that says when it has ended, with no close callback on
    /// its channel for it); true: the channel's close does.
    func admit(_ channel: any Channel, addingUnreadLimit: Bool = true, countedOutOnClose: Bool = true) throws -> Admission? {
        guard let admission = count(channel) else {
            try channel.pipeline.syncOperations.addHandler(CloseAtOnce(), position: .first)
            return nil
        }
        if countedOutOnClose { channel.closeFuture.whenComplete { _ in admission.end() } }
        if let maxUnread {
            // The kernel's send buffer is fixed instead of growing with
            // the peer's backlog (to 4 MiB per socket by Linux's defaults:
            // the memory of every TCP socket of the machine, which slow
            // peers would take); Linux doubles the value given.
            // The channel turns unwritable once more than maxUnread bytes
            // wait in it: NIO counts them on every write anyway, so the
            // bound costs nothing per write. A socket that refuses the
            // options (its peer already gone) is closed, not thrown for
            // (see above).
            do {
                try channel.syncOptions?.setOption(.socketOption(.so_sndbuf), value: Self.sendBuffer)
                try channel.syncOptions?.setOption(.writeBufferWaterMark, value: .init(low: maxUnread / 2, high: maxUnread))
            } catch {
                if !countedOutOnClose { admission.end() }
                try channel.pipeline.syncOperations.addHandler(CloseAtOnce(), position: .first)
                return nil
            }
            if addingUnreadLimit { try channel.pipeline.syncOperations.addHandler(UnreadLimit(self), position: .first) }
        }
        return admission
    }

    /// Closes a connection whose channel turned unwritable: more than
    /// `maxUnread` bytes wait for a peer that does not read (the channel's
    /// write-buffer high water mark, set by `admit`). Counted and logged.
    func writabilityChanged(_ context: ChannelHandlerContext) {
        if !context.channel.isWritable, context.channel.isActive {
            closedUnread(context.channel)
            context.close(promise: nil)
        }
    }

    /// Counts and (at most once per interval) logs a connection closed
    /// because its peer did not read.
    private func closedUnread(_ channel: any Channel) {
        let now = NIODeadline.now()
        let count = state.withLock { state -> Int? in
            state.closedUnread += 1
            state.unloggedUnread += 1
            guard state.lastUnreadLog.map({ now - $0 >= logInterval }) ?? true else { return nil }
            state.lastUnreadLog = now
            defer { state.unloggedUnread = 0 }
            return state.unloggedUnread
        }
        if let count {
            logger.warning(
                "closing connections whose peer does not read",
                metadata: [
                    "courier.reason": "more than \(maxUnread ?? 0) bytes waited for the peer", "courier.closed": "\(count)",
                    "courier.address": "\(channel.remoteAddress?.ipAddress ?? "unknown")",
                ])
        }
    }

    /// Counts a new connection in (not authenticated yet); nil, and
    /// counted as refused, when it is over a limit.
    private func count(_ channel: any Channel) -> Admission? {
        let address = channel.remoteAddress?.ipAddress ?? "unknown"
        let now = NIODeadline.now()
        let second = clock.now()
        let refusal = state.withLock { state -> (why: String, log: Int?)? in
            let why: String
            if state.open >= maxOpen {
                why = "the listener has its \(maxOpen) connections"
            } else if state.byAddress[address, default: 0] >= maxPerAddress {
                why = "the address has its \(maxPerAddress) connections"
            } else if state.unauthenticated >= maxUnauthenticated {
                why = "the listener has its \(maxUnauthenticated) connections that have not authenticated"
            } else if state.unauthenticatedByAddress[address, default: 0] >= maxUnauthenticatedPerAddress {
                why = "the address has its \(maxUnauthenticatedPerAddress) connections that have not authenticated"
            } else if let failures = state.failures[address], !failures.hasEnded(at: second, length: 1), failures.count >= maxFailuresPerAddress {
                why = "the address's connections ended \(failures.count) times in the last second without authenticating"
            } else {
                state.open += 1
                state.byAddress[address, default: 0] += 1
                state.unauthenticated += 1
                state.unauthenticatedByAddress[address, default: 0] += 1
                return nil
            }
            state.refused += 1
            state.unlogged += 1
            guard state.lastLog.map({ now - $0 >= logInterval }) ?? true else { return (why, nil) }
            state.lastLog = now
            defer { state.unlogged = 0 }
            return (why, state.unlogged)
        }
        if let refusal {
            if let count = refusal.log {
                logger.warning(
                    "refusing connections", metadata: ["courier.reason": "\(refusal.why)", "courier.refused": "\(count)", "courier.address": "\(address)"])
            }
            return nil
        }
        return Admission(guardian: self, address: address)
    }

    private func authenticated(_ address: String) {
        state.withLock { state in state.leaveUnauthenticated(address) }
    }

    /// `authenticated` false: it ended without authenticating, a failure
    /// of its address in the current second.
    private func countOut(_ address: String, authenticated: Bool) {
        let now = authenticated ? nil : clock.now()
        state.withLock { state in
            state.open -= 1
            let left = state.byAddress[address, default: 1] - 1
            state.byAddress[address] = left > 0 ? left : nil
            guard let now else { return }
            state.leaveUnauthenticated(address)
            guard maxFailuresPerAddress < .max else { return }
            state.countFailure(address, now: now)
        }
    }

    /// A failure of `address` in the current second.
    private func countFailure(_ address: String) {
        guard maxFailuresPerAddress < .max else { return }
        let now = clock.now()
        state.withLock { $0.countFailure(address, now: now) }
    }

    /// Connections open now that have not authenticated.
    var unauthenticated: Int { state.withLock { $0.unauthenticated } }

    /// Connections refused since the start.
    var refused: Int { state.withLock { $0.refused } }
    /// Connections closed since the start because their peer did not read.
    var closedForNotReading: Int { state.withLock { $0.closedUnread } }
    /// Connections open now.
    var open: Int { state.withLock { $0.open } }
}

/// Closes its connection as soon as it is active: a connection refused at
/// accept.
final class CloseAtOnce: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { context.close(promise: nil) }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}

/// Closes its connection when the channel turns unwritable: more than
/// `connections.maxUnreadBytes` wait for a peer that does not read (the
/// channel's write-buffer high water mark, set by `ListenerGuard.admit`).
final class UnreadLimit: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny

    private let limits: ListenerGuard

    init(_ limits: ListenerGuard) { self.limits = limits }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        limits.writabilityChanged(context)
        context.fireChannelWritabilityChanged()
    }
}

/// What one provider identity (a certificate's serial, an auth key's id)
/// may do with connections: open `connections.reconnectLimit` per
/// `connections.reconnectWindow` (APNs treats rapid connect and disconnect
/// cycles as a denial-of-service attempt, and so does Courier), and hold
/// `connections.maxPerIdentity` open at once in the whole server — so that
/// one team with valid credentials cannot fill a listener that every team
/// shares.
final class ProviderLimits: Sendable {
    enum Admission: Equatable {
        case admitted
        /// Over the reconnect limit of the window.
        case tooFast
        /// Over the open connections allowed to one identity.
        case tooMany
    }

    private struct State {
        var windows: [String: RateWindow] = [:]
        var open: [String: Int] = [:]
    }

    private let limit: Int
    private let length: TimeInterval
    let maxOpen: Int
    private let clock: any WallClock
    private let state = Mutex(State())

    init(limit: Int, window: TimeInterval, maxOpen: Int, clock: any WallClock) {
        self.limit = limit
        self.length = window
        self.maxOpen = maxOpen
        self.clock = clock
    }

    /// Counts one more connection of `identity` in its window and, when
    /// admitted, as open until `closed` completes.
    func admit(_ identity: String, until closed: EventLoopFuture<Void>) -> Admission {
        let now = clock.now()
        let admission = state.withLock { state -> Admission in
            // Forget ended windows now and then, so that the table stays small.
            if state.windows.count >= 10_000 { state.windows = state.windows.filter { !$0.value.hasEnded(at: now, length: length) } }
            guard state.windows[identity, default: RateWindow.unopened].take(limit: limit, per: length, now: now) else {
                return .tooFast
            }
            guard state.open[identity, default: 0] < maxOpen else { return .tooMany }
            state.open[identity, default: 0] += 1
            return .admitted
        }
        if admission == .admitted {
            closed.whenComplete { _ in
                self.state.withLock { state in
                    let left = state.open[identity, default: 1] - 1
                    state.open[identity] = left > 0 ? left : nil
                }
            }
        }
        return admission
    }

    /// Connections of `identity` open now.
    func open(_ identity: String) -> Int { state.withLock { $0.open[identity, default: 0] } }
}

/// Closes a connection whose frame, once started, is not complete within
/// `timeout`: a peer that sends one byte at a time keeps a silence timer
/// quiet but cannot hold a connection with half a frame for ever.
struct UnfinishedFrameDeadline {
    let timeout: TimeAmount
    private var scheduled: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    /// After the bytes of a read were read into frames: `unfinished` when
    /// part of a frame waits for more bytes, `progressed` when a whole
    /// frame was read since the last call (the deadline starts again).
    mutating func update(unfinished: Bool, progressed: Bool, channel: any Channel) {
        guard unfinished else {
            cancel()
            return
        }
        guard scheduled == nil || progressed else { return }
        scheduled?.cancel()
        scheduled = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    mutating func cancel() {
        scheduled?.cancel()
        scheduled = nil
    }
}

/// The process's limit of open files, which bounds its connections.
public enum DescriptorLimit {
    /// The soft limit in force (nil where it cannot be read).
    public static var current: Int? {
        #if canImport(Glibc)
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return nil }
        return Int(clamping: limits.rlim_cur)
        #else
        return nil
        #endif
    }

    /// Raises the soft limit to the hard one and returns the limit in
    /// force afterwards (nil where it cannot be read).
    public static func raise() -> Int? {
        #if canImport(Glibc)
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return nil }
        if limits.rlim_cur < limits.rlim_max {
            var raised = limits
            raised.rlim_cur = limits.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limits = raised }
        }
        // RLIM_INFINITY is all ones, beyond any Int: clamped to Int.max, read as unlimited.
        return Int(clamping: limits.rlim_cur)
        #else
        return nil
        #endif
    }
}

extension CourierConfiguration.Connections {
    var unfinishedFrame: TimeAmount { .milliseconds(Int64(unfinishedFrameTimeout * 1000)) }
    var binaryIdle: TimeAmount { .milliseconds(Int64(binaryIdleTimeout * 1000)) }
    var feedbackLifetime: TimeAmount { .milliseconds(Int64(feedbackTimeout * 1000)) }

    /// Descriptors kept for what is not a connection (the store, logs,
    /// files), at most a quarter of the limit.
    static func reserved(of descriptorLimit: Int) -> Int { min(256, descriptorLimit / 4) }

    /// These limits, lowered in proportion where every connection they
    /// allow and the reserve would not fit in `descriptorLimit` open files:
    /// a listener then refuses a connection (and closes it at once) before
    /// the process runs out of descriptors — out of them, accepting fails
    /// and the connection waiting keeps the socket readable, an event loop
    /// spinning on it (NIO's `AcceptBackoffHandler` does not stop that).
    public func fitted(toDescriptorLimit descriptorLimit: Int) -> Self {
        let room = max(16, descriptorLimit - Self.reserved(of: descriptorLimit))
        guard capacity > room else { return self }
        let scale = Double(room) / Double(capacity)
        var fitted = self
        fitted.maxPerListener = max(1, Int(Double(maxPerListener) * scale))
        fitted.maxPerDeviceListener = max(1, Int(Double(maxPerDeviceListener) * scale))
        if maxPerSandboxDeviceListener > 0 { fitted.maxPerSandboxDeviceListener = max(1, Int(Double(maxPerSandboxDeviceListener) * scale)) }
        fitted.maxPerAddress = min(maxPerAddress, max(fitted.maxPerListener, fitted.maxPerDeviceListener, fitted.maxPerDeviceListener(.sandbox)))
        return fitted
    }

    /// What `courier serve` prints of its connection limits, given the
    /// descriptor limit in force and the limits configured (before they
    /// were fitted to it).
    public func describe(descriptorLimit: Int?, configured: Self) -> String {
        let sandbox = maxPerDeviceListener(.sandbox)
        let devices = sandbox == maxPerDeviceListener ? "\(maxPerDeviceListener) per device listener" : "\(maxPerDeviceListener) on the production device listener, \(sandbox) on the sandbox's"
        var text = "Connections: at most \(devices), \(maxPerListener) per provider listener, "
        text += "\(maxPerAddress) per address; \(capacity) in all"
        guard let descriptorLimit else { return text + "\n" }
        text += descriptorLimit == Int.max ? " (open files: unlimited)\n" : " (open files: \(descriptorLimit))\n"
        if self != configured {
            // Said as the user's own only when they set it.
            let whose = configured == Self() ? "the default" : "the configured"
            text += "Lowered from \(whose) \(configured.capacity) to fit the open-file limit; raise it (ulimit -n) for more.\n"
        }
        return text
    }
}

/// What every listener shares about its peers: the limits of the
/// configuration, the connections of each certificate (revocation), and
/// the reconnect and open-connection limits of provider identities.
struct ConnectionPolicy: Sendable {
    let connections: CourierConfiguration.Connections
    let certificates: CertificateConnections
    let providers: ProviderLimits
    let memory: MemoryReturn
    /// The server's clock (the seconds of `ListenerGuard`'s failure budget).
    let clock: any WallClock
    /// The lines peers can cause, at most one per cause per interval.
    let peerLog: PeerLog
    /// Every listener's guard, by name, for the admin API's status.
    let open = ConnectionCounts()

    /// The limits of one listener (each listener has its own).
    func guardFor(_ listener: BoundPorts.Listener, _ environment: Environment, logger: Logger) -> ListenerGuard {
        let limits = ListenerGuard(listener, environment, connections, clock: clock, logger: logger)
        memory.watch(limits)
        open.add(limits, as: "\(listener.rawValue).\(environment.rawValue)")
        return limits
    }
}

/// The open connections of every listener, by name ("http2.production").
final class ConnectionCounts: Sendable {
    private let guards = Mutex<[String: ListenerGuard]>([:])

    func add(_ limits: ListenerGuard, as name: String) {
        guards.withLock { $0[name] = limits }
    }

    func counts() -> [String: Int] {
        guards.withLock { $0 }.mapValues(\.open)
    }
}
