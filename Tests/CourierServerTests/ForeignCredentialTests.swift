import CourierCore
import CourierPKI
import CourierProvider
import CourierServer
import CourierTestSupport
import Foundation
import Testing
import X509

/// Credentials a team has from elsewhere, kept unchanged
/// (docs/provisioning.md): provider certificates of another trusted
/// authority (as Apple's WWDR issues them), and UID-only certificates.
@Suite(.timeLimit(.minutes(2))) struct ForeignCredentialTests {
    let payload = Array(#"{"aps":{"alert":"kept"}}"#.utf8)

    /// A provider certificate and key of `authority`, written to the data
    /// directory; its paths.
    func foreign(
        _ authority: CertificateAuthority, bundle: String = "com.example.demo", team: String = "DEMOTEAM01", topics: [Topic]? = nil,
        environments: Set<Environment> = [.production, .sandbox], name: String, in server: TestServer
    ) throws -> (certificate: String, key: String, serial: String) {
        let issued = try authority.issueProviderCertificate(
            bundleID: bundle, teamID: team, teamName: "A Team", topics: topics ?? Topic.all(of: bundle).filter { [.app, .voip, .complication].contains($0.kind) },
            environments: environments, now: server.clock.now())
        let paths = (server.directory + "/\(name).pem", server.directory + "/\(name)-key.pem")
        try issued.certificatePEM.write(toFile: paths.0, atomically: true, encoding: .utf8)
        try issued.privateKeyPEM.write(toFile: paths.1, atomically: true, encoding: .utf8)
        return (paths.0, paths.1, issued.serialHex)
    }

    @Test func aCertificateOfATrustedAuthorityConnectsUnchangedAndIsRevokedLikeCouriersOwn() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let issued = try CertificateAuthority.create(commonName: "Apple Worldwide Developer Relations Certification Authority", now: server.clock.now())
            let wwdr = try CertificateAuthority(certificate: issued.certificate, key: issued.privateKey)
            let existing = try foreign(wwdr, name: "existing", in: server)

            // Not trusted yet: the handshake fails.
            let untrusted = try await server.http2Client(credentials: .certificate(certificatePath: existing.certificate, keyPath: existing.key))
            await #expect(throws: (any Error).self) { try await untrusted.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")) }
            await untrusted.close()

            // Trusted from the command line, from its DER (.cer) file, while the server runs.
            let cer = server.directory + "/AppleWWDRCA.cer"
            try Data(try issued.certificate.serializeAsPEM().derBytes).write(to: URL(fileURLWithPath: cer))
            let run = try await runProgram(courier, ["pki", "trust-ca", "--data", server.directory, "--file", cer])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("trusted provider authority"), "\(run.stdout)")
            let notCA = try await runProgram(courier, ["pki", "trust-ca", "--data", server.directory, "--file", existing.certificate])
            #expect(notCA.status != 0)
            #expect(notCA.stderr.contains("is not a certificate authority"), "\(notCA.stderr)")

            let client = try await server.http2Client(credentials: .certificate(certificatePath: existing.certificate, keyPath: existing.key))
            let sent = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo.voip", pushType: "voip"))
            #expect(sent.status == 200, "\(sent.reason?.rawValue ?? "")")
            #expect(try #require(await device.next()).topic == "com.example.demo.voip")
            // Its topics are its extension's: not another app of the team.
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.second", teamID: "DEMOTEAM01")
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.second")).reason == .topicDisallowed)

            // The binary API takes it too.
            let binary = try await server.binaryClient(certificate: existing.certificate, key: existing.key)
            _ = try await binary.send(token: token, payload: payload)
            #expect(try #require(await device.next()).payload == payload)

            // Adopted: listed with the others, and revoked like them.
            let listed = try await server.application.provisioner.certificates(kind: .provider)
            let record = try #require(listed.first { $0.serial == existing.serial })
            #expect(record.teamID == "DEMOTEAM01")
            #expect(record.environments == [.production, .sandbox])
            #expect(try await server.admin("POST", "/v1/certificates/\(existing.serial)/revoke").status == 200)
            let afterRevocation = try await server.http2Client(credentials: .certificate(certificatePath: existing.certificate, keyPath: existing.key))
            await #expect(throws: (any Error).self) { try await afterRevocation.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")) }
            await afterRevocation.close()
            await client.close()
            await binary.close()
            await server.disconnect(device)
        }
    }

    /// A trusted authority does not decide which team a certificate
    /// reaches: its team and every app it names must be the operator's.
    @Test func aTrustedAuthorityReachesOnlyItsCertificatesOwnTeamsApps() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            _ = try await server.otherTeam()
            let foreignToken = try await device.client.register("com.example.foreign")
            let issued = try CertificateAuthority.create(commonName: "Another Authority", now: server.clock.now())
            let other = try CertificateAuthority(certificate: issued.certificate, key: issued.privateKey)
            _ = try server.application.provisioner.trustProviderAuthority(Array(try issued.certificatePEM.utf8))
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.novoip", teamID: "DEMOTEAM01", kinds: [.app])
            let cases = [
                // Claims the demo team but names the other team's app.
                try foreign(other, team: "DEMOTEAM01", topics: [Topic("com.example.demo"), Topic("com.example.foreign")], name: "mixed", in: server),
                // Claims the other team's app under the demo team.
                try foreign(other, bundle: "com.example.foreign", team: "DEMOTEAM01", name: "wrong-team", in: server),
                // A team that does not exist.
                try foreign(other, team: "NOSUCHTEAM", name: "no-team", in: server),
                // A kind its app lacks, and a kind certificates may not use.
                try foreign(other, bundle: "com.example.novoip", topics: [Topic("com.example.novoip"), Topic("com.example.novoip.voip")], name: "no-voip", in: server),
                try foreign(other, topics: [Topic("com.example.demo"), Topic("com.example.demo.push-type.liveactivity")], name: "token-only", in: server),
            ]
            for claimed in cases {
                let client = try await server.http2Client(credentials: .certificate(certificatePath: claimed.certificate, keyPath: claimed.key))
                await #expect(throws: (any Error).self) {
                    try await client.send(HTTP2Push(token: foreignToken, payload: payload, topic: "com.example.foreign"))
                }
                await client.close()
                #expect(try await server.application.provisioner.store.certificate(serial: claimed.serial) == nil)
            }
            await server.disconnect(device)
        }
    }

    /// A UID-only certificate (no topics extension), as Apple issued them
    /// before universal certificates: its bundle id is its one topic and
    /// the default.
    @Test func aUIDOnlyCertificatePushesToItsBundleIDAlone() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let issued = try await server.admin("POST", "/v1/apps/com.example.demo/certificates", body: #"{"topicsLayout": "uid-only"}"#)
            #expect(issued.status == 201, "\(issued.message ?? "")")
            let pem = try #require(issued.object["certificatePEM"] as? String)
            #expect(try Certificate(pemEncoded: pem).extensions[oid: .Courier.topics] == nil)
            let paths = (server.directory + "/uid-only.pem", server.directory + "/uid-only-key.pem")
            try pem.write(toFile: paths.0, atomically: true, encoding: .utf8)
            try #require(issued.object["keyPEM"] as? String).write(toFile: paths.1, atomically: true, encoding: .utf8)
            let connection = try await server.http2Connection(certificate: paths)
            #expect(try await RawPush(token: token, topic: nil).send(on: connection).status == 200)
            #expect(try #require(await device.next()).topic == "com.example.demo")
            #expect(try await RawPush(token: token, topic: "com.example.demo.voip").send(on: connection).reason == "TopicDisallowed")
            await connection.close()
            #expect(try await server.admin("POST", "/v1/apps/com.example.demo/certificates", body: #"{"topicsLayout": "flat"}"#).status == 422)
            let both = try await runProgram(courier, ["pki", "provider-cert", "--data", server.directory, "--bundle", "com.example.demo", "--plain-topics", "--uid-only"])
            #expect(both.stderr.contains("give one"), "\(both.stderr)")
            await server.disconnect(device)
        }
    }
}
