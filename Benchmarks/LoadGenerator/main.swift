// courier-load: devices and pushes against a running `courier serve`.
//
//   courier-load --data DIR --devices N [--server-pid PID] [--rate R] [--seconds S]
//
// It makes N device identities in DIR (the server's data directory), connects
// them to the production device gateway, registers the demo app, and reports:
//   1. the server's memory per idle device connection (VmRSS of --server-pid);
//   2. delivery at a fixed rate R (expiration 0, the in-memory path): the
//      accept-to-device latency p50/p99 (the payload carries the send time);
//   3. delivery as fast as one binary connection sends (saturation);
//   4. the durable path: pushes that may be stored, to the same devices while
//      they are offline, and how fast they drain when the devices reconnect.
import CourierCore
import CourierDevice
import CourierProvider
import CourierServer
import Foundation
import Logging
import Synchronization

struct Arguments {
    var data = "./courier-data"
    var devices = 1000
    var serverPID: Int32?
    var rate = 10_000
    var seconds = 5.0
    var devicePort = 5223
    var binaryPort = 2195
    var host = "127.0.0.1"
    /// "delivery" (devices and pushes) or "binary" (the binary gateway's acceptance rate).
    var mode = "delivery"
    var connections = 1
    var count = 200_000

    init() {
        var iterator = CommandLine.arguments.dropFirst().makeIterator()
        while let flag = iterator.next() {
            guard let value = iterator.next() else { fatalError("\(flag) needs a value") }
            switch flag {
            case "--data": data = value
            case "--devices": devices = Int(value)!
            case "--server-pid": serverPID = Int32(value)!
            case "--rate": rate = Int(value)!
            case "--seconds": seconds = Double(value)!
            case "--device-port": devicePort = Int(value)!
            case "--binary-port": binaryPort = Int(value)!
            case "--host": host = value
            case "--mode": mode = value
            case "--connections": connections = Int(value)!
            case "--count": count = Int(value)!
            default: fatalError("unknown option \(flag)")
            }
        }
    }
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
    private let state = Mutex<(latencies: [Double], count: Int)>(([], 0))
    func record(_ payload: [UInt8]) {
        let now = nanoseconds()
        // The payload ends with "t":<send time in ns>}
        let text = String(decoding: payload, as: UTF8.self)
        var latency: Double?
        if let range = text.range(of: "\"t\":") {
            let digits = text[range.upperBound...].prefix { $0.isNumber }
            if let sent = UInt64(digits) { latency = Double(now &- sent) / 1e6 }
        }
        state.withLock { state in
            state.count += 1
            if let latency { state.latencies.append(latency) }
        }
    }
    func take() -> (latencies: [Double], count: Int) {
        state.withLock { state in
            defer { state = ([], 0) }
            return state
        }
    }
    var count: Int { state.withLock { $0.count } }
}

