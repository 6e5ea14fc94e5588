import CourierCore
import CourierDevice
import CourierPKI
import CourierServer
import CourierTestSupport
import Foundation
import Logging
import ServiceLifecycle
import SwiftASN1
import Testing
import X509

func testConfiguration(_ directory: String) -> CourierConfiguration {
    var configuration = CourierConfiguration(dataDirectory: directory)
    configuration.network.production = .ephemeral
    configuration.network.sandbox = .ephemeral
    configuration.network.adminPort = 0
    return configuration
}

@Suite struct ApplicationTests {
    let logger = Logger(label: "test")

    @Test func firstStartCreatesWhatANewcomerNeedsAndStopsGracefully() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let application = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        let report = application.report
        #expect(report.isFirstStart)
        for file in report.files {
            #expect(file.created, "\(file.what)")
            #expect(FileManager.default.fileExists(atPath: file.path), "\(file.path)")
        }
        #expect(report.files.contains { $0.path == directory + "/pki/ca.pem" })
        #expect(report.files.contains { $0.path == directory + "/pki/token-key-production.key" })
        #expect(report.files.contains { $0.path == directory + "/pki/token-key-sandbox.key" })

        // The demo: team, app, auth key and a universal provider certificate.
        let store = application.provisioner.store
        #expect(try await store.team(id: "DEMOTEAM01") != nil)
        #expect(try await store.app(bundleID: "com.example.demo")?.teamID == "DEMOTEAM01")
        let keyID = try #require(report.demoKeyID)
        #expect(try await store.authKey(id: keyID)?.teamID == "DEMOTEAM01")
        #expect(FileManager.default.fileExists(atPath: directory + "/demo/AuthKey_\(keyID).p8"))
        let pem = try String(contentsOfFile: try #require(report.demoCertificatePath), encoding: .utf8)
        let info = try ProviderCertificateInfo(certificate: Certificate(pemEncoded: pem))
        #expect(info.bundleID == "com.example.demo")
        #expect(info.environments == [.production, .sandbox])
        #expect(
            info.topics.map(\.description) == [
                "com.example.demo", "com.example.demo.voip", "com.example.demo.complication", "com.example.demo.pushkit.fileprovider", "com.example.demo.voip-ptt",
            ])

        // The server certificate names localhost, 127.0.0.1 and ::1.
        // server.pem holds the server certificate, then the CA.
        let chain = try PEMDocument.parseMultiple(pemString: try String(contentsOfFile: directory + "/pki/server.pem", encoding: .utf8))
        #expect(chain.count == 2)
        let server = try Certificate(pemDocument: chain[0])
        let names = try #require(try server.extensions.subjectAlternativeNames)
        #expect(names.contains(.dnsName("localhost")))
        #expect(names.count == 3)

        // Token keys work and differ by environment.
        let production = try application.provisioner.tokenCodec(.production)
        let sandbox = try application.provisioner.tokenCodec(.sandbox)
        let token = production.issue(DeviceTokenContents(deviceID: 1, generation: 1, bundleID: "com.example.demo"))
        #expect(sandbox.open(token) == .failure(.notAuthentic))

