import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
@testable import CourierServer
import CourierWire
import Foundation
import Logging
import NIOHPACK
import NIOHTTP2
import Synchronization
import NIOSSL
import Testing
import X509

extension TestServer {
    var demoDirectory: String { directory + "/demo" }
    var caPath: String { directory + "/pki/ca.pem" }

    /// The demo team's auth key, as `courier serve` wrote it.
    func demoAuthKey() throws -> AuthKey {
        let keyID = try #require(application.report.demoKeyID)
        return try AuthKey(keyID: keyID, p8PEM: String(contentsOfFile: try #require(application.report.demoAuthKeyPath), encoding: .utf8))
    }

    func http2Port(_ environment: Environment = .production) async throws -> Int {
        try await application.ports.port(.http2, environment)
    }

    /// The client library with the demo team's key, or a certificate.
    func http2Client(_ environment: Environment = .production, credentials: HTTP2Credentials? = nil) async throws -> HTTP2ProviderClient {
        let port = try await http2Port(environment)
        let credentials = try credentials ?? .token(demoAuthKey(), teamID: "DEMOTEAM01")
        return try HTTP2ProviderClient(
            options: .init(host: "127.0.0.1", port: port, caPath: caPath, serverName: "localhost", connections: 1), credentials: credentials,
            clock: clock, logger: logger)
    }

    var demoCertificate: HTTP2Credentials {
        .certificate(certificatePath: demoDirectory + "/com.example.demo.pem", keyPath: demoDirectory + "/com.example.demo-key.pem")
    }

    /// One raw connection: no certificate (token trust), or the given one.
    func http2Connection(
        _ environment: Environment = .production, certificate: (String, String)? = nil, alpn: [String] = ["h2"]
    ) async throws -> HTTP2Connection {
        let tls = try ProviderTLS(certificatePath: certificate?.0, keyPath: certificate?.1, caPath: caPath).configuration()
        return try await HTTP2Connection.connect(host: "127.0.0.1", port: try await http2Port(environment), tls: tls, serverName: "localhost", alpn: alpn)
    }
}

/// A request as a test writes it: the headers of a valid push, changed as
/// the case needs.
struct RawPush {
    var method = "POST"
    var path: String
    var headers: [(String, String)] = []
    var body: [UInt8]? = Array(#"{"aps":{"alert":"raw"}}"#.utf8)

    init(token: [UInt8], topic: String? = "com.example.demo", authorization: String? = nil) {
        path = "/3/device/" + Hex.encode(token)
        if let topic { headers.append(("apns-topic", topic)) }
        if let authorization { headers.append(("authorization", "bearer " + authorization)) }
    }

    var all: [(name: String, value: String, indexing: HPACKIndexing)] {
        [(":method", method, .indexable), (":scheme", "https", .indexable), (":path", path, .indexable), (":authority", "localhost", .indexable)]
            + headers.map { ($0.0, $0.1, .indexable) }
    }

    func send(on connection: HTTP2Connection) async throws -> (status: Int, reason: String?, response: HTTP2RawResponse) {
        let response = try await connection.request(all, body: body)
        return (response.status, HTTP2ErrorBody.decode(response.body)?.reason, response)
    }
}

@Suite(.timeLimit(.minutes(2))) struct HTTP2GatewayTests {
    let payload = Array(#"{"aps":{"alert":"over HTTP/2"}}"#.utf8)

    @Test func aPushByTokenReachesADevice() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            let id = UUID()
            let result = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: id, pushType: "alert"))
            #expect(result.status == 200)
            #expect(result.apnsID == id.uuidString.lowercased())
            let received = try #require(await device.next())
            #expect(received.payload == payload)
            #expect(received.id == id)
            #expect(received.pushType == "alert")
            await client.close()
            await server.disconnect(device)
        }
    }

    @Test func aPushByCertificateReachesADevice() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client(credentials: server.demoCertificate)
            let result = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(result.status == 200)
            // No apns-id sent: the server made a lowercase UUID.
            #expect(UUID(uuidString: result.apnsID) != nil)
            #expect(result.apnsID == result.apnsID.lowercased())
            let received = try #require(await device.next())
            #expect(received.payload == payload)
            #expect(received.id.uuidString.lowercased() == result.apnsID)
            await client.close()
            await server.disconnect(device)
        }
    }
}

/// A JWT with exactly these header and claims texts, signed with `key`
/// (JOSE `r||s`, or DER as openssl makes it).
func jwt(header: String, claims: String, key: AuthKey, der: Bool = false) throws -> String {
    let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
    let signature = try key.privateKey.signature(for: Array(input.utf8))
    return input + "." + Base64URL.encode(der ? Array(signature.derRepresentation) : Array(signature.rawRepresentation))
}

func jwt(key: AuthKey, team: String = "DEMOTEAM01", issuedAt: Date) -> String {
    ProviderToken.make(key: key, teamID: team, issuedAt: issuedAt)
}

