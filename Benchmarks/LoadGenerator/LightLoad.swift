// The delivery benchmark with light clients (`--light`): each device is a
// channel handler (no task, no stream per device) and the pushes are
// binary frames written straight to one TLS connection, so that the load
// generator's own core is not what limits the figures.
import CourierCore
import CourierDevice
import CourierProvider
import CourierServer
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// One device of the benchmark: connects with its certificate, registers
/// the demo app when asked, and records and acknowledges every notification.
final class LightDevice: ChannelInboundHandler {
    typealias InboundIn = DeviceFrame
    typealias OutboundOut = DeviceMessage

    private let tokens: [[UInt8]]
    private let generation: UInt32?
    private let collector: Collector
    /// Succeeds once the server acknowledged the Connect.
    let connected: EventLoopPromise<Void>
    private var registered: EventLoopPromise<[UInt8]>?
    private var subscribed: EventLoopPromise<Void>?
    private var context: ChannelHandlerContext?
    private var unflushed = false

    init(tokens: [[UInt8]], generation: UInt32?, collector: Collector, connected: EventLoopPromise<Void>) {
        self.tokens = tokens
        self.generation = generation
        self.collector = collector
        self.connected = connected
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    /// Asks for the demo app's token.
    func register() -> EventLoopFuture<[UInt8]> {
        guard let context else { return connected.futureResult.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        let promise = context.eventLoop.makePromise(of: [UInt8].self)
        registered = promise
        context.writeAndFlush(wrapOutboundOut(DeviceMessage.appTokenRequest(bundleID: demoBundleID, requestID: 1)), promise: nil)
        return promise.futureResult
    }

    /// Subscribes the demo app to a broadcast channel.
    func subscribe(_ channelID: String) -> EventLoopFuture<Void> {
        guard let context else { return connected.futureResult.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        let promise = context.eventLoop.makePromise(of: Void.self)
        subscribed = promise
        context.writeAndFlush(wrapOutboundOut(DeviceMessage.subscribe(bundleID: demoBundleID, requestID: 2, channelID: channelID)), promise: nil)
        return promise.futureResult
    }

    /// Connect goes out once the TLS handshake is done, as the client library does.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            let connect = DeviceMessage.connect(version: DeviceMessage.version, tokens: tokens, keepAlive: nil, generation: generation)
            context.writeAndFlush(wrapOutboundOut(connect), promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let message: DeviceMessage
        do {
            message = try DeviceMessage(frame: unwrapInboundIn(data))
        } catch {
            fail(context, "unreadable frame: \(error)")
            return
        }
        switch message {
        case .notification(let notification):
            collector.record(notification.payload, deliveryID: notification.deliveryID)
            context.write(wrapOutboundOut(DeviceMessage.ack(deliveryID: notification.deliveryID, status: DeviceAckStatus.handled)), promise: nil)
            unflushed = true
        case .connectAck(let status, _, _, _, _, _):
            guard status == .ok else { return fail(context, "connection refused: \(status)") }
            connected.succeed()
        case .appTokenResponse(_, _, let token, let status, _):
            guard status == .ok, let token else { return fail(context, "registration refused: \(status)") }
            registered?.succeed(token)
        case .channelAck(_, let status):
            guard status == .ok else { return fail(context, "subscription refused: \(status)") }
            subscribed?.succeed()
        case .keepAlive:
            context.writeAndFlush(wrapOutboundOut(DeviceMessage.keepAliveAck), promise: nil)
        case .error(let code, let text):
            fail(context, "server error \(code): \(text)")
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if unflushed {
            unflushed = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        connected.fail(ChannelError.ioOnClosedChannel)
        registered?.fail(ChannelError.ioOnClosedChannel)
        subscribed?.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(context, "\(error)")
    }

    private func fail(_ context: ChannelHandlerContext, _ why: String) {
        connected.fail(LightLoadError(description: why))
        registered?.fail(LightLoadError(description: why))
        subscribed?.fail(LightLoadError(description: why))
        context.close(promise: nil)
    }
}

struct LightLoadError: Error, CustomStringConvertible {
    var description: String
}

let demoBundleID = "com.example.demo"

/// Connects light devices, `wave` at a time (0: all at once). Without
/// `tokens` each registers the demo app as soon as it is connected, as an
/// app starting does; with them, device `index` presents `tokens[index]`.
func connectLightDevices(
    _ contexts: [(NIOSSLContext, DeviceCredentials)], tokens: [[UInt8]]?, wave: Int, collector: Collector, arguments: Arguments,
    place: (@Sendable (Int) -> (host: String, source: String?))? = nil
) async throws -> [(channel: any Channel, token: [UInt8])] {
    let group = MultiThreadedEventLoopGroup.singleton
    @Sendable func connect(_ index: Int) async throws -> (any Channel, EventLoopFuture<Void>) {
        let (context, credentials) = contexts[index]
        let held = tokens.map { [$0[index]] } ?? credentials.tokens(in: .production)
        let (host, source) = place?(index) ?? (arguments.host, nil)
        var bootstrap = ClientBootstrap(group: group).channelOption(.tcpOption(.tcp_nodelay), value: 1)
        if let source { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: source, port: 0)) }
        return try await bootstrap
            .connect(host: host, port: arguments.devicePort) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let device = LightDevice(
                        tokens: held, generation: credentials.file.generation, collector: collector, connected: channel.eventLoop.makePromise())
                    try channel.pipeline.syncOperations.addHandlers([
                        try NIOSSLClientHandler(context: context, serverHostname: "localhost"),
                        ByteToMessageHandler(DeviceFrameDecoder(maxFrameLength: 1 << 20)),
                        MessageToByteHandler(DeviceMessageEncoder()),
                        device,
                    ])
                    return (channel, device.connected.futureResult)
                }
            }
    }
    @Sendable func register(_ channel: any Channel) async throws -> [UInt8] {
        try await channel.eventLoop.flatSubmit {
            do {
                return try channel.pipeline.syncOperations.handler(type: LightDevice.self).register()
            } catch {
                return channel.eventLoop.makeFailedFuture(error)
            }
        }.get()
    }
    return try await inWaves(contexts.count, wave: wave) { index in
        let (channel, connected) = try await connect(index)
        try await connected.get()
        if let tokens { return (channel, tokens[index]) }
        return (channel, try await register(channel))
    }
}

/// `body` for 0..<count, `wave` at a time (0: all at once), each wave done
/// before the next starts; the results in index order.
func inWaves<T: Sendable>(_ count: Int, wave: Int, _ body: @escaping @Sendable (Int) async throws -> T) async throws -> [T] {
    let size = wave > 0 ? wave : count
    var results: [T] = []
    for start in stride(from: 0, to: count, by: size) {
        try await withThrowingTaskGroup(of: (Int, T).self) { group in
            for index in start..<min(start + size, count) {
                group.addTask { (index, try await body(index)) }
            }
            var done: [(Int, T)] = []
            for try await result in group { done.append(result) }
            results += done.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }
    return results
}

/// One binary provider connection with the demo certificate, and the
/// first answer the gateway sends on it.
func rawProviderConnection(_ arguments: Arguments, host: String? = nil) async throws -> (any Channel, EventLoopFuture<[UInt8]>) {
    let context = try NIOSSLContext(configuration: demoProviderTLS(arguments).configuration())
    return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .channelOption(.tcpOption(.tcp_nodelay), value: 1)
        .connect(host: host ?? arguments.host, port: arguments.binaryPort) { channel in
            channel.eventLoop.makeCompletedFuture {
                let reader = ErrorResponseReader(promise: channel.eventLoop.makePromise())
                try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                try channel.pipeline.syncOperations.addHandler(reader)
                return (channel, reader.promise.futureResult)
            }
        }
}

/// A sender of messages carrying their send time, one connection's worth:
/// the binary provider's frames, or an MQTT publisher's messages.
protocol StampedSender {
    var channel: any Channel { get }
    /// Messages made so far.
    var sent: Int { get set }
    /// The next `count` messages in one buffer, each stamped as it is encoded.
    mutating func batch(_ count: Int) -> ByteBuffer
}

extension StampedSender {
    /// Writes `count` messages in one write and waits until TCP took them.
    mutating func send(_ count: Int) async throws {
        try await channel.writeAndFlush(batch(count))
    }

    /// Sends `total` messages (more) at `rate` per second from the channel's own
    /// event loop: every `interval` the ones due by then go out in one
    /// write, with no thread between the clock and the socket. Returns the
    /// seconds the sending took.
    mutating func sendAtRate(_ rate: Int, total: Int, interval: TimeAmount) async throws -> Double {
        let loop = channel.eventLoop
        let finished = loop.makePromise(of: (sent: Int, seconds: Double).self)
        let start = NIODeadline.now()
        let initial = self
        // `total` more than were sent before.
        let base = initial.sent
        loop.execute {
            let state = NIOLoopBoundBox(initial, eventLoop: loop)
            loop.scheduleRepeatedTask(initialDelay: .zero, delay: interval) { task in
                let elapsed = Double((NIODeadline.now() - start).nanoseconds) / 1e9
                let due = base + min(total, Int(elapsed * Double(rate)))
                if due > state.value.sent {
                    state.value.channel.writeAndFlush(state.value.batch(due - state.value.sent), promise: nil)
                }
                if state.value.sent >= base + total {
                    task.cancel()
                    finished.succeed((state.value.sent, Double((NIODeadline.now() - start).nanoseconds) / 1e9))
                }
            }
        }
        let (sent, seconds) = try await finished.futureResult.get()
        self.sent = sent
        return seconds
    }
}

/// The delivery benchmark's two phases on one sender: `--rate` a second for
/// `--seconds` (every `--write-interval` the messages due by then in one
/// write), then `--count` as fast as the connection takes them, 100 a write;
/// each reported once every message arrived.
func fixedRateAndSaturation(
    _ sender: inout some StampedSender, arguments: Arguments, collector: Collector, cpu: CPUMeter?, saturation: String
) async throws {
    do {
        let total = Int(Double(arguments.rate) * (arguments.seconds ?? 5))
        cpu?.start()
        let sendSeconds = try await sender.sendAtRate(arguments.rate, total: total, interval: .microseconds(Int64(arguments.writeInterval)))
        await collector.waitFor(total, limit: 30)
        collector.report("fixed rate \(arguments.rate)/s", sent: total, seconds: sendSeconds)
        cpu?.report()
    }
    do {
        let total = arguments.count
        let first = sender.sent
        cpu?.start()
        let start = ContinuousClock.now
        while sender.sent - first < total { try await sender.send(min(100, total - (sender.sent - first))) }
        await collector.waitFor(total, limit: 120)
        let seconds = (ContinuousClock.now - start) / .seconds(1)
        collector.report(saturation, sent: total, seconds: seconds)
        cpu?.report()
    }
}

/// Writes notifications carrying their send time to the devices' tokens in turn.
struct RawPusher: StampedSender {
    let channel: any Channel
    let tokens: [[UInt8]]
    var sent = 0
    /// The expiry of the notifications `batch` makes (0: never stored).
    var expiry: UInt32 = 0

    /// Writes `count` notifications in one write and waits until TCP took them.
    mutating func push(_ count: Int, expiry: UInt32) async throws {
        try await channel.writeAndFlush(frames(count, expiry: expiry))
    }

    mutating func batch(_ count: Int) -> ByteBuffer { frames(count, expiry: expiry) }

    /// The next `count` notifications, each stamped with the time it is encoded.
    mutating func frames(_ count: Int, expiry: UInt32) -> ByteBuffer {
        var buffer = channel.allocator.buffer(capacity: count * 160)
        for _ in 0..<count {
            let payload = #"{"aps":{"alert":"load"},"t":\#(nanoseconds())}"#.utf8
            buffer.writeBinaryNotification(token: tokens[sent % tokens.count], payload: payload, identifier: UInt32(truncatingIfNeeded: sent), expiry: expiry, priority: 10)
            sent += 1
        }
        return buffer
    }

    /// Ends with a bad notification; returns its error response.
    func finish(answer: EventLoopFuture<[UInt8]>) async throws -> [UInt8] {
        try await sendBadFrame(on: channel, token: tokens[0], answer: answer)
    }
}

/// Writes a bad notification (a 4-byte token) on a raw provider connection
/// and returns its error response, which means the gateway handled every
/// notification before it.
func sendBadFrame(on channel: any Channel, token: [UInt8], answer: EventLoopFuture<[UInt8]>) async throws -> [UInt8] {
    var buffer = channel.allocator.buffer(capacity: 160)
    buffer.writeBinaryNotification(token: token.prefix(4), payload: #"{"aps":{}}"#.utf8, identifier: 0xBAD, expiry: 0, priority: 10)
    try await channel.writeAndFlush(buffer)
    return try await answer.get()
}

func lightDelivery(_ arguments: Arguments, directories: [String]) async throws {
    let contexts = try directories.map { directory in
        let credentials = try DeviceCredentials.load(from: directory)
        return (try NIOSSLContext(configuration: credentials.tlsConfiguration()), credentials)
    }
    let collector = Collector(latencyFile: arguments.latencyFile)
    let before = arguments.serverPID.flatMap(residentKiB)
    let connectStart = Date()
    var devices = try await connectLightDevices(contexts, tokens: nil, wave: arguments.connectWave, collector: collector, arguments: arguments)
    let tokens = devices.map(\.token)
    print("connected and registered \(devices.count) light devices in \(String(format: "%.1f", Date().timeIntervalSince(connectStart))) s")
    try await settle()
    printServerMemory(arguments.serverPID, before: before, connections: devices.count)

    let cpu = arguments.serverPID.map { CPUMeter(server: $0) }

    var (channel, answer) = try await rawProviderConnection(arguments)
    var pusher = RawPusher(channel: channel, tokens: tokens)

    // The in-memory path: expiration 0, devices online.
    try await fixedRateAndSaturation(&pusher, arguments: arguments, collector: collector, cpu: cpu, saturation: "saturation (in-memory path)")
    _ = try await pusher.finish(answer: answer)
    try? await channel.close()

    // The durable path: devices offline, one stored notification each.
    for device in devices { device.channel.close(promise: nil) }
    for device in devices { try? await device.channel.closeFuture.get() }
    // The server sees the connections end shortly after: give it a moment.
    try await Task.sleep(for: .seconds(1))
    (channel, answer) = try await rawProviderConnection(arguments)
    pusher = RawPusher(channel: channel, tokens: tokens)
    do {
        let expiry = UInt32(Date().timeIntervalSince1970 + 3600)
        let start = ContinuousClock.now
        while pusher.sent < tokens.count { try await pusher.push(min(100, tokens.count - pusher.sent), expiry: expiry) }
        // The error response comes once every notification before it is committed.
        let response = try await pusher.finish(answer: answer)
        let seconds = (ContinuousClock.now - start) / .seconds(1)
        print("durable path: \(tokens.count) stored notifications accepted in \(String(format: "%.2f", seconds)) s (\(Int(Double(tokens.count) / seconds))/s); answer \(response)")
    }
    try? await channel.close()

    // Drain: the devices reconnect and receive what was held.
    let drainStart = ContinuousClock.now
    devices = try await connectLightDevices(contexts, tokens: tokens, wave: arguments.connectWave, collector: collector, arguments: arguments)
    await collector.waitFor(devices.count, limit: 120)
    let drainSeconds = (ContinuousClock.now - drainStart) / .seconds(1)
    print("drain: \(collector.count) held notifications reached \(devices.count) reconnecting devices in \(String(format: "%.2f", drainSeconds)) s (\(Int(Double(collector.count) / drainSeconds))/s, connections included)")
    for device in devices { device.channel.close(promise: nil) }
    for device in devices { try? await device.channel.closeFuture.get() }
}

/// CPU time (user + system, from /proc) of the server and of the load
/// generator itself over a phase, as a share of one core; and the time
/// the virtual machine's host took from its CPUs meanwhile (steal), as a
/// share of all of them.
final class CPUMeter: Sendable {
    let processes: [(name: String, pid: Int32)]
    private let started = Mutex<(ticks: [Int?], steal: (ticks: Int, cpus: Int)?, at: ContinuousClock.Instant)?>(nil)

    init(server: Int32) { processes = [("server", server), ("load generator", getpid())] }

    private static func ticks(_ pid: Int32) -> Int? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name; utime and stime are the 14th and 15th of the line.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return user + system
    }

    /// All CPUs' steal time (the eighth number of /proc/stat's first line) and the machine's CPUs.
    private static var steal: (ticks: Int, cpus: Int)? {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        let lines = stat.split(separator: "\n")
        let cpus = lines.filter { $0.hasPrefix("cpu") && $0.dropFirst(3).first?.isNumber == true }.count
        guard let fields = lines.first?.split(separator: " "), fields.count > 8, let ticks = Int(fields[8]) else { return nil }
        return (ticks, cpus)
    }

    private let bursts = StealBursts()

    func start() {
        started.withLock { $0 = (processes.map { Self.ticks($0.pid) }, Self.steal, .now) }
        bursts.start()
    }

    func report() {
        guard let (before, stealBefore, at) = started.withLock({ $0 }) else { return }
        let seconds = (ContinuousClock.now - at) / .seconds(1)
        let hertz = Double(sysconf(Int32(_SC_CLK_TCK)))
        func share(_ ticks: Int, cores: Int = 1) -> String { String(format: "%.0f", Double(ticks) / hertz / seconds / Double(cores) * 100) + " %" }
        var shares = zip(processes, before).compactMap { process, before -> String? in
            guard let before, let now = Self.ticks(process.pid) else { return nil }
            return "\(process.name) \(share(now - before))"
        }
        if let stealBefore, let steal = Self.steal { shares.append("steal \(share(steal.ticks - stealBefore.ticks, cores: steal.cpus)) of all cores") }
        print("  CPU, share of one core: \(shares.joined(separator: ", "))")
        print("  steal by CPU (/proc/stat every 10 ms): \(bursts.stop())")
    }
}

/// Samples each CPU's steal time every 10 ms while a phase runs: a share
/// over the whole phase hides the host taking a CPU away for tens of
/// milliseconds at a time, which is what shows in a latency tail.
final class StealBursts: Sendable {
    private struct CPU {
        var last: Int
        var samples = 0
        var burst = 0
        var longest = 0
    }
    private let state = Mutex<(running: Bool, cpus: [String: CPU])>((false, [:]))

    /// Each CPU's steal ticks (1/100 s), by name ("cpu0", ...).
    private static func read() -> [String: Int] {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return [:] }
        var ticks: [String: Int] = [:]
        for line in stat.split(separator: "\n") where line.hasPrefix("cpu") && line.dropFirst(3).first?.isNumber == true {
            let fields = line.split(separator: " ")
            if fields.count > 8, let steal = Int(fields[8]) { ticks[String(fields[0])] = steal }
        }
        return ticks
    }

    func start() {
        state.withLock { $0 = (true, Self.read().mapValues { CPU(last: $0) }) }
        let thread = Thread { [self] in
            while state.withLock({ $0.running }) {
                usleep(10_000)
                let now = Self.read()
                state.withLock { state in
                    for (name, ticks) in now {
                        guard var cpu = state.cpus[name] else { continue }
                        if ticks > cpu.last {
                            cpu.samples += 1
                            cpu.burst += ticks - cpu.last
                            cpu.longest = max(cpu.longest, cpu.burst)
                        } else {
                            cpu.burst = 0
                        }
                        cpu.last = ticks
                        state.cpus[name] = cpu
                    }
                }
            }
        }
        thread.start()
    }

    /// Stops sampling; per CPU, the samples in which it lost time and its longest run of them.
    func stop() -> String {
        state.withLock { state in
            state.running = false
            return state.cpus.sorted { $0.key < $1.key }.map { name, cpu in
                "\(name) in \(cpu.samples) samples, longest \(cpu.longest * 10) ms"
            }.joined(separator: ", ")
        }
    }
}

/// Completes its promise when the TLS handshake is done; nothing else.
private final class HandshakeWatcher: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let done: EventLoopPromise<Void>

