import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
import CourierServer
import CourierWire
import Foundation
import Logging
import NIOHPACK
import NIOSSL
import Testing

extension TestServer {
    var demoDirectory: String { directory + "/demo" }
    var caPath: String { directory + "/pki/ca.pem" }

    /// The demo team's auth key, as `courier serve` wrote it.
    func demoAuthKey() throws -> AuthKey {
        let keyID = try #require(application.report.demoKeyID)
        return try AuthKey(keyID: keyID, p8PEM: String(contentsOfFile: try #require(application.report.demoAuthKeyPath), encoding: .utf8))
    }

    func http2Port(_ environment: Environment = .production) async -> Int {
        await application.ports.port(.http2, environment)
    }

    /// The client library with the demo team's key, or a certificate.
    func http2Client(_ environment: Environment = .production, credentials: HTTP2Credentials? = nil) async throws -> HTTP2ProviderClient {
        let port = await http2Port(environment)
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
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(caPath)
        if let (certificatePath, keyPath) = certificate {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: keyPath, format: .pem))
        }
        return try await HTTP2Connection.connect(host: "127.0.0.1", port: await http2Port(environment), tls: tls, serverName: "localhost", alpn: alpn)
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
        let server = try await TestServer()
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
        try await server.stop()
    }

    @Test func aPushByCertificateReachesADevice() async throws {
        let server = try await TestServer()
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
        try await server.stop()
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
        let server = try await TestServer()
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
        try await server.stop()
    }
}
