import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
import CourierSQLite
import CourierWire
import Foundation
import NIOCore
import Logging
import NIOEmbedded
import Synchronization
import Testing

@testable import CourierServer

/// Revoking a certificate closes every connection that uses it, on every
/// interface, at the next sweep (every `qos.tickInterval`, 1 s), each with
/// its protocol's signal (docs/protocol.md, docs/device-protocol.md).
@Suite(.timeLimit(.minutes(2))) struct RevocationTests {
    /// A binary connection whose certificate is revoked hears status 10
    /// with the last notification it had accepted, then closes; the
    /// certificate cannot connect again.
    @Test func aRevokedCertificatesBinaryConnectionGetsStatus10AndCloses() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient()
            var last: UInt32 = 0
            for index in 0..<3 {
                last = try await client.send(token: token, payload: Array(#"{"aps":{"alert":"\#(index)"}}"#.utf8), expiry: 0)
                #expect(await device.next() != nil)
            }
            let provisioner = server.application.provisioner
            let serial = try #require(try await provisioner.store.certificates(kind: .provider).first { $0.bundleID == "com.example.demo" }?.serial)
            try await provisioner.revokeCertificate(serial: serial)
            await server.application.sweep()
            #expect(await nextFailure(client) == BinaryPushFailure(identifier: last, status: .shutdown))
            await client.close()
            let again = try await server.binaryClient()
            await #expect(throws: (any Error).self) { try await again.send(token: token, payload: Array(#"{"aps":{}}"#.utf8)) }
            await again.close()
            await server.disconnect(device)
        }
    }

    /// A device connection whose certificate is revoked gets an Error
    /// frame `certificateRefused` (9), then the server closes it.
    @Test func aRevokedDeviceCertificatesConnectionGetsCertificateRefused() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let deviceID = await device.client.deviceID
            await server.disconnect(device)
            let store = server.application.provisioner.store
            let serial = try #require(try await store.device(id: deviceID)?.certificateSerial)

            let connection = try await DeviceGatewayTests().rawConnection(server, directory: device.directory)
            let answers = try await connection.executeThenClose { inbound, outbound in
                try await outbound.write(DeviceMessage.connect(version: 1, tokens: [token], keepAlive: nil, generation: nil).frame)
                var messages: [DeviceMessage] = []
                do {
                    for try await frame in inbound {
                        let message = try DeviceMessage(frame: frame)
                        messages.append(message)
                        if message == .noStorage {
                            try await server.application.provisioner.revokeCertificate(serial: serial)
                            await server.application.sweep()
                        }
                    }
                } catch {
                    // The server closed after its Error frame.
                }
                return messages
            }
            guard case .error(let code, _) = answers.last else {
                Issue.record("expected an Error frame last, got \(answers)")
                return
            }
            #expect(code == .certificateRefused)
            await server.dispatcher.waitUntilOffline(deviceID: deviceID, environment: .production)
        }
    }

    /// A device connection is kept under its certificate while it is
    /// open, and forgotten once it has ended (the connection says so; its
    /// channel has no close callback for it).
    @Test func aDeviceConnectionLeavesTheRegisterWhenItEnds() async throws {
        try await withTestServer { server in
            let certificates = server.application.policy.certificates
            let before = certificates.count
            let device = try await server.device()
            _ = try await device.client.register("com.example.demo")
            #expect(certificates.count == before + 1)
            let deviceID = await device.client.deviceID
            await server.disconnect(device)
            await server.dispatcher.waitUntilOffline(deviceID: deviceID, environment: .production)
            #expect(certificates.count == before)
        }
    }

    /// Only the revoked certificate's connections close: another
    /// provider's binary connection and another device stay.
    @Test func otherCertificatesConnectionsStay() async throws {
        try await withTestServer { server in
            let provisioner = server.application.provisioner
            let device = try await server.device()
            let other = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let (second, _) = try await provisioner.issueProviderCertificate(
                bundleID: "com.example.demo", environments: [.production], directory: server.directory + "/second")
            let kept = try await server.binaryClient(certificate: server.directory + "/second/com.example.demo.pem", key: server.directory + "/second/com.example.demo-key.pem")
            _ = try await kept.send(token: token, payload: Array(#"{"aps":{"alert":"before"}}"#.utf8), expiry: 0)
            #expect(await device.next() != nil)
            let revokedDevice = try #require(try await provisioner.store.device(id: await other.client.deviceID)?.certificateSerial)
            let demo = try #require(try await provisioner.store.certificates(kind: .provider).first { $0.bundleID == "com.example.demo" && $0.serial != second.serial }?.serial)
            try await provisioner.revokeCertificate(serial: demo)
            try await provisioner.revokeCertificate(serial: revokedDevice)
            await server.application.sweep()
            await server.dispatcher.waitUntilOffline(deviceID: await other.client.deviceID, environment: .production)
            _ = try await kept.send(token: token, payload: Array(#"{"aps":{"alert":"after"}}"#.utf8), expiry: 0)
            #expect(await device.next()?.payload == Array(#"{"aps":{"alert":"after"}}"#.utf8))
            await kept.close()
            await other.stop()
            await server.disconnect(device)
        }
    }
}

/// The register of connections by certificate, without a server.
@Suite struct CertificateConnectionsTests {
    @Test func eachCertificatesConnectionsAreKeptUntilTheyClose() async throws {
        let store = try await SQLiteStore.inMemory(logger: Logger(label: "test"))
        let connections = CertificateConnections(store: store, clock: ManualWallClock(Date(timeIntervalSince1970: 1_750_000_000)), logger: Logger(label: "test"))
        try Self.keepUntilClosed(connections)
        try await store.close()
    }

    /// The part on embedded channels, without a suspension point: an
    /// embedded loop is used only on the thread that made it.
    private static func keepUntilClosed(_ connections: CertificateConnections) throws {
        let closed = Mutex<[String]>([])
        let channels = (0..<4).map { _ in EmbeddedChannel() }
        for channel in channels { try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait() }
        // A device's certificate with one connection, a provider's with three.
        connections.register(serial: "01", channel: channels[0]) { closed.withLock { $0.append("device") } }
        for (index, channel) in channels.dropFirst().enumerated() {
            connections.register(serial: "02", channel: channel) { closed.withLock { $0.append("provider \(index)") } }
        }
        #expect(connections.count == 4)
        try channels[2].close().wait()
        channels[2].embeddedEventLoop.run()
        #expect(connections.count == 3)
        for connection in connections.takeConnections(of: ["02"]) { connection.revoke() }
        #expect(closed.withLock { $0.sorted() } == ["provider 0", "provider 2"])
        #expect(connections.count == 1)
        try channels[0].close().wait()
        channels[0].embeddedEventLoop.run()
        #expect(connections.count == 0)
        #expect(connections.takeConnections(of: ["01", "02"]).isEmpty)
    }
}
