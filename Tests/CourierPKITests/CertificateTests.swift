import CourierCore
import CourierPKI
import CourierTestSupport
import Crypto
import Foundation
import SwiftASN1
import Testing
import X509

/// Certificates checked with the machine's openssl and curl.
@Suite struct CertificateTests {
    let now = Date()

    func write(_ text: String, _ name: String, in directory: String) throws -> String {
        let path = directory + "/" + name
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func providerCertificateShowsTopicsUIDAndEnvironmentsInOpenSSL() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let ca = try CertificateAuthority.create(now: now)
        let authority = try CertificateAuthority(certificate: ca.certificate, key: ca.privateKey)
        let provider = try authority.issueProviderCertificate(
            bundleID: "com.example.demo", teamID: "DEMOTEAM01", teamName: "Demo", topics: Topic.all(of: "com.example.demo"),
            environments: [.production, .sandbox], now: now)
        let path = try write(try provider.certificatePEM, "provider.pem", in: directory)
        let text = try runProgram("openssl", ["x509", "-text", "-noout", "-in", path])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("UID = com.example.demo"))
        #expect(text.stdout.contains("OU = DEMOTEAM01"))
        #expect(text.stdout.contains("1.2.840.113635.100.6.3.6"))
        #expect(text.stdout.contains("com.example.demo.voip"))
        #expect(text.stdout.contains("1.2.840.113635.100.6.3.1"))
        #expect(text.stdout.contains("1.2.840.113635.100.6.3.2"))
        #expect(text.stdout.contains("TLS Web Client Authentication"))
    }

    @Test func everyIssuedCertificateVerifiesAgainstItsCAAndNotAnother() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let ca = try CertificateAuthority.create(now: now)
        let authority = try CertificateAuthority(certificate: ca.certificate, key: ca.privateKey)
        let otherCA = try CertificateAuthority.create(commonName: "Another CA", now: now)
        let caPath = try write(try ca.certificatePEM, "ca.pem", in: directory)
        let otherPath = try write(try otherCA.certificatePEM, "other.pem", in: directory)
        let issued = [
            ("server", try authority.issueServerCertificate(dnsNames: ["localhost"], ipAddresses: ["127.0.0.1", "::1"], now: now)),
            ("provider", try authority.issueProviderCertificate(
                bundleID: "com.example.demo", teamID: "DEMOTEAM01", teamName: "Demo", topics: Topic.all(of: "com.example.demo"),
                environments: [.sandbox], now: now)),
            ("device", try authority.issueDeviceCertificate(deviceID: 42, now: now)),
        ]
        for (name, certificate) in issued {
            let path = try write(try certificate.certificatePEM, "\(name).pem", in: directory)
            let good = try runProgram("openssl", ["verify", "-CAfile", caPath, path])
            #expect(good.status == 0 && good.stdout.contains("OK"), "\(name): \(good.stdout) \(good.stderr)")
            let bad = try runProgram("openssl", ["verify", "-CAfile", otherPath, path])
            #expect(bad.status != 0, "\(name) must not verify against another CA")
            // The private key is PKCS#8 and matches the certificate.
            let keyPath = try write(certificate.privateKeyPEM, "\(name)-key.pem", in: directory)
            #expect(certificate.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
            let keyPublic = try runProgram("openssl", ["pkey", "-in", keyPath, "-pubout"])
            let certificatePublic = try runProgram("openssl", ["x509", "-in", path, "-pubkey", "-noout"])
            #expect(keyPublic.status == 0 && keyPublic.stdout == certificatePublic.stdout, "\(name) key pair")
        }
        let caText = try runProgram("openssl", ["x509", "-text", "-noout", "-in", caPath])
        #expect(caText.stdout.contains("CA:TRUE"))
    }

    @Test func curlTrustsTheServerCertificateAndPresentsAProviderCertificate() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let ca = try CertificateAuthority.create(now: now)
        let authority = try CertificateAuthority(certificate: ca.certificate, key: ca.privateKey)
        let server = try authority.issueServerCertificate(dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"], now: now)
        let provider = try authority.issueProviderCertificate(
            bundleID: "com.example.demo", teamID: "DEMOTEAM01", teamName: "Demo", topics: Topic.all(of: "com.example.demo"),
            environments: [.production], now: now)
        let caPath = try write(try ca.certificatePEM, "ca.pem", in: directory)
        let serverPath = try write(try server.certificatePEM, "server.pem", in: directory)
        let serverKey = try write(server.privateKeyPEM, "server-key.pem", in: directory)
        let providerPath = try write(try provider.certificatePEM, "provider.pem", in: directory)
        let providerKey = try write(provider.privateKeyPEM, "provider-key.pem", in: directory)

        // openssl's test server requires a client certificate from the CA.
        let tlsServer = try RunningProgram(
            "openssl",
            ["s_server", "-accept", "127.0.0.1:0", "-cert", serverPath, "-key", serverKey, "-CAfile", caPath, "-Verify", "1",
             "-verify_return_error", "-naccept", "1", "-www"],
            mergeStandardError: true)
        let accept = try #require(tlsServer.waitForLine(containing: "ACCEPT"), "s_server did not start: \(tlsServer.output)")
        let port = try #require(accept.split(separator: ":").last.map(String.init))
        let curl = try runProgram(
            "curl", ["-sS", "--cacert", caPath, "--cert", providerPath, "--key", providerKey, "https://localhost:\(port)/"])
        #expect(curl.status == 0, "curl: \(curl.stderr)")
        #expect(curl.stdout.contains("s_server"), "curl got the test server's page")
        _ = tlsServer.waitForExit(limit: 30)
    }

    @Test func topicsExtensionReadsBothLayouts() throws {
        let topics = Topic.all(of: "com.example.demo")
        let apple = try PushTopicsExtension(topics: topics).makeCertificateExtension()
        let plain = try PushTopicsExtension(topics: topics).makePlainCertificateExtension()
        #expect(try PushTopicsExtension(apple).topics == topics)
        #expect(try PushTopicsExtension(plain).topics == topics)
        // Apple's layout: SEQUENCE { "com.example.demo", SEQUENCE { "app" }, ... }
        let root = try DER.parse(apple.value)
        guard case .constructed(let children) = root.content else {
            Issue.record("not constructed")
            return
        }
        let nodes = Array(children)
        #expect(nodes.count == topics.count * 2)
        #expect(nodes[0].identifier == .utf8String)
        #expect(nodes[1].identifier == .sequence)
        // A kind that disagrees with the topic is refused.
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { sequence in
            try sequence.serialize(ASN1UTF8String("com.example.demo"))
            try sequence.appendConstructedNode(identifier: .sequence) { try $0.serialize(ASN1UTF8String("voip")) }
        }
        let wrong = Certificate.Extension(oid: .Courier.topics, critical: false, value: serializer.serializedBytes[...])
        #expect(throws: PKIError.self) { try PushTopicsExtension(wrong) }
        // A kind Courier does not name is left to the topic's suffix.
        var other = DER.Serializer()
        try other.appendConstructedNode(identifier: .sequence) { sequence in
            try sequence.serialize(ASN1UTF8String("com.example.demo.voip"))
            try sequence.appendConstructedNode(identifier: .sequence) { try $0.serialize(ASN1UTF8String("some-new-kind")) }
        }
        let unnamed = Certificate.Extension(oid: .Courier.topics, critical: false, value: other.serializedBytes[...])
        #expect(try PushTopicsExtension(unnamed).topics == [Topic(bundleID: "com.example.demo", kind: .voip)])
    }

    @Test(arguments: [false, true])
    func providerCertificateInfoRoundTrips(plain: Bool) throws {
        let ca = try CertificateAuthority.create(now: now)
        let authority = try CertificateAuthority(certificate: ca.certificate, key: ca.privateKey)
        let issued = try authority.issueProviderCertificate(
            bundleID: "com.example.demo", teamID: "DEMOTEAM01", teamName: "Demo", topics: Topic.all(of: "com.example.demo"),
            environments: [.sandbox], now: now, layout: plain ? .plain : .apple)
        let reread = try Certificate(pemEncoded: try issued.certificatePEM)
        let info = try ProviderCertificateInfo(certificate: reread)
        #expect(info.bundleID == "com.example.demo")
        #expect(info.teamID == "DEMOTEAM01")
        #expect(info.topics == Topic.all(of: "com.example.demo"))
        #expect(info.environments == [.sandbox])
    }

    @Test func deviceIDTravelsInTheDeviceCertificate() throws {
        let ca = try CertificateAuthority.create(now: now)
        let authority = try CertificateAuthority(certificate: ca.certificate, key: ca.privateKey)
        let device = try authority.issueDeviceCertificate(deviceID: 0xFEED_FACE_CAFE_BEEF, now: now)
        #expect(DeviceIdentity.deviceID(of: device.certificate) == 0xFEED_FACE_CAFE_BEEF)
        let server = try authority.issueServerCertificate(dnsNames: ["localhost"], ipAddresses: [], now: now)
        #expect(DeviceIdentity.deviceID(of: server.certificate) == nil)
    }

    @Test func badInputsAreRefusedWithAMessage() throws {
        let ca = try CertificateAuthority.create(now: now)
        let authority = try CertificateAuthority(certificate: ca.certificate, key: ca.privateKey)
        #expect(throws: PKIError(.invalidArgument, "")) {
            try authority.issueServerCertificate(dnsNames: [], ipAddresses: ["300.1.1.1"], now: now)
        }
        #expect(throws: PKIError(.invalidArgument, "")) {
            try authority.issueServerCertificate(dnsNames: [], ipAddresses: [], now: now)
        }
        #expect(throws: PKIError(.invalidArgument, "")) {
            try authority.issueProviderCertificate(
                bundleID: "not a bundle", teamID: "DEMOTEAM01", teamName: "Demo", topics: [], environments: [.sandbox], now: now)
        }
        let other = try CertificateAuthority.create(now: now)
        #expect(throws: PKIError(.badFile, "")) { try CertificateAuthority(certificate: ca.certificate, key: other.privateKey) }
    }

    @Test func authKeysAreP8FilesOpenSSLReads() throws {
        let key = AuthKey.generate()
        #expect(Identifiers.isTenCharacterID(key.keyID))
        #expect(key.fileName == "AuthKey_\(key.keyID).p8")
        #expect(key.publicKeyX963.count == 65)
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let path = try write(key.p8PEM, key.fileName, in: directory)
        let parsed = try runProgram("openssl", ["pkey", "-in", path, "-noout", "-text"])
        #expect(parsed.status == 0)
        #expect(parsed.stdout.contains("P-256"))
        let reread = try AuthKey(keyID: key.keyID, p8PEM: key.p8PEM)
        #expect(reread.publicKeyX963 == key.publicKeyX963)
        // An ES256 signature made with the file's key verifies with the stored public key.
        let signature = try reread.privateKey.signature(for: Array("header.claims".utf8))
        let stored = try P256.Signing.PublicKey(x963Representation: key.publicKeyX963)
        #expect(stored.isValidSignature(signature, for: Array("header.claims".utf8)))
        #expect(throws: PKIError(.badFile, "")) { try AuthKey(keyID: "ABCDEFGHIJ", p8PEM: "not a key") }
        #expect(throws: PKIError(.invalidArgument, "")) { try AuthKey(keyID: "short", p8PEM: key.p8PEM) }
    }
}
