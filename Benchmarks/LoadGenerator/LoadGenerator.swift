// courier-load: devices and pushes against a running `courier serve`.
//
//   courier-load --data DIR --devices N [--server-pid PID] [--rate R] [--seconds S]
//
// It makes N device identities in DIR (the server's data directory), connects
// them to the production device gateway, registers the demo app, and reports:
//   1. the server's memory per idle device connection (VmRSS of --server-pid);
//   2. delivery at a fixed rate R (expiration 0, the in-memory path): the
//      accept-to-device latency p50/p99/p99.9/max (the payload carries the
//      send time; --latency-file keeps every one);
//   3. delivery as fast as one binary connection sends (saturation);
//   4. the durable path: pushes that may be stored, to the same devices while
//      they are offline, and how fast they drain when the devices reconnect.
//
// `--mode broadcast`: N devices subscribe to one broadcast channel of the
// demo app, and each of `--broadcasts` broadcasts is timed until every
// device has it.
//
// `--mode mqtt`: the light delivery benchmark's fixed rate and saturation
// against an MQTT broker (MQTTLoad.swift, Benchmarks/mqtt/compare.sh).
import ArgumentParser
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
import Synchronization

struct Arguments: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "courier-load", abstract: "Load for a running courier serve: devices and pushes, or the binary gateway's acceptance rate.")

    @Option(help: "The running server's data directory (identities are made in it).")
    var data = "./courier-data"
    @Option(help: "The running server's configuration file, when it has one: its store (SQLite in the data directory, or PostgreSQL) is where identities are made.")
    var config: String?
    @Option(help: "Device connections (delivery mode).")
    var devices = 1000
    @Option(name: .customLong("server-pid"), help: "The server's process id, to sample its memory and CPU.")
    var serverPID: Int32?
    @Option(help: "Notifications per second in the fixed-rate phase (delivery mode).")
    var rate = 10_000
    @Option(help: "Length of the fixed-rate phase (default 5), or of a binary-raw run instead of --count.")
    var seconds: Double?
    @Option(name: .customLong("device-port"))
    var devicePort = 5223
    @Option(name: .customLong("binary-port"))
    var binaryPort = 2195
    @Option(name: .customLong("http2-port"))
    var http2Port = 2197
    @Option(name: .customLong("channel-port"))
    var channelPort = 2198
    @Option(help: "Broadcasts to send (broadcast mode), one after the other.")
    var broadcasts = 5
    @Option
    var host = "127.0.0.1"
    @Option(help: "delivery (devices and pushes), broadcast (devices subscribed to one channel, the time until all have each broadcast), binary (the provider library), binary-raw (pre-encoded frames), tls-idle (device connections that finish the TLS handshake and send nothing: the server's memory per connection without a device session), restart (devices on the device library, connected; the time until all are connected again after the server restarts: Benchmarks/limits/restart.sh) or mqtt (the light delivery benchmark against an MQTT broker: --devices QoS 1 subscribers over TLS, one publisher; Benchmarks/mqtt/compare.sh).")
    var mode = "delivery"
    @Option(help: "Provider connections (binary mode).")
    var connections = 1
    @Option(help: "Notifications to send (binary modes).")
    var count = 200_000
    @Flag(help: "Delivery mode with light clients: devices as channel handlers, pushes as raw frames on one connection.")
    var light = false
    @Option(name: .customLong("connect-wave"), help: "Devices that connect at a time at the start, each wave connected before the next (0: all at once).")
    var connectWave = 0
    @Option(name: .customLong("latency-file"), help: "Write each phase's latencies to PATH.fixed and PATH.saturation, one line per notification in arrival order: send time (Unix seconds) and latency (ms).")
    var latencyFile: String?
    @Option(name: .customLong("mqtt-port"), help: "The MQTT broker's TLS port (mqtt mode).")
    var mqttPort = 8883
    @Option(name: .customLong("mqtt-ca"), help: "The CA of the MQTT broker's certificate, PEM (mqtt mode).")
    var mqttCA: String?
    @Option(name: .customLong("write-interval"), help: "Microseconds between the provider's writes in the fixed-rate phase (--light): each write carries the notifications due by then.")
    var writeInterval = 1000
    @Option(help: "Seconds the tls-idle connections stay open after the memory figure is printed (for a measurement of one's own, such as the server's memory after malloc_trim); then they are closed.")
    var hold = 0
    @Option(help: ArgumentHelp("binary-raw: push to this token (hex; a virtual token, say) instead of the load device's, offline.", valueName: "hex"))
    var token: String?
    @Flag(help: "binary-raw: the load device stays connected, and reads and acknowledges every notification (counted).")
    var connected = false
    @Option(help: "cluster: the nodes' addresses, comma-separated (each with --device-port and --binary-port); device i connects to node i mod N.")
    var nodes: String?
    @Option(help: "cluster: this host's source addresses, comma-separated; device i connects from address i mod S.")
    var sources: String?
    @Option(name: .customLong("first-device"), help: "The first identity's number (identities first..first+devices-1 in DATA/load-devices): load processes side by side take ranges of their own.")
    var firstDevice = 0
    @Option(name: .customLong("durable-seconds"), help: "cluster: after saturation, pushes that may be stored (expiry in an hour) at --rate for this long, then each provider connection's count of accepted ones, and a wait for every one of them (Benchmarks/cluster: a node is cut or killed meanwhile).")
    var durableSeconds = 0.0
}

