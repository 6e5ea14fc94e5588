import CourierCore
import CourierProvider
@testable import CourierServer
import CourierTestSupport
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An admin API answer: status, and the body as JSON (nil when it is not).
struct AdminAnswer {
    var status: Int
    var body: Data
    var json: Any? { try? JSONSerialization.jsonObject(with: body) }
    var object: [String: Any] { json as? [String: Any] ?? [:] }
    /// The one-line message of an error answer.
    var message: String? { (object["error"] as? [String: Any])?["message"] as? String }
}

extension TestServer {
    func adminPort() async throws -> Int { try await application.ports.adminPort() }

    /// One request to the admin API, with the admin token unless `token` says otherwise ("" for none).
    func admin(_ method: String = "GET", _ path: String, token: String? = nil, body: String? = nil) async throws -> AdminAnswer {
        let port = try await adminPort()
        var request = URLRequest(url: try #require(URL(string: "http://127.0.0.1:\(port)\(path)")), timeoutInterval: 60)
        request.httpMethod = method
        let token = token ?? application.report.adminToken
        if !token.isEmpty { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = Data(body.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return AdminAnswer(status: (response as? HTTPURLResponse)?.statusCode ?? 0, body: data)
    }

    /// The inbox's entries for a query.
    func inboxEntries(_ query: String = "") async throws -> [[String: Any]] {
        let answer = try await admin("GET", "/v1/inbox" + query)
        #expect(answer.status == 200, "\(answer.message ?? "")")
        return answer.object["entries"] as? [[String: Any]] ?? []
    }
}

private func outcome(_ entry: [String: Any]) -> [String: Any] { entry["outcome"] as? [String: Any] ?? [:] }

@Suite(.timeLimit(.minutes(2))) struct AdminAPITests {
    let payload = Array(#"{"aps":{"alert":"to the inbox"}}"#.utf8)

    @Test func healthNeedsNoTokenAndEverythingElseRefusesWithoutIt() async throws {
        try await withTestServer { server in
            #expect(try await server.admin("GET", "/health/live", token: "").status == 200)
            let ready = try await server.admin("GET", "/health/ready", token: "")
            #expect(ready.status == 200)
            #expect(ready.object["status"] as? String == "ready")
            let openapi = try await server.admin("GET", "/openapi.json", token: "")
            #expect(openapi.status == 200)
            #expect(openapi.object["openapi"] as? String == "3.0.3")
            for (method, path) in [
                ("GET", "/v1/inbox"), ("GET", "/v1/inbox/wait?timeout=0"), ("DELETE", "/v1/inbox"), ("GET", "/v1/status"),
                ("GET", "/v1/notifications/\(UUID().uuidString)"), ("GET", "/v1/tokens/00ff/notifications"), ("GET", "/v1/connections"),
                ("GET", "/v1/devices"), ("GET", "/v1/faults"),
            ] {
                let none = try await server.admin(method, path, token: "")
                #expect(none.status == 401, "\(method) \(path)")
                #expect(none.message?.contains("admin token") == true, "\(method) \(path)")
                let wrong = try await server.admin(method, path, token: String(repeating: "0", count: 64))
                #expect(wrong.status == 401, "\(method) \(path)")
                #expect(wrong.message == "the admin token was refused", "\(method) \(path)")
            }
            let unknown = try await server.admin("GET", "/v1/nothing-here")
            #expect(unknown.status == 404)
            #expect(unknown.message?.contains("/v1/nothing-here") == true)
        }
    }

    /// Each provider connection with its provider, since when, and the
    /// notifications it sent.
    @Test func providerConnectionsAreListedWithWhatTheySent() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let http2 = try await server.http2Client()
            for _ in 0..<2 {
                #expect(try await http2.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
                _ = try #require(await device.next())
            }
            let binary = try await server.binaryClient(.sandbox)
            let sandboxDevice = try await server.device(.sandbox)
            let sandboxToken = try await sandboxDevice.client.register("com.example.demo")
            for _ in 0..<3 {
                try await binary.send(token: sandboxToken, payload: payload, expiry: 0, priority: 10)
                _ = try #require(await sandboxDevice.next())
            }
            let answer = try await server.admin("GET", "/v1/connections")
            #expect(answer.status == 200)
            let connections = answer.object["connections"] as? [[String: Any]] ?? []
            #expect(connections.count == 2)
            let h2 = try #require(connections.first { $0["interface"] as? String == "http2" })
            #expect(h2["environment"] as? String == "production")
            #expect((h2["provider"] as? String)?.hasPrefix("key ") == true)
            #expect(h2["teamID"] as? String == "DEMOTEAM01")
            #expect(h2["requests"] as? Int == 2)
            #expect((h2["address"] as? String)?.contains("127.0.0.1") == true)
            let legacy = try #require(connections.first { $0["interface"] as? String == "binary" })
            #expect(legacy["environment"] as? String == "sandbox")
            #expect((legacy["provider"] as? String)?.hasPrefix("certificate ") == true)
            #expect(legacy["requests"] as? Int == 3)
            #expect(legacy["since"] as? String != nil)
            let binaryOnly = try await server.admin("GET", "/v1/connections?interface=binary")
            #expect((binaryOnly.object["connections"] as? [Any])?.count == 1)
            let bad = try await server.admin("GET", "/v1/connections?interface=smtp")
            #expect(bad.status == 400)
            #expect(bad.message?.contains("interface") == true)
            await binary.close()
            await http2.close()
            await server.disconnect(device)
            await server.disconnect(sandboxDevice)
        }
    }

    /// The token is made once, readable by its owner only, and found again.
    @Test func theAdminTokenIsMadeAtFirstStartAndKept() async throws {
        try await withTestServer { server in
            let path = server.directory + "/admin-token"
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
            let again = try AdminToken.loadOrCreate(inDataDirectory: server.directory)
            #expect(!again.created)
            #expect(again.token == server.application.report.adminToken)
            #expect(again.token.count == 64)
        }
    }

    @Test func badQueriesGetA400WithTheParameterNamed() async throws {
        try await withTestServer { server in
            for (query, named) in [
                ("?token=xyz", "token"), ("?interface=smtp", "interface"), ("?limit=0", "limit"), ("?since=yesterday", "since"),
                ("?after=-1", "after"), ("?colour=blue", "colour"), ("?environment=staging", "environment"),
            ] {
                let answer = try await server.admin("GET", "/v1/inbox" + query)
                #expect(answer.status == 400, "\(query)")
                #expect(answer.message?.contains(named) == true, "\(query): \(answer.message ?? "")")
            }
            #expect(try await server.admin("GET", "/v1/notifications/not-a-uuid").status == 400)
            #expect(try await server.admin("GET", "/v1/tokens/nothex/notifications").status == 400)
            let missing = try await server.admin("GET", "/v1/notifications/\(UUID().uuidString)")
            #expect(missing.status == 404)
            #expect(missing.message?.contains("no notification") == true)
        }
    }

    /// HTTP/2 pushes, accepted and refused, are listed with their headers,
    /// payload, provider and answer, and the filters select among them.
    @Test func theInboxRecordsHTTP2PushesWithTheirAnswers() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            let id = UUID()
            let accepted = try await client.send(
                HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: id, collapseID: "c1", pushType: "alert"))
            #expect(accepted.status == 200)
            var bad = token
            bad[0] ^= 0xff
            let refused = try await client.send(HTTP2Push(token: bad, payload: payload, topic: "com.example.demo"))
            #expect(refused.status == 400)

            let all = try await server.inboxEntries()
            #expect(all.count == 2)
            let first = try #require(all.first)
            #expect(first["apnsID"] as? String == id.uuidString.lowercased())
            #expect(first["interface"] as? String == "http2")
            #expect(first["environment"] as? String == "production")
            #expect(first["token"] as? String == Hex.encode(token))
            #expect(first["topic"] as? String == "com.example.demo")
            #expect(first["teamID"] as? String == "DEMOTEAM01")
            #expect((first["provider"] as? String)?.hasPrefix("key ") == true)
            #expect((first["connection"] as? String)?.contains("127.0.0.1") == true, "the provider connection's address")
            #expect(first["device"] as? String == String(await device.client.deviceID, radix: 16), "the device the token is for")
            #expect(first["payload"] as? String == String(decoding: payload, as: UTF8.self))
            #expect(outcome(first)["accepted"] as? Bool == true)
            let headers = (first["headers"] as? [[String: String]] ?? []).map { ($0["name"] ?? "", $0["value"] ?? "") }
            #expect(headers.contains { $0 == ("apns-collapse-id", "c1") })
            #expect(headers.contains { $0 == ("apns-push-type", "alert") })
            // The provider token is not kept.
            let authorization = headers.first { $0.0 == "authorization" }?.1
            #expect(authorization == "bearer (not recorded)")
            let second = try #require(all.last)
            #expect(outcome(second)["accepted"] as? Bool == false)
            #expect(outcome(second)["status"] as? Int == 400)
            #expect(outcome(second)["reason"] as? String == "BadDeviceToken")
            #expect((second["sequence"] as? Int ?? 0) > (first["sequence"] as? Int ?? 0))

            #expect(try await server.inboxEntries("?outcome=accepted").count == 1)
            #expect(try await server.inboxEntries("?outcome=BadDeviceToken").count == 1)
            #expect(try await server.inboxEntries("?outcome=refused").count == 1)
            #expect(try await server.inboxEntries("?token=\(Hex.encode(token))").count == 1)
            #expect(try await server.inboxEntries("?apns-id=\(id.uuidString)").count == 1)
            #expect(try await server.inboxEntries("?interface=binary").isEmpty)
            #expect(try await server.inboxEntries("?team=DEMOTEAM01").count == 2)
            #expect(try await server.inboxEntries("?environment=sandbox").isEmpty)
            #expect(try await server.inboxEntries("?topic=com.example.other").isEmpty)
            let page = try await server.admin("GET", "/v1/inbox?limit=1")
            #expect((page.object["entries"] as? [Any])?.count == 1)
            #expect(page.object["more"] as? Bool == true)
            let rest = try await server.inboxEntries("?after=\(first["sequence"] as? Int ?? 0)")
            #expect(rest.count == 1)
            #expect(rest.first?["sequence"] as? Int == second["sequence"] as? Int)
            // since/until bound the time range (the injected clock's).
            let now = server.clock.now()
            #expect(try await server.inboxEntries("?since=\(now.timeIntervalSince1970 + 1)").isEmpty)
            #expect(try await server.inboxEntries("?until=\(now.timeIntervalSince1970 + 1)").count == 2)

            let cleared = try await server.admin("DELETE", "/v1/inbox")
            #expect(cleared.status == 200)
            #expect(cleared.object["cleared"] as? Int == 2)
            #expect(try await server.inboxEntries().isEmpty)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// A wait returns an entry already received, or the next one that
    /// matches; a wait that nothing answers ends with a 404.
    @Test func waitReturnsTheFirstMatchingEntry() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            _ = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            let present = try await server.admin("GET", "/v1/inbox/wait?token=\(Hex.encode(token))&timeout=0")
            #expect(present.status == 200, "one already received answers a wait of no time")
            let last = try #require(present.object["sequence"] as? Int)

            // After the last one: only the next push answers it, whether it
            // comes before the wait begins or while it waits.
            async let waited = server.admin("GET", "/v1/inbox/wait?after=\(last)&topic=com.example.demo&timeout=60")
            let id = UUID()
            _ = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: id))
            let next = try await waited
            #expect(next.status == 200)
            #expect(next.object["apnsID"] as? String == id.uuidString.lowercased())

            let none = try await server.admin("GET", "/v1/inbox/wait?topic=com.example.nothing&timeout=0")
            #expect(none.status == 404)
            #expect(none.message?.contains("no notification matched") == true)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// Binary frames are recorded with their fields and their status.
    @Test func theInboxRecordsBinaryPushes() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.binaryClient()
            try await client.send(token: token, payload: payload, expiry: 0, priority: 10)
            _ = try #require(await device.next())
            // A payload that is not JSON is refused with an error response.
            try await client.send(token: token, payload: Array("not json".utf8), expiry: 0, priority: 10)
            _ = await nextFailure(client)
            let entries = try await server.inboxEntries("?interface=binary")
            #expect(entries.count == 2)
            let first = try #require(entries.first)
            #expect(outcome(first)["accepted"] as? Bool == true)
            #expect((first["provider"] as? String)?.hasPrefix("certificate ") == true)
            #expect((first["connection"] as? String)?.contains("127.0.0.1") == true)
            #expect(first["device"] as? String == String(await device.client.deviceID, radix: 16))
            #expect(first["token"] as? String == Hex.encode(token))
            let headers = (first["headers"] as? [[String: String]] ?? []).map { ($0["name"] ?? "", $0["value"] ?? "") }
            #expect(headers.contains { $0 == ("command", "2") })
            #expect(headers.contains { $0 == ("priority", "10") })
            #expect(headers.contains { $0 == ("expiry", "0") })
            let refused = try #require(entries.last)
            #expect(outcome(refused)["accepted"] as? Bool == false)
            #expect(outcome(refused)["status"] as? Int != nil)
            #expect(refused["payload"] as? String == "not json")
            await client.close()
            await server.disconnect(device)
        }
    }

    /// By apns-id: how the push came in and its delivery log; by token:
    /// its recent notifications.
    @Test func aNotificationsTimelineByApnsIDAndByToken() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            let id = UUID()
            _ = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: id))
            _ = try #require(await device.nextAcknowledged())
            var events: [String] = []
            // The acknowledgement is logged once the server read it.
            for _ in 0..<500 where !events.contains("acknowledged") {
                let timeline = try await server.admin("GET", "/v1/notifications/\(id.uuidString)")
                #expect(timeline.status == 200)
                #expect((timeline.object["received"] as? [Any])?.count == 1)
                events = (timeline.object["events"] as? [[String: Any]] ?? []).compactMap { $0["event"] as? String }
            }
            // No apns-expiration: it may be stored (held until acknowledged).
            #expect(events == ["accepted", "stored", "delivered", "acknowledged"])
            let byToken = try await server.admin("GET", "/v1/tokens/\(Hex.encode(token))/notifications")
            #expect(byToken.status == 200)
            let notifications = byToken.object["notifications"] as? [[String: Any]] ?? []
            #expect(notifications.count == 1)
            #expect(notifications.first?["apnsID"] as? String == id.uuidString.lowercased())
            await client.close()
            await server.disconnect(device)
        }
    }

    /// The sandbox answers apns-unique-id, the id of that notification
    /// alone: two pushes with one apns-id have one timeline by apns-id and
    /// one each by their unique ids; production answers none.
    @Test func aSandboxNotificationsTimelineByItsUniqueID() async throws {
        try await withTestServer { server in
            let device = try await server.device(.sandbox)
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client(.sandbox)
            let id = UUID()
            var uniqueIDs: [UUID] = []
            for _ in 0..<2 {
                let result = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: id))
                #expect(result.status == 200)
                uniqueIDs.append(try #require(result.uniqueID))
                _ = try #require(await device.nextAcknowledged())
            }
            #expect(uniqueIDs[0] != uniqueIDs[1])
            #expect(uniqueIDs[0] != id)
            // Refused by the dispatcher: answered with its unique id, logged under it.
            let refused = try await client.send(HTTP2Push(token: Array(repeating: 7, count: 32), payload: payload, topic: "com.example.demo"))
            #expect(refused.reason == .badDeviceToken)
            let refusedID = try #require(refused.uniqueID)

            func events(_ lookup: UUID, until last: String) async throws -> (events: [String], object: [String: Any]) {
                var events: [String] = []
                var object: [String: Any] = [:]
                // The acknowledgement is logged once the server read it.
                for _ in 0..<500 where !events.contains(last) {
                    let timeline = try await server.admin("GET", "/v1/notifications/\(lookup.lowercasedString)")
                    #expect(timeline.status == 200)
                    object = timeline.object
                    events = (timeline.object["events"] as? [[String: Any]] ?? []).compactMap { $0["event"] as? String }
                }
                return (events, object)
            }
            for unique in uniqueIDs {
                let (timeline, object) = try await events(unique, until: "acknowledged")
                // Its own events only (the first may also be "replaced" by
                // the second, if that was held before the acknowledgement
                // removed the first).
                #expect(timeline.filter { $0 != "replaced" } == ["accepted", "stored", "delivered", "acknowledged"])
                #expect(object["apnsID"] as? String == id.lowercasedString)
                #expect(object["apnsUniqueID"] as? String == unique.lowercasedString)
                let received = object["received"] as? [[String: Any]] ?? []
                #expect(received.map { $0["apnsUniqueID"] as? String } == [unique.lowercasedString])
            }
            #expect(try await events(id, until: "acknowledged").events.filter { $0 == "accepted" }.count == 2)
            #expect(try await events(refusedID, until: "rejected").events == ["rejected"])
            // The command line finds it by either id.
            let admin = ["--data", server.directory, "--url", "http://127.0.0.1:\(try await server.adminPort())"]
            let log = try await runProgram(courier, ["log", uniqueIDs[1].lowercasedString] + admin)
            #expect(log.status == 0, "\(log.stderr)")
            #expect(log.stdout.contains("acknowledged"), "\(log.stdout)")
            await client.close()

            let production = try await server.device()
            let productionToken = try await production.client.register("com.example.demo")
            let productionClient = try await server.http2Client()
            let answered = try await productionClient.send(HTTP2Push(token: productionToken, payload: payload, topic: "com.example.demo"))
            #expect(answered.status == 200)
            #expect(answered.uniqueID == nil)
            await productionClient.close()
            await server.disconnect(production)
            await server.disconnect(device)
        }
    }

    @Test func statusCountsDevicesConnectionsAndTheInbox() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            _ = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            let status = try await server.admin("GET", "/v1/status")
            #expect(status.status == 200)
            #expect(status.object["devicesOnline"] as? Int == 1)
            let connections = status.object["connections"] as? [String: Int] ?? [:]
            #expect(connections["device.production"] == 1)
            #expect(connections["http2.production"] == 1)
            #expect(connections["binary.sandbox"] == 0)
            #expect((status.object["inbox"] as? [String: Int])?["entries"] == 1)
            // Not acknowledged (the test device does not read it): held in the store.
            #expect(status.object["notificationsHeld"] as? Int == 1)
            let devices = try await server.admin("GET", "/v1/devices")
            #expect(devices.status == 200)
            #expect(devices.object["online"] as? Int == 1)
            let listed = try #require((devices.object["devices"] as? [[String: Any]])?.first)
            #expect(listed["deviceID"] as? String == String(await device.client.deviceID, radix: 16))
            #expect(listed["environment"] as? String == "production")
            let registrations = listed["registrations"] as? [[String: Any]] ?? []
            #expect(registrations.map { $0["bundleID"] as? String } == ["com.example.demo"])
            #expect(registrations.first?["token"] as? String == Hex.encode(token))
            #expect(registrations.first?["active"] as? Bool == true)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// The committed OpenAPI document is the one served.
    @Test func theCommittedOpenAPIDocumentIsTheServedOne() async throws {
        try await withTestServer { server in
            let served = try await server.admin("GET", "/openapi.json", token: "")
            let committed = try Data(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/openapi.json"))
            let a = try JSONSerialization.jsonObject(with: served.body) as? NSDictionary
            let b = try JSONSerialization.jsonObject(with: committed) as? NSDictionary
            #expect(a != nil)
            #expect(a == b)
        }
    }

    /// A capacity of 0 records nothing; a full inbox drops its oldest.
    @Test func theInboxIsBoundedByCount() async throws {
        try await withTestServer(configure: { $0.inbox.capacity = 2 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            var ids: [UUID] = []
            for _ in 0..<3 {
                let id = UUID()
                ids.append(id)
                _ = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: id))
            }
            let entries = try await server.inboxEntries()
            #expect(entries.compactMap { $0["apnsID"] as? String } == ids.suffix(2).map { $0.uuidString.lowercased() })
            await client.close()
            await server.disconnect(device)
        }
        try await withTestServer(configure: { $0.inbox.capacity = 0 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            _ = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(try await server.inboxEntries().isEmpty)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// Entries older than maxAge are gone (the injected clock moves).
    @Test func theInboxIsBoundedByAge() async throws {
        try await withTestServer(configure: { $0.inbox.maxAge = 60 }) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            _ = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(try await server.inboxEntries().count == 1)
            server.clock.advance(by: 61)
            #expect(try await server.inboxEntries().isEmpty)
            await client.close()
            await server.disconnect(device)
        }
    }
}

/// `courier inbox`, `courier log` and `courier status` against a running server.
@Suite(.timeLimit(.minutes(2))) struct AdminCommandLineTests {
    @Test func inboxLogAndStatusFromTheCommandLine() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let client = try await server.http2Client()
            let id = UUID()
            _ = try await client.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"cli"}}"#.utf8), topic: "com.example.demo", id: id))
            let url = "http://127.0.0.1:\(try await server.adminPort())"
            let admin = ["--data", server.directory, "--url", url]

            let waited = try await runProgram(courier, ["inbox", "--wait", "--token", Hex.encode(token), "--timeout", "10"] + admin)
            #expect(waited.status == 0, "\(waited.stderr)")
            #expect(waited.stdout.contains(id.uuidString.lowercased()))
            #expect(waited.stdout.contains("accepted"))
            #expect(waited.stdout.contains(#"{"aps":{"alert":"cli"}}"#))

            let none = try await runProgram(courier, ["inbox", "--wait", "--topic", "com.example.none", "--timeout", "0"] + admin)
            #expect(none.status == 1)
            #expect(none.stderr == "courier: no notification matched within 0 s\n")

            let listed = try await runProgram(courier, ["inbox", "--outcome", "accepted"] + admin)
            #expect(listed.status == 0, "\(listed.stderr)")
            #expect(listed.stdout.contains(id.uuidString.lowercased()))
            let empty = try await runProgram(courier, ["inbox", "--interface", "binary"] + admin)
            #expect(empty.stdout == "No notifications match.\n")

            _ = try #require(await device.nextAcknowledged())
            await server.dispatcher.flushLog()
            let log = try await runProgram(courier, ["log", id.uuidString] + admin)
            #expect(log.status == 0, "\(log.stderr)")
            #expect(log.stdout.contains("accepted"))
            #expect(log.stdout.contains("delivered"))
            #expect(log.stdout.hasPrefix("Notification \(id.lowercasedString) of com.example.demo\n"), "\(log.stdout)")
            // --app: that app's notification under the id (another app has none here).
            let ofApp = try await runProgram(courier, ["log", id.uuidString, "--app", "com.example.demo"] + admin)
            // (Not compared with the first whole: the acknowledgement may be logged between the two.)
            #expect(ofApp.status == 0, "\(ofApp.stderr)")
            #expect(ofApp.stdout.hasPrefix("Notification \(id.lowercasedString) of com.example.demo\n"), "\(ofApp.stdout)")
            #expect(ofApp.stdout.contains("delivered"))
            let ofOther = try await runProgram(courier, ["log", id.uuidString, "--app", "com.example.other"] + admin)
            #expect(ofOther.status != 0)
            #expect(ofOther.stderr.contains("of com.example.other in the inbox or the delivery log"), "\(ofOther.stderr)")
            let unknown = try await runProgram(courier, ["log", UUID().uuidString] + admin)
            #expect(unknown.status != 0)
            #expect(unknown.stderr.hasPrefix("courier: no notification"))

            let status = try await runProgram(courier, ["status"] + admin)
            #expect(status.status == 0, "\(status.stderr)")
            #expect(status.stdout.contains("devices online        1"))

            // Fault rules from the command line.
            let added = try await runProgram(courier, ["fault", "add", "--token", Hex.encode(token), "--reject", "BadTopic", "--count", "1"] + admin)
            #expect(added.status == 0, "\(added.stderr)")
            #expect(added.stdout == "Added fault rule f1.\n")
            let rules = try await runProgram(courier, ["fault", "list"] + admin)
            #expect(rules.stdout.hasPrefix("f1  reject BadTopic  token=\(Hex.encode(token))  hits 0, 1 left"), "\(rules.stdout)")
            let badReason = try await runProgram(courier, ["fault", "add", "--reject", "Nope"] + admin)
            #expect(badReason.status != 0)
            #expect(badReason.stderr == "courier: 'Nope' is not a reason of docs/protocol.md\n")
            let twoActions = try await runProgram(courier, ["fault", "add", "--reject", "BadTopic", "--close"] + admin)
            #expect(twoActions.stderr == "courier: give exactly one of --reject REASON, --delay MS, --close\n")
            // --json prints the API's answer; --close takes its GOAWAY reason from --close-reason.
            let closing = try await runProgram(courier, ["fault", "add", "--close", "--close-reason", "InternalServerError", "--json"] + admin)
            #expect(closing.status == 0, "\(closing.stderr)")
            let closingRule = try JSONSerialization.jsonObject(with: Data(closing.stdout.utf8)) as? [String: Any]
            #expect(closingRule?["id"] as? String == "f2" && closingRule?["action"] as? String == "close", "\(closing.stdout)")
            #expect(closingRule?["reason"] as? String == "InternalServerError", "\(closing.stdout)")
            let listedJSON = try await runProgram(courier, ["fault", "list", "--json"] + admin)
            let listedRules = (try JSONSerialization.jsonObject(with: Data(listedJSON.stdout.utf8)) as? [String: Any])?["faults"] as? [[String: Any]]
            #expect(listedRules?.compactMap { $0["id"] as? String } == ["f1", "f2"], "\(listedJSON.stdout)")
            let strayReason = try await runProgram(courier, ["fault", "add", "--reject", "BadTopic", "--close-reason", "Shutdown"] + admin)
            #expect(strayReason.stderr == "courier: --close-reason goes with --close\n")
            #expect(try await runProgram(courier, ["fault", "rm", "f2"] + admin).status == 0)
            let removed = try await runProgram(courier, ["fault", "rm", "f1"] + admin)
            #expect(removed.stdout == "Removed fault rule f1.\n")
            let gone = try await runProgram(courier, ["fault", "rm", "f1"] + admin)
            #expect(gone.stderr == "courier: no fault rule f1\n")
            #expect(try await runProgram(courier, ["fault", "list"] + admin).stdout == "No fault rules.\n")

            // A wrong token and a server that is not there: one line each, naming what to check.
            let refused = try await runProgram(courier, ["status", "--admin-token", String(repeating: "a", count: 64)] + admin)
            #expect(refused.status != 0)
            #expect(refused.stderr.hasPrefix("courier: the server at http://127.0.0.1:\(try await server.adminPort()) refused the admin token;"), "\(refused.stderr)")
            #expect(refused.stderr.split(separator: "\n").count == 1)
            let away = try await runProgram(courier, ["status", "--data", server.directory, "--url", "http://127.0.0.1:1"])
            #expect(away.status != 0)
            #expect(away.stderr.hasPrefix("courier: no Courier admin API at http://127.0.0.1:1"))
            #expect(away.stderr.split(separator: "\n").count == 1)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// On an address other machines reach, the admin API speaks HTTPS with
    /// the server certificate of Courier's CA; the command line checks it
    /// against the data directory's CA.
    @Test func offTheLoopbackTheAdminAPISpeaksHTTPS() async throws {
        try await withTestServer(configure: { $0.network.adminHost = "0.0.0.0" }) { server in
            let port = try await server.adminPort()
            #expect(server.application.configuration.network.adminURL(port: port) == "https://127.0.0.1:\(port)")
            let status = try await runProgram(courier, ["status", "--data", server.directory, "--url", "https://127.0.0.1:\(port)"])
            #expect(status.status == 0, "\(status.stderr)")
            #expect(status.stdout.contains("devices online"))
            let plain = try await runProgram(courier, ["status", "--data", server.directory, "--url", "http://127.0.0.1:\(port)"])
            #expect(plain.status != 0)
            #expect(plain.stderr.hasPrefix("courier: no Courier admin API at http://127.0.0.1:\(port)"), "\(plain.stderr)")
            #expect(plain.stderr.split(separator: "\n").count == 1)
            // Over HTTPS the console's session cookie is Secure (never sent in the clear) and __Host- (this host's alone).
            let signIn = try await runProgram(
                "curl", [
                    "-sS", "-i", "--cacert", server.application.provisioner.caCertificatePath, "-H", "Content-Type: application/json",
                    "-d", #"{"token": "\#(server.application.report.adminToken)"}"#, "https://127.0.0.1:\(port)/console/session",
                ])
            let cookie = try #require(signIn.stdout.split(separator: "\r\n").first { $0.lowercased().hasPrefix("set-cookie: __host-courier_session=") })
            #expect(cookie.contains("; Secure") && cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "\(cookie)")
            // Another data directory: another CA, which does not vouch for this server.
            let other = try temporaryDirectory()
            defer { removeTemporaryDirectory(other) }
            let otherApplication = try await CourierApplication.build(configuration: testConfiguration(other), logger: server.logger)
            try await otherApplication.provisioner.close()
            let untrusted = try await runProgram(
                courier, ["status", "--data", other, "--admin-token", server.application.report.adminToken, "--url", "https://127.0.0.1:\(port)"])
            #expect(untrusted.status != 0)
            #expect(untrusted.stderr.contains("TLS"), "\(untrusted.stderr)")
            #expect(untrusted.stderr.split(separator: "\n").count == 1)
        }
    }
}