        let group = application.serviceGroup(logger: logger, signals: false)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    /// A server whose task is cancelled rather than shut down (a test's
    /// time limit, a host that cancels its tasks) still closes its store:
    /// no descriptor of its data directory stays open.
    @Test func aCancelledServerStillClosesItsStore() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let application = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        let group = application.serviceGroup(logger: logger, signals: false)
        let running = Task { try await group.run() }
        _ = try await application.ports.adminPort()
        #expect(Self.openFiles(under: directory) >= 2, "the store's two connections are open")
        running.cancel()
        _ = await running.result
        #expect(Self.openFiles(under: directory) == 0, "the store was closed")
    }

    /// How many of this process's descriptors are files under `directory`.
    static func openFiles(under directory: String) -> Int {
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return descriptors.filter { descriptor in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + descriptor))?.hasPrefix(directory + "/") == true
        }.count
    }

    @Test func aSecondStartReusesTheDataDirectory() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let first = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        let caBefore = try String(contentsOfFile: directory + "/pki/ca.pem", encoding: .utf8)
        let tokenKeyBefore = try String(contentsOfFile: directory + "/pki/token-key-production.key", encoding: .utf8)
        let certificatesBefore = try await first.provisioner.store.certificates(kind: nil).count
        try await first.provisioner.close()

        let second = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        #expect(!second.report.isFirstStart)
        #expect(second.report.files.allSatisfy { !$0.created })
        #expect(second.report.demoKeyID == first.report.demoKeyID)
        #expect(try String(contentsOfFile: directory + "/pki/ca.pem", encoding: .utf8) == caBefore)
        #expect(try String(contentsOfFile: directory + "/pki/token-key-production.key", encoding: .utf8) == tokenKeyBefore)
        #expect(try await second.provisioner.store.certificates(kind: nil).count == certificatesBefore)
        try await second.provisioner.close()
    }

    /// The demo device follows the configured device ports: its identity
    /// does not keep a port the configuration changed since.
    @Test func theDemoDeviceIdentityFollowsTheConfiguredPorts() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        var configuration = testConfiguration(directory)
        configuration.network.production.device = 45_001
        configuration.network.sandbox.device = 55_001
        // Built, not run: nothing binds these ports.
        let first = try await CourierApplication.build(configuration: configuration, logger: logger)
        try await first.provisioner.close()
        let path = try #require(first.report.demoDeviceDirectory) + "/identity.json"
        func identity() throws -> DeviceIdentityFile { try JSONDecoder().decode(DeviceIdentityFile.self, from: Data(contentsOf: URL(fileURLWithPath: path))) }
        #expect(try identity().productionPort == 45_001)
        let tokens = try identity().tokens

        configuration.network.production.device = 45_002
        let second = try await CourierApplication.build(configuration: configuration, logger: logger)
        try await second.provisioner.close()
        #expect(try identity().productionPort == 45_002)
        #expect(try identity().sandboxPort == 55_001)
        #expect(try identity().tokens == tokens)
    }

    /// The data directory holds private keys, the token keys and payloads:
    /// every folder and every secret file Courier makes is its owner's
    /// only (0700 / 0600), whatever the umask.
    @Test func keysTheDatabaseAndFoldersAreTheOwnersOnly() async throws {
        let parent = try temporaryDirectory()
        defer { removeTemporaryDirectory(parent) }
        let directory = parent + "/data"
        let previous = umask(0o022)
        defer { umask(previous) }
        let application = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        // A provider's key and a device's identity made later land there too.
        _ = try await application.provisioner.issueProviderCertificate(
            bundleID: "com.example.demo", environments: [.production], directory: directory + "/issued/provider")
        _ = try await application.provisioner.issueDeviceIdentity(directory: directory + "/issued/device")
        try await application.provisioner.close()

        func mode(_ path: String) throws -> Int { try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) }
        var secrets: [String] = []
        #expect(try mode(directory) == 0o700)
        let walker = try #require(FileManager.default.enumerator(atPath: directory))
        while let name = walker.nextObject() as? String {
            let path = directory + "/" + name
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
            if isDirectory.boolValue {
                #expect(try mode(path) == 0o700, "folder \(name)")
                continue
            }
            let text = String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
            let secret = text.contains("PRIVATE KEY") || name.hasSuffix(".key") || name.contains("courier.sqlite")
            if secret {
                secrets.append(name)
                #expect(try mode(path) == 0o600, "\(name)")
            }
        }
        // What must be among them: the CA's, the server's, both token keys, the demo's keys, the database.
        for expected in [
            "pki/ca-key.pem", "pki/server-key.pem", "pki/token-key-production.key", "pki/token-key-sandbox.key", "courier.sqlite",
            "demo/com.example.demo-key.pem", "demo/device/key.pem", "issued/device/key.pem",
        ] {
            #expect(secrets.contains(expected), "\(expected) among \(secrets)")
        }
        #expect(secrets.contains { $0.hasPrefix("demo/AuthKey_") })
        #expect(secrets.contains { $0.hasPrefix("issued/provider/") })
    }

    /// A database made by an earlier version with a wider mode is narrowed
    /// at start.
    @Test func aReadableDatabaseIsNarrowedAtStart() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let first = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        try await first.provisioner.close()
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: directory + "/courier.sqlite")
        let second = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        try await second.provisioner.close()
        #expect(try FileManager.default.attributesOfItem(atPath: directory + "/courier.sqlite")[.posixPermissions] as? Int == 0o600)
    }

    /// `courier device uninstall` of the demo app, then a restart: the
    /// registration stays ended (a push is still Unregistered), and the
    /// demo app is not registered again behind the user's back.
    @Test func aRestartKeepsAnUninstall() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let first = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        let token = try #require(first.report.demoDeviceToken.flatMap(Hex.decode))
        let deviceDirectory = try #require(first.report.demoDeviceDirectory)
        var credentials = try DeviceCredentials.load(from: deviceDirectory)
        #expect(try await first.dispatcher.unregister(deviceID: credentials.deviceID, bundleID: "com.example.demo", environment: .production))
        // As `courier device uninstall` does: the identity forgets the token.
        credentials.setToken(nil, for: "com.example.demo", in: .production)
        try credentials.save()
        try await first.provisioner.close()

        let second = try await CourierApplication.build(configuration: testConfiguration(directory), logger: logger)
        let registration = try await second.provisioner.store.registration(deviceID: credentials.deviceID, bundleID: "com.example.demo", environment: .production)
        #expect(registration?.active == false, "still uninstalled")
        #expect(second.report.demoDeviceToken == nil)
        #expect(try DeviceCredentials.load(from: deviceDirectory).token(for: "com.example.demo", in: .production) == nil)
        let push = PushNotification(id: UUID(), token: token, topic: "com.example.demo", payload: Array(#"{"aps":{}}"#.utf8), expiration: nil, priority: .immediate)
        // Running: the push's feedback entry is written by the feedback list's group commit.
        let group = second.serviceGroup(logger: logger, signals: false)
        let result = try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let result = await second.dispatcher.accept(push, environment: .production, grant: TopicGrant(push.topic, for: TestServer.demoProvider))
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        }
        guard case .rejected(let reason, _) = result else {
            Issue.record("expected Unregistered, got \(result)")
            try await second.provisioner.close()
            return
        }
        #expect(reason == .unregistered)
        try await second.provisioner.close()
    }

    @Test func theDemoCanBeSwitchedOff() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        var configuration = testConfiguration(directory)
        configuration.demo.enabled = false
        let application = try await CourierApplication.build(configuration: configuration, logger: logger)
        #expect(try await application.provisioner.store.teams().isEmpty)
        #expect(application.report.demoKeyID == nil)
        try await application.provisioner.close()
    }
}