/// The server's configuration as the load generator opens its store:
/// `--config` when given (its store section), with `--data`, without the demo.
func serverConfiguration(_ arguments: Arguments) throws -> CourierConfiguration {
    var configuration = try arguments.config.map { try CourierConfiguration.load(contentsOf: $0) } ?? CourierConfiguration()
    configuration.dataDirectory = arguments.data
    configuration.demo.enabled = false
    return configuration
}

func residentKiB(_ pid: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
    }
    return nil
}

func nanoseconds() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1e9) }

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

/// Latencies and counts collected by the devices.
final class Collector: Sendable {
    private let state = Mutex<(latencies: [Double], sendTimes: [UInt64], count: Int)>(([], [], 0))
    /// Where each phase's latencies are written (`PATH.fixed`, `PATH.saturation`), if anywhere.
    private let latencyFile: String?
    /// The delivery ids seen, when notifications received more than once are counted (`duplicates`).
    private let seen: Mutex<(ids: Set<UUID>, duplicates: Int)>?

    init(latencyFile: String? = nil, distinct: Bool = false) {
        self.latencyFile = latencyFile
        seen = distinct ? Mutex(([], 0)) : nil
    }

    /// Notifications received again (the same delivery id), with `distinct`.
    var duplicates: Int { seen?.withLock { $0.duplicates } ?? 0 }

    func record(_ payload: [UInt8], deliveryID: UUID) {
        seen?.withLock { seen in
            if !seen.ids.insert(deliveryID).inserted { seen.duplicates += 1 }
        }
        record(payload)
    }

    func record(_ payload: [UInt8]) {
        let now = nanoseconds()
        // The payload ends with "t":<send time in ns>}: read the digits back from the end.
        var sent: UInt64 = 0
        var scale: UInt64 = 1
        var index = payload.index(before: payload.endIndex)
        while index > payload.startIndex, payload[index] == UInt8(ascii: "}") { index -= 1 }
        while index > payload.startIndex, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(payload[index]) {
            sent &+= UInt64(payload[index] - UInt8(ascii: "0")) &* scale
            scale &*= 10
            index -= 1
        }
        let latency: Double? = scale > 1 && payload[index] == UInt8(ascii: ":") ? Double(now &- sent) / 1e6 : nil
        state.withLock { state in
            state.count += 1
            if let latency {
                state.latencies.append(latency)
                state.sendTimes.append(sent)
            }
        }
    }
    func take() -> (latencies: [Double], sendTimes: [UInt64], count: Int) {
        state.withLock { state in
            defer { state = ([], [], 0) }
            return state
        }
    }
    var count: Int { state.withLock { $0.count } }

