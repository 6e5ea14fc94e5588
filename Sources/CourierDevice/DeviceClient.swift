import CourierCore
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// The device side of Courier: keeps one TLS connection to the device
/// gateway open (reconnecting with back-off), registers apps for tokens,
/// hands notifications to the app as an `AsyncSequence`, acknowledges them
/// once handled and drops duplicates by their delivery id (the server's,
/// never the provider's apns-id, which may repeat).
///
/// Call `run()` in a task of its own; it returns when `stop()` is called or
/// the task is cancelled.
/// A change of a device client's connection (`DeviceClient.Options.onChange`).
public enum ConnectionChange: Sendable, Hashable {
    /// Connected to the endpoint (again, when `again`).
    case connected(endpoint: String, again: Bool)
    /// The connection ended; the client reconnects.
    case lost(endpoint: String, reason: String)
    /// A connection could not be made; the client tries again, backing off.
    case unreachable(endpoint: String, reason: String)
    /// The gateway refused this device (a revoked or unknown certificate).
    case refused(endpoint: String, reason: String)
}

public actor DeviceClient {
    /// One address of the device gateway.
    public struct Gateway: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// "host:port" ("[::1]:5223" for an IPv6 address); nil when it is not that.
        public init?(_ text: String) {
            guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65_535).contains(port) else {
                return nil
            }
            var host = String(text[..<colon])
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            guard !host.isEmpty else { return nil }
            self.init(host: host, port: port)
        }

        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    public struct Options: Sendable {
        /// Override the host and port of identity.json.
        public var host: String?
        public var port: Int?
        /// Several nodes' gateways, tried in turn (overriding `host` and
        /// `port`): a connection that fails or is lost moves on to the next.
        public var gateways: [Gateway]
        /// First and longest wait before reconnecting (seconds); doubles each time.
        public var initialBackoff: Double
        public var maximumBackoff: Double
        /// The name the server certificate must carry.
        public var serverName: String?
        /// Give up after this many failed attempts in a row (nil: never).
        public var attempts: Int?
        /// Told each change of the connection (connected, lost, cannot
        /// connect, refused), once per change: not each retry.
        public var onChange: (@Sendable (ConnectionChange) -> Void)?
        /// A refusal ends `run()` (`refusal` says why) instead of being retried.
        public var stopOnRefusal: Bool

        public init(
            host: String? = nil, port: Int? = nil, gateways: [Gateway] = [], initialBackoff: Double = 0.1, maximumBackoff: Double = 30,
            serverName: String? = nil, attempts: Int? = nil, onChange: (@Sendable (ConnectionChange) -> Void)? = nil, stopOnRefusal: Bool = false
        ) {
            self.gateways = gateways
            self.onChange = onChange
            self.stopOnRefusal = stopOnRefusal
            self.attempts = attempts
            self.host = host
            self.port = port
            self.initialBackoff = initialBackoff
            self.maximumBackoff = maximumBackoff
            self.serverName = serverName
        }
    }

    public nonisolated let environment: Environment
    public nonisolated let notifications: AsyncStream<DeviceNotification>
    private let notificationSink: AsyncStream<DeviceNotification>.Continuation
    var credentials: DeviceCredentials
    private let options: Options
    private let logger: Logger
    private let tls: NIOSSLContext

    private var writer: NIOAsyncChannelOutboundWriter<DeviceMessage>?
    private var channel: (any Channel)?
    private var connectedWaiters: [CheckedContinuation<Void, any Error>] = []
    private var drainWaiters: [CheckedContinuation<Void, Never>] = []
    private var drained = false
    private var pingWaiters: [CheckedContinuation<Void, any Error>] = []
    private var requests: [UInt32: CheckedContinuation<DeviceMessage, any Error>] = [:]
    var nextRequestID: UInt32 = 1
    private var seen = Set<UUID>()
    /// Broadcast channels subscribed to (channel id → app), subscribed
    /// again on every connection.
    var subscriptions: [String: String] = [:]
    /// Each channel's last broadcast, so that a channel's stored one is not
    /// sent again when the device subscribes again.
    var lastBroadcasts: [String: UUID] = [:]
    /// Subscribe requests sent at a reconnection, whose answer no caller waits for.
    var resubscribing: [UInt32: String] = [:]
    private var seenOrder: [UUID] = []
    private var stopped = false
    /// The back-off under way: resumed when it has passed, or at `stop()`.
    private var backoffWake: (id: Int, continuation: CheckedContinuation<Void, Never>, timer: Task<Void, Never>)?
    private var backoffs = 0
    private var terminalError: DeviceClientError?
    /// Connections made so far (for tests and tools).
    public private(set) var connections = 0

    public init(credentials: DeviceCredentials, environment: Environment, options: Options = Options(), logger: Logger) throws {
        self.credentials = credentials
        self.environment = environment
        self.options = options
        self.logger = logger
        (notifications, notificationSink) = AsyncStream.makeStream(of: DeviceNotification.self)
        tls = try NIOSSLContext(configuration: credentials.tlsConfiguration())
    }

    public var deviceID: UInt64 { credentials.deviceID }
    public var isConnected: Bool { writer != nil }

    // MARK: Connection

    /// Connects and stays connected until stopped.
    public func run() async {
        var backoff = options.initialBackoff
        var failures = 0
        while !stopped && !Task.isCancelled {
            let before = connections
            do {
                try await connectOnce()
                backoff = options.initialBackoff
                if !stopped {
                    report(
                        connections > before
                            ? .lost(endpoint: endpoint, reason: "the server closed the connection")
                            : .unreachable(endpoint: endpoint, reason: "the server closed the connection before it answered"))
                }
            } catch DeviceClientError.refused(let why) {
                logger.error("the gateway refused this device", metadata: ["courier.reason": "\(why)"])
                refuse(why, final: options.stopOnRefusal)
            } catch where ConnectionFailure(error) == .certificateRefused {
                // The gateway's TLS alert about this device's certificate: revoked, or not its CA's.
                let why = "its certificate was refused (revoked, or not of this server's CA)"
                certificateRefusals += 1
                // A revoked or foreign certificate is refused every time; a
                // passing failure of the server's store alerts the same way once.
                if !options.stopOnRefusal || certificateRefusals >= 3 { refuse(why, final: options.stopOnRefusal) }
                if !stopped, connections == before {
                    // Counted as a failed attempt, as any handshake that fails.
                    failures += 1
                    if let attempts = options.attempts, failures >= attempts {
                        terminalError = DeviceClientError.refused(why)
                        stopped = true
                    }
                }
            } catch {
                logger.debug("connection ended", metadata: ["courier.error": "\(error)"])
                let error = Self.reason(error)
                if !stopped {
                    if connections > before {
                        report(.lost(endpoint: endpoint, reason: "\(error)"))
                    } else if case .unreachable? = reported {
                    } else {
                        report(.unreachable(endpoint: endpoint, reason: "\(error)"))
                    }
                }
                if connections == before {
                    failures += 1
                    if let attempts = options.attempts, failures >= attempts {
                        terminalError = DeviceClientError.unreachable("\(endpoint): \(error)")
                        fail(connectedWaiters: terminalError!)
                        stopped = true
                    }
                }
            }
            if connections > before { failures = 0 }
            disconnected()
            if stopped || Task.isCancelled { break }
            // With several gateways the next one is tried; the back-off grows once all were.
            var wait = backoff
            if options.gateways.count > 1 {
                gatewayIndex += 1
                if gatewayIndex % options.gateways.count != 0 { wait = options.initialBackoff }
            }
            // Jitter: devices that lost the same node do not all come back at once.
            wait *= Double.random(in: 0.5...1)
            await backOff(seconds: wait)
            if options.gateways.count <= 1 || gatewayIndex % options.gateways.count == 0 { backoff = min(backoff * 2, options.maximumBackoff) }
        }
        fail(connectedWaiters: DeviceClientError.stopped)
        notificationSink.finish()
        stopped = true
    }

    /// A connection failure in a few words, where it is a common one.
    static func reason(_ error: any Error) -> String {
        switch ConnectionFailure(error) {
        case .refused: "connection refused"
        case .untrustedServer: "the server's certificate did not verify against the identity's CA"
        case .unresolved: "the host name did not resolve"
        case .timedOut: "no answer in time"
        case .closedBeforeHandshake: "the server refused the connection before its TLS handshake (over a connection limit; its log says which)"
        case .certificateRefused, nil: String(describing: error)
        }
    }

    /// Certificate refusals in a row (`stopOnRefusal` ends after three).
    private var certificateRefusals = 0

    /// Why the gateway refused this device, when that ended `run()`.
    public private(set) var refusal: String?

    /// What `onChange` was told last: a change is told once, not each retry.
    private var reported: ConnectionChange?

    /// The gateway refused this device: told, and the waiters fail; with
    /// `final`, `run()` ends.
    private func refuse(_ why: String, final: Bool) {
        report(.refused(endpoint: endpoint, reason: why))
        fail(connectedWaiters: DeviceClientError.refused(why))
        if final {
            refusal = why
            stopped = true
        }
    }

    private func report(_ change: ConnectionChange) {
        guard change != reported else { return }
        reported = change
        options.onChange?(change)
    }

    /// Waits `seconds`, or until `stop()` or the task's cancellation,
    /// whichever comes first: one timer, however long the wait (an
    /// application with thousands of clients waits without polling).
    private func backOff(seconds: Double) async {
        guard !stopped, !Task.isCancelled else { return }
        backoffs += 1
        let id = backoffs
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let timer = Task { [weak self] in
                    // Cancelled when the back-off ends early (no sleeping task left behind).
                    guard (try? await Task.sleep(for: .seconds(seconds))) != nil else { return }
                    await self?.endBackOff(id)
                }
                backoffWake = (id, continuation, timer)
            }
        } onCancel: {
            Task { await self.endBackOff(id) }
        }
    }

    private func endBackOff(_ id: Int? = nil) {
        guard let wake = backoffWake, id == nil || wake.id == id else { return }
        backoffWake = nil
        wake.timer.cancel()
        wake.continuation.resume()
    }

    /// Ends `run()` and closes the connection.
    public func stop() {
        endBackOff()
        stopped = true
        channel?.close(promise: nil)
    }

    /// Closes the current connection (`run()` reconnects); waiting for a
    /// connection or a drain after this waits for the next connection.
    public func dropConnection() {
        writer = nil
        drained = false
        channel?.close(promise: nil)
    }

    /// A KeepAlive round trip: when it returns, the server has handled
    /// every frame this device sent before it.
    public func ping() async throws {
        guard let writer else { throw DeviceClientError.disconnected }
        try await withCheckedThrowingContinuation { continuation in
            pingWaiters.append(continuation)
            Task {
                do {
                    try await writer.write(DeviceMessage.keepAlive)
                } catch {
                    self.failPings(error)
                }
            }
        }
    }

    private func failPings(_ error: any Error) {
        let waiters = pingWaiters
        pingWaiters = []
        for waiter in waiters { waiter.resume(throwing: error) }
    }

    /// Returns once connected (ConnectAck received).
    public func waitUntilConnected() async throws {
        if writer != nil { return }
        if stopped { throw terminalError ?? DeviceClientError.stopped }
        try await withCheckedThrowingContinuation { connectedWaiters.append($0) }
    }

    /// Returns once the server said NoStorage on the current connection:
    /// everything it held has been delivered.
    public func waitUntilDrained() async {
        if drained { return }
        await withCheckedContinuation { drainWaiters.append($0) }
    }

    private var endpoint: String { "\(host):\(port)" }
    private var host: String { gateway?.host ?? options.host ?? credentials.file.host }
    private var port: Int {
        gateway?.port ?? options.port ?? (environment == .production ? credentials.file.productionPort : credentials.file.sandboxPort)
    }
    /// The gateway tried now, when there are several.
    private var gateway: Gateway? { options.gateways.isEmpty ? nil : options.gateways[gatewayIndex % options.gateways.count] }
    private var gatewayIndex = 0

    private func connectOnce() async throws {
        let host = self.host
        let port = self.port
        let tls = self.tls
        let serverName = options.serverName ?? host
        let connection = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let ssl = try NIOSSLClientHandler(context: tls, serverHostname: serverName.first?.isNumber == true ? nil : serverName)
                    try channel.pipeline.syncOperations.addHandlers([
                        ssl,
                        ByteToMessageHandler(DeviceFrameDecoder(maxFrameLength: 1 << 20)),
                        MessageToByteHandler(DeviceMessageEncoder()),
                    ])
                    return try NIOAsyncChannel<DeviceFrame, DeviceMessage>(wrappingChannelSynchronously: channel)
                }
            }
        channel = connection.channel
        if stopped { connection.channel.close(promise: nil) }
        try await connection.executeThenClose { inbound, outbound in
            try await self.session(inbound: inbound, outbound: outbound)
        }
    }

    private func session(inbound: NIOAsyncChannelInboundStream<DeviceFrame>, outbound: NIOAsyncChannelOutboundWriter<DeviceMessage>) async throws {
        let tokens = credentials.tokens(in: environment)
        tokenLength = tokens.first?.count ?? 32
        try await outbound.write(
            DeviceMessage.connect(version: DeviceMessage.version, tokens: tokens, keepAlive: nil, generation: credentials.file.generation))
        var keepAliveTask: Task<Void, Never>?
        defer { keepAliveTask?.cancel() }
        for try await frame in inbound {
            let message: DeviceMessage
            do {
                message = try DeviceMessage(frame: frame, tokenLength: tokenLength)
            } catch let error as DeviceProtocolError {
                // A notification this device cannot read is refused, and the connection goes on.
                guard keepAliveTask != nil, let deliveryID = frame.deliveryIDOfUnreadableNotification else { throw error }
                logger.warning("refused a notification it could not read", metadata: ["courier.error": "\(error)"])
                try await outbound.write(DeviceMessage.ack(deliveryID: deliveryID, status: DeviceAckStatus.unreadable))
                continue
            }
            guard keepAliveTask != nil else {
                keepAliveTask = try await accept(connectAck: message, outbound: outbound)
                continue
            }
            try await handle(message, outbound: outbound)
        }
    }

    /// Handles the first frame, which must be a ConnectAck, and starts the keepalive.
    private func accept(connectAck message: DeviceMessage, outbound: NIOAsyncChannelOutboundWriter<DeviceMessage>) async throws -> Task<Void, Never> {
        guard case .connectAck(let status, _, let keepAlive, _, let refused, let announcedLength) = message else {
            throw DeviceClientError.protocolError(code: DeviceProtocolCode.malformedFrame.rawValue, message: "expected ConnectAck")
        }
        guard status == .ok else { throw DeviceClientError.refused(status.name) }
        if let announcedLength { tokenLength = Int(announcedLength) }
        if !refused.isEmpty { forget(refused) }
        connections += 1
        certificateRefusals = 0
        report(.connected(endpoint: endpoint, again: connections > 1))
        // The subscriptions go first: what the caller sends once connected comes after them.
        try await subscribeAgain(outbound)
        writer = outbound
        drained = false
        let waiters = connectedWaiters
        connectedWaiters = []
        for waiter in waiters { waiter.resume() }
        // The server closes a connection silent for two intervals.
        let interval = Double(max(1, keepAlive))
        return Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(interval / 2))
                if Task.isCancelled { return }
                try? await outbound.write(DeviceMessage.keepAlive)
            }
        }
    }

    /// The size token items must have: what the server's ConnectAck says,
    /// before that the size of the tokens held, else 32.
    private var tokenLength = 32

    private func handle(_ message: DeviceMessage, outbound: NIOAsyncChannelOutboundWriter<DeviceMessage>) async throws {
        switch message {
        case .notification(let notification):
            if seen.contains(notification.deliveryID) {
                // Delivered before and handled: acknowledge again, do not hand it over twice.
                try await outbound.write(DeviceMessage.ack(deliveryID: notification.deliveryID, status: DeviceAckStatus.handled))
                return
            }
            remember(notification.deliveryID)
            if let channelID = notification.channelID { lastBroadcasts[channelID] = notification.deliveryID }
            notificationSink.yield(notification)
        case .channelAck(let requestID, let status) where resubscribing[requestID] != nil:
            let channelID = resubscribing.removeValue(forKey: requestID)!
            if status != .ok {
                logger.warning("a broadcast channel is gone", metadata: ["courier.channel": "\(channelID)", "courier.status": "\(status)"])
                subscriptions[channelID] = nil
                lastBroadcasts[channelID] = nil
            }
        case .appTokenResponse(let requestID, _, _, _, _), .unregisterAck(let requestID, _), .channelAck(let requestID, _):
            requests.removeValue(forKey: requestID)?.resume(returning: message)
        case .noStorage:
            drained = true
            let waiters = drainWaiters
            drainWaiters = []
            for waiter in waiters { waiter.resume() }
        case .keepAliveAck:
            if !pingWaiters.isEmpty { pingWaiters.removeFirst().resume() }
        case .error(let code, let text):
            throw DeviceClientError.protocolError(code: code.rawValue, message: text)
        default:
            throw DeviceClientError.protocolError(code: DeviceProtocolCode.unknownCommand.rawValue, message: "unexpected \(message.command)")
        }
    }

    private func remember(_ id: UUID) {
        seen.insert(id)
        seenOrder.append(id)
        if seenOrder.count > 10_000 {
            seen.remove(seenOrder.removeFirst())
        }
    }

    private func disconnected() {
        writer = nil
        channel = nil
        let pending = requests
        requests = [:]
        for (_, waiter) in pending { waiter.resume(throwing: DeviceClientError.disconnected) }
        failPings(DeviceClientError.disconnected)
    }

    private func fail(connectedWaiters error: DeviceClientError) {
        let waiters = connectedWaiters
        connectedWaiters = []
        for waiter in waiters { waiter.resume(throwing: error) }
    }

    private func forget(_ refused: [[UInt8]]) {
        for (bundleID, hex) in credentials.file.tokens[environment.rawValue] ?? [:] {
            if let token = Hex.decode(hex), refused.contains(token) { credentials.setToken(nil, for: bundleID, in: environment) }
        }
        try? credentials.save()
    }

    // MARK: Apps

    func request(_ make: (UInt32) -> DeviceMessage) async throws -> DeviceMessage {
        guard let writer else { throw DeviceClientError.disconnected }
        let requestID = nextRequestID
        nextRequestID &+= 1
        let message = make(requestID)
        return try await withCheckedThrowingContinuation { continuation in
            requests[requestID] = continuation
            Task {
                do {
                    try await writer.write(message)
                } catch {
                    self.failRequest(requestID, error)
                }
            }
        }
    }

    private func failRequest(_ requestID: UInt32, _ error: any Error) {
        requests.removeValue(forKey: requestID)?.resume(throwing: error)
    }

    /// Registers an app for remote notifications and returns its token
    /// (the same token every time for this device, app and generation).
    public func register(_ bundleID: String) async throws -> [UInt8] {
        let answer = try await request { .appTokenRequest(bundleID: bundleID, requestID: $0) }
        guard case .appTokenResponse(_, _, let token, let status, _) = answer, status == .ok, let token else {
            throw DeviceClientError.unknownApp(bundleID)
        }
        credentials.setToken(token, for: bundleID, in: environment)
        try credentials.save()
        return token
    }

    /// The app's Live Activity push-to-start token, as ActivityKit's
    /// `pushToStartTokenUpdates` gives it: pushes of type `liveactivity`
    /// to `<bundle>.push-type.liveactivity` with it start an activity. The
    /// server registers the app on the device if it was not.
    public func liveActivityPushToStartToken(_ bundleID: String) async throws -> [UInt8] {
        try await liveActivityToken(bundleID, kind: .liveActivityPushToStart).token
    }

    /// Starts a Live Activity of the app: its number and update token, as
    /// ActivityKit's `pushTokenUpdates` gives it. Pushes to the token reach
    /// this device (their token item is this token) until `endLiveActivity`.
    public func startLiveActivity(_ bundleID: String) async throws -> LiveActivity {
        let (token, activity) = try await liveActivityToken(bundleID, kind: .liveActivityUpdate)
        guard let activity else { throw DeviceClientError.unknownApp(bundleID) }
        return LiveActivity(bundleID: bundleID, activity: activity, token: token)
    }

    /// The Live Activity ended: pushes to its update token are refused
    /// with 410 ExpiredToken from now on.
    public func endLiveActivity(_ liveActivity: LiveActivity) async throws {
        let answer = try await request { .unregister(bundleID: liveActivity.bundleID, requestID: $0, activity: liveActivity.activity) }
        guard case .unregisterAck(_, let status) = answer, status == .ok else { throw DeviceClientError.unknownApp(liveActivity.bundleID) }
    }

    private func liveActivityToken(_ bundleID: String, kind: AppTokenKind) async throws -> (token: [UInt8], activity: UInt32?) {
        let answer = try await request { .appTokenRequest(bundleID: bundleID, requestID: $0, kind: kind) }
        guard case .appTokenResponse(_, _, let token, let status, let activity) = answer, status == .ok, let token else {
            throw DeviceClientError.unknownApp(bundleID)
        }
        return (token, activity)
    }

    /// The app was removed: pushes to its token fail as Unregistered.
    public func unregister(_ bundleID: String) async throws {
        let answer = try await request { .unregister(bundleID: bundleID, requestID: $0) }
        guard case .unregisterAck(_, let status) = answer, status == .ok else { throw DeviceClientError.unknownApp(bundleID) }
        credentials.setToken(nil, for: bundleID, in: environment)
        try credentials.save()
    }

    /// Tells the server which apps want notifications now; returns once
    /// the server has applied it.
    public func setEnabledApps(_ bundleIDs: [String]) async throws {
        guard let writer else { throw DeviceClientError.disconnected }
        let hashes = bundleIDs.map(topicHash(of:))
        try await writer.write(DeviceMessage.filter(enabledTopicHashes: hashes))
        try await ping()
    }

    /// The app handled the notification: the server stops holding it.
    public func acknowledge(_ notification: DeviceNotification) async throws {
        guard let writer else { throw DeviceClientError.disconnected }
        try await writer.write(DeviceMessage.ack(deliveryID: notification.deliveryID, status: DeviceAckStatus.handled))
    }
}

/// A Live Activity a device started (`DeviceClient.startLiveActivity`).
public struct LiveActivity: Sendable, Hashable {
    public var bundleID: String
    /// Its number on this device and app.
    public var activity: UInt32
    /// Its update token.
    public var token: [UInt8]
}