@Suite struct ProvisionerTests {
    let logger = Logger(label: "test")

    func open() async throws -> (Provisioner, String) {
        let directory = try temporaryDirectory()
        let provisioner = try await Provisioner.open(configuration: testConfiguration(directory), logger: logger)
        _ = try await provisioner.createAuthority()
        return (provisioner, directory)
    }

    @Test func teamsAndAppsAreCheckedBeforeTheyAreStored() async throws {
        let (provisioner, directory) = try await open()
        defer { removeTemporaryDirectory(directory) }
        _ = try await provisioner.createTeam(id: "TEAM000001", name: "One")
        await #expect(throws: PKIError(.alreadyExists, "")) { _ = try await provisioner.createTeam(id: "TEAM000001", name: "Again") }
        await #expect(throws: PKIError(.invalidArgument, "")) { _ = try await provisioner.createTeam(id: "team1", name: "Bad") }
        await #expect(throws: PKIError(.notFound, "")) { _ = try await provisioner.createApp(bundleID: "com.example.x", teamID: "NOSUCHTEAM") }
        await #expect(throws: PKIError(.invalidArgument, "")) { _ = try await provisioner.createApp(bundleID: "bad bundle", teamID: "TEAM000001") }
        let app = try await provisioner.createApp(bundleID: "com.example.x", teamID: "TEAM000001", kinds: [.app])
        #expect(app.topics.map(\.description) == ["com.example.x"])
        await #expect(throws: PKIError(.alreadyExists, "")) { _ = try await provisioner.createApp(bundleID: "com.example.x", teamID: "TEAM000001") }
        try await provisioner.close()
    }