    init(done: EventLoopPromise<Void>) { self.done = done }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent { done.succeed() }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        done.fail(LightLoadError(description: "a TLS-only connection was closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        done.fail(error)
        context.close(promise: nil)
    }
}

/// The server's memory per device connection that finished its TLS
/// handshake (client certificate and all) and sent nothing: what the TLS
/// stack and the connection's channel cost before Courier has a device
/// session for it. `--connect-wave` connections at a time, as in delivery.
func tlsIdleConnections(_ arguments: Arguments, directories: [String]) async throws {
    let contexts = try directories.map { try NIOSSLContext(configuration: DeviceCredentials.load(from: $0).tlsConfiguration()) }
    let before = arguments.serverPID.flatMap(residentKiB)
    let start = Date()
    let channels = try await inWaves(contexts.count, wave: arguments.connectWave) { index in
        let (channel, done) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: arguments.host, port: arguments.devicePort) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let watcher = HandshakeWatcher(done: channel.eventLoop.makePromise())
                    try channel.pipeline.syncOperations.addHandlers([
                        try NIOSSLClientHandler(context: contexts[index], serverHostname: "localhost"), watcher,
                    ])
                    return (channel, watcher.done.futureResult)
                }
            }
        try await done.get()
        return channel
    }
    print("\(channels.count) TLS-only device connections in \(String(format: "%.1f", Date().timeIntervalSince(start))) s")
    try await settle()
    printServerMemory(arguments.serverPID, before: before, connections: channels.count)
    if arguments.hold > 0 {
        print("holding the connections open for \(arguments.hold) s")
        try await Task.sleep(for: .seconds(arguments.hold))
    }
    for channel in channels { try? await channel.close() }
}

