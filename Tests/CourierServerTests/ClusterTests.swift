import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
import CourierTestSupport
import Foundation
import Logging
import Synchronization
import Testing

/// Several `courier serve` nodes on one PostgreSQL database, on this
/// machine, every port 0 (docs/operations.md): the first node provisions,
/// the others start on copies of its data directory (the same CA and
/// token keys, as operators copy `pki/`).
final class Nodes: @unchecked Sendable {
    let directory: String
    let server: PostgresServer
    let database: String
    /// Changed by the test's own task only.
    var nodes: [String: ServeProcess] = [:]
    /// More of `cluster`'s keys, each node's (", \"directHandOver\": false", say).
    var clusterExtra = ""

    init(directory: String, server: PostgresServer, database: String) {
        self.directory = directory
        self.server = server
        self.database = database
    }

    static func start(_ names: [String], clusterExtra: String = "") async throws -> Nodes {
        let server = try await PostgresServer.shared()
        let nodes = Nodes(directory: try temporaryDirectory(), server: server, database: try await server.createDatabase())
        nodes.clusterExtra = clusterExtra
        try (server.password + "\n").write(toFile: nodes.directory + "/pgpass", atomically: true, encoding: .utf8)
        for (index, name) in names.enumerated() {
            if index > 0 {
                let copied = try await runProgram("cp", ["-a", nodes.data(names[0]), nodes.data(name)])
                guard copied.status == 0 else { throw TestServerError("cp: \(copied.stderr)") }
            }
            try nodes.start(name)
        }
        return nodes
    }

    func data(_ name: String) -> String { directory + "/" + name }

    /// A node's `courier_handovers_total`: directly, and through the store.
    func handOvers(_ name: String) async throws -> (direct: Int, store: Int) {
        try await paths(name, "courier_handovers_total")
    }

    /// A node's `courier_inbox_shared_total`: directly, and through the store.
    func inboxShared(_ name: String) async throws -> (direct: Int, store: Int) {
        try await paths(name, "courier_inbox_shared_total")
    }

    /// A counter of a node's with a `path` label: its `direct` and `store` counts.
    private func paths(_ name: String, _ metric: String) async throws -> (direct: Int, store: Int) {
        let page = try await runProgram("curl", ["-s", "http://127.0.0.1:\(try port(name, "admin"))/metrics"]).stdout
        func count(_ path: String) -> Int {
            let prefix = metric + "{path=\"\(path)\"} "
            return page.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
        }
        return (count("direct"), count("store"))
    }