extension TestServer {
    /// Adds a fault rule through the admin API; its id.
    func addFault(_ body: String) async throws -> String {
        let answer = try await admin("POST", "/v1/faults", body: body)
        #expect(answer.status == 201, "\(answer.message ?? "")")
        return try #require(answer.object["id"] as? String)
    }
}

/// Fault rules, each kind observed by a real client over HTTP/2 and over the binary API.
@Suite(.timeLimit(.minutes(2))) struct FaultInjectionTests {
    let payload = Array(#"{"aps":{"alert":"fault"}}"#.utf8)

    @Test func aRejectRuleAnswersItsReasonForItsCountThenEnds() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let id = try await server.addFault(
                #"{"match": {"token": "\#(Hex.encode(token))"}, "action": "reject", "reason": "Unregistered", "timestamp": "1750000000", "count": 1}"#)
            let client = try await server.http2Client()
            let refusedID = UUID()
            let refused = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: refusedID))
            #expect(refused.status == 410)
            #expect(refused.reason == .unregistered)
            #expect(refused.timestamp == Date(timeIntervalSince1970: 1_750_000_000))
            // Its count is used up: the next one goes through, and the rule is gone.
            let accepted = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(accepted.status == 200)
            _ = try #require(await device.next())
            let rules = try await server.admin("GET", "/v1/faults")
            #expect((rules.object["faults"] as? [Any])?.isEmpty == true)
            // The inbox and the delivery log say what the fault did.
            let entry = try #require(try await server.inboxEntries("?apns-id=\(refusedID.uuidString)").first)
            #expect(entry["fault"] as? String == id)
            #expect((entry["outcome"] as? [String: Any])?["reason"] as? String == "Unregistered")
            let timeline = try await server.admin("GET", "/v1/notifications/\(refusedID.uuidString)")
            let events = timeline.object["events"] as? [[String: Any]] ?? []
            #expect(events.first?["event"] as? String == "faultInjected")
            #expect((events.first?["detail"] as? String)?.contains(id) == true)
            await client.close()
            await server.disconnect(device)
        }
    }

    @Test func rulesMatchOnTopicTeamAndInterfaceOnly() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            _ = try await server.addFault(#"{"match": {"interface": "binary"}, "action": "reject", "reason": "BadDeviceToken"}"#)
            _ = try await server.addFault(#"{"match": {"topic": "com.example.other"}, "action": "reject", "reason": "BadDeviceToken"}"#)
            _ = try await server.addFault(#"{"match": {"team": "OTHERTEAM1"}, "action": "reject", "reason": "BadDeviceToken"}"#)
            let client = try await server.http2Client()
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
            _ = try await server.addFault(#"{"match": {"team": "DEMOTEAM01", "environment": "production"}, "action": "reject", "reason": "TooManyRequests"}"#)
            let limited = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(limited.status == 429)
            #expect(limited.reason == .tooManyRequests)
            await client.close()
            await server.disconnect(device)
        }
    }

    @Test func aDelayRuleHoldsTheAnswerThenLetsItThrough() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            _ = try await server.addFault(#"{"action": "delay", "milliseconds": 300, "count": 2}"#)
            let client = try await server.http2Client()
            let start = ContinuousClock.now
            let answer = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(answer.status == 200)
            #expect(ContinuousClock.now - start >= .milliseconds(300))
            _ = try #require(await device.next())
            // Over the binary API: the frame is decided after the delay, and delivered.
            let binary = try await server.binaryClient()
            try await binary.send(token: token, payload: payload, expiry: 0, priority: 10)
            _ = try #require(await device.next())
            let entries = try await server.inboxEntries("?interface=binary")
            #expect(entries.count == 1)
            #expect((entries.first?["outcome"] as? [String: Any])?["accepted"] as? Bool == true)
            #expect(entries.first?["fault"] as? String != nil, "the delay's rule is named")
            await binary.close()
            await client.close()
            await server.disconnect(device)
        }
    }

    @Test func aCloseRuleEndsTheHTTP2ConnectionWithGoAway() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            _ = try await server.addFault(#"{"action": "close", "reason": "Shutdown", "count": 1}"#)
            let connection = try await server.http2Connection()
            let push = RawPush(token: token, authorization: jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now()))
            let answer = try await push.send(on: connection)
            #expect(answer.status == 503)
            #expect(answer.reason == "Shutdown")
            let goAway = try #require(await connection.closed())
            #expect(goAway.reason == .shutdown)
            await server.disconnect(device)
        }
    }

    @Test func binaryRulesAnswerTheirStatusOrShutdown() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            _ = try await server.addFault(#"{"match": {"interface": "binary"}, "action": "reject", "reason": "BadDeviceToken", "binaryStatus": 8, "count": 1}"#)
            let client = try await server.binaryClient()
            try await client.send(token: token, payload: payload, expiry: 0, priority: 10)
            let failure = try #require(await nextFailure(client))
            #expect(failure.status == .invalidToken)
            await client.close()

            _ = try await server.addFault(#"{"match": {"interface": "binary"}, "action": "close", "count": 1}"#)
            let second = try await server.binaryClient()
            try await second.send(token: token, payload: payload, expiry: 0, priority: 10)
            let shutdown = try #require(await nextFailure(second))
            #expect(shutdown.status == .shutdown)
            await second.close()
            let refused = try await server.inboxEntries("?interface=binary&outcome=refused")
            #expect(refused.count == 2)
            #expect(refused.allSatisfy { $0["fault"] as? String != nil })
            await server.disconnect(device)
        }
    }

    @Test func rulesAreListedRemovedAndChecked() async throws {
        try await withTestServer { server in
            let id = try await server.addFault(#"{"match": {"topic": "com.example.demo"}, "action": "reject", "reason": "BadTopic", "seconds": 60}"#)
            let listed = try await server.admin("GET", "/v1/faults")
            let rules = listed.object["faults"] as? [[String: Any]] ?? []
            #expect(rules.count == 1)
            #expect(rules.first?["id"] as? String == id)
            #expect(rules.first?["reason"] as? String == "BadTopic")
            #expect(rules.first?["until"] as? String != nil)
            // Its time passes on the server's clock.
            server.clock.advance(by: 61)
            #expect((try await server.admin("GET", "/v1/faults").object["faults"] as? [Any])?.isEmpty == true)
            let again = try await server.addFault(#"{"action": "delay", "milliseconds": 5}"#)
            #expect(try await server.admin("DELETE", "/v1/faults/\(again)").status == 200)
            #expect(try await server.admin("DELETE", "/v1/faults/\(again)").status == 404)
            for (body, named) in [
                (#"{"action": "reject", "reason": "NoSuchReason"}"#, "NoSuchReason"), (#"{"action": "explode"}"#, "action"),
                (#"{"action": "reject"}"#, "reason"), (#"{"action": "delay"}"#, "milliseconds"), (#"{"action": "delay", "milliseconds": 5, "count": 0}"#, "count"),
                (#"{"action": "reject", "reason": "BadTopic", "binaryStatus": 300}"#, "binaryStatus"),
                (#"{"match": {"interface": "smtp"}, "action": "delay", "milliseconds": 5}"#, "interface"),
            ] {
                let answer = try await server.admin("POST", "/v1/faults", body: body)
                #expect(answer.status == 422, "\(body)")
                #expect(answer.message?.contains(named) == true, "\(body): \(answer.message ?? "")")
            }
            let notJSON = try await server.admin("POST", "/v1/faults", body: "{")
            #expect(notJSON.status == 400)
            #expect(notJSON.message != nil)
        }
    }

    /// A token marked unregistered without its device: 410 with that time, and a feedback entry.
    @Test func aTokenMarkedUnregisteredGets410AndAFeedbackEntry() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            await server.disconnect(device)
            let marked = try await server.admin(
                "POST", "/v1/tokens/\(Hex.encode(token))/unregister", body: #"{"environment": "production", "topic": "com.example.demo", "at": 1760000000}"#)
            #expect(marked.status == 200, "\(marked.message ?? "")")
            let client = try await server.http2Client()
            let answer = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(answer.status == 410)
            #expect(answer.timestamp == Date(timeIntervalSince1970: 1_760_000_000))
            let feedback = try await server.application.provisioner.store.feedback(environment: .production, topic: "com.example.demo")
            #expect(feedback.map(\.token) == [token])
            let again = try await server.admin(
                "POST", "/v1/tokens/\(Hex.encode(token))/unregister", body: #"{"environment": "production", "topic": "com.example.demo"}"#)
            #expect(again.status == 404)
            await client.close()
        }
    }
}

/// A long poll does not hold up graceful shutdown: it ends with it.
@Suite(.timeLimit(.minutes(2))) struct AdminShutdownTests {
    @Test func aLongPollEndsWhenTheServerShutsDown() async throws {
        try await withTestServer { server in
            async let waited = server.admin("GET", "/v1/inbox/wait?topic=com.example.never&timeout=300")
            // Shut down once the wait is pending in the inbox.
            while server.application.inbox.waiting == 0 { await Task.yield() }
            await server.shutDown()
            let answer = try await waited
            #expect(answer.status == 404)
            #expect(answer.message == "no notification matched within 300 s")
        }
    }
}

/// The admin port bounded as the protocol ports are (docs/security.md,
/// "Without credentials, or with too many connections").
@Suite(.timeLimit(.minutes(2))) struct AdminLimitTests {
    /// A request must arrive whole within `connections.unfinishedFrameTimeout`
    /// of its first byte, whatever it sends meanwhile: headers sent a byte
    /// at a time, or a body announced as a megabyte and sent a byte at a
    /// time after its 401, no longer hold a connection (an idle timer,
    /// restarted by every byte, never closed them).
    @Test func aRequestNotWholeWithinTheDeadlineIsClosedWhateverItSends() async throws {
        // Four seconds: long enough that a loaded machine (the whole suite
        // on two cores) sends each first request in time.
        try await withTestServer(configure: { $0.connections.unfinishedFrameTimeout = 4 }) { server in
            let port = try await server.adminPort()
            let headers = try await RawHTTPConnection.open(port: port)
            try await headers.send("GET /health/live HTTP/1.1\r\n")
            let body = try await RawHTTPConnection.open(port: port)
            try await body.send(
                "POST /v1/faults HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{")
            // Closed after four seconds; the limit only ends the test of a server that never closes them.
            async let headersEnd = headers.readToEnd(limit: .seconds(12), drip: "X")
            async let bodyEnd = body.readToEnd(limit: .seconds(12), drip: " ")
            let (headersAnswer, bodyAnswer) = await (headersEnd, bodyEnd)
            #expect(headersAnswer == "", "closed, with no answer")
            let answer = try #require(bodyAnswer, "closed")
            #expect(answer.hasPrefix("HTTP/1.1 401"), "\(answer)")
            // Whole requests are answered, one after another on a kept connection too.
            let kept = try await RawHTTPConnection.open(port: port)
            for _ in 0..<2 {
                try await kept.send("GET /health/live HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
                #expect(try await kept.read(until: #""live""#).hasPrefix("HTTP/1.1 200"))
            }
            await kept.close()
            #expect(try await server.admin("GET", "/health/ready", token: "").status == 200)
        }
    }

    /// One address holds at most `connections.maxPerAddress` connections to
    /// the admin port: one more is closed as it opens, with no answer;
    /// another address is let in.
    @Test func anAddressHoldsAtMostItsConnectionsToTheAdminPort() async throws {
        try await withTestServer(configure: { $0.connections.maxPerAddress = 2 }) { server in
            let port = try await server.adminPort()
            let request = "GET /health/live HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n"
            // Each answered before the next opens: the server has admitted it.
            var held: [RawHTTPConnection] = []
            for _ in 0..<2 {
                let connection = try await RawHTTPConnection.open(port: port, from: "127.0.0.2")
                try await connection.send(request)
                #expect(try await connection.read(until: #""live""#).hasPrefix("HTTP/1.1 200"))
                held.append(connection)
            }
            // Closed at once: well before the request deadline (10 s) or the idle timeout (60 s).
            let third = try await RawHTTPConnection.open(port: port, from: "127.0.0.2")
            #expect(await third.readToEnd(limit: .seconds(5)) == "")
            let other = try await RawHTTPConnection.open(port: port, from: "127.0.0.3")
            try await other.send(request)
            #expect(try await other.read(until: #""live""#).hasPrefix("HTTP/1.1 200"))
            await other.close()
            for connection in held { await connection.close() }
        }
    }

    /// A body over the limit is 413, announced (`Content-Length`) or not
    /// (chunked), from anyone (the sign-in takes no token), and no error
    /// line: it was a 500 and an error line each, with which anyone could
    /// fill the log.
    @Test func anOversizedBodyIs413AndNoErrorLine() async throws {
        let log = CapturedLog()
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let application = try await CourierApplication.build(configuration: testConfiguration(directory), timers: false, logger: log.logger)
        let group = application.serviceGroup(logger: log.logger, signals: false)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do {
                let port = try await application.ports.adminPort()
                let head = "POST /console/session HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\n"
                let json = #"{"token": ""# + String(repeating: "a", count: 3_000_000) + #""}"#
                let chunk = String(json.utf8.count, radix: 16)
                for request in [
                    head + "Content-Length: \(json.utf8.count)\r\n\r\n" + json,
                    head + "Transfer-Encoding: chunked\r\n\r\n" + chunk + "\r\n" + json + "\r\n0\r\n\r\n",
                ] {
                    let connection = try await RawHTTPConnection.open(port: port)
                    // The server reads the whole body (answered or not), so the write ends.
                    try await connection.send(request)
                    let answer = try await connection.read(until: "}}")
                    #expect(answer.hasPrefix("HTTP/1.1 413"), "\(answer.prefix(200))")
                    #expect(answer.contains("larger than the 2097152 bytes"), "\(answer.prefix(400))")
                    await connection.close()
                }
            } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(log.messages(atLeast: .error) == [])
    }

    /// A long poll and an event stream end when their client goes (its
    /// connection closes), not at their timeout (300 s) or next comment (15 s).
    @Test func aLongPollAndAnEventStreamEndWhenTheirClientGoes() async throws {
        try await withTestServer { server in
            let port = try await server.adminPort()
            let token = server.application.report.adminToken
            let inbox = server.application.inbox
            let wait = try await RawHTTPConnection.open(port: port)
            try await wait.send(
                "GET /v1/inbox/wait?topic=com.example.never&timeout=300 HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Bearer \(token)\r\n\r\n")
            try await waitUntil(limit: 10) { inbox.waiting == 1 }
            await wait.close()
            try await waitUntil(limit: 5) { inbox.waiting == 0 }

            let stream = try await EventStream.open(port: port, path: "/v1/inbox/stream?topic=com.example.never", token: token)
            _ = try await stream.read(until: ": courier inbox")
            try await waitUntil(limit: 10) { inbox.waiting == 1 }
            await stream.close()
            try await waitUntil(limit: 5) { inbox.waiting == 0 }
        }
    }
}

/// A plain TCP connection to the admin port, for what a client library does
/// not send: a request a byte at a time, a body over the limit, a wrong
/// `Host`, a connection from another loopback address.
actor RawHTTPConnection {
    /// The connection ended before what a read waited for; what came.
    struct Ended: Error {
        var received: String
    }

    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    private var inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    private var pending = ""

    private init(channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>) {
        self.channel = channel
        inbound = channel.inbound.makeAsyncIterator()
    }

    /// Connected to 127.0.0.1 from `source` (any loopback address on Linux).
    static func open(port: Int, from source: String = "127.0.0.1") async throws -> RawHTTPConnection {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
            }
        return RawHTTPConnection(channel: channel)
    }

    func send(_ text: String) async throws {
        try await channel.outbound.write(ByteBuffer(string: text))
    }

    /// What arrived up to the read that brought `text`.
    func read(until text: String) async throws -> String {
        while !pending.contains(text) {
            guard let buffer = try await next() else { throw Ended(received: pending) }
            pending += String(buffer: buffer)
        }
        defer { pending = "" }
        return pending
    }

    /// What the server sent until it closed the connection (or reset it);
    /// nil when it was still open after `limit` (it is closed here then).
    /// With `drip`, that is sent every 200 ms meanwhile, as a slowloris
    /// sends its bytes.
    func readToEnd(limit: TimeAmount, drip: String? = nil) async -> String? {
        let client = channel.channel
        let timer = client.eventLoop.scheduleTask(in: limit) { client.close(promise: nil) }
        let outbound = channel.outbound
        let dripping = Task {
            guard let drip else { return }
            while !Task.isCancelled {
                do {
                    try await outbound.write(ByteBuffer(string: drip))
                    try await Task.sleep(for: .milliseconds(200))
                } catch {
                    return
                }
            }
        }
        var text = pending
        pending = ""
        do {
            while let buffer = try await next() { text += String(buffer: buffer) }
        } catch {
            // Reset: closed too.
        }
        dripping.cancel()
        await dripping.value
        timer.cancel()
        // The timer ran: the server had not closed it.
        return (try? await timer.futureResult.get()) == nil ? text : nil
    }

    func close() async {
        try? await channel.channel.close()
    }

    private func next() async throws -> ByteBuffer? {
        var iterator = inbound
        let buffer = try await iterator.next(isolation: self)
        inbound = iterator
        return buffer
    }
}

/// What a logger wrote, for a test to read.
final class CapturedLog: Sendable {
    private let lines = Mutex<[(level: Logger.Level, message: String)]>([])

    /// A logger that writes here, from debug up.
    var logger: Logger {
        var logger = Logger(label: "courier-test") { _ in Handler(captured: self) }
        logger.logLevel = .debug
        return logger
    }

    func messages(atLeast level: Logger.Level) -> [String] {
        lines.withLock { lines in lines.filter { $0.level >= level }.map { $0.message } }
    }

    struct Handler: LogHandler {
        let captured: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            captured.lines.withLock { $0.append((event.level, "\(event.message)")) }
        }
    }
}