/// `--mode broadcast`: N light devices subscribe to one broadcast channel
/// of the demo app; each broadcast's time until every subscriber has it
/// (the payload carries its send time; the last arrival is the figure).
func broadcastDelivery(_ arguments: Arguments, directories: [String], logger: Logger) async throws {
    let contexts = try directories.map { directory in
        let credentials = try DeviceCredentials.load(from: directory)
        return (try NIOSSLContext(configuration: credentials.tlsConfiguration()), credentials)
    }
    let collector = Collector()
    let before = arguments.serverPID.flatMap(residentKiB)
    let connectStart = Date()
    let devices = try await connectLightDevices(contexts, tokens: nil, wave: arguments.connectWave, collector: collector, arguments: arguments)
    print("connected and registered \(devices.count) light devices in \(String(format: "%.1f", Date().timeIntervalSince(connectStart))) s")

    // The channel (policy 0: what is measured is the fan-out, not the store), with the demo certificate.
    let tls = demoProviderTLS(arguments)
    let credentials = HTTP2Credentials.certificate(certificatePath: tls.certificatePath!, keyPath: tls.keyPath!)
    let management = try HTTP2ProviderClient(
        options: .init(host: arguments.host, port: arguments.channelPort, caPath: tls.caPath, serverName: "localhost", connections: 1),
        credentials: credentials, logger: logger)
    let created = try await management.createChannel(bundleID: demoBundleID, policy: .noStorage)
    await management.close()
    guard let channelID = created.channelID else { throw LightLoadError(description: "channel not created: \(created)") }
    let subscribeStart = Date()
    _ = try await inWaves(devices.count, wave: arguments.connectWave) { index in
        let channel = devices[index].channel
        try await channel.eventLoop.flatSubmit {
            do {
                return try channel.pipeline.syncOperations.handler(type: LightDevice.self).subscribe(channelID)
            } catch {
                return channel.eventLoop.makeFailedFuture(error)
            }
        }.get()
    }
    print("\(devices.count) devices subscribed to channel \(channelID) in \(String(format: "%.1f", Date().timeIntervalSince(subscribeStart))) s")
    printServerMemory(arguments.serverPID, before: before, connections: devices.count)

    let push = try HTTP2ProviderClient(
        options: .init(host: arguments.host, port: arguments.http2Port, caPath: tls.caPath, serverName: "localhost", connections: 1),
        credentials: credentials, logger: logger)
    let cpu = arguments.serverPID.map { CPUMeter(server: $0) }
    for round in 1...arguments.broadcasts {
        cpu?.start()
        let payload = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"round":\#(round)}},"t":\#(nanoseconds())}"#.utf8)
        let start = ContinuousClock.now
        let answer = try await push.broadcast(HTTP2Broadcast(bundleID: demoBundleID, channelID: channelID, payload: payload))
        let answered = (ContinuousClock.now - start) / .seconds(1)
        guard answer.isSuccess else { throw LightLoadError(description: "broadcast refused: \(answer)") }
        await collector.waitFor(devices.count, limit: 60)
        let seconds = (ContinuousClock.now - start) / .seconds(1)
        let (latencies, _, count) = collector.take()
        let sorted = latencies.sorted()
        print(
            "broadcast \(round): answered in \(String(format: "%.1f", answered * 1000)) ms; \(count) of \(devices.count) devices had it, "
                + "the last after \(String(format: "%.1f", (sorted.last ?? .nan))) ms (p50 \(String(format: "%.1f", percentile(sorted, 0.5))) ms, "
                + "p99 \(String(format: "%.1f", percentile(sorted, 0.99))) ms; waited \(String(format: "%.2f", seconds)) s)")
        cpu?.report()
        // Apart, so that one broadcast's tail is not the next one's start.
        try await Task.sleep(for: .milliseconds(500))
    }
    await push.close()
    for device in devices { device.channel.close(promise: nil) }
}
