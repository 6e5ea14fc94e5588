import CourierCore
import CourierDevice
import CourierProvider
import CourierTestSupport
import Foundation
import Logging
import Testing

/// Runs `courier serve` as a process on ephemeral ports and reads the
/// ports it bound from its banner.
struct ServeProcess {
    let program: RunningProgram
    let ports: [String: Int]

    static func start(data: String, config: String, mergeStandardError: Bool = false) throws -> ServeProcess {
        let program = try RunningProgram(courier, ["serve", "--data", data, "--config", config], mergeStandardError: mergeStandardError)
        guard program.waitForLine(containing: "Courier is running") != nil else {
            throw ConfigurationFailure(output: program.output)
        }
        var ports: [String: Int] = [:]
        for line in program.output {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            if parts.count == 2, parts[0].contains(".") || parts[0] == "admin", let port = Int(parts[1]) { ports[String(parts[0])] = port }
        }
        return ServeProcess(program: program, ports: ports)
    }

    struct ConfigurationFailure: Error {
        let output: [String]
    }
}

@Suite(.timeLimit(.minutes(2))) struct CrashRecoveryTests {
    @Test func aStoredNotificationSurvivesSIGKILL() async throws {
        try await survivesSIGKILL(store: nil)
    }

    @Test(.enabled(if: PostgresServer.available, Comment(rawValue: PostgresServer.unavailable)))
    func aNotificationStoredInPostgreSQLSurvivesSIGKILL() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        try await survivesSIGKILL(store: (server, database))
    }

    /// `store`: PostgreSQL's server and database; nil for SQLite.
    private func survivesSIGKILL(store: (server: PostgresServer, database: String)?) async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let data = directory + "/data"
        let config = directory + "/courier.json"
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        var storeSection = ""
        if let store {
            // The password from a file outside the data directory, as an operator would keep it.
            try (store.server.password + "\n").write(toFile: directory + "/pgpass", atomically: true, encoding: .utf8)
            storeSection = """
                , "store": {"kind": "postgresql", "host": "\(store.server.host)", "port": \(store.server.port), \
                "database": "\(store.database)", "user": "\(store.server.user)", "passwordFile": "\(directory)/pgpass"}
                """
        }
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}, "logLevel": "warning"\#(storeSection)}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        var logger = Logger(label: "crash-test")
        logger.logLevel = .warning

        let first = try ServeProcess.start(data: data, config: config)
        if let store {
            #expect(first.program.output.contains("Store: PostgreSQL postgresql://courier@127.0.0.1:\(store.server.port)/\(store.database)"))
            #expect(!first.program.output.joined().contains(store.server.password), "the password is never printed")
            #expect(!FileManager.default.fileExists(atPath: data + "/courier.sqlite"), "no SQLite file beside PostgreSQL")
        }
        let devicePort = try #require(first.ports["device.production"])
        let binaryPort = try #require(first.ports["binary.production"])

        // The demo device registers the demo app, then goes offline.
        let credentials = try DeviceCredentials.load(from: data + "/demo/device")
        let device = try DeviceClient(
            credentials: credentials, environment: .production, options: .init(host: "127.0.0.1", port: devicePort, serverName: "localhost"), logger: logger)
        let running = Task { await device.run() }
        try await device.waitUntilConnected()
        let token = try await device.register("com.example.demo")
        await device.stop()
        await running.value

        // A notification that may be stored goes to the offline device; a bad
        // one after it proves the first was fully handled (strictly in order).
        let tls = ProviderTLS(
            certificatePath: data + "/demo/com.example.demo.pem", keyPath: data + "/demo/com.example.demo-key.pem", caPath: data + "/pki/ca.pem")
        let provider = try BinaryProviderClient(host: "127.0.0.1", port: binaryPort, tls: tls, serverName: "localhost", logger: logger)
        let expiry = UInt32(Date().timeIntervalSince1970 + 86_400)
        try await provider.send(token: token, payload: Array(#"{"aps":{"alert":"survives"}}"#.utf8), expiry: expiry)
        let bad = try await provider.send(token: Array(token.prefix(8)), payload: Array(#"{"aps":{"alert":"bad"}}"#.utf8))
        var failures = provider.failures.makeAsyncIterator()
        #expect(await failures.next() == BinaryPushFailure(identifier: bad, status: .invalidTokenSize))
        await provider.close()

        // Kill the server hard, start it again on the same data.
        first.program.signal(SIGKILL)
        #expect(await first.program.waitForExit() != 0)
        let second = try ServeProcess.start(data: data, config: config)
        let newPort = try #require(second.ports["device.production"])

        let again = try DeviceClient(
            credentials: try DeviceCredentials.load(from: data + "/demo/device"), environment: .production,
            options: .init(host: "127.0.0.1", port: newPort, serverName: "localhost"), logger: logger)
        let runningAgain = Task { await again.run() }
        var notifications = again.notifications.makeAsyncIterator()
        let received = await notifications.next()
        #expect(received.map { String(decoding: $0.payload, as: UTF8.self) } == #"{"aps":{"alert":"survives"}}"#)
        await again.stop()
        await runningAgain.value
        second.program.signal(SIGTERM)
        #expect(await second.program.waitForExit() == 0)
    }
}