/// docs/protocol.md §2, every row from a real request over TLS and HTTP/2.
@Suite(.timeLimit(.minutes(2))) struct HTTP2ProtocolTableTests {
    /// The rows decided by the request itself: method, path, headers, payload.
    @Test func headerAndPayloadRows() async throws {
        try await withTestServer { try await headerAndPayloadRows(on: $0) }
    }

    /// (Its own function: the compiler of Swift 6.3.1 crashes on its local
    /// function inside `withTestServer`'s closure.)
    private func headerAndPayloadRows(on server: TestServer) async throws {
        let device = try await server.device()
        let token = try await device.client.register("com.example.demo")
        let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
        let connection = try await server.http2Connection()
        func answer(_ change: (inout RawPush) -> Void) async throws -> (Int, String?) {
            var push = RawPush(token: token, authorization: authorization)
            change(&push)
            let (status, reason, _) = try await push.send(on: connection)
            return (status, reason)
        }
        #expect(try await answer { _ in } == (200, nil))
        #expect(try await answer { $0.method = "GET" } == (405, "MethodNotAllowed"))
        #expect(try await answer { $0.method = "PUT" } == (405, "MethodNotAllowed"))
        #expect(try await answer { $0.path = "/3/devices/" + Hex.encode(token) } == (404, "BadPath"))
        #expect(try await answer { $0.path = "/2/device/" + Hex.encode(token) } == (404, "BadPath"))
        #expect(try await answer { $0.path = "/3/device/" } == (400, "MissingDeviceToken"))
        #expect(try await answer { $0.path = "/3/device/" + String(repeating: "zz", count: 32) } == (400, "BadDeviceToken"))
        #expect(try await answer { $0.path = "/3/device/" + Hex.encode(token.dropLast()) } == (400, "BadDeviceToken"))
        #expect(try await answer { $0.headers.append(("apns-topic", "com.example.demo")) } == (400, "DuplicateHeaders"))
        #expect(try await answer { $0.headers.append(("apns-id", UUID().uuidString)); $0.headers.append(("apns-id", UUID().uuidString)) } == (400, "DuplicateHeaders"))
        #expect(try await answer { $0.headers.append(("authorization", "bearer " + authorization)) } == (400, "DuplicateHeaders"))
        #expect(try await answer { $0.headers.append(("apns-id", "not-a-uuid")) } == (400, "BadMessageId"))
        #expect(try await answer { $0.headers.append(("apns-expiration", "tomorrow")) } == (400, "BadExpirationDate"))
        #expect(try await answer { $0.headers.append(("apns-expiration", "-1")) } == (400, "BadExpirationDate"))
        #expect(try await answer { $0.headers.append(("apns-priority", "7")) } == (400, "BadPriority"))
        #expect(try await answer { $0.headers.append(("apns-priority", "10")); $0.body = Array(#"{"aps":{"content-available":1}}"#.utf8) } == (400, "BadPriority"))
        #expect(try await answer { $0.headers.append(("apns-collapse-id", String(repeating: "c", count: 65))) } == (400, "BadCollapseId"))
        #expect(try await answer { $0.headers.append(("apns-collapse-id", String(repeating: "c", count: 64))) } == (200, nil))
        #expect(try await answer { $0.headers.append(("apns-push-type", String(repeating: "a", count: 300))) } == (400, "InvalidPushType"))
        #expect(try await answer { $0.headers.append(("apns-push-type", "")) } == (400, "InvalidPushType"))
        #expect(try await answer { $0.headers.append(("apns-push-type", "Alert")) } == (400, "InvalidPushType"))
        // A type of another topic kind (docs/protocol.md, "Push types and topics").
        #expect(try await answer { $0.headers.append(("apns-push-type", "liveactivity")) } == (400, "InvalidPushType"))
        #expect(try await answer { $0.headers.append(("apns-priority", "1")) } == (200, nil))
        #expect(try await answer { $0.headers = [("authorization", "bearer " + authorization), ("apns-topic", "not a topic")] } == (400, "BadTopic"))
        #expect(try await answer { $0.headers = [("authorization", "bearer " + authorization), ("apns-topic", "")] } == (400, "BadTopic"))
        #expect(try await answer { $0.headers = [("authorization", "bearer " + authorization)] } == (400, "MissingTopic"))
        #expect(try await answer { $0.body = nil } == (400, "PayloadEmpty"))
        #expect(try await answer { $0.body = [] } == (400, "PayloadEmpty"))
        #expect(try await answer { $0.body = Array("not json".utf8) } == (400, "PayloadEmpty"))
        #expect(try await answer { $0.body = Array(#"{"aps":{}}"#.utf8) + [0] } == (400, "PayloadEmpty"))
        let large = Array((#"{"aps":{"alert":""# + String(repeating: "x", count: 4_080) + #""}}"#).utf8)
        #expect(large.count == 4_100)
        #expect(try await answer { $0.body = large } == (413, "PayloadTooLarge"))
        // A .voip topic takes 5120 bytes.
        let voipToken = try await device.client.register("com.example.demo")
        #expect(try await answer { $0.headers[0].1 = "com.example.demo.voip"; $0.body = large; $0.path = "/3/device/" + Hex.encode(voipToken) } == (200, nil))
        let huge = Array((#"{"aps":{"alert":""# + String(repeating: "x", count: 100_000) + #""}}"#).utf8)
        let hugeAnswer = try await answer { $0.body = huge }
        #expect(hugeAnswer == (413, "PayloadTooLarge"), "\(hugeAnswer)")
        // Absent priority and expiration, unknown headers ignored, upper-case apns-id echoed.
        let id = UUID().uuidString
        let (status, _, response) = try await {
            var push = RawPush(token: token, authorization: authorization)
            push.headers += [("apns-id", id), ("x-custom", "1"), ("apns-push-type", "alert")]
            return try await push.send(on: connection)
        }()
        #expect(status == 200)
        #expect(response.apnsID == id)
        // apns-id is echoed on errors too.
        var bad = RawPush(token: token, authorization: authorization)
        bad.headers.append(("apns-id", id))
        bad.method = "GET"
        #expect(try await bad.send(on: connection).response.apnsID == id)
        await connection.close()
        await server.disconnect(device)
    }
}

extension TestServer {
    /// A second team with an app and an auth key.
    func otherTeam() async throws -> AuthKey {
        let provisioner = application.provisioner
        _ = try await provisioner.createTeam(id: "OTHERTEAM1", name: "Other")
        _ = try await provisioner.createApp(bundleID: "com.example.foreign", teamID: "OTHERTEAM1")
        let (record, file) = try await provisioner.createAuthKey(teamID: "OTHERTEAM1", directory: directory)
        return try AuthKey(keyID: record.keyID, p8PEM: String(contentsOfFile: file.path, encoding: .utf8))
    }
}

extension HTTP2ProtocolTableTests {
    @Test func tokenTrustRows() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let key = try server.demoAuthKey()
            let other = try await server.otherTeam()
            let now = server.clock.now()
            func answer(_ authorization: String?, topic: String = "com.example.demo", on connection: HTTP2Connection) async throws -> (Int, String?) {
                var push = RawPush(token: token, topic: topic)
                if let authorization { push.headers.append(("authorization", authorization)) }
                let (status, reason, _) = try await push.send(on: connection)
                return (status, reason)
            }

            let refused = try await server.http2Connection()
            #expect(try await answer(nil, on: refused) == (403, "MissingProviderToken"))
            #expect(try await answer("bearer not.a.jwt", on: refused) == (403, "InvalidProviderToken"))
            #expect(try await answer("basic " + jwt(key: key, issuedAt: now), on: refused) == (403, "InvalidProviderToken"))
            let hs256 = try jwt(header: #"{"alg":"HS256","kid":"\#(key.keyID)"}"#, claims: #"{"iss":"DEMOTEAM01","iat":\#(Int(now.timeIntervalSince1970))}"#, key: key)
            #expect(try await answer("bearer " + hs256, on: refused) == (403, "InvalidProviderToken"))
            let unknownKid = try jwt(header: #"{"alg":"ES256","kid":"UNKNOWN123"}"#, claims: #"{"iss":"DEMOTEAM01","iat":\#(Int(now.timeIntervalSince1970))}"#, key: key)
            #expect(try await answer("bearer " + unknownKid, on: refused) == (403, "InvalidProviderToken"))
            // iss must be the key's team.
            #expect(try await answer("bearer " + jwt(key: key, team: "OTHERTEAM1", issuedAt: now), on: refused) == (403, "InvalidProviderToken"))
            // A signature by another key.
            let forged = jwt(key: key, issuedAt: now).split(separator: ".").prefix(2).joined(separator: ".") + "."
                + jwt(key: other, issuedAt: now).split(separator: ".")[2]
            #expect(try await answer("bearer " + forged, on: refused) == (403, "InvalidProviderToken"))
            #expect(try await answer("bearer " + jwt(key: key, issuedAt: now - 3_601), on: refused) == (403, "ExpiredProviderToken"))
            #expect(try await answer("bearer " + jwt(key: key, issuedAt: now + 3_600), on: refused) == (403, "InvalidProviderToken"))
            await refused.close()

            // What real clients send: iat as a float or a string, a DER signature (openssl).
            let seconds = Int(now.timeIntervalSince1970)
            let forms = [
                try jwt(header: #"{"alg":"ES256","kid":"\#(key.keyID)"}"#, claims: #"{"iss":"DEMOTEAM01","iat":\#(seconds).25}"#, key: key),
                try jwt(header: #"{"alg":"ES256","kid":"\#(key.keyID)"}"#, claims: #"{"iss":"DEMOTEAM01","iat":"\#(seconds)"}"#, key: key),
                try jwt(header: #"{"alg":"ES256","kid":"\#(key.keyID)","typ":"JWT"}"#, claims: #"{"iss":"DEMOTEAM01","iat":\#(seconds)}"#, key: key, der: true),
            ]
            for form in forms {
                let connection = try await server.http2Connection()
                #expect(try await answer("bearer " + form, on: connection) == (200, nil))
                await connection.close()
            }

            // The topic must be one of the team's apps; one team per connection.
            let connection = try await server.http2Connection()
            let first = jwt(key: key, issuedAt: now)
            #expect(try await answer("bearer " + first, topic: "com.example.foreign", on: connection) == (400, "TopicDisallowed"))
            #expect(try await answer("bearer " + jwt(key: other, team: "OTHERTEAM1", issuedAt: now + 1), topic: "com.example.foreign", on: connection) == (403, "InvalidProviderToken"))

            // The 20-minute rule: another token too soon is refused; the same claims signed again are not an update.
            let second = jwt(key: key, issuedAt: now + 60)
            #expect(try await answer("bearer " + second, on: connection) == (429, "TooManyProviderTokenUpdates"))
            #expect(try await answer("bearer " + jwt(key: key, issuedAt: now), on: connection) == (200, nil))
            #expect(try await answer("bearer " + first, on: connection) == (200, nil))
            server.clock.advance(by: 20 * 60 + 1)
            #expect(try await answer("bearer " + second, on: connection) == (200, nil))
            #expect(try await answer("bearer " + first, on: connection) == (429, "TooManyProviderTokenUpdates"))
            // The one-hour rule, for the token in use.
            server.clock.advance(by: 42 * 60)
            #expect(try await answer("bearer " + second, on: connection) == (403, "ExpiredProviderToken"))
            // Once the token in use has expired, a new one is taken at once.
            #expect(try await answer("bearer " + jwt(key: key, issuedAt: server.clock.now()), on: connection) == (200, nil))
            await connection.close()
            await server.disconnect(device)
        }
    }

    /// Keys scoped to an environment and to apps (docs/protocol.md, "Key
    /// scoping"), made through the admin API as an operator would.
    @Test func keyScopingRows() async throws {
        try await withTestServer { server in
            let provisioner = server.application.provisioner
            _ = try await provisioner.createApp(bundleID: "com.example.second", teamID: "DEMOTEAM01")
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let sandboxDevice = try await server.device(.sandbox)
            let sandboxToken = try await sandboxDevice.client.register("com.example.demo")
            let now = server.clock.now()
            /// A new key of the demo team with this scope, through the admin API.
            func key(_ scope: [String: Any]) async throws -> AuthKey {
                let body = String(decoding: try JSONSerialization.data(withJSONObject: scope), as: UTF8.self)
                let created = try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: body)
                #expect(created.status == 201, "\(created.message ?? "")")
                #expect(created.object["environments"] as? [String] == (scope["environments"] as? [String])?.sorted() ?? ["production", "sandbox"])
                #expect(created.object["bundleIDs"] as? [String] == scope["bundleIDs"] as? [String])
                return try AuthKey(keyID: try #require(created.object["keyID"] as? String), p8PEM: try #require(created.object["p8"] as? String))
            }
            func answer(_ key: AuthKey, topic: String = "com.example.demo", token: [UInt8], on connection: HTTP2Connection, at: Date? = nil) async throws
                -> (Int, String?)
            {
                let (status, reason, _) = try await RawPush(token: token, topic: topic, authorization: jwt(key: key, issuedAt: at ?? now)).send(on: connection)
                return (status, reason)
            }

            // A team-scoped key of one environment.
            let sandboxOnly = try await key(["environments": ["sandbox"]])
            let production = try await server.http2Connection()
            #expect(try await answer(sandboxOnly, token: token, on: production) == (403, "BadEnvironmentKeyIdInToken"))
            await production.close()
            let sandbox = try await server.http2Connection(.sandbox)
            #expect(try await answer(sandboxOnly, token: sandboxToken, on: sandbox) == (200, nil))
            _ = try #require(await sandboxDevice.next())
            // Another team-scoped key of the team may follow it on the connection.
            #expect(try await answer(try server.demoAuthKey(), token: sandboxToken, on: sandbox, at: now + 1) == (429, "TooManyProviderTokenUpdates"))
            await sandbox.close()

            // A topic-specific key: its apps' topics only, every kind of them.
            let topicKey = try await key(["bundleIDs": ["com.example.demo"], "environments": ["production"]])
            let scoped = try await server.http2Connection()
            #expect(try await answer(topicKey, topic: "com.example.second", token: token, on: scoped) == (400, "TopicDisallowed"))
            #expect(try await answer(topicKey, token: token, on: scoped) == (200, nil))
            _ = try #require(await device.next())
            #expect(try await answer(topicKey, topic: "com.example.demo.voip", token: token, on: scoped) == (200, nil))
            _ = try #require(await device.next())
            // Its connection takes no other key, even once the 20 minutes are over.
            server.clock.advance(by: 21 * 60)
            let later = server.clock.now()
            #expect(try await answer(try server.demoAuthKey(), token: token, on: scoped, at: later) == (403, "UnrelatedKeyIdInToken"))
            #expect(try await answer(topicKey, token: token, on: scoped, at: later) == (200, nil))
            _ = try #require(await device.next())
            await scoped.close()
            // Nor does a team-scoped key's connection take it.
            let teamFirst = try await server.http2Connection()
            #expect(try await answer(try server.demoAuthKey(), token: token, on: teamFirst, at: later) == (200, nil))
            _ = try #require(await device.next())
            server.clock.advance(by: 21 * 60)
            #expect(try await answer(topicKey, token: token, on: teamFirst, at: server.clock.now()) == (403, "UnrelatedKeyIdInToken"))
            await teamFirst.close()

            // A scope the team cannot have is refused with a message.
            let foreign = try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: #"{"bundleIDs": ["com.example.nosuch"]}"#)
            #expect(foreign.status == 422)
            #expect(foreign.message == "app com.example.nosuch is not an app of team DEMOTEAM01")
            #expect(try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: #"{"environments": []}"#).status == 422)
            #expect(try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: #"{"environments": ["staging"]}"#).status == 422)
            #expect(try await server.admin("POST", "/v1/teams/DEMOTEAM01/keys", body: #"{"keyID": "ABCDE12345"}"#).status == 422)
            await server.disconnect(device)
            await server.disconnect(sandboxDevice)
        }
    }

    /// Only one stream until a valid token is seen (seeds, "APNs allows
    /// multiple concurrent streams…"); a certificate connection has them
    /// all from the start.
    @Test func streamLimitBeforeAuthentication() async throws {
        try await withTestServer(configure: { $0.http2.maxConcurrentStreams = 250 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let connection = try await server.http2Connection()
            let invalid = RawPush(token: token, authorization: "garbage.garbage.garbage")
            #expect(try await invalid.send(on: connection).status == 403)
            #expect(connection.announcedMaxConcurrentStreams == [1])
            let valid = RawPush(token: token, authorization: jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now()))
            #expect(try await valid.send(on: connection).status == 200)
            // The raised limit comes in a SETTINGS frame after the answer; many streams at once then work.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<50 { group.addTask { try await valid.send(on: connection).status } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 200, count: 50))
            #expect(connection.announcedMaxConcurrentStreams == [1, 250])
            await connection.close()

            let certified = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            #expect(try await RawPush(token: token).send(on: certified).status == 200)
            #expect(certified.announcedMaxConcurrentStreams == [250])
            await certified.close()
            await server.disconnect(device)
        }
    }
}

extension HTTP2ProtocolTableTests {
    @Test func certificateTrustRows() async throws {
        try await withTestServer { server in
            let provisioner = server.application.provisioner
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let demo = (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem")

            // Several topics: apns-topic is required; the authorization header is ignored.
            let connection = try await server.http2Connection(certificate: demo)
            #expect(try await RawPush(token: token, topic: nil).send(on: connection).reason == "MissingTopic")
            let ignored = try await RawPush(token: token, authorization: "not even a token").send(on: connection)
            #expect(ignored.status == 200)
            #expect(try #require(await device.next()).topic == "com.example.demo")
            _ = try await server.otherTeam()
            #expect(try await RawPush(token: token, topic: "com.example.foreign").send(on: connection).reason == "TopicDisallowed")
            await connection.close()

            // One topic: it is the default.
            _ = try await provisioner.createApp(bundleID: "com.example.single", teamID: "DEMOTEAM01", kinds: [.app])
            let singleDirectory = server.directory + "/single"
            try FileManager.default.createDirectory(atPath: singleDirectory, withIntermediateDirectories: true)
            _ = try await provisioner.issueProviderCertificate(bundleID: "com.example.single", environments: [.production], directory: singleDirectory)
            let singleToken = try await device.client.register("com.example.single")
            let single = try await server.http2Connection(certificate: (singleDirectory + "/com.example.single.pem", singleDirectory + "/com.example.single-key.pem"))
            #expect(try await RawPush(token: singleToken, topic: nil).send(on: single).status == 200)
            #expect(try #require(await device.next()).topic == "com.example.single")
            await single.close()

            // A sandbox-only certificate on the production port.
            let sandboxDirectory = server.directory + "/sandbox-only"
            try FileManager.default.createDirectory(atPath: sandboxDirectory, withIntermediateDirectories: true)
            _ = try await provisioner.issueProviderCertificate(bundleID: "com.example.demo", environments: [.sandbox], directory: sandboxDirectory)
            let sandboxOnly = (sandboxDirectory + "/com.example.demo.pem", sandboxDirectory + "/com.example.demo-key.pem")
            let wrongEnvironment = try await server.http2Connection(certificate: sandboxOnly)
            let refused = try await RawPush(token: token).send(on: wrongEnvironment)
            #expect((refused.status, refused.reason) == (403, "BadCertificateEnvironment"))
            await wrongEnvironment.close()

            // A certificate from Courier's CA without topics.
            let issued = try provisioner.authority().issueProviderCertificate(
                bundleID: "com.example.demo", teamID: "DEMOTEAM01", teamName: "Courier Demo", topics: [], environments: [.production], now: server.clock.now())
            try await provisioner.store.addCertificate(
                CertificateRecord(
                    serial: issued.serialHex, kind: .provider, subject: issued.certificate.subject.description, teamID: "DEMOTEAM01",
                    bundleID: "com.example.demo", deviceID: nil, environments: [.production], notAfter: issued.certificate.notValidAfter,
                    createdAt: server.clock.now(), pem: try issued.certificatePEM))
            try issued.certificatePEM.write(toFile: server.directory + "/no-topics.pem", atomically: true, encoding: .utf8)
            try issued.privateKeyPEM.write(toFile: server.directory + "/no-topics-key.pem", atomically: true, encoding: .utf8)
            let noTopics = try await server.http2Connection(certificate: (server.directory + "/no-topics.pem", server.directory + "/no-topics-key.pem"))
            let bad = try await RawPush(token: token).send(on: noTopics)
            #expect((bad.status, bad.reason) == (403, "BadCertificate"))
            await noTopics.close()
            await server.disconnect(device)
        }
    }

    /// Every push type to its topic kind, with the priorities it takes and
    /// the trust it needs (docs/protocol.md, "Push types and topics").
    @Test func pushTypeRows() async throws {
        try await withTestServer(qos: QoSConfiguration(burstWindow: 1)) { server in
            /// What goes out with the device's next burst (priorities 5 and 1).
            func burst() async throws -> DeviceNotification {
                server.clock.advance(by: 1)
                await server.dispatcher.tick()
                return try #require(await device.next())
            }
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            let byToken = try await server.http2Connection()
            func answer(
                _ type: String?, topic: String, priority: String? = nil, on connection: HTTP2Connection, authorized: Bool = true,
                body: String = #"{"aps":{"alert":"typed"}}"#
            ) async throws -> (Int, String?) {
                var push = RawPush(token: token, topic: topic, authorization: authorized ? authorization : nil)
                if let type { push.headers.append(("apns-push-type", type)) }
                if let priority { push.headers.append(("apns-priority", priority)) }
                push.body = Array(body.utf8)
                let (status, reason, _) = try await push.send(on: connection)
                return (status, reason)
            }
            let bundle = "com.example.demo"
            let topics: [(PushType, String)] = [
                (.alert, bundle), (.mdm, bundle), (.voip, bundle + ".voip"), (.complication, bundle + ".complication"),
                (.fileprovider, bundle + ".pushkit.fileprovider"), (.location, bundle + ".location-query"),
                (.liveactivity, bundle + ".push-type.liveactivity"), (.pushtotalk, bundle + ".voip-ptt"),
                (.widgets, bundle + ".push-type.widgets"), (.controls, bundle + ".push-type.controls"),
            ]
            // Live Activities take Live Activity tokens (LiveActivityTests): a device token is not for their topic.
            let pushToStart = try await device.client.liveActivityPushToStartToken("com.example.demo")
            for (type, topic) in topics {
                if type == .liveactivity {
                    var push = RawPush(token: pushToStart, topic: topic, authorization: authorization)
                    push.headers.append(("apns-push-type", "liveactivity"))
                    #expect(try await push.send(on: byToken).status == 200)
                    #expect(try await answer(type.rawValue, topic: topic, on: byToken) == (400, "DeviceTokenNotForTopic"))
                } else {
                    #expect(try await answer(type.rawValue, topic: topic, on: byToken) == (200, nil), "\(type)")
                }
                let received = try #require(await device.next())
                #expect(received.topic == topic)
                #expect(received.pushType == type.rawValue)
                // The type of another kind's topic.
                let other = type == .voip ? bundle : bundle + ".voip"
                #expect(try await answer(type.rawValue, topic: other, on: byToken) == (400, "InvalidPushType"), "\(type) to \(other)")
            }
            // Background: 5 only, and 5 when none is given.
            let silent = #"{"aps":{"content-available":1},"k":1}"#
            #expect(try await answer("background", topic: bundle, on: byToken, body: silent) == (200, nil))
            #expect(try await burst().priority == 5)
            #expect(try await answer("background", topic: bundle, priority: "10", on: byToken, body: silent) == (400, "BadPriority"))
            #expect(try await answer("background", topic: bundle, priority: "1", on: byToken, body: silent) == (400, "BadPriority"))
            // Push-to-talk: 10 only; without a type its topic's rule applies.
            #expect(try await answer("pushtotalk", topic: bundle + ".voip-ptt", priority: "5", on: byToken) == (400, "BadPriority"))
            #expect(try await answer(nil, topic: bundle + ".voip-ptt", priority: "5", on: byToken) == (400, "BadPriority"))
            #expect(try await answer(nil, topic: bundle + ".voip-ptt", priority: "10", on: byToken) == (200, nil))
            _ = try #require(await device.next())
            // Live Activities and location queries: 5 or 10.
            #expect(try await answer("liveactivity", topic: bundle + ".push-type.liveactivity", priority: "1", on: byToken) == (400, "BadPriority"))
            #expect(try await answer("location", topic: bundle + ".location-query", priority: "1", on: byToken) == (400, "BadPriority"))
            var quiet = RawPush(token: pushToStart, topic: bundle + ".push-type.liveactivity", authorization: authorization)
            quiet.headers += [("apns-push-type", "liveactivity"), ("apns-priority", "5")]
            #expect(try await quiet.send(on: byToken).status == 200)
            #expect(try await burst().priority == 5)
            // Priority 1 where the type takes it.
            #expect(try await answer("alert", topic: bundle, priority: "1", on: byToken) == (200, nil))
            #expect(try await burst().priority == 1)
            await byToken.close()

            // Certificate trust: the certificate lists no token-only topic,
            // and a certificate connection is refused them.
            let certificate = try Certificate(pemEncoded: String(contentsOfFile: server.demoDirectory + "/com.example.demo.pem", encoding: .utf8))
            let listed = try ProviderCertificateInfo(certificate: certificate).topics.map(\.kind)
            #expect(Set(listed) == Set(TopicKind.allCases.filter(\.allowsCertificates)))
            let byCertificate = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            for (type, topic) in topics {
                let expected: (Int, String?) = type.topicKind.allowsCertificates ? (200, nil) : (400, "TopicDisallowed")
                #expect(try await answer(type.rawValue, topic: topic, on: byCertificate, authorized: false) == expected, "\(type)")
                if expected.0 == 200 { _ = try #require(await device.next()) }
            }
            await byCertificate.close()

            // An app without a kind: that kind's topic is not one of its topics.
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.plain", teamID: "DEMOTEAM01", kinds: [.app, .voip])
            let plainToken = try await device.client.register("com.example.plain")
            let fresh = try await server.http2Connection()
            var push = RawPush(token: plainToken, topic: "com.example.plain.push-type.widgets", authorization: authorization)
            push.headers.append(("apns-push-type", "widgets"))
            #expect(try await push.send(on: fresh).reason == "TopicDisallowed")
            await fresh.close()
            await server.disconnect(device)
        }
    }

    /// Rows the dispatcher decides: token checks, unregistered, rate.
    @Test func dispatcherRows() async throws {
        try await withTestServer(qos: QoSConfiguration(tokenRateLimit: 3)) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.other", teamID: "DEMOTEAM01")
            let sandboxDevice = try await server.device(.sandbox)
            let sandboxToken = try await sandboxDevice.client.register("com.example.demo")
            let connection = try await server.http2Connection()
            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            func answer(_ token: [UInt8], topic: String = "com.example.demo") async throws -> (Int, String?) {
                let (status, reason, _) = try await RawPush(token: token, topic: topic, authorization: authorization).send(on: connection)
                return (status, reason)
            }
            var tampered = token
            tampered[5] ^= 0x01
            #expect(try await answer(tampered) == (400, "BadDeviceToken"))
            #expect(try await answer(sandboxToken) == (400, "BadDeviceToken"))
            #expect(try await answer(token, topic: "com.example.other") == (400, "DeviceTokenNotForTopic"))
            #expect(try await answer(token) == (200, nil))
            #expect(try await answer(token) == (200, nil))
            #expect(try await answer(token) == (200, nil))
            #expect(try await answer(token) == (429, "TooManyRequests"))

            // Uninstalled: 410 with the removal time in milliseconds.
            let otherToken = try await device.client.register("com.example.other")
            // A whole second, so that the store's milliseconds and the answer's agree exactly.
            let removedAt = Date(timeIntervalSince1970: (server.clock.now().timeIntervalSince1970 + 12).rounded(.down))
            server.clock.set(removedAt)
            try await device.client.unregister("com.example.other")
            server.clock.advance(by: 60)
            let (status, reason, response) = try await RawPush(token: otherToken, topic: "com.example.other", authorization: authorization).send(on: connection)
            #expect((status, reason) == (410, "Unregistered"))
            let body = try #require(HTTP2ErrorBody.decode(response.body))
            #expect(body.timestamp == Int64((removedAt.timeIntervalSince1970 * 1000).rounded(.down)))
            await connection.close()
            await server.disconnect(device)
            await server.disconnect(sandboxDevice)
        }
    }

    /// Rows of a failing store: 500, 503, and a team that is gone (403 Forbidden).
    @Test func storeFailureRows() async throws {
        try await withFaultyStoreServer { server, store in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let key = try server.demoAuthKey()

            store.failKeyReads(true)
            let unavailable = try await RawPush(token: token, authorization: jwt(key: key, issuedAt: server.clock.now())).send(on: try await server.http2Connection())
            #expect((unavailable.status, unavailable.reason) == (503, "ServiceUnavailable"))
            store.failKeyReads(false)

            let connection = try await server.http2Connection()
            let authorization = jwt(key: key, issuedAt: server.clock.now())
            store.failStorePending(true)
            var stored = RawPush(token: token, authorization: authorization)
            stored.headers.append(("apns-expiration", String(Int(server.clock.now().timeIntervalSince1970) + 3600)))
            let failed = try await stored.send(on: connection)
            #expect((failed.status, failed.reason) == (500, "InternalServerError"))
            store.failStorePending(false)
            #expect(try await stored.send(on: connection).status == 200)
            await connection.close()

            // A team that is gone (the gateway's sweep notices it).
            store.hideTeam("DEMOTEAM01")
            await server.application.http2Gateways[.production]!.sweep()
            let gone = try await RawPush(token: token, authorization: authorization).send(on: try await server.http2Connection())
            #expect((gone.status, gone.reason) == (403, "Forbidden"))
            await server.disconnect(device)
        }
    }
}

/// Connection behaviour: GOAWAY on idle and shutdown, revocation, no ALPN,
/// PING and PRIORITY.
@Suite(.timeLimit(.minutes(2))) struct HTTP2ConnectionTests {
    @Test func idleConnectionsGetGoAwayIdleTimeout() async throws {
        try await withTestServer(configure: { $0.http2.idleTimeout = 60 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let gateway = try #require(server.application.http2Gateways[.production])
            let idle = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            #expect(try await RawPush(token: token).send(on: idle).status == 200)
            server.clock.advance(by: 59)
            await gateway.sweep()
            #expect(idle.isUsable)
            server.clock.advance(by: 2)
            let fresh = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            await gateway.sweep()
            let goAway = try #require(await idle.closed())
            #expect(goAway.reason == .idleTimeout)
            #expect(goAway.errorCode == 0)
            #expect(goAway.lastStreamID == 1)
            // The connection opened just now is not idle.
            #expect(try await RawPush(token: token).send(on: fresh).status == 200)
            await fresh.close()
            await server.disconnect(device)
        }
    }

    @Test func durablePushesThatShareACommitAreEachAnswered() async throws {
        try await withFaultyStoreServer { server, store in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let connection = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            let expiration = String(Int(server.clock.now().timeIntervalSince1970) + 3600)
            func held(_ id: String) -> RawPush {
                var push = RawPush(token: token)
                push.headers += [("apns-expiration", expiration), ("apns-id", id)]
                return push
            }
            // The first push's commit is held; the next five wait behind it
            // and are written in one commit, whose answers go to the
            // connection's event loop together.
            store.commitGate.close()
            let firstID = UUID().uuidString
            let first = Task { try await held(firstID).send(on: connection) }
            await store.commitGate.waitUntilHolding()
            let ids = (0..<5).map { _ in UUID().uuidString }
            let rest = ids.map { id in Task { try await held(id).send(on: connection) } }
            try await waitUntil(limit: 10) { server.dispatcher.waitingToBeHeld == ids.count }
            store.commitGate.open()
            let answer = try await first.value
            #expect((answer.status, answer.response.apnsID) == (200, firstID))
            for (id, task) in zip(ids, rest) {
                let answer = try await task.value
                #expect((answer.status, answer.response.apnsID) == (200, id))
            }
            #expect(store.pendingBatches == [1, ids.count])
            await connection.close()
            await server.disconnect(device)
        }
    }

    @Test func gracefulShutdownFinishesInFlightStreamsThenSaysGoAwayShutdown() async throws {
        try await withFaultyStoreServer { server, store in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let connection = try await server.http2Connection(certificate: (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem"))
            var held = RawPush(token: token)
            held.headers.append(("apns-expiration", String(Int(server.clock.now().timeIntervalSince1970) + 3600)))
            // A push that must be stored stays in flight while its commit is held.
            store.commitGate.close()
            let inFlight = Task { try await held.send(on: connection) }
            await store.commitGate.waitUntilHolding()
            let stopping = Task { await server.shutDown() }
            await server.application.http2Gateways[.production]!.waitUntilShuttingDown()
            let late = try await RawPush(token: token).send(on: connection)
            #expect((late.status, late.reason) == (503, "Shutdown"))
            #expect(connection.isUsable)
            store.commitGate.open()
            #expect(try await inFlight.value.status == 200)
            let goAway = try #require(await connection.closed())
            #expect(goAway.reason == .shutdown)
            #expect(goAway.lastStreamID == 3)
            await stopping.value
            await device.stop()
        }
    }

    @Test func revokingAKeyOrACertificateClosesItsConnections() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let gateway = try #require(server.application.http2Gateways[.production])
            let key = try server.demoAuthKey()
            let authorization = jwt(key: key, issuedAt: server.clock.now())
            let byToken = try await server.http2Connection()
            #expect(try await RawPush(token: token, authorization: authorization).send(on: byToken).status == 200)
            let certificate = (server.demoDirectory + "/com.example.demo.pem", server.demoDirectory + "/com.example.demo-key.pem")
            let byCertificate = try await server.http2Connection(certificate: certificate)
            #expect(try await RawPush(token: token).send(on: byCertificate).status == 200)

            try await server.application.provisioner.revokeAuthKey(keyID: key.keyID)
            await gateway.sweep()
            #expect(try #require(await byToken.closed()).reason == .invalidProviderToken)
            #expect(byCertificate.isUsable)
            let again = try await RawPush(token: token, authorization: authorization).send(on: try await server.http2Connection())
            #expect((again.status, again.reason) == (403, "InvalidProviderToken"))

            let serial = try #require(await server.application.provisioner.store.certificates(kind: .provider).first { $0.bundleID == "com.example.demo" }?.serial)
            try await server.application.provisioner.revokeCertificate(serial: serial)
            await server.application.sweep()
            #expect(try #require(await byCertificate.closed()).reason == .badCertificate)
            // TLS 1.3: the client finishes its handshake before the server refuses the certificate, so the request fails.
            await #expect(throws: HTTP2ClientError.self) { _ = try await RawPush(token: token).send(on: try await server.http2Connection(certificate: certificate)) }
            await server.disconnect(device)
        }
    }

    @Test func noALPNPingAndPriorityFrames() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            // A client that offers no ALPN still speaks HTTP/2.
            let connection = try await server.http2Connection(alpn: [])
            try await connection.write(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 7), ack: false)))
            try await connection.write(HTTP2Frame(streamID: 11, payload: .priority(.init(exclusive: false, dependency: .rootStream, weight: 200))))
            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            #expect(try await RawPush(token: token, authorization: authorization).send(on: connection).status == 200)
            #expect(connection.pingAcknowledgements == 1)
            #expect(try #require(await device.next()).topic == "com.example.demo")
            await connection.close()
            await server.disconnect(device)
        }
    }
}

extension HTTP2ProtocolTableTests {
    /// A topic the connection's token did not cover when it was verified:
    /// the team's apps are read again, so an app created meanwhile is
    /// usable on the open connection; a topic still not the team's is
    /// refused.
    @Test func anAppCreatedWhileTheConnectionIsOpenIsUsableOnIt() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let demoToken = try await device.client.register("com.example.demo")
            let key = try server.demoAuthKey()
            let authorization = jwt(key: key, issuedAt: server.clock.now())
            let connection = try await server.http2Connection()
            #expect(try await RawPush(token: demoToken, authorization: authorization).send(on: connection).status == 200)

            _ = try await server.application.provisioner.createApp(bundleID: "com.example.later", teamID: "DEMOTEAM01")
            let laterToken = try await device.client.register("com.example.later")
            let later = RawPush(token: laterToken, topic: "com.example.later", authorization: authorization)
            #expect(try await later.send(on: connection).status == 200)
            let foreign = RawPush(token: laterToken, topic: "com.example.never", authorization: authorization)
            #expect(try await foreign.send(on: connection).reason == "TopicDisallowed")
            // A token-only kind's topic of an app created later: the connection is still token trust once its topics are read again.
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.latest", teamID: "DEMOTEAM01")
            let latestToken = try await device.client.register("com.example.latest")
            var widgets = RawPush(token: latestToken, topic: "com.example.latest.push-type.widgets", authorization: authorization)
            widgets.headers.append(("apns-push-type", "widgets"))
            let widgetsAnswer = try await widgets.send(on: connection)
            #expect(widgetsAnswer.status == 200, "\(widgetsAnswer.reason ?? "")")
            await connection.close()
            await server.disconnect(device)
        }
    }

    /// A connection whose first request names an app created after its
    /// team's topics were read (by another connection): its decision
    /// waits twice, for the key and then for the team's topics read
    /// again; the push is accepted, and the token is still the
    /// connection's first valid one, so its stream limit is lifted.
    @Test func aFirstRequestForALaterAppLiftsTheStreamLimit() async throws {
        try await withTestServer(configure: { $0.http2.maxConcurrentStreams = 250 }) { server in
            let device = try await server.device()
            let demoToken = try await device.client.register("com.example.demo")
            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            let earlier = try await server.http2Connection()
            #expect(try await RawPush(token: demoToken, authorization: authorization).send(on: earlier).status == 200)
            await earlier.close()

            _ = try await server.application.provisioner.createApp(bundleID: "com.example.later", teamID: "DEMOTEAM01")
            let laterToken = try await device.client.register("com.example.later")
            let connection = try await server.http2Connection()
            let later = RawPush(token: laterToken, topic: "com.example.later", authorization: authorization)
            #expect(try await later.send(on: connection).status == 200)
            // The raised limit comes in a SETTINGS frame after the answer.
            #expect(try await later.send(on: connection).status == 200)
            #expect(connection.announcedMaxConcurrentStreams == [1, 250])
            await connection.close()
            await server.disconnect(device)
        }
    }
}
