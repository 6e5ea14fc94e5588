import CourierCore
import CourierDevice
import CourierProvider
import CourierServer
import CourierWire
import CourierTestSupport
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization
import Testing

/// Faults against `courier serve` running as a process on loopback: killed
/// with SIGKILL under load, its database's file system full, its database
/// read-only. The sizes here are what CI runs; docs/reliability.md has
/// larger runs (`COURIER_FAULT_DEVICES`) and their figures.
@Suite(.serialized, .timeLimit(.minutes(5))) struct FaultTests {
    /// Every notification answered 200 (with an expiration, so it may be
    /// held) reaches its device, unless a later one for that device and app
    /// replaced it while it was held; counted per run.
    @Test(arguments: 1...3) func acceptedNotificationsSurviveSIGKILLUnderLoad(run: Int) async throws {
        let directory = try temporaryDirectory("courier-fault")
        defer { removeTemporaryDirectory(directory) }
        var server = try FaultServer(directory: directory)
        let count = FaultServer.scale("COURIER_FAULT_DEVICES", default: 40)
        let fleet = try await Fleet.connect(try await Fleet.identities(count: count, server: server), server: server)
        let provider = try server.provider()
        let ledger = Ledger(devices: count)

        // Sixteen senders, each for its share of the devices, one push at a
        // time, until the server is gone; the kill comes after a random
        // number of acceptances.
        let lanes = 16
        let killAfter = Int.random(in: count * 5...count * 15)
        let senders = (0..<lanes).map { lane in
            Task {
                var sequence = 0
                while true {
                    sequence += 1
                    for device in stride(from: lane, to: count, by: lanes) {
                        do {
                            let result = try await provider.send(FaultServer.push(to: fleet.tokens[device], device: device, sequence: sequence))
                            ledger.record(device: device, sequence: sequence, result: result)
                        } catch {
                            return
                        }
                    }
                }
            }
        }
        try await waitUntil(limit: 120) { ledger.acceptedCount >= killAfter }
        server.program.signal(SIGKILL)
        #expect(await server.program.waitForExit() != 0)
        for sender in senders { await sender.value }
        await provider.close()

        try server.restart()
        let accepted = ledger.accepted
        try? await waitUntil(limit: 60) { fleet.outcome(accepted).lost == 0 }
        let outcome = fleet.outcome(accepted)
        print("SIGKILL run \(run): \(count) devices, killed after \(killAfter) acceptances; \(outcome)")
        #expect(ledger.refusals.isEmpty, "refused: \(ledger.refusals)")
        #expect(outcome.accepted >= killAfter)
        #expect(outcome.lost == 0, "\(outcome)")
        await fleet.stop()
        try server.stop()
    }

    /// A full file system: pushes that must be stored get 500
    /// InternalServerError and binary status 1, the server stays up, and
    /// once there is space again it accepts without a restart and delivers
    /// everything it accepted before.
    @Test(.enabled(if: Mount.canMountTmpfs, "needs permission to mount a tmpfs"))
    func aFullFileSystemFailsPushesUntilSpaceReturns() async throws {
        let directory = try temporaryDirectory("courier-fault")
        defer { removeTemporaryDirectory(directory) }
        let volume = directory + "/volume"
        try Mount.tmpfs(at: volume, megabytes: 32)
        defer { Mount.unmount(volume) }
        let filler = volume + "/filler"
        try await storeFault(directory: directory, data: volume + "/data") {
            try Mount.fill(filler)
        } clear: {
            try FileManager.default.removeItem(atPath: filler)
        }
    }

    /// A database that cannot be written (its files made immutable): the same
    /// answers as a full file system, and the same recovery.
    @Test(.enabled(if: Mount.canMakeImmutable, "needs chattr +i on the temporary directory's file system"))
    func aReadOnlyDatabaseFailsPushesUntilWritableAgain() async throws {
        let directory = try temporaryDirectory("courier-fault")
        defer { removeTemporaryDirectory(directory) }
        let data = directory + "/data"
        let files = ["courier.sqlite", "courier.sqlite-wal"].map { data + "/" + $0 }
        defer { try? Mount.immutable(files, false) }
        try await storeFault(directory: directory, data: data) {
            try Mount.immutable(files, true)
        } clear: {
            try Mount.immutable(files, false)
        }
    }

    /// Devices that stop reading while notifications keep coming for them
    /// do not hold back delivery to the others (the slow ones half in each
    /// environment, so that each device listener needs half of the
    /// descriptors the server may have); the server closes each
    /// once `connections.maxUnreadBytes` wait for it (64 KiB here), so what
    /// they pile up stays bounded.
    @Test func devicesThatStopReadingDoNotHoldBackTheOthers() async throws {
        let slowCount = FaultServer.scale("COURIER_FAULT_SLOW_DEVICES", default: 50)
        let pushesEach = FaultServer.scale("COURIER_FAULT_SLOW_PUSHES", default: 200)
        let fastCount = 10
        let fastPushes = 20
        // The test holds a descriptor per device and the server as many,
        // for both device listeners it sizes its limits for: where the
        // hard limit is lower, root may raise it (children inherit it).
        Mount.raiseDescriptorLimit(to: 3 * slowCount + 10_000)
        _ = DescriptorLimit.raise()
        let directory = try temporaryDirectory("courier-fault")
        defer { removeTemporaryDirectory(directory) }
        let server = try FaultServer(directory: directory, connections: ["maxPerDeviceListener": slowCount / 2 + 100, "maxUnreadBytes": 65_536])
        let identities = try await Fleet.identities(count: slowCount + fastCount, server: server)
        let slow: [(channel: any Channel, token: [UInt8])]
        do {
            slow = try await SlowDevice.connect(
                Array(identities.prefix(slowCount)), ports: [try server.port("device"), try server.port("device", .sandbox)])
        } catch {
            Issue.record("connecting the slow devices: \(error); the server said: \(server.program.output.suffix(10))")
            throw error
        }
        let fast = try await Fleet.connect(Array(identities.suffix(fastCount)), server: server)
        let provider = try server.provider()
        let sandboxProvider = try server.provider(.sandbox)
        let before = residentKiB(server.program.processIdentifier)

        // Every slow device gets its pushes (3 KB each, not to be stored)
        // from 16 senders; half-way through, the fast devices get theirs.
        let padding = String(repeating: "x", count: 3_000)
        let sent = Ledger(devices: slowCount)
        let slowSenders = (0..<16).map { lane in
            Task {
                for round in 0..<pushesEach {
                    for device in stride(from: lane, to: slowCount, by: 16) {
                        let payload = Array(#"{"aps":{"alert":"slow"},"s":\#(round),"pad":"\#(padding)"}"#.utf8)
                        let push = HTTP2Push(token: slow[device].token, payload: payload, topic: "com.example.demo", expiration: Date(timeIntervalSince1970: 0))
                        guard let result = try? await (device % 2 == 0 ? provider : sandboxProvider).send(push) else { return }
                        sent.record(device: device, sequence: round, result: result)
                    }
                }
            }
        }
        try await waitUntil(limit: 240) { sent.acceptedCount >= slowCount * pushesEach / 2 }
        let started = Date()
        let fastSenders = (0..<fastCount).map { device in
            Task {
                for sequence in 0..<fastPushes {
                    let push = HTTP2Push(
                        token: fast.tokens[device], payload: FaultServer.payload(device: device, sequence: sequence), topic: "com.example.demo",
                        expiration: Date(timeIntervalSince1970: 0))
                    _ = try? await provider.send(push)
                }
            }
        }
        try? await waitUntil(limit: 60) { (0..<fastCount).allSatisfy { fast.received($0).count == fastPushes } }
        let fastSeconds = Date().timeIntervalSince(started)
        for sender in fastSenders + slowSenders { await sender.value }
        let after = residentKiB(server.program.processIdentifier)
        // Reading again, a device the server closed finds the end of its
        // stream after what was already on the way; one left open would
        // stay open (it sends nothing, and its silence would take 120 s).
        for device in slow { device.channel.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in device.channel.read() } }
        try? await waitUntil(limit: 30) { slow.allSatisfy { !$0.channel.isActive } }
        let closed = slow.filter { !$0.channel.isActive }.count
        print(
            "slow devices: \(slowCount) stopped reading, \(sent.acceptedCount) pushes of 3 KB accepted for them; \(fastCount) other devices got "
                + "their \(fastCount * fastPushes) in \(String(format: "%.2f", fastSeconds)) s; \(closed) slow devices closed by the server; "
                + "server memory \(before ?? -1) KiB before, \(after ?? -1) KiB after")
        for device in 0..<fastCount { #expect(fast.received(device).sorted() == Array(0..<fastPushes), "device \(device)") }
        #expect(sent.refusals.isEmpty, "\(sent.refusals.prefix(5))")
        // Sent far more than 64 KiB beyond what the kernel's buffers hold
        // (128 KiB of the server's fixed send buffer, about as much again
        // received by the device), a slow device was closed; sent less than
        // the buffers hold, it was not.
        let bytesEach = pushesEach * 3_000
        if bytesEach >= 600_000 {
            #expect(closed == slowCount)
            #expect(server.program.output.contains { $0.contains("closing connections whose peer does not read") })
        } else if bytesEach <= 64_000 {
            #expect(closed == 0)
        }
        #expect(server.program.isRunning)
        for device in slow { device.channel.close(promise: nil) }
        await provider.close()
        await sandboxProvider.close()
        await fast.stop()
        try server.stop()
    }

    /// Devices 0–3 get a notification before the fault; during it pushes
    /// to devices 4–7 go on until one fails (some may still fit, in pages
    /// the database already has), then a binary push fails too; after it,
    /// devices 4–7 get one each. Every device then connects and must get
    /// the last notification accepted for it.
    private func storeFault(
        directory: String, data: String, inject: () throws -> Void, clear: () throws -> Void
    ) async throws {
        let server = try FaultServer(directory: directory, data: data)
        let identities = try await Fleet.identities(count: 8, server: server)
        let offline = try await Fleet.connect(identities, server: server)
        let tokens = offline.tokens
        await offline.stop()
        let provider = try server.provider()
        let ledger = Ledger(devices: 8)
        func push(_ device: Int, _ sequence: Int) async throws -> HTTP2PushResult {
            let result = try await provider.send(FaultServer.push(to: tokens[device], device: device, sequence: sequence))
            ledger.record(device: device, sequence: sequence, result: result)
            return result
        }
        for device in 0..<4 { #expect(try await push(device, 1).status == 200) }

        try inject()
        var failure: HTTP2PushResult?
        for attempt in 0..<5_000 {
            let result = try await push(4 + attempt % 4, 2 + attempt)
            if result.status != 200 {
                failure = result
                break
            }
        }
        #expect(failure?.status == 500)
        #expect(failure?.reason == .internalServerError)

        let binary = try BinaryProviderClient(
            host: "127.0.0.1", port: try server.port("binary"), tls: server.providerTLS, serverName: "localhost", logger: FaultServer.logger)
        let expiry = UInt32(Date().timeIntervalSince1970 + 86_400)
        let id = try await binary.send(token: tokens[4], payload: FaultServer.payload(device: 4, sequence: 99_999), expiry: expiry)
        var failures = binary.failures.makeAsyncIterator()
        #expect(await failures.next() == BinaryPushFailure(identifier: id, status: .processingError))
        await binary.close()
        #expect(server.program.isRunning)

        try clear()
        for device in 4..<8 { #expect(try await push(device, 100_000).status == 200) }
        await provider.close()

        let fleet = try await Fleet.connect(identities, server: server)
        let accepted = ledger.accepted
        try? await waitUntil(limit: 30) { fleet.outcome(accepted).lost == 0 }
        let outcome = fleet.outcome(accepted)
        print("store fault: the first refusal after \(ledger.acceptedCount - 8) acceptances during the fault; \(outcome)")
        #expect(outcome.lost == 0, "\(outcome)")
        for device in 0..<8 {
            #expect(fleet.received(device).contains(accepted[device].max() ?? -1), "device \(device): \(fleet.received(device))")
        }
        await fleet.stop()
        try server.stop()
    }
}

/// `courier serve` for a fault test: started on ephemeral ports, whose
/// numbers are then written into its configuration so that a restart binds
/// the same ones (devices reconnect to where they were).
struct FaultServer {
    static let logger: Logger = {
        var logger = Logger(label: "fault-test")
        logger.logLevel = .critical
        return logger
    }()

    let data: String
    let configPath: String
    private(set) var program: RunningProgram
    let ports: [String: Int]

    /// `connections`: settings of the configuration's `connections` section.
    init(directory: String, data: String? = nil, connections: [String: Int] = [:]) throws {
        self.data = data ?? directory + "/data"
        configPath = directory + "/courier.json"
        try Self.writeConfiguration(configPath, production: [:], connections: connections)
        let first = try ServeProcess.start(data: self.data, config: configPath, mergeStandardError: true)
        program = first.program
        ports = first.ports
        try Self.writeConfiguration(configPath, production: ports, connections: connections)
    }

    /// The configuration: production on `ports` (0 where missing), sandbox
    /// on ephemeral ports, no per-token rate limit (the load would reach
    /// it) and room for every device on the one loopback address.
    private static func writeConfiguration(_ path: String, production ports: [String: Int], connections: [String: Int]) throws {
        func section(_ environment: String) -> String {
            let entries = ["binary", "feedback", "http2", "device", "channels"].map { #""\#($0)": \#(ports["\($0).\(environment)"] ?? 0)"# }
            return "{" + entries.joined(separator: ", ") + "}"
        }
        let limits = connections.merging(["maxPerAddress": 20_000]) { given, _ in given }
            .sorted { $0.key < $1.key }.map { #""\#($0.key)": \#($0.value)"# }.joined(separator: ", ")
        try #"{"network": {"production": \#(section("production")), "sandbox": \#(section("sandbox")), "adminPort": 0}, "qos": {"tokenRateLimit": 1000000000}, "connections": {\#(limits)}, "logLevel": "warning"}"#
            .write(toFile: path, atomically: true, encoding: .utf8)
    }

    func port(_ interface: String, _ environment: Environment = .production) throws -> Int {
        try #require(ports["\(interface).\(environment.rawValue)"])
    }

    mutating func restart() throws {
        program = try ServeProcess.start(data: data, config: configPath, mergeStandardError: true).program
    }

    /// SIGTERM, and a clean exit.
    func stop() throws {
        program.signal(SIGTERM)
        #expect(program.waitForExit() == 0, "\(program.output.suffix(20))")
    }

    var providerTLS: ProviderTLS {
        ProviderTLS(certificatePath: data + "/demo/com.example.demo.pem", keyPath: data + "/demo/com.example.demo-key.pem", caPath: data + "/pki/ca.pem")
    }

    func provider(_ environment: Environment = .production) throws -> HTTP2ProviderClient {
        try HTTP2ProviderClient(
            options: .init(host: "127.0.0.1", port: try port("http2", environment), caPath: data + "/pki/ca.pem", serverName: "localhost"),
            credentials: .certificate(certificatePath: data + "/demo/com.example.demo.pem", keyPath: data + "/demo/com.example.demo-key.pem"),
            logger: Self.logger)
    }

    static func payload(device: Int, sequence: Int) -> [UInt8] {
        Array(#"{"aps":{"alert":"fault"},"d":\#(device),"s":\#(sequence)}"#.utf8)
    }

    /// A push that may be held for a day.
    static func push(to token: [UInt8], device: Int, sequence: Int) -> HTTP2Push {
        HTTP2Push(token: token, payload: payload(device: device, sequence: sequence), topic: "com.example.demo", expiration: Date().addingTimeInterval(86_400))
    }

    /// A size for the larger runs of docs/reliability.md, from the environment.
    static func scale(_ name: String, default value: Int) -> Int {
        ProcessInfo.processInfo.environment[name].flatMap(Int.init) ?? value
    }
}

/// What the provider had answered: per device, the sequence numbers accepted.
final class Ledger: Sendable {
    private let state: Mutex<(accepted: [Set<Int>], count: Int, refusals: [String])>

    init(devices: Int) { state = Mutex((Array(repeating: [], count: devices), 0, [])) }

    func record(device: Int, sequence: Int, result: HTTP2PushResult) {
        state.withLock { state in
            if result.isAccepted {
                state.accepted[device].insert(sequence)
                state.count += 1
            } else {
                state.refusals.append("\(result.status) \(result.reason?.rawValue ?? "")")
            }
        }
    }

    var accepted: [Set<Int>] { state.withLock { $0.accepted } }
    var acceptedCount: Int { state.withLock { $0.count } }
    var refusals: [String] { state.withLock { $0.refusals } }
}

/// What became of the accepted notifications.
struct Outcome: CustomStringConvertible {
    var accepted = 0
    /// Received by their device.
    var delivered = 0
    /// Not received, and a later one for the device was (held notifications
    /// replace each other: the store keeps the last per device and app).
    var replaced = 0
    /// Neither: lost.
    var lost = 0
    /// Received without a 200 before the kill (accepted as the server died).
    var unanswered = 0
    /// Received more than once (an acknowledgement the kill cut off).
    var repeated = 0

    var description: String {
        "accepted \(accepted): delivered \(delivered), replaced \(replaced), lost \(lost); "
            + "also delivered: \(unanswered) unanswered, \(repeated) repeated"
    }
}

/// The devices of a fault test: each a `DeviceClient` with the demo app
/// registered, recording the sequence numbers it receives and acknowledging.
final class Fleet: Sendable {
    let clients: [DeviceClient]
    let tokens: [[UInt8]]
    private let runs: [Task<Void, Never>]
    private let readers: [Task<Void, Never>]
    private let arrivals: Arrivals

    /// Per device, the sequence numbers received, in order.
    final class Arrivals: Sendable {
        let state: Mutex<[[Int]]>
        init(devices: Int) { state = Mutex(Array(repeating: [], count: devices)) }
    }

    private init(clients: [DeviceClient], tokens: [[UInt8]], runs: [Task<Void, Never>], arrivals: Arrivals, readers: [Task<Void, Never>]) {
        self.clients = clients
        self.tokens = tokens
        self.runs = runs
        self.arrivals = arrivals
        self.readers = readers
    }

    /// Makes `count` device identities in the server's data directory; returns their folders.
    static func identities(count: Int, server: FaultServer) async throws -> [String] {
        var configuration = CourierConfiguration(dataDirectory: server.data)
        configuration.demo.enabled = false
        let provisioner = try await Provisioner.open(configuration: configuration, logger: FaultServer.logger)
        var directories: [String] = []
        for index in 0..<count {
            let directory = server.data + "/fault-devices/\(index)"
            _ = try await provisioner.issueDeviceIdentity(directory: directory)
            directories.append(directory)
        }
        try await provisioner.close()
        return directories
    }

    /// Connects a device per identity, registers the demo app on each, and
    /// starts recording what arrives.
    static func connect(_ directories: [String], server: FaultServer) async throws -> Fleet {
        let port = try server.port("device")
        var clients: [DeviceClient] = []
        var runs: [Task<Void, Never>] = []
        var tokens: [[UInt8]] = []
        for directory in directories {
            let client = try DeviceClient(
                credentials: try DeviceCredentials.load(from: directory), environment: .production,
                options: .init(host: "127.0.0.1", port: port, initialBackoff: 0.05, maximumBackoff: 0.5, serverName: "localhost"),
                logger: FaultServer.logger)
            clients.append(client)
            runs.append(Task { await client.run() })
        }
        for client in clients {
            try await client.waitUntilConnected()
            tokens.append(try await client.register("com.example.demo"))
        }
        let arrivals = Arrivals(devices: clients.count)
        let readers = clients.enumerated().map { index, client in
            Task {
                for await notification in client.notifications {
                    let object = try? JSONSerialization.jsonObject(with: Data(notification.payload)) as? [String: Any]
                    let sequence = object?["s"] as? Int ?? -1
                    arrivals.state.withLock { $0[index].append(sequence) }
                    try? await client.acknowledge(notification)
                }
            }
        }
        return Fleet(clients: clients, tokens: tokens, runs: runs, arrivals: arrivals, readers: readers)
    }

    func received(_ device: Int) -> [Int] { arrivals.state.withLock { $0[device] } }

    func outcome(_ accepted: [Set<Int>]) -> Outcome {
        let arrivals = arrivals.state.withLock { $0 }
        var outcome = Outcome()
        for (device, sequences) in accepted.enumerated() {
            let received = Set(arrivals[device])
            let latest = received.max() ?? Int.min
            outcome.accepted += sequences.count
            for sequence in sequences {
                if received.contains(sequence) {
                    outcome.delivered += 1
                } else if latest > sequence {
                    outcome.replaced += 1
                } else {
                    outcome.lost += 1
                }
            }
            outcome.unanswered += received.subtracting(sequences).count
            outcome.repeated += arrivals[device].count - received.count
        }
        return outcome
    }

    func stop() async {
        for client in clients { await client.stop() }
        for run in runs { await run.value }
        for reader in readers { reader.cancel() }
    }
}

/// Waits until `condition` holds, checking every 10 ms; throws after `limit` seconds.
func waitUntil(limit: TimeInterval, _ condition: () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(limit)
    while !condition() {
        guard Date() < deadline else { throw WaitTimedOut(limit: limit) }
        try await Task.sleep(for: .milliseconds(10))
    }
}

struct WaitTimedOut: Error {
    let limit: TimeInterval
}

/// The file-system faults: a small tmpfs filled to the last byte, files made
/// immutable. Both need root (or the capabilities); each test that uses
/// them is enabled only where a probe succeeds.
enum Mount {
    static func tmpfs(at path: String, megabytes: Int) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let result = try runProgram("mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0700", "tmpfs", path])
        guard result.status == 0 else { throw MountFailure(message: result.stderr) }
    }

    static func unmount(_ path: String) {
        _ = try? runProgram("umount", ["-l", path])
    }

    /// Writes to `path` until the file system has no space left.
    static func fill(_ path: String) throws {
        guard let file = fopen(path, "w") else { throw MountFailure(message: "cannot create \(path)") }
        defer { fclose(file) }
        let chunk = [UInt8](repeating: 0x55, count: 4096)
        while fwrite(chunk, 1, chunk.count, file) == chunk.count && fflush(file) == 0 {}
    }

    static func immutable(_ paths: [String], _ on: Bool) throws {
        let result = try runProgram("chattr", [on ? "+i" : "-i"] + paths)
        guard result.status == 0 else { throw MountFailure(message: result.stderr) }
    }

    static func raiseDescriptorLimit(to wanted: Int) {
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0, limits.rlim_max < rlim_t(wanted) else { return }
        limits.rlim_max = rlim_t(wanted)
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits)
    }

    struct MountFailure: Error {
        let message: String
    }

    static let canMountTmpfs: Bool = {
        guard let directory = try? temporaryDirectory("courier-probe") else { return false }
        defer { removeTemporaryDirectory(directory) }
        guard (try? tmpfs(at: directory + "/volume", megabytes: 1)) != nil else { return false }
        unmount(directory + "/volume")
        return true
    }()

    /// True when an immutable file refuses a write through a descriptor
    /// opened before (what the test relies on: SQLite keeps its files open).
    static let canMakeImmutable: Bool = {
        guard let directory = try? temporaryDirectory("courier-probe") else { return false }
        defer { removeTemporaryDirectory(directory) }
        let path = directory + "/probe"
        guard let file = fopen(path, "w") else { return false }
        defer { fclose(file) }
        guard (try? immutable([path], true)) != nil else { return false }
        defer { try? immutable([path], false) }
        return fwrite("x", 1, 1, file) != 1 || fflush(file) != 0
    }()
}

/// A device that connects, registers the demo app and then stops reading:
/// what the server sends it fills the kernel's buffers, then waits in the
/// server's.
final class SlowDevice: ChannelInboundHandler, Sendable {
    typealias InboundIn = DeviceFrame
    typealias OutboundOut = DeviceMessage

    private let generation: UInt32?
    private let registered: EventLoopPromise<[UInt8]>

    private init(generation: UInt32?, registered: EventLoopPromise<[UInt8]>) {
        self.generation = generation
        self.registered = registered
    }

    /// Connects one per identity, 500 at a time, device `i` to `ports[i % ports.count]`;
    /// returns each channel with its token.
    static func connect(_ directories: [String], ports: [Int]) async throws -> [(channel: any Channel, token: [UInt8])] {
        var devices: [(channel: any Channel, token: [UInt8])] = []
        for start in stride(from: 0, to: directories.count, by: 500) {
            try await withThrowingTaskGroup(of: (Int, any Channel, [UInt8]).self) { group in
                for index in start..<min(start + 500, directories.count) {
                    let credentials = try DeviceCredentials.load(from: directories[index])
                    let context = try NIOSSLContext(configuration: credentials.tlsConfiguration())
                    group.addTask {
                        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                            .channelInitializer { channel in
                                channel.eventLoop.makeCompletedFuture {
                                    try channel.pipeline.syncOperations.addHandlers([
                                        try NIOSSLClientHandler(context: context, serverHostname: "localhost"),
                                        ByteToMessageHandler(DeviceFrameDecoder(maxFrameLength: 1 << 20)),
                                        MessageToByteHandler(DeviceMessageEncoder()),
                                        SlowDevice(generation: credentials.file.generation, registered: channel.eventLoop.makePromise()),
                                    ])
                                }
                            }
                            .connect(host: "127.0.0.1", port: ports[index % ports.count]).get()
                        let device = try await channel.pipeline.handler(type: SlowDevice.self).get()
                        return (index, channel, try await device.registered.futureResult.get())
                    }
                }
                var wave: [(Int, any Channel, [UInt8])] = []
                for try await device in group { wave.append(device) }
                devices += wave.sorted { $0.0 < $1.0 }.map { ($0.1, $0.2) }
            }
        }
        return devices
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            let connect = DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: generation)
            context.writeAndFlush(wrapOutboundOut(connect), promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let message = try? DeviceMessage(frame: unwrapInboundIn(data)) else { return }
        switch message {
        case .connectAck(.ok, _, _, _, _, _):
            context.writeAndFlush(wrapOutboundOut(.appTokenRequest(bundleID: "com.example.demo", requestID: 1)), promise: nil)
        case .appTokenResponse(_, _, let token?, .ok, _):
            // From here on nothing is read.
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in self.registered.succeed(token) }
        case .connectAck, .appTokenResponse, .error:
            registered.fail(SlowDeviceRefused(message: "\(message)"))
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        registered.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        registered.fail(error)
        context.close(promise: nil)
    }

    struct SlowDeviceRefused: Error {
        let message: String
    }
}

/// The resident memory of a process, KiB.
func residentKiB(_ pid: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
    }
    return nil
}