    @Test func certificatesAndKeysAreRevokedOnce() async throws {
        let (provisioner, directory) = try await open()
        defer { removeTemporaryDirectory(directory) }
        _ = try await provisioner.createTeam(id: "TEAM000001", name: "One")
        _ = try await provisioner.createApp(bundleID: "com.example.x", teamID: "TEAM000001")
        let (record, _) = try await provisioner.issueProviderCertificate(bundleID: "com.example.x", environments: [.sandbox], directory: directory + "/out")
        #expect(record.environments == [.sandbox])
        try await provisioner.revokeCertificate(serial: record.serial.uppercased())
        #expect(try await provisioner.store.certificate(serial: record.serial)?.revokedAt != nil)
        await #expect(throws: PKIError(.alreadyExists, "")) { try await provisioner.revokeCertificate(serial: record.serial) }
        await #expect(throws: PKIError(.notFound, "")) { try await provisioner.revokeCertificate(serial: "abcdef") }
        await #expect(throws: PKIError(.invalidArgument, "")) { try await provisioner.revokeCertificate(serial: "xyz") }
        let ca = try #require(try await provisioner.store.certificates(kind: .authority).first)
        await #expect(throws: PKIError(.notAllowed, "")) { try await provisioner.revokeCertificate(serial: ca.serial) }

        let (key, file) = try await provisioner.createAuthKey(teamID: "TEAM000001", directory: directory + "/out")
        #expect(file.path.hasSuffix("/AuthKey_\(key.keyID).p8"))
        try await provisioner.revokeAuthKey(keyID: key.keyID)
        #expect(try await provisioner.store.authKey(id: key.keyID)?.revokedAt != nil)
        await #expect(throws: PKIError(.alreadyExists, "")) { try await provisioner.revokeAuthKey(keyID: key.keyID) }
        await #expect(throws: PKIError(.notFound, "")) { try await provisioner.revokeAuthKey(keyID: "NOSUCHKEY1") }
        try await provisioner.close()
    }

    @Test func aDeviceIdentityHoldsCertificateKeyCAAndIdentityFile() async throws {
        let (provisioner, directory) = try await open()
        defer { removeTemporaryDirectory(directory) }
        let (device, _) = try await provisioner.issueDeviceIdentity(directory: directory + "/device")
        for name in ["cert.pem", "key.pem", "ca.pem", "identity.json"] {
            #expect(FileManager.default.fileExists(atPath: directory + "/device/" + name), "\(name)")
        }
        let certificate = try Certificate(pemEncoded: try String(contentsOfFile: directory + "/device/cert.pem", encoding: .utf8))
        #expect(DeviceIdentity.deviceID(of: certificate) == device.id)
        let identity = try JSONDecoder().decode(DeviceIdentityFile.self, from: Data(contentsOf: URL(fileURLWithPath: directory + "/device/identity.json")))
        #expect(identity.deviceID == String(device.id, radix: 16))
        #expect(identity.generation == 1)
        #expect(try await provisioner.store.device(id: device.id)?.certificateSerial == Hex.encode(certificate.serialNumber.bytes))
        try await provisioner.close()
    }

    @Test func withoutACAIssuingSaysWhatToRun() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let provisioner = try await Provisioner.open(configuration: testConfiguration(directory), logger: logger)
        do {
            _ = try await provisioner.issueDeviceIdentity(directory: directory + "/device")
            Issue.record("issued without a CA")
        } catch let error as PKIError {
            #expect(error.code == .notFound)
            #expect(error.message.contains("courier pki ca"))
        }
        try await provisioner.close()
    }
}