    /// Returns once `expected` notifications arrived, or after `limit` seconds.
    func waitFor(_ expected: Int, limit: Double) async {
        let deadline = Date().addingTimeInterval(limit)
        while count < expected && Date() < deadline { try? await Task.sleep(for: .milliseconds(1)) }
    }

    /// Prints a phase's rate, deliveries and latency, and starts counting anew.
    func report(_ name: String, sent: Int, seconds: Double) {
        let (latencies, sendTimes, count) = take()
        if let latencyFile {
            // A line per notification, in the order they arrived: its send
            // time (Unix time, seconds) and its latency in ms.
            let path = latencyFile + "." + name.prefix { $0 != " " }
            do {
                try zip(sendTimes, latencies).map { String(format: "%.6f", Double($0) / 1e9) + " " + String($1) }
                    .joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
            } catch {
                print("cannot write \(path): \(error)")
            }
        }
        let sorted = latencies.sorted()
        print(
            "\(name): sent \(sent) in \(String(format: "%.2f", seconds)) s (\(Int(Double(sent) / seconds))/s), delivered \(count), "
                + "latency p50 \(String(format: "%.2f", percentile(sorted, 0.5))) ms, p99 \(String(format: "%.2f", percentile(sorted, 0.99))) ms, "
                + "p99.9 \(String(format: "%.2f", percentile(sorted, 0.999))) ms, max \(String(format: "%.2f", sorted.last ?? .nan)) ms")
    }
}

/// Lets the server finish with the connections' leftovers before its
/// memory is read: the handshakes' and Connects' freed memory, which
/// Courier gives back at the second tick (one second each) after a storm
/// of connections stopped growing. The same wait for every server measured.
func settle() async throws {
    try await Task.sleep(for: .seconds(3))
}

/// Prints the server's memory growth per connection since `before` (KiB).
func printServerMemory(_ pid: Int32?, before: Int?, connections: Int) {
    guard let pid, let before, let after = residentKiB(pid) else { return }
    let perConnection = Double(after - before) / Double(connections)
    print("server memory: \(before) KiB before, \(after) KiB with \(connections) idle device connections: \(String(format: "%.1f", perConnection)) KiB per connection")
}

