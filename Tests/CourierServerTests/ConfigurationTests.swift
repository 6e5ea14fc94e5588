import CourierCore
import CourierServer
import CourierTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

/// Flattens a JSON object to its key paths ("network.production.binary").
func keyPaths(_ object: [String: Any], prefix: String = "") -> Set<String> {
    var paths = Set<String>()
    for (key, value) in object {
        let path = prefix.isEmpty ? key : "\(prefix).\(key)"
        if let nested = value as? [String: Any] {
            paths.formUnion(keyPaths(nested, prefix: path))
        } else {
            paths.insert(path)
        }
    }
    return paths
}

func documentedKeys() -> [String: String] {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let text = (try? String(contentsOf: root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)) ?? ""
    var keys: [String: String] = [:]
    for line in text.split(separator: "\n") where line.hasPrefix("| `") {
        let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
        let shown = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
        // An empty text is shown as `""`.
        keys[cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = shown == #""""# ? "" : shown
    }
    return keys
}

/// A configuration with every value different from its default.
let everyKeyChanged = CourierConfiguration(
    dataDirectory: "/var/lib/courier",
    network: .init(
        host: "0.0.0.0",
        production: .init(binary: 3195, feedback: 3196, http2: 3197, device: 6223, channels: 3198),
        sandbox: .init(binary: 13195, feedback: 13196, http2: 13197, device: 16223, channels: 13198),
        adminPort: 9090, serverDNSNames: ["push.example.com"], serverIPAddresses: ["10.0.0.1"], handshakeTimeout: 3, adminHost: "::1", adminTLS: true),
    connections: .init(
        maxPerListener: 10, maxPerDeviceListener: 20, maxPerAddress: 5, authenticationTimeout: 2, binaryIdleTimeout: 60, unfinishedFrameTimeout: 4,
        feedbackTimeout: 6, reconnectLimit: 7, reconnectWindow: 8, refusalLogInterval: 9, maxUnfinishedRequestBytes: 10_000,
        maxUnreadBytes: 20_000, maxPerIdentity: 11, maxPerSandboxDeviceListener: 15, unauthenticatedShare: 0.25, maxUnauthenticatedPerAddress: 3,
        maxFailedAuthenticationsPerAddress: 4),
    http2: .init(maxConcurrentStreams: 64, idleTimeout: 600),
    limits: .init(
        payload: PayloadLimits(binaryLegacy: 300, binaryCommand2: 3000, http2: 5000, http2VoIP: 6000, broadcast: 7000), tokenLength: 64,
        deviceMaxFrameLength: 32_768, channelsPerApp: 12),
    paths: .init(database: "db.sqlite", pki: "certs", demo: "example"),
    store: .init(
        kind: .postgresql, host: "db.example.com", port: 6543, database: "push", user: "node", passwordFile: "/etc/courier/pgpass",
        passwordEnvironment: "COURIER_PG_PASSWORD", connections: 16, tls: "require", caFile: "/etc/courier/db-ca.pem"),
    cluster: .init(node: "node-7", heartbeatInterval: 2, nodeTimeout: 20, directHandOver: false, peerPort: 3199, peerHost: "10.0.0.7"),
    demo: .init(enabled: false, teamID: "ABCDE12345", teamName: "Other", bundleID: "com.example.other"),
    qos: QoSConfiguration(burstWindow: 5, silentBudgetPerHour: 3, retention: 3600, tokenRateLimit: 10, tokenRateWindow: 1, tickInterval: 0.5, keepAlive: 30),
    threads: .init(realtimePriority: 5),
    inbox: .init(capacity: 50, maxAge: 120),
    virtualDevices: .init(acceptAnyToken: ["production": ["com.example.any"], "sandbox": ["com.example.any", "com.example.other"]]),
    logLevel: "debug")

@Suite struct ConfigurationTests {
    @Test func everyKeyIsDocumentedWithItsDefault() throws {
        let encoded = try JSONSerialization.jsonObject(with: JSONEncoder().encode(CourierConfiguration())) as! [String: Any]
        let documented = documentedKeys()
        #expect(Set(documented.keys) == keyPaths(encoded))
        for path in keyPaths(encoded) {
            var value: Any = encoded
            for part in path.split(separator: ".") { value = (value as! [String: Any])[String(part)]! }
            let shown: String
            if let array = value as? [String] {
                shown = "[" + array.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
            } else if let text = value as? String {
                shown = text
            } else {
                // Numbers and booleans as JSON writes them.
                let json = String(decoding: try JSONSerialization.data(withJSONObject: [value]), as: UTF8.self)
                shown = String(json.dropFirst().dropLast())
            }
            #expect(documented[path] == shown, "default of \(path)")
        }
    }

    @Test func everyKeyIsReadFromTheFile() throws {
        let data = try JSONEncoder().encode(everyKeyChanged)
        let decoded = try CourierConfiguration.decode(data)
        #expect(decoded == everyKeyChanged)
        // Each key on its own changes exactly that value.
        let full = try JSONSerialization.jsonObject(with: data) as! [String: Any]
        for path in keyPaths(full) {
            let parts = path.split(separator: ".").map(String.init)
            var value: Any = full
            for part in parts { value = (value as! [String: Any])[part]! }
            var single: Any = value
            for part in parts.reversed() { single = [part: single] }
            let one = try CourierConfiguration.decode(JSONSerialization.data(withJSONObject: single))
            #expect(one != CourierConfiguration(), "\(path) was not read")
            let reencoded = try JSONSerialization.jsonObject(with: JSONEncoder().encode(one)) as! [String: Any]
            var read: Any = reencoded
            for part in parts { read = (read as! [String: Any])[part]! }
            #expect("\(read)" == "\(value)", "\(path)")
        }
    }

    /// PostgreSQL's password: the environment variable when it is set,
    /// else the file's first line (relative to the data directory).
    @Test func thePostgreSQLPasswordComesFromItsVariableOrElseItsFile() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        try "from-the-file\r\nsecond line\n".write(toFile: directory + "/pgpass", atomically: true, encoding: .utf8)
        var configuration = CourierConfiguration(dataDirectory: directory)
        configuration.store = .init(kind: .postgresql, passwordFile: "pgpass", passwordEnvironment: "PG_PASSWORD")
        #expect(try configuration.postgresSettings(environment: ["PG_PASSWORD": "from-the-variable"]).password == "from-the-variable")
        #expect(try configuration.postgresSettings(environment: [:]).password == "from-the-file")
        configuration.store.passwordFile = ""
        #expect(throws: ConfigurationError("the environment variable PG_PASSWORD ('store.passwordEnvironment') is not set")) {
            try configuration.postgresSettings(environment: [:])
        }
        configuration.store.passwordEnvironment = ""
        let settings = try configuration.postgresSettings(environment: [:])
        #expect(settings.password == nil, "neither: no password")
        #expect(settings.description == "postgresql://courier@127.0.0.1:5432/courier")
    }

    @Test func anEmptyObjectGivesTheDefaults() throws {
        #expect(try CourierConfiguration.decode(Data("{}".utf8)) == CourierConfiguration())
    }

    @Test(arguments: [
        (#"{"dataDirectry": "x"}"#, "unknown key 'dataDirectry'"),
        (#"{"network": {"production": {"binery": 1}}}"#, "unknown key 'network.production.binery'"),
        (#"{"network": {"adminPort": "80"}}"#, "key 'network.adminPort' has a value of the wrong type: it takes a whole number, not \"80\""),
        (#"{"network": 5}"#, "key 'network' has a value of the wrong type: it takes an object, not 5"),
        (#"{"logLevel": 5}"#, "key 'logLevel' has a value of the wrong type: it takes a string, not 5"),
        (#"{"network": {"adminTLS": "yes"}}"#, "key 'network.adminTLS' has a value of the wrong type: it takes true or false, not \"yes\""),
        (#"{"logLevel": "info",}"#, "is not valid JSON: a comma before a closing bracket at line 1, column 20"),
        ("{\n  \"inbox\": {\"capacity\": 5,\n  }\n}", "is not valid JSON: a comma before a closing bracket at line 2, column 26"),
        ("{\n  \"logLevel\": \"info\",,\n}", "is not valid JSON: a syntax error at line 2, column "),
        (#"{"demo": {"teamID": "A,}"}}"#, "'demo.teamID' must be ten characters"),
        (#"{"network": {"sandbox": {"http2": 70000}}}"#, "'network.sandbox.http2' is 70000, not a port"),
        (#"{"limits": {"tokenLength": 33}}"#, "'limits.tokenLength' must be even, 32 to 254"),
        (#"{"limits": {"payload": {"http2": 0}}}"#, "'limits.payload.http2' must be 1 to 65535"),
        (#"{"limits": {"deviceMaxFrameLength": 10}}"#, "'limits.deviceMaxFrameLength' must be 1024 to 16777216"),
        (#"{"logLevel": "loud"}"#, "'logLevel' must be one of"),
        (#"{"qos": {"burstWindow": 0}}"#, "'qos.burstWindow' must be more than 0"),
        (#"{"connections": {"maxPerAddress": 0}}"#, "'connections.maxPerAddress' must be at least 1"),
        (#"{"connections": {"maxPerIdentity": 0}}"#, "'connections.maxPerIdentity' must be at least 1"),
        (#"{"connections": {"maxUnreadBytes": 16383}}"#, "'connections.maxUnreadBytes' must be at least 16384"),
        (#"{"connections": {"unfinishedFrameTimeout": 0}}"#, "'connections.unfinishedFrameTimeout' must be more than 0"),
        (#"{"qos": {"silentBudgetPerHour": -1}}"#, "'qos.silentBudgetPerHour' must be 0 or more"),
        (#"{"qos": {"tokenRateLimit": 0}}"#, "'qos.tokenRateLimit' must be at least 1"),
        (#"{"qos": {"keepAlive": 0}}"#, "'qos.keepAlive' must be 1 to 86400"),
        (#"{"threads": {"realtimePriority": 100}}"#, "'threads.realtimePriority' must be 0 (off) or 1 to 99"),
        (#"{"threads": {"realtimePriority": -1}}"#, "'threads.realtimePriority' must be 0 (off) or 1 to 99"),
        (#"{"demo": {"teamID": "short"}}"#, "'demo.teamID' must be ten characters"),
        (#"{"demo": {"bundleID": "nodots"}}"#, "'demo.bundleID' is not a bundle id"),
        (#"{"store": {"knd": "postgresql"}}"#, "unknown key 'store.knd'"),
        (#"{"store": {"kind": "mysql"}}"#, "'store.kind' is 'mysql', not one of sqlite, postgresql"),
        (#"{"store": {"kind": "postgresql", "port": 0}}"#, "'store.port' is 0, not a port (1-65535)"),
        (#"{"store": {"kind": "postgresql", "database": ""}}"#, "'store.database' is empty"),
        (#"{"store": {"kind": "postgresql", "connections": 0}}"#, "'store.connections' must be 1 to 1000"),
        (#"{"store": {"kind": "postgresql", "tls": "verify-full"}}"#, "'store.tls' must be disable or require"),
        (#"{"cluster": {"node": "Node A"}}"#, "'cluster.node' must be 1 to 40 characters a-z, 0-9 and '-'"),
        (#"{"cluster": {"heartbeatInterval": 0}}"#, "'cluster.heartbeatInterval' must be more than 0"),
        (#"{"cluster": {"heartbeatInterval": 5, "nodeTimeout": 9}}"#, "'cluster.nodeTimeout' must be at least twice 'cluster.heartbeatInterval'"),
        (#"[1]"#, "must hold a JSON object"),
        (#"{"#, "is not valid JSON: it ends before its last value or bracket is complete"),
    ])
    func badFilesAreRefusedNamingTheProblem(_ text: String, _ message: String) {
        do {
            _ = try CourierConfiguration.decode(Data(text.utf8), source: "courier.json")
            Issue.record("\(text) was accepted")
        } catch let error as ConfigurationError {
            #expect(error.message.contains(message), "\(error.message)")
            #expect(error.message.hasPrefix("courier.json"))
            #expect(!error.message.contains("\n"))
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test func pathsResolveAgainstTheDataDirectory() {
        let configuration = CourierConfiguration(dataDirectory: "/srv/courier")
        #expect(configuration.resolve("pki") == "/srv/courier/pki")
        #expect(configuration.resolve("/etc/courier/db.sqlite") == "/etc/courier/db.sqlite")
    }
}

@Suite struct ProcessorAffinityTests {
    /// The mask of `/proc/<pid>/status`, as Linux writes it for 1, 2 and
    /// 72 allowed CPUs (the last in comma-separated groups of 32 bits).
    @Test func theAllowedCPUsAreCountedFromTheStatusMask() {
        func status(_ mask: String) -> String { "Name:\tcourier\nCpus_allowed:\t\(mask)\nCpus_allowed_list:\t0-1\n" }
        #expect(ProcessorAffinity.count(status: status("2")) == 1)
        #expect(ProcessorAffinity.count(status: status("3")) == 2)
        #expect(ProcessorAffinity.count(status: status("ff,ffffffff,ffffffff")) == 72)
        #expect(ProcessorAffinity.count(status: status("0")) == nil)
        #expect(ProcessorAffinity.count(status: "Name:\tcourier\n") == nil)
    }

    /// This process's own mask reads, and is within what the machine has.
    @Test func thisProcessHasAnAffinity() throws {
        let count = try #require(ProcessorAffinity.count)
        #expect(count >= 1)
        #expect(count <= ProcessInfo.processInfo.processorCount)
    }
}

@Suite struct RealtimeSchedulingTests {
    /// Two event loops of their own (not the shared ones the other tests
    /// use) are raised to SCHED_RR at priority 3 — or, where this process
    /// may not (no CAP_SYS_NICE), the refusal says so and the loops stay
    /// ordinary threads.
    @Test func theEventLoopsRunRoundRobinOrTheRefusalSaysWhy() throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { try? group.syncShutdownGracefully() }
        let loops = Array(group.makeIterator())
        let before = try loops.map { try $0.submit { RealtimeScheduling.currentThread() }.wait() }
        #expect(before.allSatisfy { !RealtimeScheduling.isRoundRobin($0.policy) })
        do {
            try RealtimeScheduling.apply(priority: 3, to: group)
            for loop in loops {
                let (policy, priority) = try loop.submit { RealtimeScheduling.currentThread() }.wait()
                #expect(RealtimeScheduling.isRoundRobin(policy))
                #expect(priority == 3)
            }
            // The calling thread is not one of the loops: it is unchanged.
            #expect(!RealtimeScheduling.isRoundRobin(RealtimeScheduling.currentThread().policy))
        } catch let refused as RealtimeScheduling.Refused {
            #expect(refused.errno == EPERM)
            #expect("\(refused)" == "cannot run the event loops at real-time priority 3: not permitted (it needs CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least 3)")
            let after = try loops.map { try $0.submit { RealtimeScheduling.currentThread() }.wait() }
            #expect(after.allSatisfy { !RealtimeScheduling.isRoundRobin($0.policy) })
        }
    }

    /// A priority SCHED_RR does not have is refused by the system, named.
    @Test func aPriorityOutOfRangeIsRefused() throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        #expect {
            try RealtimeScheduling.apply(priority: 100, to: group)
        } throws: { error in
            guard let refused = error as? RealtimeScheduling.Refused else { return false }
            return refused.errno == EINVAL && "\(refused)".hasPrefix("cannot run the event loops at real-time priority 100: ")
        }
    }

    /// The admin API speaks HTTPS when asked, and always off the loopback.
    @Test func theAdminAPIUsesTLSOffTheLoopback() {
        var network = CourierConfiguration.Network()
        #expect(!network.adminUsesTLS)
        #expect(network.adminURL(port: 8080) == "http://127.0.0.1:8080")
        network.adminHost = "::1"
        #expect(network.adminURL(port: 8080) == "http://[::1]:8080")
        network.adminTLS = true
        #expect(network.adminURL(port: 8080) == "https://[::1]:8080")
        network.adminTLS = false
        network.adminHost = "0.0.0.0"
        #expect(network.adminUsesTLS)
        #expect(network.adminURL(port: 8443) == "https://127.0.0.1:8443")
        network.adminHost = "10.1.2.3"
        #expect(network.adminURL(port: 8443) == "https://10.1.2.3:8443")
    }
}