@main
struct LoadGenerator {
    static func main() async throws {
        let arguments = Arguments()
        var logger = Logger(label: "courier-load")
        logger.logLevel = .error
        if arguments.mode == "binary" {
            try await binaryThroughput(arguments, logger: logger)
            return
        }
        var configuration = CourierConfiguration(dataDirectory: arguments.data)
        configuration.demo.enabled = false
        let provisioner = try await Provisioner.open(configuration: configuration, logger: logger)

        // Identities.
        let started = Date()
        let base = arguments.data + "/load-devices"
        var directories: [String] = []
        for index in 0..<arguments.devices {
            let directory = base + "/\(index)"
            if !FileManager.default.fileExists(atPath: directory + "/identity.json") {
                _ = try await provisioner.issueDeviceIdentity(directory: directory)
            }
            directories.append(directory)
        }
        try await provisioner.close()
        print("identities: \(arguments.devices) ready in \(String(format: "%.1f", Date().timeIntervalSince(started))) s")

        // Connect and register.
        let before = arguments.serverPID.flatMap(residentKiB)
        let collector = Collector()
        let connectStart = Date()
        /// Starts a device per identity; each records and acknowledges what it gets.
        func startDevices() throws -> ([DeviceClient], [Task<Void, Never>]) {
            var clients: [DeviceClient] = []
            var runners: [Task<Void, Never>] = []
            for directory in directories {
                let client = try DeviceClient(
                    credentials: try DeviceCredentials.load(from: directory), environment: .production,
                    options: .init(host: arguments.host, port: arguments.devicePort, serverName: "localhost"), logger: logger)
                clients.append(client)
                runners.append(Task { await client.run() })
                runners.append(Task {
                    for await notification in client.notifications {
                        collector.record(notification.payload)
                        try? await client.acknowledge(notification.id)
                    }
                })
            }
            return (clients, runners)
        }
        var tokens: [[UInt8]] = []
        var (clients, runners) = try startDevices()
        for client in clients { try await client.waitUntilConnected() }
        for client in clients { tokens.append(try await client.register("com.example.demo")) }
        let connectSeconds = Date().timeIntervalSince(connectStart)
        print("connected and registered \(clients.count) devices in \(String(format: "%.1f", connectSeconds)) s")
        if let pid = arguments.serverPID, let before, let after = residentKiB(pid) {
            let perConnection = Double(after - before) * 1024 / Double(clients.count)
            print("server memory: \(before) KiB before, \(after) KiB with \(clients.count) idle device connections: \(String(format: "%.1f", perConnection / 1024)) KiB per connection")
        }

        let tls = ProviderTLS(
            certificatePath: arguments.data + "/demo/com.example.demo.pem", keyPath: arguments.data + "/demo/com.example.demo-key.pem",
            caPath: arguments.data + "/pki/ca.pem")
        let provider = try BinaryProviderClient(host: arguments.host, port: arguments.binaryPort, tls: tls, serverName: "localhost", logger: logger)

        func payload() -> [UInt8] { Array(#"{"aps":{"alert":"load"},"t":\#(nanoseconds())}"#.utf8) }

        func waitFor(_ expected: Int, limit: Double) async {
            let deadline = Date().addingTimeInterval(limit)
            while collector.count < expected && Date() < deadline { try? await Task.sleep(for: .milliseconds(5)) }
        }

        func report(_ name: String, sent: Int, seconds: Double) {
            let (latencies, count) = collector.take()
            let sorted = latencies.sorted()
            print(
                "\(name): sent \(sent) in \(String(format: "%.2f", seconds)) s (\(Int(Double(sent) / seconds))/s), delivered \(count), "
                    + "latency p50 \(String(format: "%.2f", percentile(sorted, 0.5))) ms, p99 \(String(format: "%.2f", percentile(sorted, 0.99))) ms")
        }

        // 2. A fixed rate, in-memory path (expiration 0, devices online).
        do {
            let total = Int(Double(arguments.rate) * arguments.seconds)
            let start = Date()
            for index in 0..<total {
                let due = start.addingTimeInterval(Double(index) / Double(arguments.rate))
                let wait = due.timeIntervalSinceNow
                if wait > 0.001 { try await Task.sleep(for: .seconds(wait)) }
                try await provider.send(token: tokens[index % tokens.count], payload: payload(), expiry: 0, priority: 10)
            }
            let sendSeconds = Date().timeIntervalSince(start)
            await waitFor(total, limit: 30)
            report("fixed rate \(arguments.rate)/s", sent: total, seconds: sendSeconds)
        }

        // 3. Saturation: as fast as one binary connection sends.
        do {
            let total = max(arguments.rate * 2, 20_000)
            let start = Date()
            for index in 0..<total {
                try await provider.send(token: tokens[index % tokens.count], payload: payload(), expiry: 0, priority: 10)
            }
            await waitFor(total, limit: 60)
            let seconds = Date().timeIntervalSince(start)
            report("saturation (in-memory path)", sent: total, seconds: seconds)
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
        (again, runners) = try startDevices()
        await waitFor(again.count, limit: 120)
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
    var configuration = CourierConfiguration(dataDirectory: arguments.data)
    configuration.demo.enabled = false
    let provisioner = try await Provisioner.open(configuration: configuration, logger: logger)
    let directory = arguments.data + "/load-binary-device"
    if !FileManager.default.fileExists(atPath: directory + "/identity.json") {
        _ = try await provisioner.issueDeviceIdentity(directory: directory)
    }
    try await provisioner.close()
    let device = try DeviceClient(
        credentials: try DeviceCredentials.load(from: directory), environment: .production,
        options: .init(host: arguments.host, port: arguments.devicePort, serverName: "localhost"), logger: logger)
    let running = Task { await device.run() }
    try await device.waitUntilConnected()
    let token = try await device.register("com.example.demo")
    await device.stop()
    await running.value

    let tls = ProviderTLS(
        certificatePath: arguments.data + "/demo/com.example.demo.pem", keyPath: arguments.data + "/demo/com.example.demo-key.pem",
        caPath: arguments.data + "/pki/ca.pem")
    let payload = Array(#"{"aps":{"alert":"Your order has shipped","badge":1,"sound":"default"},"order":"A-123456"}"#.utf8)
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