@main
struct LoadGenerator {
    /// A run that fails (a connection the server closed, a refused
    /// notification) ends with one line naming the error, not a crash.
    static func main() async {
        do {
            try await run()
        } catch {
            FileHandle.standardError.write(Data("courier-load: the run failed: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        // Pinned with taskset, the load generator runs one event loop per CPU it may use, as the server does.
        ProcessorAffinity.fitSharedThreads()
        let arguments = Arguments.parseOrExit()
        var logger = Logger(label: "courier-load")
        logger.logLevel = .error
        if arguments.mode == "binary" {
            try await binaryThroughput(arguments, logger: logger)
            return
        }
        if arguments.mode == "binary-raw" {
            try await rawBinaryThroughput(arguments, logger: logger)
            return
        }
        if arguments.mode == "mqtt" {
            try await mqttDelivery(arguments)
            return
        }
        let provisioner = try await Provisioner.open(configuration: try serverConfiguration(arguments), logger: logger)

        // Identities.
        let started = Date()
        let base = arguments.data + "/load-devices"
        var directories: [String] = []
        for index in arguments.firstDevice..<(arguments.firstDevice + arguments.devices) {
            let directory = base + "/\(index)"
            if !FileManager.default.fileExists(atPath: directory + "/identity.json") {
                _ = try await provisioner.issueDeviceIdentity(directory: directory)
            }
            directories.append(directory)
        }
        try await provisioner.close()
        print("identities: \(arguments.devices) ready in \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        if arguments.mode == "broadcast" {
            try await broadcastDelivery(arguments, directories: directories, logger: logger)
            return
        }
        if arguments.light {
            try await lightDelivery(arguments, directories: directories)
            return
        }
        if arguments.mode == "cluster" {
            try await clusterDelivery(arguments, directories: directories)
            return
        }
        if arguments.mode == "tls-idle" {
            try await tlsIdleConnections(arguments, directories: directories)
            return
        }
        if arguments.mode == "restart" {
            try await restartStorm(arguments, directories: directories, logger: logger)
            return
        }

        // Connect and register.
        let before = arguments.serverPID.flatMap(residentKiB)
        let collector = Collector(latencyFile: arguments.latencyFile)
        let connectStart = Date()
        /// Starts a device per identity; each records and acknowledges what it gets.
        /// With `wave` > 0, that many at a time, each wave connected before the next starts.
        func startDevices(wave: Int = 0) async throws -> ([DeviceClient], [Task<Void, Never>]) {
            var clients: [DeviceClient] = []
            var runners: [Task<Void, Never>] = []
            for directory in directories {
                if wave > 0, clients.count % wave == 0 {
                    for client in clients.suffix(wave) { try await client.waitUntilConnected() }
                }
                let client = try DeviceClient(
                    credentials: try DeviceCredentials.load(from: directory), environment: .production,
                    options: .init(host: arguments.host, port: arguments.devicePort, serverName: "localhost"), logger: logger)
                clients.append(client)
                runners.append(Task { await client.run() })
                runners.append(Task {
                    for await notification in client.notifications {
                        collector.record(notification.payload)
                        try? await client.acknowledge(notification)
                    }
                })
            }
            return (clients, runners)
        }
        var tokens: [[UInt8]] = []
        var (clients, runners) = try await startDevices(wave: arguments.connectWave)
        for client in clients { try await client.waitUntilConnected() }
        for client in clients { tokens.append(try await client.register("com.example.demo")) }
        let connectSeconds = Date().timeIntervalSince(connectStart)
        print("connected and registered \(clients.count) devices in \(String(format: "%.1f", connectSeconds)) s")
        printServerMemory(arguments.serverPID, before: before, connections: clients.count)

        let provider = try BinaryProviderClient(host: arguments.host, port: arguments.binaryPort, tls: demoProviderTLS(arguments), serverName: "localhost", logger: logger)

        func payload() -> [UInt8] { Array(#"{"aps":{"alert":"load"},"t":\#(nanoseconds())}"#.utf8) }


        // 2. A fixed rate, in-memory path (expiration 0, devices online).
        do {
            let total = Int(Double(arguments.rate) * (arguments.seconds ?? 5))
            let start = Date()
            for index in 0..<total {
                let due = start.addingTimeInterval(Double(index) / Double(arguments.rate))
                let wait = due.timeIntervalSinceNow
                if wait > 0.001 { try await Task.sleep(for: .seconds(wait)) }
                try await provider.send(token: tokens[index % tokens.count], payload: payload(), expiry: 0, priority: 10)
            }
            let sendSeconds = Date().timeIntervalSince(start)
            await collector.waitFor(total, limit: 30)
            collector.report("fixed rate \(arguments.rate)/s", sent: total, seconds: sendSeconds)
        }

        // 3. Saturation: as fast as one binary connection sends.
        do {
            let total = max(arguments.rate * 2, 20_000)
            let start = Date()
            for index in 0..<total {
                try await provider.send(token: tokens[index % tokens.count], payload: payload(), expiry: 0, priority: 10)
            }
            await collector.waitFor(total, limit: 60)
            let seconds = Date().timeIntervalSince(start)
            collector.report("saturation (in-memory path)", sent: total, seconds: seconds)
        }

        // 4. The durable path: devices offline, one stored notification each.
        for client in clients { await client.stop() }
        for runner in runners { await runner.value }
        let expiry = UInt32(Date().timeIntervalSince1970 + 3600)
        do {
            let total = tokens.count
            let start = Date()
            for index in 0..<total {
                try await provider.send(token: tokens[index % tokens.count], payload: payload(), expiry: expiry, priority: 10)
            }
            // A bad notification after them: its error response means all before it were handled (and are durable).
            try await provider.send(token: Array(tokens[0].prefix(4)), payload: payload())
            var failures = provider.failures.makeAsyncIterator()
            _ = await failures.next()
            let seconds = Date().timeIntervalSince(start)
            print("durable path: \(total) stored notifications accepted in \(String(format: "%.2f", seconds)) s (\(Int(Double(total) / seconds))/s)")
        }
        await provider.close()

        // Drain: the devices reconnect and receive what was held.
        let drainStart = Date()
        let again: [DeviceClient]
        (again, runners) = try await startDevices()
        await collector.waitFor(again.count, limit: 120)
        let drainSeconds = Date().timeIntervalSince(drainStart)
        print("drain: \(collector.count) held notifications reached \(again.count) reconnecting devices in \(String(format: "%.2f", drainSeconds)) s (\(Int(Double(collector.count) / drainSeconds))/s, connections included)")
        for client in again { await client.stop() }
        for runner in runners { await runner.value }
    }
}

/// The binary gateway's acceptance rate: `--connections` provider
/// connections each send `--count / connections` valid notifications (a
/// registered token, expiration 0, the device offline: parsed, checked,
/// token opened, handed to the dispatcher, then dropped as undeliverable),
/// then one bad notification; its error response means every notification
/// before it was handled.
func binaryThroughput(_ arguments: Arguments, logger: Logger) async throws {
    let token = try await offlineDemoToken(arguments, logger: logger)
    let tls = demoProviderTLS(arguments)
    let payload = benchmarkPayload
    let perConnection = arguments.count / arguments.connections
    let before = arguments.serverPID.flatMap(residentKiB)
    let start = Date()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<arguments.connections {
            group.addTask {
                let client = try BinaryProviderClient(host: arguments.host, port: arguments.binaryPort, tls: tls, serverName: "localhost", logger: logger)
                for _ in 0..<perConnection {
                    try await client.send(token: token, payload: payload, expiry: 0, priority: 10)
                }
                try await client.send(token: Array(token.prefix(4)), payload: payload)
                var failures = client.failures.makeAsyncIterator()
                _ = await failures.next()
                await client.close()
            }
        }
        try await group.waitForAll()
    }
    let seconds = Date().timeIntervalSince(start)
    let total = perConnection * arguments.connections
    print("binary: \(total) notifications over \(arguments.connections) connection(s) accepted in \(String(format: "%.2f", seconds)) s (\(Int(Double(total) / seconds))/s)")
    if let pid = arguments.serverPID, let before, let after = residentKiB(pid) {
        print("server memory: \(before) KiB before, \(after) KiB after")
    }
}

/// The demo app's provider certificate in the server's data directory.
func demoProviderTLS(_ arguments: Arguments) -> ProviderTLS {
    ProviderTLS(
        certificatePath: arguments.data + "/demo/com.example.demo.pem", keyPath: arguments.data + "/demo/com.example.demo-key.pem",
        caPath: arguments.data + "/pki/ca.pem")
}

let benchmarkPayload = Array(#"{"aps":{"alert":"Your order has shipped","badge":1,"sound":"default"},"order":"A-123456"}"#.utf8)

/// The demo app's token on a device of its own, registered and then taken
/// offline (so every push is accepted and dropped as undeliverable).
/// The binary modes' device (made once in the data directory), not yet connected.
func loadDevice(_ arguments: Arguments, logger: Logger) async throws -> DeviceClient {
    let provisioner = try await Provisioner.open(configuration: try serverConfiguration(arguments), logger: logger)
    let directory = arguments.data + "/load-binary-device"
    if !FileManager.default.fileExists(atPath: directory + "/identity.json") {
        _ = try await provisioner.issueDeviceIdentity(directory: directory)
    }
    try await provisioner.close()
    return try DeviceClient(
        credentials: try DeviceCredentials.load(from: directory), environment: .production,
        options: .init(host: arguments.host, port: arguments.devicePort, serverName: "localhost"), logger: logger)
}

func offlineDemoToken(_ arguments: Arguments, logger: Logger) async throws -> [UInt8] {
    let device = try await loadDevice(arguments, logger: logger)
    let running = Task { await device.run() }
    try await device.waitUntilConnected()
    let token = try await device.register("com.example.demo")
    await device.stop()
    await running.value
    return token
}

/// Completes a promise with the first 6 bytes the server sends: the
/// binary API's error response.
final class ErrorResponseReader: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let promise: EventLoopPromise<[UInt8]>

    init(promise: EventLoopPromise<[UInt8]>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        promise.succeed(Array(unwrapInboundIn(data).readableBytesView))
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }
}

/// The binary gateway with a minimal raw-socket sender: frames encoded
/// once, written in chunks of 1,000 (batched writes, each awaited, so TCP
/// back-pressure holds the sender), then one bad frame whose error response
/// means everything before it was handled. With `--seconds S` it writes for
/// S seconds instead of `--count` frames and samples the server's memory
/// every second: a sender faster than the server must not make it grow.
func rawBinaryThroughput(_ arguments: Arguments, logger: Logger) async throws {
    var device: (client: DeviceClient, running: Task<Void, Never>, received: Task<(count: Int, last: Date?), Never>)?
    let token: [UInt8]
    if let text = arguments.token {
        guard let given = Hex.decode(text) else { throw ValidationError("--token \(text) is not hex") }
        token = given
    } else if arguments.connected {
        let client = try await loadDevice(arguments, logger: logger)
        let running = Task { await client.run() }
        try await client.waitUntilConnected()
        token = try await client.register("com.example.demo")
        let received = Task { () -> (count: Int, last: Date?) in
            var count = 0
            var last: Date?
            for await notification in client.notifications {
                try? await client.acknowledge(notification)
                count += 1
                last = Date()
            }
            return (count, last)
        }
        device = (client, running, received)
    } else {
        token = try await offlineDemoToken(arguments, logger: logger)
    }
    var chunk = ByteBuffer()
    let perChunk = 1_000
    for index in 0..<perChunk {
        chunk.writeBinaryNotification(token: token, payload: benchmarkPayload, identifier: UInt32(index), expiry: 0, priority: 10)
    }
    let frameBytes = chunk.readableBytes / perChunk

    let duration = arguments.seconds
    let before = arguments.serverPID.flatMap(residentKiB)
    var samples: [Int] = []
    let (channel, answer) = try await rawProviderConnection(arguments)
    let start = Date()
    var sent = 0
    var nextSample = start.addingTimeInterval(1)
    while duration.map({ Date().timeIntervalSince(start) < $0 }) ?? (sent < arguments.count) {
        try await channel.writeAndFlush(chunk)
        sent += perChunk
        if duration != nil, Date() >= nextSample, let pid = arguments.serverPID, let resident = residentKiB(pid) {
            samples.append(resident)
            nextSample = nextSample.addingTimeInterval(1)
        }
    }
    let written = Date().timeIntervalSince(start)
    let response = try await sendBadFrame(on: channel, token: token, answer: answer)
    let seconds = Date().timeIntervalSince(start)
    try? await channel.close()
    print("binary (raw sender, \(frameBytes)-byte frames, chunks of \(perChunk)): \(sent) notifications written in \(String(format: "%.2f", written)) s, all handled in \(String(format: "%.2f", seconds)) s (\(Int(Double(sent) / seconds))/s); answer \(response)")
    if let device {
        // What the device got (each read and acknowledged) once the server has handled every frame.
        try? await Task.sleep(for: .seconds(2))
        await device.client.stop()
        await device.running.value
        let (received, last) = await device.received.value
        let after = last.map { String(format: "%.2f s", $0.timeIntervalSince(start)) } ?? "-"
        print("connected device: \(received) of \(sent) received and acknowledged, the last \(after) after the first was written")
    }
    if let pid = arguments.serverPID, let before, let after = residentKiB(pid) {
        print("server memory: \(before) KiB before, \(after) KiB after" + (samples.isEmpty ? "" : "; every second while writing: \(samples.map(String.init).joined(separator: " "))"))
    }
}
