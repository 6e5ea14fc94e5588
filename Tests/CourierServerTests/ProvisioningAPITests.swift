import CourierCore
import CourierPKI
import CourierProvider
@testable import CourierServer
import CourierTestSupport
import CourierWire
import Foundation
import Testing

/// Provisioning through the admin API, each credential it makes used by a
/// real client against the server, and each revocation felt by it.
@Suite(.timeLimit(.minutes(2))) struct ProvisioningAPITests {
    let payload = Array(#"{"aps":{"alert":"provisioned"}}"#.utf8)

    @Test func teamsAndAppsAreCreatedListedAndChecked() async throws {
        try await withTestServer { server in
            let team = try await server.admin("POST", "/v1/teams", body: #"{"id": "TEAMAPI001", "name": "API team"}"#)
            #expect(team.status == 201, "\(team.message ?? "")")
            #expect(team.object["id"] as? String == "TEAMAPI001")
            let again = try await server.admin("POST", "/v1/teams", body: #"{"id": "TEAMAPI001", "name": "Again"}"#)
            #expect(again.status == 409)
            #expect(again.message?.contains("exists") == true)
            let badID = try await server.admin("POST", "/v1/teams", body: #"{"id": "short", "name": "Bad"}"#)
            #expect(badID.status == 422)
            #expect(badID.message?.contains("team id") == true)
            let noName = try await server.admin("POST", "/v1/teams", body: #"{"id": "TEAMAPI002"}"#)
            #expect(noName.status == 400)

            let app = try await server.admin(
                "POST", "/v1/apps", body: #"{"bundleID": "com.example.api", "teamID": "TEAMAPI001", "topicKinds": ["app", "voip"]}"#)
            #expect(app.status == 201, "\(app.message ?? "")")
            #expect(app.object["topics"] as? [String] == ["com.example.api", "com.example.api.voip"])
            let orphan = try await server.admin("POST", "/v1/apps", body: #"{"bundleID": "com.example.orphan", "teamID": "NOSUCHTEAM"}"#)
            #expect(orphan.status == 404)
            let kind = try await server.admin("POST", "/v1/apps", body: #"{"bundleID": "com.example.k", "teamID": "TEAMAPI001", "topicKinds": ["fax"]}"#)
            #expect(kind.status == 422)
            #expect(kind.message?.contains("fax") == true)
            // A bundle id that reads as another app's topic (another team's, here) is refused.
            let suffixed = try await server.admin("POST", "/v1/apps", body: #"{"bundleID": "com.example.demo.voip-ptt", "teamID": "TEAMAPI001"}"#)
            #expect(suffixed.status == 422)
            #expect(
                suffixed.message
                    == "'com.example.demo.voip-ptt' ends in '.voip-ptt', which names the pushtotalk topic of com.example.demo: choose another bundle id")

            let list = try await server.admin("GET", "/v1/teams")
            let teams = list.object["teams"] as? [[String: Any]] ?? []
            let created = try #require(teams.first { $0["id"] as? String == "TEAMAPI001" })
            #expect((created["apps"] as? [[String: Any]])?.first?["bundleID"] as? String == "com.example.api")
            #expect(teams.contains { $0["id"] as? String == "DEMOTEAM01" })
        }
    }

    /// The .p8 comes once in the answer; a provider signs with it, and
    /// its revocation ends the connection at once.
    @Test func anAuthKeyIsUsableAtOnceAndItsRevocationEndsItsConnections() async throws {
        try await withTestServer { server in
            let created = try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys")
            #expect(created.status == 201, "\(created.message ?? "")")
            let keyID = try #require(created.object["keyID"] as? String)
            let p8 = try #require(created.object["p8"] as? String)
            #expect(created.object["fileName"] as? String == "AuthKey_\(keyID).p8")
            #expect(try await server.admin("POST", "/v1/teams/NOSUCHTEAM/keys").status == 404)
            let listed = try await server.admin("GET", "/v1/teams")
            let demo = (listed.object["teams"] as? [[String: Any]] ?? []).first { $0["id"] as? String == "DEMOTEAM01" }
            let keys = demo?["authKeys"] as? [[String: Any]] ?? []
            #expect(keys.contains { $0["keyID"] as? String == keyID && $0["p8"] == nil })

            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client(credentials: .token(try AuthKey(keyID: keyID, p8PEM: p8), teamID: "DEMOTEAM01"))
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
            _ = try #require(await device.next())

            let revoked = try await server.admin("POST", "/v1/keys/\(keyID)/revoke")
            #expect(revoked.status == 200)
            #expect(revoked.object["revoked"] as? String == keyID)
            #expect(try await server.admin("POST", "/v1/keys/\(keyID)/revoke").status == 409)
            #expect(try await server.admin("POST", "/v1/keys/NOSUCHKEY1/revoke").status == 404)
            // Closed with GOAWAY before the answer: a new connection's token is refused.
            let refused = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(refused.status == 403)
            #expect(refused.reason == .invalidProviderToken)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// A team's existing .p8 and key id, imported through the API and with
    /// `courier pki auth-key --import`: provider code signs with its own
    /// key file and key id, unchanged.
    @Test func anExistingAuthKeyIsImportedAndSignsPushes() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let existing = AuthKey.generate()
            let body = try String(decoding: JSONSerialization.data(withJSONObject: ["keyID": existing.keyID, "p8": existing.p8PEM]), as: UTF8.self)
            let imported = try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: body)
            #expect(imported.status == 201, "\(imported.message ?? "")")
            #expect(imported.object["keyID"] as? String == existing.keyID)
            #expect(imported.object["p8"] == nil, "Courier gives no .p8 back")
            let client = try await server.http2Client(credentials: .token(existing, teamID: "DEMOTEAM01"))
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
            _ = try #require(await device.next())
            #expect(try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: body).status == 409)
            let notAKey = #"{"keyID": "ABCDE12345", "p8": "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"}"#
            let refused = try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: notAKey)
            #expect(refused.status == 422)
            #expect(refused.message?.contains(".p8") == true)

            // The command line, on the running server's data directory, from Apple's file name.
            let other = AuthKey.generate()
            let path = server.directory + "/" + other.fileName
            try other.p8PEM.write(toFile: path, atomically: true, encoding: .utf8)
            let run = try await runProgram(courier, ["pki", "auth-key", "--data", server.directory, "--team", "DEMOTEAM01", "--import", path])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("imported auth key \(other.keyID)"))
            let second = try await server.http2Client(credentials: .token(other, teamID: "DEMOTEAM01"))
            #expect(try await second.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
            _ = try #require(await device.next())
            let unnamed = server.directory + "/key.p8"
            try other.p8PEM.write(toFile: unnamed, atomically: true, encoding: .utf8)
            let noID = try await runProgram(courier, ["pki", "auth-key", "--data", server.directory, "--team", "DEMOTEAM01", "--import", unnamed])
            #expect(noID.status != 0)
            #expect(noID.stderr.contains("give --key-id"), "\(noID.stderr)")
            // A scoped key from the command line: kept with its scope.
            let scoped = AuthKey.generate()
            let scopedPath = server.directory + "/" + scoped.fileName
            try scoped.p8PEM.write(toFile: scopedPath, atomically: true, encoding: .utf8)
            let scopedRun = try await runProgram(
                courier, ["pki", "auth-key", "--data", server.directory, "--team", "DEMOTEAM01", "--import", scopedPath, "--env", "sandbox", "--bundle", "com.example.demo"])
            #expect(scopedRun.status == 0, "\(scopedRun.stderr)")
            let record = try await server.application.provisioner.store.authKey(id: scoped.keyID)
            #expect(record?.environments == [.sandbox])
            #expect(record?.bundleIDs == ["com.example.demo"])
            let badEnv = try await runProgram(courier, ["pki", "auth-key", "--data", server.directory, "--team", "DEMOTEAM01", "--env", "staging"])
            #expect(badEnv.stderr.contains("--env must be production, sandbox or both, not 'staging'"), "\(badEnv.stderr)")
            let badApp = try await runProgram(courier, ["pki", "auth-key", "--data", server.directory, "--team", "DEMOTEAM01", "--bundle", "com.example.nosuch"])
            #expect(badApp.status != 0)
            #expect(badApp.stderr.contains("app com.example.nosuch is not an app of team DEMOTEAM01"), "\(badApp.stderr)")
            await client.close()
            await second.close()
            await server.disconnect(device)
        }
    }

    /// A provider certificate and key in the answer; a binary client
    /// connects with them until the certificate is revoked.
    @Test func aProviderCertificateIsIssuedListedAndRevoked() async throws {
        try await withTestServer { server in
            let issued = try await server.admin("POST", "/v1/apps/com.example.demo/certificates", body: #"{"environments": ["sandbox"]}"#)
            #expect(issued.status == 201, "\(issued.message ?? "")")
            let certificate = try #require(issued.object["certificate"] as? [String: Any])
            let serial = try #require(certificate["serial"] as? String)
            #expect(certificate["environments"] as? [String] == ["sandbox"])
            #expect(certificate["bundleID"] as? String == "com.example.demo")
            let certificatePath = server.directory + "/api-cert.pem"
            let keyPath = server.directory + "/api-key.pem"
            try #require(issued.object["certificatePEM"] as? String).write(toFile: certificatePath, atomically: true, encoding: .utf8)
            try #require(issued.object["keyPEM"] as? String).write(toFile: keyPath, atomically: true, encoding: .utf8)
            #expect(try await server.admin("POST", "/v1/apps/com.example.none/certificates", body: "{}").status == 404)
            let environment = try await server.admin("POST", "/v1/apps/com.example.demo/certificates", body: #"{"environments": ["staging"]}"#)
            #expect(environment.status == 422)
            let none = try await server.admin("POST", "/v1/apps/com.example.demo/certificates", body: #"{"environments": []}"#)
            #expect(none.status == 422)

            let providers = try await server.admin("GET", "/v1/certificates?kind=provider")
            let listed = providers.object["certificates"] as? [[String: Any]] ?? []
            #expect(listed.contains { $0["serial"] as? String == serial && $0["revokedAt"] == nil })
            #expect(listed.allSatisfy { $0["kind"] as? String == "provider" && $0["keyPEM"] == nil })
            #expect(try await server.admin("GET", "/v1/certificates?kind=friend").status == 400)

            let device = try await server.device(.sandbox)
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient(.sandbox, certificate: certificatePath, key: keyPath)
            let last = try await client.send(token: token, payload: payload, expiry: 0)
            _ = try #require(await device.next())

            let revoked = try await server.admin("POST", "/v1/certificates/\(serial)/revoke")
            #expect(revoked.status == 200)
            // The connection heard status 10 before the answer came.
            #expect(await nextFailure(client) == BinaryPushFailure(identifier: last, status: .shutdown))
            await client.close()
            #expect(try await server.admin("POST", "/v1/certificates/\(serial)/revoke").status == 409)
            #expect(try await server.admin("POST", "/v1/certificates/zz/revoke").status == 422)
            let after = try await server.admin("GET", "/v1/certificates?kind=provider")
            #expect((after.object["certificates"] as? [[String: Any]] ?? []).contains { $0["serial"] as? String == serial && $0["revokedAt"] != nil })
            let again = try await server.binaryClient(.sandbox, certificate: certificatePath, key: keyPath)
            await #expect(throws: (any Error).self) { try await again.send(token: token, payload: payload) }
            await again.close()
            await server.disconnect(device)
        }
    }

    /// The identity bundle, written as files, is a device that connects.
    @Test func aDeviceActivatedThroughTheAPIConnects() async throws {
        try await withTestServer { server in
            let answer = try await server.admin("POST", "/v1/devices")
            #expect(answer.status == 201, "\(answer.message ?? "")")
            let directory = server.directory + "/api-device"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for (field, file) in [("certificatePEM", "cert.pem"), ("keyPEM", "key.pem"), ("caPEM", "ca.pem")] {
                try #require(answer.object[field] as? String).write(toFile: directory + "/" + file, atomically: true, encoding: .utf8)
            }
            let identity = try JSONSerialization.data(withJSONObject: try #require(answer.object["identity"]))
            try identity.write(to: URL(fileURLWithPath: directory + "/identity.json"))
            let device = try await server.device(directory: directory)
            #expect(String(await device.client.deviceID, radix: 16) == answer.object["deviceID"] as? String)
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
            #expect(await device.next() != nil)
            let devices = try await server.admin("GET", "/v1/certificates?kind=device")
            #expect((devices.object["certificates"] as? [[String: Any]] ?? []).contains { $0["deviceID"] as? String == answer.object["deviceID"] as? String })
            await client.close()
            await server.disconnect(device)
        }
    }

    @Test func everyProvisioningEndpointNeedsTheToken() async throws {
        try await withTestServer { server in
            for (method, path) in [
                ("GET", "/v1/teams"), ("POST", "/v1/teams"), ("POST", "/v1/apps"), ("POST", "/v1/teams/DEMOTEAM01/keys"), ("POST", "/v1/keys/K/revoke"),
                ("GET", "/v1/certificates"), ("POST", "/v1/apps/com.example.demo/certificates"), ("POST", "/v1/certificates/01/revoke"),
                ("POST", "/v1/devices"),
            ] {
                #expect(try await server.admin(method, path, token: "", body: method == "POST" ? "{}" : nil).status == 401, "\(method) \(path)")
            }
            let wrongMethod = try await server.admin("DELETE", "/v1/teams")
            #expect(wrongMethod.status == 405)
        }
    }
}
