// The delivery benchmark over several nodes (`--mode cluster`,
// Benchmarks/cluster/measure.sh): light devices spread over the nodes and
// over this host's source addresses, one binary provider connection per
// node, and pushes spread round-robin over the nodes so that N-1 in N are
// for a device on another node (handed over).
import CourierCore
import CourierDevice
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// Device `index` of this process (identity `first + index`) connects to
/// node `(first + index) mod N` from source `(first + index) mod S`. The
/// provider connection of node n sends its m-th push to token m mod T,
/// whose device is on node m mod N: one push in N is for a device of the
/// node it is sent to, as with pushes spread round-robin.
func clusterDelivery(_ arguments: Arguments, directories: [String]) async throws {
    let nodes = (arguments.nodes ?? arguments.host).split(separator: ",").map(String.init)
    let sources = arguments.sources.map { $0.split(separator: ",").map(String.init) } ?? []
    let first = arguments.firstDevice
    let contexts = try directories.map { directory in
        let credentials = try DeviceCredentials.load(from: directory)
        return (try NIOSSLContext(configuration: credentials.tlsConfiguration()), credentials)
    }
    let collector = Collector(latencyFile: arguments.latencyFile, distinct: true)
    let connectStart = Date()
    let place: @Sendable (Int) -> (host: String, source: String?) = { index in
        (nodes[(first + index) % nodes.count], sources.isEmpty ? nil : sources[(first + index) % sources.count])
    }
    let devices = try await connectLightDevices(contexts, tokens: nil, wave: arguments.connectWave, collector: collector, arguments: arguments, place: place)
    // Token m's device is on node (first + m) mod N: order the tokens so that token m's is on node m mod N.
    let tokens = (0..<devices.count).map { devices[($0 + nodes.count - first % nodes.count) % devices.count].token }
    let seconds = Date().timeIntervalSince(connectStart)
    print(
        "connected and registered \(devices.count) light devices over \(nodes.count) nodes from \(max(1, sources.count)) addresses in "
            + "\(String(format: "%.1f", seconds)) s (\(Int(Double(devices.count) / seconds))/s)")
    // measure.sh acts on this line and the durable phase's as they come: out now, not when the buffer fills.
    fflush(nil)
    try await settle()

    var pushers: [RawPusher] = []
    var answers: [EventLoopFuture<[UInt8]>] = []
    for node in nodes {
        let (channel, answer) = try await rawProviderConnection(arguments, host: node)
        pushers.append(RawPusher(channel: channel, tokens: tokens))
        answers.append(answer)
    }

    // A first push from every node to every token, reported apart: what a node reads once per token (its
    // registration, the first time another node's device is pushed to) is not measured as delivery.
    var start = ContinuousClock.now
    pushers = try await concurrently(pushers) { pusher, _ in
        _ = try await pusher.sendAtRate(arguments.rate / nodes.count, total: tokens.count, interval: .microseconds(Int64(arguments.writeInterval)))
    }
    await collector.waitFor(tokens.count * nodes.count, limit: 60)
    collector.report("warm-up", sent: tokens.count * nodes.count, seconds: (ContinuousClock.now - start) / .seconds(1))

    // At a fixed rate, then as fast as the connections take them (expiration 0: online only).
    let total = Int(Double(arguments.rate) * (arguments.seconds ?? 5))
    start = ContinuousClock.now
    pushers = try await concurrently(pushers) { pusher, index in
        _ = try await pusher.sendAtRate(
            arguments.rate / nodes.count, total: share(total, of: nodes.count, index), interval: .microseconds(Int64(arguments.writeInterval)))
    }
    await collector.waitFor(total, limit: 30)
    collector.report("fixed rate \(arguments.rate)/s", sent: total, seconds: (ContinuousClock.now - start) / .seconds(1))
    start = ContinuousClock.now
    pushers = try await concurrently(pushers) { pusher, index in
        let count = share(arguments.count, of: nodes.count, index)
        let first = pusher.sent
        while pusher.sent - first < count { try await pusher.send(min(100, count - (pusher.sent - first))) }
    }
    await collector.waitFor(arguments.count, limit: 120)
    collector.report("saturation", sent: arguments.count, seconds: (ContinuousClock.now - start) / .seconds(1))

    guard arguments.durableSeconds > 0 else { return }
    // Pushes that may be stored, at the fixed rate: a node is cut or killed meanwhile (measure.sh).
    let durable = Int(Double(arguments.rate) * arguments.durableSeconds)
    start = ContinuousClock.now
    print("durable phase: \(durable) pushes at \(arguments.rate)/s from \(Int(Date().timeIntervalSince1970))")
    fflush(nil)
    let expiry = UInt32(Date().timeIntervalSince1970 + 3600)
    pushers = try await concurrently(pushers.map { RawPusher(channel: $0.channel, tokens: tokens, expiry: expiry) }) { pusher, index in
        _ = try? await pusher.sendAtRate(
            arguments.rate / nodes.count, total: share(durable, of: nodes.count, index), interval: .microseconds(Int64(arguments.writeInterval)))
    }
    // Each connection's last push before a bad one: the error response names the bad one when every push before it was taken.
    var accepted = 0
    for (index, pusher) in pushers.enumerated() {
        let sentHere = share(durable, of: nodes.count, index)
        do {
            let response = try await pusher.finish(answer: answers[index])
            let identifier = response.count == 6 ? UInt32(response[2]) << 24 | UInt32(response[3]) << 16 | UInt32(response[4]) << 8 | UInt32(response[5]) : 0
            if identifier == 0xBAD {
                accepted += sentHere
            } else {
                print("node \(nodes[index]): error response \(response) before the last push")
            }
        } catch {
            print("node \(nodes[index]): its provider connection ended (\(error)); its \(sentHere) pushes are not counted as accepted")
        }
    }
    await collector.waitFor(accepted, limit: 180)
    let (delivered, duplicates) = (collector.count, collector.duplicates)
    collector.report("durable at \(arguments.rate)/s", sent: durable, seconds: (ContinuousClock.now - start) / .seconds(1))
    print("durable phase: accepted \(accepted), delivered \(delivered) (\(duplicates) more than once), missing \(max(0, accepted - (delivered - duplicates)))")
}

/// Share `index` of `total` split over `parts`, the remainder to the first ones.
func share(_ total: Int, of parts: Int, _ index: Int) -> Int {
    total / parts + (index < total % parts ? 1 : 0)
}

/// Runs `body` on every pusher at once; returns them as they ended.
func concurrently(_ pushers: [RawPusher], _ body: @escaping @Sendable (inout RawPusher, Int) async throws -> Void) async throws -> [RawPusher] {
    try await withThrowingTaskGroup(of: (Int, RawPusher).self) { group in
        for (index, pusher) in pushers.enumerated() {
            group.addTask {
                var pusher = pusher
                try await body(&pusher, index)
                return (index, pusher)
            }
        }
        var done = pushers
        for try await (index, pusher) in group { done[index] = pusher }
        return done
    }
}