    func start(_ name: String) throws {
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        let config = directory + "/\(name).json"
        try #"""
        {"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}, "logLevel": "warning",
         "store": {"kind": "postgresql", "host": "\#(server.host)", "port": \#(server.port), "database": "\#(database)",
                   "user": "\#(server.user)", "passwordFile": "\#(directory)/pgpass"},
         "cluster": {"node": "\#(name)", "heartbeatInterval": 0.2, "nodeTimeout": 1, "peerPort": 0\#(clusterExtra)}}
        """#.write(toFile: config, atomically: true, encoding: .utf8)
        nodes[name] = try ServeProcess.start(data: data(name), config: config, mergeStandardError: true)
    }

    func port(_ name: String, _ listener: String) throws -> Int {
        guard let port = nodes[name]?.ports[listener] else { throw TestServerError("no \(listener) port of \(name)") }
        return port
    }

    /// A provider of the demo app (its certificate) on a node's HTTP/2 port.
    func provider(_ name: String, logger: Logger) throws -> HTTP2ProviderClient {
        let data = data(name)
        return try HTTP2ProviderClient(
            options: .init(host: "127.0.0.1", port: try port(name, "http2.production"), caPath: data + "/pki/ca.pem", serverName: "localhost", connections: 1),
            credentials: .certificate(certificatePath: data + "/demo/com.example.demo.pem", keyPath: data + "/demo/com.example.demo-key.pem"),
            logger: logger)
    }

    /// A provider of the demo team (its auth key) on a node's push port, or its channel management port.
    func tokenProvider(_ name: String, channels: Bool = false, logger: Logger) throws -> HTTP2ProviderClient {
        let demo = data(name) + "/demo"
        guard let file = try FileManager.default.contentsOfDirectory(atPath: demo).first(where: { $0.hasPrefix("AuthKey_") && $0.hasSuffix(".p8") }) else {
            throw TestServerError("no auth key in \(demo)")
        }
        let key = try AuthKey(keyID: String(file.dropFirst("AuthKey_".count).dropLast(".p8".count)), p8PEM: String(contentsOfFile: demo + "/" + file, encoding: .utf8))
        return try HTTP2ProviderClient(
            options: .init(
                host: "127.0.0.1", port: try port(name, channels ? "channels.production" : "http2.production"), caPath: data(name) + "/pki/ca.pem",
                serverName: "localhost", connections: 1),
            credentials: .token(key, teamID: "DEMOTEAM01"), logger: logger)
    }

    /// The demo device, connected to a node's device port.
    func device(_ name: String, logger: Logger) throws -> DeviceClient {
        try DeviceClient(
            credentials: try DeviceCredentials.load(from: data(name) + "/demo/device"), environment: .production,
            options: .init(host: "127.0.0.1", port: try port(name, "device.production"), serverName: "localhost"), logger: logger)
    }

    /// A GET of a node's admin API, as JSON.
    func admin(_ name: String, _ path: String) async throws -> [String: Any] {
        let token = try String(contentsOfFile: data(name) + "/admin-token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let result = try await runProgram("curl", ["-s", "-H", "Authorization: Bearer \(token)", "http://127.0.0.1:\(try port(name, "admin"))\(path)"])
        return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
    }

    /// A POST or DELETE to a node's admin API, as JSON.
    func admin(_ name: String, _ method: String, _ path: String, body: String? = nil) async throws -> [String: Any] {
        let token = try String(contentsOfFile: data(name) + "/admin-token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        var arguments = ["-s", "-X", method, "-H", "Authorization: Bearer \(token)"]
        if let body { arguments += ["-H", "Content-Type: application/json", "--data", body] }
        let result = try await runProgram("curl", arguments + ["http://127.0.0.1:\(try port(name, "admin"))\(path)"])
        return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
    }

    /// The demo device connected to a node, with the demo app registered:
    /// the client, the task running it, and the app's token.
    func connectedDevice(_ name: String, logger: Logger) async throws -> (DeviceClient, Task<Void, Never>, [UInt8]) {
        let device = try device(name, logger: logger)
        let running = Task { await device.run() }
        try await device.waitUntilConnected()
        return (device, running, try await device.register("com.example.demo"))
    }

    /// The demo app's token, registered by the demo device on a node,
    /// which then goes offline.
    func offlineToken(_ name: String, logger: Logger) async throws -> [UInt8] {
        let (device, running, token) = try await connectedDevice(name, logger: logger)
        await device.stop()
        await running.value
        return token
    }

    /// `GET /v1/devices` of a node's admin API.
    func devices(_ name: String) async throws -> [[String: Any]] {
        try await admin(name, "/v1/devices")["devices"] as? [[String: Any]] ?? []
    }

    /// Waits (at most `limit` seconds, polling) until `condition` holds.
    func eventually(_ limit: TimeInterval = 10, _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(limit)
        while Date() < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return try await condition()
    }

    /// Stops every node (SIGTERM) and waits for each; true when all
    /// stopped cleanly. Then removes the folder.
    func stop() async -> Bool {
        for node in nodes.values { node.program.signal(SIGTERM) }
        var clean = true
        for (name, node) in nodes {
            let status = await node.program.waitForExit()
            if status != 0 {
                print("\(name) exited with \(status): \(node.program.output.suffix(15).joined(separator: "\n"))")
                clean = false
            }
        }
        nodes = [:]
        removeTemporaryDirectory(directory)
        return clean
    }

    /// For a test that failed before `stop`: kills what is left.
    func kill() {
        for node in nodes.values { node.program.signal(SIGKILL) }
        removeTemporaryDirectory(directory)
    }
}

@Suite(.enabled(if: PostgresServer.available, Comment(rawValue: PostgresServer.unavailable)), .timeLimit(.minutes(2)))
struct ClusterTests {
    let logger: Logger = {
        var logger = Logger(label: "cluster-test")
        logger.logLevel = .warning
        return logger
    }()

    /// A push accepted on one node reaches the device connected to
    /// another (expiration 0 and a stored one); every node lists the
    /// device with its node; an uninstall on the device's node is 410 on
    /// another.
    @Test func aPushOnOneNodeReachesTheDeviceOnAnotherAndAnUninstallIsSeenEverywhere() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b", "node-c"])
        defer { nodes.kill() }

        let (device, running, token) = try await nodes.connectedDevice("node-b", logger: logger)
        var received = device.notifications.makeAsyncIterator()

        // Every node lists it, on node-b.
        for name in ["node-a", "node-b", "node-c"] {
            let listed = try await nodes.eventually {
                try await nodes.devices(name).contains { $0["node"] as? String == "node-b" }
            }
            #expect(listed, "\(name) lists the device on node-b")
        }

        let provider = try nodes.provider("node-a", logger: logger)
        let now = try await provider.send(
            HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"now or never"}}"#.utf8), topic: "com.example.demo", expiration: Date(timeIntervalSince1970: 0)))
        #expect(now.status == 200, "\(now)")
        #expect(await received.next().map { String(decoding: $0.payload, as: UTF8.self) } == #"{"aps":{"alert":"now or never"}}"#)

        let stored = try await provider.send(
            HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"kept"}}"#.utf8), topic: "com.example.demo", expiration: Date().addingTimeInterval(3600)))
        #expect(stored.status == 200, "\(stored)")
        #expect(await received.next().map { String(decoding: $0.payload, as: UTF8.self) } == #"{"aps":{"alert":"kept"}}"#)

        // A Live Activity on the device: updates through node-a arrive until it ends on node-b,
        // then node-a answers 410 ExpiredToken (what it knew of the activity is forgotten).
        let activity = try await device.startLiveActivity("com.example.demo")
        let tokenProvider = try nodes.tokenProvider("node-a", logger: logger)
        func liveActivityUpdate() async throws -> HTTP2PushResult {
            try await tokenProvider.send(
                HTTP2Push(
                    token: activity.token, payload: Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}"#.utf8),
                    topic: "com.example.demo.push-type.liveactivity", pushType: "liveactivity"))
        }
        #expect(try await liveActivityUpdate().status == 200)
        #expect(await received.next()?.token == activity.token)
        try await device.endLiveActivity(activity)
        let expired = try await nodes.eventually { try await liveActivityUpdate().reason == .expiredToken }
        #expect(expired, "node-a answers ExpiredToken once the activity ended on node-b")
        await tokenProvider.close()

        // The app is removed on node-b; node-a answers 410 Unregistered.
        try await device.unregister("com.example.demo")
        let gone = try await nodes.eventually {
            try await provider.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"gone?"}}"#.utf8), topic: "com.example.demo")).status == 410
        }
        #expect(gone, "node-a answers 410 after the uninstall on node-b")
        let answer = try await provider.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"gone?"}}"#.utf8), topic: "com.example.demo"))
        #expect(answer.reason == .unregistered)

        await provider.close()
        await device.stop()
        await running.value
        // Gone from every node's list once it disconnected.
        for name in ["node-a", "node-c"] {
            #expect(try await nodes.eventually { try await nodes.devices(name).isEmpty }, "\(name) no longer lists it")
        }
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// Pushes in quick succession on one node to a device on another all
    /// arrive, whatever their expiration: handed over one by one, none
    /// replaces another on the way (as on one node, where each goes out at
    /// once).
    /// How a node hands pushes over in `everyPushHandedOverArrivesNoneReplaced`.
    enum HandOverPath: String, CaseIterable, Sendable {
        /// To the other node directly (`NodeListener`).
        case direct
        /// Direct hand-overs on, but the other node records an address nothing listens on: the store's queue.
        case unreachable
        /// `cluster.directHandOver` false: the store's queue.
        case store

        /// The nodes' `cluster` settings for it.
        var clusterExtra: String {
            switch self {
            case .direct: ""
            // Loopback, where the nodes' ports are not bound (they listen on 127.0.0.1): refused at once.
            case .unreachable: #", "peerHost": "127.0.0.2""#
            case .store: #", "directHandOver": false"#
            }
        }
    }

    /// Pushes accepted on one node for a device connected to another all
    /// arrive, in whichever way the node hands them over; the node's
    /// `courier_handovers_total` says which way each went.
    @Test(arguments: HandOverPath.allCases)
    func everyPushHandedOverArrivesNoneReplaced(path: HandOverPath) async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"], clusterExtra: path.clusterExtra)
        defer { nodes.kill() }
        let (device, running, token) = try await nodes.connectedDevice("node-b", logger: logger)
        #expect(try await nodes.eventually { try await nodes.devices("node-a").contains { $0["node"] as? String == "node-b" } })
        let accepted = AcceptedIDs()
        let received = AcceptedIDs()
        let receiving = Task {
            for await notification in device.notifications {
                received.append(notification.id)
                try? await device.acknowledge(notification)
            }
        }
        let provider = try nodes.provider("node-a", logger: logger)
        func push(_ text: String, stored: Bool) async throws {
            let id = UUID()
            let expiration = stored ? Date().addingTimeInterval(3600) : Date(timeIntervalSince1970: 0)
            let result = try await provider.send(
                HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"\#(text)"}}"#.utf8), topic: "com.example.demo", id: id, expiration: expiration))
            if result.status == 200 { accepted.append(id) }
        }
        // node-a hands over directly once it knows node-b's address (recorded at node-b's beat, read at
        // node-a's): until then, through the store. A push every 100 ms until one went the path's way.
        let waysBefore = try await nodes.eventually {
            try await push("probe", stored: false)
            try await Task.sleep(for: .milliseconds(100))
            let counted = try await nodes.handOvers("node-a")
            return path == .direct ? counted.direct > 0 : counted.store > 0
        }
        #expect(waysBefore)
        let before = try await nodes.handOvers("node-a")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sender in 0..<4 {
                group.addTask {
                    // Half of expiration 0, half that may be stored.
                    for n in 0..<50 { try await push("\(sender)-\(n)", stored: n.isMultiple(of: 2)) }
                }
            }
            try await group.waitForAll()
        }
        let all = Set(accepted.all)
        #expect(all.count == accepted.all.count && all.count >= 201)
        #expect(
            try await nodes.eventually(20) { Set(received.all).isSuperset(of: all) }, "\(all.subtracting(received.all).count) accepted pushes did not arrive")
        receiving.cancel()
        let after = try await nodes.handOvers("node-a")
        let counted = (direct: after.direct - before.direct, store: after.store - before.store)
        #expect(path == .direct ? counted == (200, 0) : counted == (0, 200), "\(counted)")
        await provider.close()
        await device.stop()
        await running.value
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// Failover: the node a device is connected to is killed (SIGKILL)
    /// while another node accepts pushes for it; the device moves to the
    /// other gateway it knows, and every push accepted with an expiration
    /// reaches it, or was replaced by a later one (the delivery log says so)
    /// while the device was away — counted.
    @Test func whenANodeIsKilledUnderLoadEveryStoredNotificationArrivesOrWasReplaced() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }
        let device = try DeviceClient(
            credentials: try DeviceCredentials.load(from: nodes.data("node-a") + "/demo/device"), environment: .production,
            options: .init(
                gateways: [
                    .init(host: "127.0.0.1", port: try nodes.port("node-b", "device.production")),
                    .init(host: "127.0.0.1", port: try nodes.port("node-a", "device.production")),
                ], initialBackoff: 0.05, maximumBackoff: 1, serverName: "localhost"), logger: logger)
        let running = Task { await device.run() }
        try await device.waitUntilConnected()
        let token = try await device.register("com.example.demo")
        #expect(try await nodes.eventually { try await nodes.devices("node-a").contains { $0["node"] as? String == "node-b" } })

        // What the device receives, acknowledged as an app would.
        let receiving = Task {
            var received = Set<UUID>()
            for await notification in device.notifications {
                received.insert(notification.id)
                try? await device.acknowledge(notification)
            }
            return received
        }
        // Four providers on node-a send 100 pushes each; node-b dies after the first 100 are accepted.
        let accepted = AcceptedIDs()
        let provider = try nodes.provider("node-a", logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sender in 0..<4 {
                group.addTask {
                    for n in 0..<100 {
                        let id = UUID()
                        let result = try await provider.send(
                            HTTP2Push(
                                token: token, payload: Array(#"{"aps":{"alert":"\#(sender)-\#(n)"}}"#.utf8), topic: "com.example.demo", id: id,
                                expiration: Date().addingTimeInterval(3600)))
                        if result.status == 200 { accepted.append(id) }
                    }
                }
            }
            group.addTask {
                while accepted.all.count < 100 { try await Task.sleep(for: .milliseconds(5)) }
                nodes.nodes["node-b"]?.program.signal(SIGKILL)
            }
            try await group.waitForAll()
        }
        _ = await nodes.nodes["node-b"]?.program.waitForExit()
        nodes.nodes["node-b"] = nil
        let all = accepted.all
        #expect(all.count == 400, "node-a accepted every push")

        // The device, now on node-a, gets what is held; then each accepted one is received or was replaced.
        #expect(try await nodes.eventually { try await nodes.devices("node-a").contains { $0["node"] as? String == "node-a" } })
        await device.waitUntilDrained()
        try await Task.sleep(for: .milliseconds(200))
        await device.stop()
        await running.value
        let received = await receiving.value
        var replaced = 0
        var missing: [UUID] = []
        for id in all where !received.contains(id) {
            let events = try await nodes.admin("node-a", "/v1/notifications/\(id.uuidString.lowercased())")["events"] as? [[String: Any]] ?? []
            if events.contains(where: { ["replaced", "coalesced"].contains($0["event"] as? String) }) { replaced += 1 } else { missing.append(id) }
        }
        #expect(missing.isEmpty, "\(missing.count) of \(all.count) accepted notifications neither arrived nor were replaced")
        #expect(received.isSuperset(of: all.suffix(1)), "the last one arrived")
        #expect(received.count + replaced >= all.count)
        #expect(await nodes.stop(), "node-a stops cleanly")
    }

    /// `courier device run --gateway … --gateway …`: when its node is
    /// killed, the device connects to the next gateway and says so.
    @Test func deviceRunMovesToTheNextGatewayWhenItsNodeIsKilled() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }
        let b = try nodes.port("node-b", "device.production")
        let a = try nodes.port("node-a", "device.production")
        let device = try RunningProgram(
            courier,
            [
                "device", "run", "--identity", nodes.data("node-a") + "/demo/device", "--app", "com.example.demo",
                "--gateway", "127.0.0.1:\(b)", "--gateway", "127.0.0.1:\(a)",
            ], mergeStandardError: true)
        #expect(await device.waitForLine(containing: "token ") != nil, "\(device.output)")
        #expect(device.output.contains("courier: connected to 127.0.0.1:\(b)"), "\(device.output)")
        nodes.nodes["node-b"]?.program.signal(SIGKILL)
        #expect(await device.waitForLine(containing: "courier: lost the connection to 127.0.0.1:\(b)") != nil, "\(device.output)")
        #expect(await device.waitForLine(containing: "courier: connected again to 127.0.0.1:\(a)") != nil, "\(device.output)")
        device.signal(SIGTERM)
        #expect(await device.waitForExit() == 0)
        _ = await nodes.nodes["node-b"]?.program.waitForExit()
        nodes.nodes["node-b"] = nil
        #expect(await nodes.stop(), "node-a stops cleanly")
    }

    /// A fault rule added on one node acts on every node, its count shared;
    /// every node lists it with the hits of all; removed on one node, it
    /// ends on all.
    @Test func faultRulesAreEveryNodes() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b", "node-c"])
        defer { nodes.kill() }
        let token = try await nodes.offlineToken("node-a", logger: logger)
        let onA = try nodes.provider("node-a", logger: logger)
        let onB = try nodes.provider("node-b", logger: logger)
        func push(_ provider: HTTP2ProviderClient) async throws -> HTTP2PushResult {
            try await provider.send(
                HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"x"}}"#.utf8), topic: "com.example.demo", expiration: Date(timeIntervalSince1970: 0)))
        }

        // Two notifications, on whichever node: the first on node-b, the second on node-a.
        let added = try await nodes.admin(
            "node-c", "POST", "/v1/faults", body: #"{"match": {"topic": "com.example.demo"}, "action": "reject", "reason": "TooManyRequests", "count": 2}"#)
        let id = try #require(added["id"] as? String, "\(added)")
        #expect(try await nodes.eventually { try await push(onB).status == 429 }, "node-b applies node-c's rule")
        #expect(try await nodes.eventually { try await push(onA).status == 429 }, "node-a applies it too")
        // Both hits used the count up: gone everywhere.
        #expect(try await nodes.eventually { try await push(onB).status == 200 }, "the count of 2 was shared")
        #expect(try await push(onA).status == 200)
        let left = try await nodes.admin("node-b", "/v1/faults")["faults"] as? [[String: Any]]
        #expect(left?.isEmpty == true, "no rule left: \(String(describing: left))")

        // Without a count: listed on every node with every node's hits, removed from another.
        let lasting = try await nodes.admin(
            "node-a", "POST", "/v1/faults", body: #"{"match": {"topic": "com.example.demo"}, "action": "reject", "reason": "TooManyRequests"}"#)
        let lastingID = try #require(lasting["id"] as? String)
        #expect(lastingID != id, "ids are unique across nodes")
        #expect(try await nodes.eventually { try await push(onB).status == 429 })
        #expect(try await push(onA).status == 429)
        let hits = try await nodes.eventually {
            let listed = try await nodes.admin("node-c", "/v1/faults")["faults"] as? [[String: Any]] ?? []
            return listed.count == 1 && listed[0]["hits"] as? Int == 2
        }
        #expect(hits, "node-c lists the rule with both nodes' hits")
        let removed = try await nodes.admin("node-b", "DELETE", "/v1/faults/\(lastingID)")
        #expect(removed["removed"] as? String == lastingID)
        #expect(try await nodes.eventually { try await push(onA).status == 200 }, "removed on node-b, it ends on node-a")
        await onA.close()
        await onB.close()
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// Virtual devices live in the store: registered on one node, pushed
    /// to on another; set offline on one, held by a push on another, taken
    /// when set online on a third; uninstalled on one, 410 on the others.
    @Test func virtualDevicesAreEveryNodes() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b", "node-c"])
        defer { nodes.kill() }
        let token = (0..<32).map { _ in UInt8.random(in: 0...255) }
        let hex = Hex.encode(token)
        let onA = try nodes.provider("node-a", logger: logger)
        let onB = try nodes.provider("node-b", logger: logger)
        func push(_ provider: HTTP2ProviderClient, id: UUID = UUID(), expiration: Date? = nil) async throws -> HTTP2PushResult {
            try await provider.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"x"}}"#.utf8), topic: "com.example.demo", id: id, expiration: expiration))
        }
        func events(_ id: UUID, on node: String) async throws -> [String] {
            let timeline = try await nodes.admin(node, "/v1/notifications/\(id.uuidString)")
            return (timeline["events"] as? [[String: Any]] ?? []).compactMap { $0["event"] as? String }
        }

        #expect(try await push(onB).reason == .badDeviceToken, "not registered yet")
        let added = try await nodes.admin("node-a", "POST", "/v1/apps/com.example.demo/virtual-tokens", body: #"{"environment":"production","tokens":["\#(hex)"]}"#)
        #expect(added["added"] as? Int == 1, "\(added)")
        #expect(try await nodes.eventually { try await push(onB).status == 200 }, "node-b knows node-a's virtual token")

        let offline = try await nodes.admin("node-b", "PATCH", "/v1/apps/com.example.demo/virtual-tokens/\(hex)", body: #"{"environment":"production","online":false}"#)
        #expect(offline["online"] as? Bool == false, "\(offline)")
        let held = UUID()
        // Once node-a holds what it is pushed (it knows the token is offline), one to take later.
        #expect(try await nodes.eventually {
            let probe = UUID()
            _ = try await push(onA, id: probe, expiration: Date().addingTimeInterval(3600))
            return try await events(probe, on: "node-a") == ["accepted", "stored"]
        })
        #expect(try await push(onA, id: held, expiration: Date().addingTimeInterval(3600)).status == 200)
        let online = try await nodes.admin("node-c", "PATCH", "/v1/apps/com.example.demo/virtual-tokens/\(hex)", body: #"{"environment":"production","online":true}"#)
        #expect(online["online"] as? Bool == true, "\(online)")
        #expect(try await nodes.eventually { try await events(held, on: "node-b").last == "deliveredToVirtualDevice" }, "node-c took what node-a held")

        let uninstalled = try await nodes.admin(
            "node-a", "PATCH", "/v1/apps/com.example.demo/virtual-tokens/\(hex)", body: #"{"environment":"production","uninstalledAt":1790000000}"#)
        #expect(uninstalled["uninstalledAt"] != nil, "\(uninstalled)")
        #expect(try await nodes.eventually { try await push(onB).status == 410 }, "node-b sees the uninstall")
        #expect(try await push(onB).timestamp == Date(timeIntervalSince1970: 1_790_000_000))
        await onA.close()
        await onB.close()
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// Two nodes that give their inboxes to each other on their streams,
    /// and a third that joins with direct hand-over off (it cannot be
    /// linked to): it reads what they kept before it came from the store,
    /// and what comes after; each entry listed once on every node; what a
    /// node received just before it stopped is listed by the others.
    @Test func aNodeThatCannotBeLinkedToGetsTheInboxThroughTheStore() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }
        let onA = try nodes.provider("node-a", logger: logger)
        func refused(_ text: String) async throws {
            let answer = try await onA.send(HTTP2Push(token: [1, 2, 3], payload: Array(#"{"aps":{"alert":"\#(text)"}}"#.utf8), topic: "com.example.demo"))
            #expect(answer.status == 400)
        }
        func payloads(_ name: String) async throws -> [String] {
            (try await nodes.admin(name, "/v1/inbox")["entries"] as? [[String: Any]] ?? []).compactMap { $0["payload"] as? String }
        }
        try await refused("before")
        #expect(try await nodes.eventually { try await payloads("node-b") == [#"{"aps":{"alert":"before"}}"#] })
        #expect(try await nodes.eventually { try await nodes.inboxShared("node-a").direct >= 1 }, "node-a gave it to node-b on their stream")

        nodes.clusterExtra = #", "directHandOver": false"#
        let copied = try await runProgram("cp", ["-a", nodes.data("node-a"), nodes.data("node-c")])
        #expect(copied.status == 0)
        try nodes.start("node-c")
        let before = try await nodes.eventually { try await payloads("node-c") == [#"{"aps":{"alert":"before"}}"#] }
        #expect(before, "node-c lists what node-a kept from before it came")
        try await refused("after")
        let after = try await nodes.eventually { try await payloads("node-c").contains(#"{"aps":{"alert":"after"}}"#) }
        #expect(after, "and what node-a received after")

        // Each entry once on every node, whichever ways it came (node-b: its stream and the store).
        for name in ["node-b", "node-c"] {
            let once = try await nodes.eventually { try await payloads(name).sorted() == [#"{"aps":{"alert":"after"}}"#, #"{"aps":{"alert":"before"}}"#] }
            let listed = try await payloads(name)
            #expect(once, "\(name) lists each entry once: \(listed)")
        }
        try await refused("last")
        await onA.close()
        nodes.nodes["node-a"]?.program.signal(SIGTERM)
        #expect(await nodes.nodes["node-a"]?.program.waitForExit() == 0)
        nodes.nodes["node-a"] = nil
        for name in ["node-b", "node-c"] {
            let last = try await nodes.eventually { try await payloads(name).contains(#"{"aps":{"alert":"last"}}"#) }
            #expect(last, "\(name) lists what node-a received just before it stopped")
        }
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// What one node's provider interfaces received is in every node's
    /// admin inbox, with the node that received it: listed, waited for,
    /// in the notification's timeline, and in the inbox of a node started
    /// later; a clear on one node clears every node's. Whichever way the
    /// entries go (on the links between nodes, or through the store when
    /// a node cannot be linked to, or direct hand-over is off), and
    /// `courier_inbox_shared_total` says which way the last went.
    @Test(arguments: HandOverPath.allCases)
    func theInboxIsEveryNodes(path: HandOverPath) async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"], clusterExtra: path.clusterExtra)
        defer { nodes.kill() }
        let token = try await nodes.offlineToken("node-a", logger: logger)
        let onA = try nodes.provider("node-a", logger: logger)
        let onB = try nodes.provider("node-b", logger: logger)
        let id = UUID()
        // Waited for on node-b (whether the wait starts before or after node-a receives it).
        let waited = Task {
            try JSONSerialization.data(withJSONObject: try await nodes.admin("node-b", "/v1/inbox/wait?apns-id=\(id.uuidString)&timeout=20"))
        }
        let accepted = try await onA.send(
            HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"seen everywhere"}}"#.utf8), topic: "com.example.demo", id: id))
        #expect(accepted.status == 200, "\(accepted)")
        let entry = try JSONSerialization.jsonObject(with: try await waited.value) as? [String: Any] ?? [:]
        #expect(entry["apnsID"] as? String == id.uuidString.lowercased(), "node-b's wait answered with node-a's entry: \(entry)")
        #expect(entry["node"] as? String == "node-a")
        #expect(entry["payload"] as? String == #"{"aps":{"alert":"seen everywhere"}}"#)
        #expect((entry["outcome"] as? [String: Any])?["accepted"] as? Bool == true)

        // A refusal on node-b is in node-a's inbox, and each node names itself for its own entries.
        let refused = try await onB.send(HTTP2Push(token: [1, 2, 3], payload: Array(#"{"aps":{}}"#.utf8), topic: "com.example.demo"))
        #expect(refused.status == 400)
        for name in ["node-a", "node-b"] {
            let both = try await nodes.eventually {
                let entries = try await nodes.admin(name, "/v1/inbox")["entries"] as? [[String: Any]] ?? []
                return entries.compactMap { $0["node"] as? String }.sorted() == ["node-a", "node-b"]
                    && entries.contains { ($0["outcome"] as? [String: Any])?["reason"] as? String == "BadDeviceToken" && $0["node"] as? String == "node-b" }
            }
            #expect(both, "\(name) lists node-a's acceptance and node-b's refusal")
        }
        let timeline = try await nodes.admin("node-b", "/v1/notifications/\(id.uuidString)")
        #expect((timeline["received"] as? [[String: Any]])?.first?["node"] as? String == "node-a", "\(timeline)")

        // A node started later reads what the others received before.
        let copied = try await runProgram("cp", ["-a", nodes.data("node-a"), nodes.data("node-c")])
        #expect(copied.status == 0)
        try nodes.start("node-c")
        let onC = try await nodes.eventually {
            (try await nodes.admin("node-c", "/v1/inbox")["entries"] as? [[String: Any]] ?? []).count == 2
        }
        #expect(onC, "node-c lists the two entries received before it started")

        // Cleared on node-c: empty everywhere; what comes next is listed again.
        #expect(try await nodes.admin("node-c", "DELETE", "/v1/inbox")["cleared"] as? Int == 2)
        for name in ["node-a", "node-b", "node-c"] {
            let empty = try await nodes.eventually { (try await nodes.admin(name, "/v1/inbox")["entries"] as? [[String: Any]])?.isEmpty == true }
            #expect(empty, "\(name)'s inbox was cleared")
        }
        let sharedBefore = try await nodes.inboxShared("node-a")
        #expect(try await onA.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"after"}}"#.utf8), topic: "com.example.demo")).status == 200)
        for name in ["node-b", "node-c"] {
            let after = try await nodes.eventually {
                (try await nodes.admin(name, "/v1/inbox")["entries"] as? [[String: Any]])?.map { $0["payload"] as? String } == [#"{"aps":{"alert":"after"}}"#]
            }
            #expect(after, "\(name) lists the entry received after the clear, and only it")
        }
        // Given to node-b and node-c: on both links (each counts once acknowledged), or once to the store.
        // (Acknowledgements are counted as they come: read until both are.)
        let counted = try await nodes.eventually {
            let after = try await nodes.inboxShared("node-a")
            switch path {
            case .direct: return after.store == sharedBefore.store && after.direct >= sharedBefore.direct + 2
            case .unreachable, .store: return after.store >= sharedBefore.store + 1 && after.direct == 0
            }
        }
        let sharedAfter = try await nodes.inboxShared("node-a")
        #expect(counted, "\(sharedBefore) then \(sharedAfter)")
        await onA.close()
        await onB.close()
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// Revoked on one node, an auth key's and a device certificate's
    /// connections to another node are closed by that node's sweep.
    @Test func aRevocationOnOneNodeClosesConnectionsOnAnother() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }
        let (device, running, token) = try await nodes.connectedDevice("node-a", logger: logger)
        let provider = try nodes.tokenProvider("node-a", logger: logger)
        let pushed = try await provider.send(
            HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"x"}}"#.utf8), topic: "com.example.demo", expiration: Date(timeIntervalSince1970: 0)))
        #expect(pushed.status == 200)
        let connections = try await nodes.admin("node-a", "/v1/connections")["connections"] as? [[String: Any]] ?? []
        let keyID = try #require(connections.first?["provider"] as? String, "\(connections)").replacingOccurrences(of: "key ", with: "")

        // The key, revoked on node-b: node-a closes its connection.
        let revoked = try await nodes.admin("node-b", "POST", "/v1/keys/\(keyID)/revoke")
        #expect(revoked["revoked"] as? String == keyID, "\(revoked)")
        #expect(
            try await nodes.eventually { (try await nodes.admin("node-a", "/v1/connections")["connections"] as? [[String: Any]])?.isEmpty == true },
            "node-a closed the revoked key's connection")

        // The device's certificate, revoked on node-b: node-a closes the device's connection, and it is refused after.
        let certificates = try await nodes.admin("node-b", "/v1/certificates?kind=device")["certificates"] as? [[String: Any]] ?? []
        let serial = try #require(certificates.first?["serial"] as? String, "\(certificates)")
        _ = try await nodes.admin("node-b", "POST", "/v1/certificates/\(serial)/revoke")
        #expect(try await nodes.eventually { try await nodes.devices("node-a").isEmpty }, "node-a closed the revoked device's connection")
        // Its client sees the connection end (and is refused when it tries again).
        #expect(try await nodes.eventually { await device.isConnected == false })
        await provider.close()
        await device.stop()
        await running.value
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// A broadcast accepted on one node reaches the channel's subscribers
    /// connected to another.
    @Test func aBroadcastOnOneNodeReachesSubscribersOnAnother() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }
        let channels = try nodes.tokenProvider("node-a", channels: true, logger: logger)
        let push = try nodes.tokenProvider("node-a", logger: logger)
        let created = try await channels.createChannel(bundleID: "com.example.demo", policy: .noStorage)
        let channelID = try #require(created.channelID, "\(created)")

        let (device, running, _) = try await nodes.connectedDevice("node-b", logger: logger)
        try await device.subscribe("com.example.demo", to: channelID)
        var received = device.notifications.makeAsyncIterator()

        let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#.utf8)
        let sent = try await push.broadcast(HTTP2Broadcast(bundleID: "com.example.demo", channelID: channelID, payload: update))
        #expect(sent.status == 200, "\(sent)")
        let got = await received.next()
        #expect(got?.payload == update)
        #expect(got?.channelID == channelID)
        await channels.close()
        await push.close()
        await device.stop()
        await running.value
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// A node the others took for dead while it was alive (as after a
    /// database outage longer than the timeout) records its devices again
    /// at its next beat.
    @Test func aNodeTakenForDeadWhileAliveRecordsItsDevicesAgain() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }
        let (device, running, _) = try await nodes.connectedDevice("node-b", logger: logger)
        #expect(try await nodes.eventually { try await nodes.devices("node-a").contains { $0["node"] as? String == "node-b" } })
        // What node-a's sweep does to a node it takes for dead.
        let removed = try await runProgram(
            "psql",
            [
                nodes.server.connectionURL(database: nodes.database), "-v", "ON_ERROR_STOP=1", "-q", "-c",
                "DELETE FROM device_presence WHERE node_id = 'node-b'; DELETE FROM nodes WHERE id = 'node-b'; NOTIFY courier, 'gone node-b'",
            ])
        #expect(removed.status == 0, "\(removed.stderr)")
        // The presence row comes back (node-b's next beat finds its own row gone), and node-a lists the device on node-b again.
        let recorded = try await nodes.eventually {
            let rows = try await runProgram(
                "psql",
                [
                    nodes.server.connectionURL(database: nodes.database), "-t", "-A", "-c",
                    "SELECT count(*) FROM device_presence WHERE node_id = 'node-b'",
                ])
            return rows.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1"
        }
        #expect(recorded, "node-b recorded its device again at its next beat")
        #expect(try await nodes.eventually { try await nodes.devices("node-a").contains { $0["node"] as? String == "node-b" } })
        await device.stop()
        await running.value
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// A notification held while the device is offline everywhere is sent
    /// by whichever node the device connects to; a node killed with
    /// SIGKILL stops being listed once its heartbeat stops.
    @Test func aHeldNotificationGoesOutFromAnyNodeAndADeadNodesDevicesAreForgotten() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }

        // Register on node-a, go offline, push on node-a.
        let first = try nodes.device("node-a", logger: logger)
        var running = Task { await first.run() }
        try await first.waitUntilConnected()
        let token = try await first.register("com.example.demo")
        await first.stop()
        await running.value
        let provider = try nodes.provider("node-a", logger: logger)
        let pushed = try await provider.send(
            HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"held"}}"#.utf8), topic: "com.example.demo", expiration: Date().addingTimeInterval(3600)))
        #expect(pushed.status == 200)
        await provider.close()

        // The device comes back on node-b and gets it there.
        let again = try nodes.device("node-b", logger: logger)
        running = Task { await again.run() }
        var received = again.notifications.makeAsyncIterator()
        #expect(await received.next().map { String(decoding: $0.payload, as: UTF8.self) } == #"{"aps":{"alert":"held"}}"#)
        #expect(try await nodes.eventually { try await nodes.devices("node-a").contains { $0["node"] as? String == "node-b" } })

        // node-b dies without a word: node-a stops listing its device once its heartbeat is missed.
        nodes.nodes["node-b"]?.program.signal(SIGKILL)
        _ = await nodes.nodes["node-b"]?.program.waitForExit()
        nodes.nodes["node-b"] = nil
        #expect(try await nodes.eventually { try await nodes.devices("node-a").isEmpty }, "node-b's device forgotten after its timeout")
        await again.stop()
        await running.value
        #expect(await nodes.stop(), "every node stops cleanly")
    }

    /// A node the others took for dead while its devices stayed connected
    /// to it (stopped past the timeout: a stalled process, or a network
    /// cut from the database) records its devices' presence again when it
    /// beats again, and sends them what the others held for them
    /// meanwhile, without waiting for them to connect again — also when
    /// the node that held it no longer remembers doing so (stopped here).
    @Test func aNodeTakenForDeadSendsWhatWasHeldForItsDevicesMeanwhile() async throws {
        let nodes = try await Nodes.start(["node-a", "node-b"])
        defer { nodes.kill() }
        let (device, running, token) = try await nodes.connectedDevice("node-b", logger: logger)
        #expect(try await nodes.eventually { try await nodes.devices("node-a").contains { $0["node"] as? String == "node-b" } })

        // node-b stops past the timeout: node-a removes it, and holds a push for its device.
        nodes.nodes["node-b"]?.program.signal(SIGSTOP)
        #expect(try await nodes.eventually { try await nodes.devices("node-a").isEmpty }, "node-b taken for dead")
        let provider = try nodes.provider("node-a", logger: logger)
        let pushed = try await provider.send(
            HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"meanwhile"}}"#.utf8), topic: "com.example.demo", expiration: Date().addingTimeInterval(3600)))
        #expect(pushed.status == 200)
        await provider.close()
        // node-a stops: nothing remembers the push but the store.
        nodes.nodes["node-a"]?.program.signal(SIGTERM)
        let status = await nodes.nodes["node-a"]?.program.waitForExit()
        #expect(status == 0, "node-a: \(nodes.nodes["node-a"]?.program.output.suffix(15).joined(separator: "\n") ?? "")")
        nodes.nodes["node-a"] = nil

        // node-b goes on: the device, still connected to it, gets the push.
        nodes.nodes["node-b"]?.program.signal(SIGCONT)
        let payload = await withTaskGroup(of: String?.self) { group in
            group.addTask {
                var received = device.notifications.makeAsyncIterator()
                return await received.next().map { String(decoding: $0.payload, as: UTF8.self) }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(20))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        #expect(payload == #"{"aps":{"alert":"meanwhile"}}"#)
        #expect(await device.connections == 1, "the device did not connect again")
        await device.stop()
        await running.value
        #expect(await nodes.stop(), "every node stops cleanly")
    }
}

/// The apns-ids accepted so far, appended by several tasks.
private final class AcceptedIDs: Sendable {
    private let ids = Mutex<[UUID]>([])
    func append(_ id: UUID) { ids.withLock { $0.append(id) } }
    var all: [UUID] { ids.withLock { $0 } }
}
