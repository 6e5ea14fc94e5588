import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
import CourierServer
import CourierWire
import Foundation
import Logging
import NIOCore
import Testing

extension TestServer {
    /// The demo app's provider certificate (universal) as a client.
    func binaryClient(
        _ environment: Environment = .production, command: BinaryProviderClient.Command = .frame, certificate: String? = nil, key: String? = nil
    ) async throws -> BinaryProviderClient {
        let demo = directory + "/demo"
        let tls = ProviderTLS(
            certificatePath: certificate ?? demo + "/com.example.demo.pem", keyPath: key ?? demo + "/com.example.demo-key.pem",
            caPath: directory + "/pki/ca.pem")
        let port = try await application.ports.port(.binary, environment)
        return try BinaryProviderClient(host: "127.0.0.1", port: port, tls: tls, command: command, serverName: "localhost", logger: logger)
    }
}

/// The next error response a client reports.
func nextFailure(_ client: BinaryProviderClient) async -> BinaryPushFailure? {
    for await failure in client.failures { return failure }
    return nil
}

@Suite(.timeLimit(.minutes(2))) struct BinaryGatewayTests {
    let payload = Array(#"{"aps":{"alert":"binary"}}"#.utf8)

    @Test(arguments: [BinaryProviderClient.Command.frame, .enhanced, .simple])
    func aBinaryPushReachesADevice(_ command: BinaryProviderClient.Command) async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient(command: command)
            try await client.send(token: token, payload: payload, expiry: 0, priority: command == .frame ? 10 : nil)
            let received = try #require(await device.next())
            #expect(received.payload == payload)
            #expect(received.topic == "com.example.demo")
            await client.close()
            await server.disconnect(device)
        }
    }

    /// A command-2 payload over the limit is status 7 with its own
    /// identifier (the identifier item after the payload), as Apple
    /// answers; the notification before it is delivered, the one after is not.
    @Test func anOversizedCommand2PayloadIsStatus7WithItsIdentifier() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient()
            try await client.send(token: token, payload: payload, expiry: 0, priority: 10, identifier: 500)
            #expect(try #require(await device.next()).payload == payload)
            let large = Array(#"{"aps":{"alert":""#.utf8) + Array(repeating: UInt8(ascii: "x"), count: 5_000) + Array(#""}}"#.utf8)
            try await client.send(token: token, payload: large, expiry: 0, priority: 10, identifier: 501)
            try await client.send(token: token, payload: payload, expiry: 0, priority: 10, identifier: 502)
            #expect(await nextFailure(client) == BinaryPushFailure(identifier: 501, status: .invalidPayloadSize))
            let entries = try await server.inboxEntries("?interface=binary&outcome=refused")
            #expect(entries.count == 1)
            #expect((entries.first?["outcome"] as? [String: Any])?["status"] as? Int == 7)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// Several notifications in one TLS record, and one cut in two: its
    /// start sent with a whole one, its end only once that one was
    /// delivered (so the halves are certainly two reads of the gateway).
    /// Each is delivered, once, in order.
    @Test func notificationsAcrossReadsAndSeveralInOneRead() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient()
            func frame(_ n: UInt32) -> ByteBuffer {
                var buffer = ByteBuffer()
                buffer.writeBinaryNotification(token: token, payload: Array(#"{"aps":{"alert":"\#(n)"}}"#.utf8), identifier: n, expiry: 0, priority: 10)
                return buffer
            }
            func alert(_ notification: DeviceNotification?) -> String? { notification.map { String(decoding: $0.payload, as: UTF8.self) } }

            var firstAndStart = frame(1)
            let second = frame(2)
            firstAndStart.writeImmutableBuffer(second.getSlice(at: 0, length: 10)!)
            try await client.sendRaw(firstAndStart, identifier: 1)
            #expect(alert(await device.next()) == #"{"aps":{"alert":"1"}}"#)
            var endAndMore = second.getSlice(at: 10, length: second.readableBytes - 10)!
            for n: UInt32 in 3...5 { endAndMore.writeImmutableBuffer(frame(n)) }
            try await client.sendRaw(endAndMore, identifier: 5)
            var alerts: [String?] = []
            for _ in 2...5 { alerts.append(alert(await device.next())) }
            #expect(alerts == (2...5).map { #"{"aps":{"alert":"\#($0)"}}"# })
            #expect(await client.settle(seconds: 0) == [])
            await client.close()
            await server.disconnect(device)
        }
    }

    /// docs/protocol.md §1: each status from a real malformed stream.
    @Test func everyStatusFromARealStream() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let sandboxDevice = try await server.device(.sandbox)
            let sandboxToken = try await sandboxDevice.client.register("com.example.demo")
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.other", teamID: "DEMOTEAM01")
            let otherToken = try await device.client.register("com.example.other")
            var tampered = token
            tampered[0] ^= 0xFF

            func frame(_ body: (inout ByteBuffer) -> Void) -> ByteBuffer {
                var buffer = ByteBuffer()
                buffer.writeItemFrame(command: 2, body)
                return buffer
            }
            let cases: [(String, ByteBuffer, UInt8)] = [
                ("missing token", frame { $0.writeFrameItem(id: 2, payload); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 2),
                ("missing payload", frame { $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 4),
                ("payload not a JSON object", frame { $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 2, Array("[1]".utf8)); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 4),
                ("token size", frame { $0.writeFrameItem(id: 1, Array(token.prefix(20))); $0.writeFrameItem(id: 2, payload); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 5),
                ("payload size", frame { $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 2, Array(repeating: 0x20, count: 2049)); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 7),
                ("null-terminated", frame { $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 2, payload + [0]); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 7),
                ("tampered token", frame { $0.writeFrameItem(id: 1, tampered); $0.writeFrameItem(id: 2, payload); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 8),
                ("sandbox token in production", frame { $0.writeFrameItem(id: 1, sandboxToken); $0.writeFrameItem(id: 2, payload); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 8),
                ("another app's token", frame { $0.writeFrameItem(id: 1, otherToken); $0.writeFrameItem(id: 2, payload); $0.writeFrameItem(id: 3, integer: UInt32(7)) }, 8),
                ("bad priority", frame { $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 2, payload); $0.writeFrameItem(id: 3, integer: UInt32(7)); $0.writeFrameItem(id: 5, [3]) }, 128),
                ("priority 1 (the HTTP/2 API's)", frame { $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 2, payload); $0.writeFrameItem(id: 3, integer: UInt32(7)); $0.writeFrameItem(id: 5, [1]) }, 128),
                ("duplicate item", frame { $0.writeFrameItem(id: 3, integer: UInt32(7)); $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 2, payload) }, 128),
                ("silent with priority 10", frame { $0.writeFrameItem(id: 1, token); $0.writeFrameItem(id: 2, Array(#"{"aps":{"content-available":1}}"#.utf8)); $0.writeFrameItem(id: 3, integer: UInt32(7)); $0.writeFrameItem(id: 5, [10]) }, 128),
                ("unknown command", ByteBuffer(bytes: [9, 0, 0, 0, 0]), 128),
            ]
            for (name, bytes, status) in cases {
                let client = try await server.binaryClient()
                try await client.sendRaw(bytes, identifier: 7)
                let failure = await nextFailure(client)
                #expect(failure?.status.rawValue == status, "\(name)")
                #expect(failure?.identifier == (name == "unknown command" ? 0 : 7), "\(name)")
                await client.close()
            }
            // Command 0 has no error response: the connection just closes, and nothing is delivered.
            let simple = try await server.binaryClient(command: .simple)
            var bad = ByteBuffer()
            bad.writeSimpleNotification(token: Array(token.prefix(10)), payload: payload)
            try await simple.sendRaw(bad, identifier: 0)
            await simple.waitForDisconnect()
            #expect(await simple.settle(seconds: 0) == [], "closed without an answer")
            await simple.close()
            await server.disconnect(device)
            await server.disconnect(sandboxDevice)
        }
    }

    @Test func notificationsAfterABadOneAreDiscardedAndTheClientResendsThem() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient()
            try await client.send(token: token, payload: Array(#"{"aps":{"alert":"one"}}"#.utf8), expiry: 0)
            let bad = try await client.send(token: Array(token.prefix(16)), payload: payload)
            try await client.send(token: token, payload: Array(#"{"aps":{"alert":"three"}}"#.utf8), expiry: 0)
            try await client.send(token: token, payload: Array(#"{"aps":{"alert":"four"}}"#.utf8), expiry: 0)
            let failure = await nextFailure(client)
            #expect(failure == BinaryPushFailure(identifier: bad, status: .invalidTokenSize))
            var received: [String] = []
            for _ in 0..<3 { received.append(String(decoding: try #require(await device.next()).payload, as: UTF8.self)) }
            #expect(received == [#"{"aps":{"alert":"one"}}"#, #"{"aps":{"alert":"three"}}"#, #"{"aps":{"alert":"four"}}"#])
            await client.close()
            await server.disconnect(device)
        }
    }

    /// Status 1: the store failed while holding a notification that had to be stored.
    @Test func aStoreFailureIsStatus1() async throws {
        try await withFaultyStoreServer { server, store in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            await server.disconnect(device)
            let client = try await server.binaryClient()
            let later = UInt32(server.clock.now().timeIntervalSince1970) + 3600
            store.failStorePending(true)
            let failing = try await client.send(token: token, payload: payload, expiry: later)
            #expect(await nextFailure(client) == BinaryPushFailure(identifier: failing, status: .processingError))
            await client.close()
        }
    }

    @Test func gracefulShutdownSendsStatus10WithTheLastAcceptedIdentifier() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient()
            var last: UInt32 = 0
            for index in 0..<5 {
                last = try await client.send(token: token, payload: Array(#"{"aps":{"alert":"\#(index)"}}"#.utf8), expiry: 0)
            }
            for _ in 0..<5 { _ = await device.next() }  // all five were accepted
            await server.group.triggerGracefulShutdown()
            let failure = await nextFailure(client)
            #expect(failure == BinaryPushFailure(identifier: last, status: .shutdown))
            await server.shutDown()  // the shutdown already triggered: waits for it
            await client.close()
        }
    }

    @Test func aCertificateForAppACannotPushToAppB() async throws {
        try await withTestServer { server in
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.b", teamID: "DEMOTEAM01")
            let device = try await server.device()
            let tokenB = try await device.client.register("com.example.b")
            let client = try await server.binaryClient()
            let id = try await client.send(token: tokenB, payload: payload)
            #expect(await nextFailure(client) == BinaryPushFailure(identifier: id, status: .invalidToken))
            await client.close()
            await server.disconnect(device)
        }
    }

    @Test func revokedAndWrongEnvironmentCertificatesFailTheHandshake() async throws {
        try await withTestServer { server in
            let provisioner = server.application.provisioner
            let (sandboxOnly, _) = try await provisioner.issueProviderCertificate(
                bundleID: "com.example.demo", environments: [.sandbox], directory: server.directory + "/sandbox-only")
            let wrongEnvironment = try await server.binaryClient(
                certificate: server.directory + "/sandbox-only/com.example.demo.pem", key: server.directory + "/sandbox-only/com.example.demo-key.pem")
            await #expect(throws: (any Error).self) { try await wrongEnvironment.send(token: Array(repeating: 0, count: 32), payload: payload) }
            let sandbox = try await server.binaryClient(
                .sandbox, certificate: server.directory + "/sandbox-only/com.example.demo.pem", key: server.directory + "/sandbox-only/com.example.demo-key.pem")
            let device = try await server.device(.sandbox)
            let token = try await device.client.register("com.example.demo")
            try await sandbox.send(token: token, payload: payload, expiry: 0)
            #expect(await device.next()?.payload == payload)
            await sandbox.close()

            try await provisioner.revokeCertificate(serial: sandboxOnly.serial)
            let revoked = try await server.binaryClient(
                .sandbox, certificate: server.directory + "/sandbox-only/com.example.demo.pem", key: server.directory + "/sandbox-only/com.example.demo-key.pem")
            await #expect(throws: (any Error).self) { try await revoked.send(token: token, payload: payload) }
            await server.disconnect(device)
        }
    }

    @Test func feedbackAfterUninstallIsSentOnceAndPerTopic() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            try await device.client.unregister("com.example.demo")
            let client = try await server.binaryClient()
            try await client.send(token: token, payload: payload)  // nothing comes back: the binary API reports no Unregistered
            try await client.send(token: Array(token.prefix(3)), payload: payload)  // a bad one, to know the first was handled
            _ = await nextFailure(client)
            await client.close()

            let tls = ProviderTLS(
                certificatePath: server.directory + "/demo/com.example.demo.pem", keyPath: server.directory + "/demo/com.example.demo-key.pem",
                caPath: server.directory + "/pki/ca.pem")
            let port = try await server.application.ports.port(.feedback, .production)
            let entries = try await FeedbackReader.read(host: "127.0.0.1", port: port, tls: tls, serverName: "localhost")
            #expect(entries.map(\.token) == [token])
            #expect(abs(entries[0].date.timeIntervalSince(server.clock.now())) < 2)
            #expect(try await FeedbackReader.read(host: "127.0.0.1", port: port, tls: tls, serverName: "localhost").isEmpty, "cleared after reading")
            let sandboxPort = try await server.application.ports.port(.feedback, .sandbox)
            #expect(try await FeedbackReader.read(host: "127.0.0.1", port: sandboxPort, tls: tls, serverName: "localhost").isEmpty, "per environment")

            // Another app's provider does not see this app's entries.
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.b", teamID: "DEMOTEAM01")
            _ = try await server.application.provisioner.issueProviderCertificate(
                bundleID: "com.example.b", environments: [.production, .sandbox], directory: server.directory + "/b")
            try await server.application.provisioner.store.addFeedback(
                [FeedbackEntry(environment: .production, topic: "com.example.demo", token: token, timestamp: server.clock.now())])
            let other = ProviderTLS(
                certificatePath: server.directory + "/b/com.example.b.pem", keyPath: server.directory + "/b/com.example.b-key.pem",
                caPath: server.directory + "/pki/ca.pem")
            #expect(try await FeedbackReader.read(host: "127.0.0.1", port: port, tls: other, serverName: "localhost").isEmpty)
            #expect(try await FeedbackReader.read(host: "127.0.0.1", port: port, tls: tls, serverName: "localhost").count == 1)
            await server.disconnect(device)
        }
    }
}
