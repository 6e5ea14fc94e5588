import CourierCore
import CourierProvider
@testable import CourierServer
import CourierTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One answer of the admin server, with its headers.
struct ConsoleAnswer {
    var status: Int
    var headers: [String: String]
    var body: Data
    var object: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
    var message: String? { (object["error"] as? [String: Any])?["message"] as? String }
    var text: String { String(decoding: body, as: UTF8.self) }
    func header(_ name: String) -> String? { headers.first { $0.key.lowercased() == name.lowercased() }?.value }
}

extension TestServer {
    /// A request to the admin server with exactly the headers given: no
    /// token, and no cookie but the one given.
    func console(_ method: String, _ path: String, headers: [String: String] = [:], body: String? = nil) async throws -> ConsoleAnswer {
        let port = try await adminPort()
        var request = URLRequest(url: try #require(URL(string: "http://127.0.0.1:\(port)\(path)")), timeoutInterval: 60)
        request.httpMethod = method
        request.httpShouldHandleCookies = false
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body { request.httpBody = Data(body.utf8) }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(for: request)
        let http = response as? HTTPURLResponse
        var fields: [String: String] = [:]
        for (name, value) in http?.allHeaderFields ?? [:] { fields["\(name)"] = "\(value)" }
        return ConsoleAnswer(status: http?.statusCode ?? 0, headers: fields, body: data)
    }

    /// Signs the console in: the session cookie (`name=value`) and the anti-forgery token.
    func signIn() async throws -> (cookie: String, csrf: String) {
        let answer = try await console(
            "POST", "/console/session", headers: ["Content-Type": "application/json"], body: #"{"token": "\#(application.report.adminToken)"}"#)
        #expect(answer.status == 201, "\(answer.message ?? "")")
        let setCookie = try #require(answer.header("Set-Cookie"))
        let cookie = String(setCookie.split(separator: ";")[0])
        return (cookie, try #require(answer.object["csrf"] as? String))
    }
}

@Suite(.timeLimit(.minutes(2))) struct ConsoleTests {
    @Test func thePageAndItsAssetsComeFromCourierAloneAndForbidOtherHosts() async throws {
        try await withTestServer { server in
            let page = try await server.console("GET", "/")
            #expect(page.status == 200)
            #expect(page.header("Content-Type")?.hasPrefix("text/html") == true)
            let policy = try #require(page.header("Content-Security-Policy"))
            for directive in ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
                #expect(policy.contains(directive), "\(directive)")
            }
            #expect(page.header("X-Content-Type-Options") == "nosniff")
            // Every reference in the page is to Courier itself (or an empty data: icon).
            let references = page.text.matches(of: /(?:src|href)="([^"]*)"/).map { String($0.output.1) }
            #expect(references.count >= 3)
            for reference in references { #expect(reference.hasPrefix("/") || reference.hasPrefix("#") || reference.hasPrefix("data:"), "\(reference)") }
            let script = try await server.console("GET", "/console.js")
            #expect(script.status == 200)
            #expect(script.header("Content-Type")?.hasPrefix("text/javascript") == true)
            #expect(script.text.contains("X-CSRF-Token"))
            // Server values go in as text: the script never writes markup.
            for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "srcdoc", "eval(", "new Function"] {
                #expect(!script.text.contains(sink), "\(sink)")
            }
            let style = try await server.console("GET", "/console.css")
            #expect(style.status == 200)
            #expect(style.header("Content-Type")?.hasPrefix("text/css") == true)
            #expect(!style.text.contains("@import") && !style.text.contains("url("))
        }
    }

    @Test func signingInTakesTheAdminTokenAndSetsAStrictHttpOnlyCookie() async throws {
        try await withTestServer { server in
            let wrong = try await server.console(
                "POST", "/console/session", headers: ["Content-Type": "application/json"], body: #"{"token": "\#(String(repeating: "0", count: 64))"}"#)
            #expect(wrong.status == 401)
            #expect(wrong.message == "the admin token was refused")
            #expect(wrong.header("Set-Cookie") == nil)
            // A form post (what another site's page can make) is not a sign-in.
            let form = try await server.console(
                "POST", "/console/session", headers: ["Content-Type": "application/x-www-form-urlencoded"], body: "token=\(server.application.report.adminToken)")
            #expect(form.status == 415)
            #expect(form.header("Set-Cookie") == nil)
            let notJSON = try await server.console("POST", "/console/session", headers: ["Content-Type": "application/json"], body: "{")
            #expect(notJSON.status == 400)

            let answer = try await server.console(
                "POST", "/console/session", headers: ["Content-Type": "application/json"], body: #"{"token": "\#(server.application.report.adminToken)"}"#)
            #expect(answer.status == 201)
            let setCookie = try #require(answer.header("Set-Cookie"))
            #expect(setCookie.hasPrefix("courier_session="))
            for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] { #expect(setCookie.contains(attribute), "\(attribute)") }
            // Plain HTTP on the loopback: a Secure cookie would never come back.
            #expect(!setCookie.contains("Secure"))
            let cookie = String(setCookie.split(separator: ";")[0])
            let session = try await server.console("GET", "/console/session", headers: ["Cookie": cookie])
            #expect(session.status == 200)
            #expect(session.object["csrf"] as? String == answer.object["csrf"] as? String)
            #expect(try await server.console("GET", "/v1/status", headers: ["Cookie": cookie]).status == 200)
            // A cookie Courier did not make is no session.
            let forged = try await server.console("GET", "/v1/status", headers: ["Cookie": "courier_session=" + String(repeating: "a", count: 64)])
            #expect(forged.status == 401)
            #expect(forged.message?.contains("console session") == true)
            #expect(try await server.console("GET", "/console/session").status == 401)
        }
    }

    @Test func aChangeWithTheCookieNeedsTheAntiForgeryTokenAndTheSameOrigin() async throws {
        try await withTestServer { server in
            let (cookie, csrf) = try await server.signIn()
            let port = try await server.adminPort()
            let rule = #"{"action": "reject", "reason": "BadDeviceToken"}"#
            let json = ["Cookie": cookie, "Content-Type": "application/json"]
            let without = try await server.console("POST", "/v1/faults", headers: json, body: rule)
            #expect(without.status == 403)
            #expect(without.message?.contains("X-CSRF-Token") == true)
            let wrong = try await server.console("POST", "/v1/faults", headers: json.merging(["X-CSRF-Token": String(repeating: "0", count: 64)]) { $1 }, body: rule)
            #expect(wrong.status == 403)
            let elsewhere = try await server.console(
                "POST", "/v1/faults", headers: json.merging(["X-CSRF-Token": csrf, "Origin": "https://attacker.example"]) { $1 }, body: rule)
            #expect(elsewhere.status == 403)
            #expect(elsewhere.message?.contains("another site") == true)
            // The same host on another port is another origin too.
            let otherPort = try await server.console(
                "POST", "/v1/faults", headers: json.merging(["X-CSRF-Token": csrf, "Origin": "http://127.0.0.1:\(port + 1)"]) { $1 }, body: rule)
            #expect(otherPort.status == 403)
            let cleared = try await server.console("DELETE", "/v1/inbox", headers: ["Cookie": cookie])
            #expect(cleared.status == 403)
            #expect((try await server.admin("GET", "/v1/faults").object["faults"] as? [Any])?.count == 0)

            let same = try await server.console(
                "POST", "/v1/faults", headers: json.merging(["X-CSRF-Token": csrf, "Origin": "http://127.0.0.1:\(port)"]) { $1 }, body: rule)
            #expect(same.status == 201, "\(same.message ?? "")")
            let id = try #require(same.object["id"] as? String)
            let removed = try await server.console("DELETE", "/v1/faults/\(id)", headers: ["Cookie": cookie, "X-CSRF-Token": csrf])
            #expect(removed.status == 200)
            // The admin token needs neither: a browser never sends it on its own.
            let bearer = try await server.admin("POST", "/v1/faults", body: rule)
            #expect(bearer.status == 201)
        }
    }

    /// An `Origin` is the console's only with its scheme, host and port:
    /// the scheme was once not compared, so `https://127.0.0.1:PORT` passed
    /// for the `http://` console.
    @Test func anOriginIsTheConsolesOnlyWithItsSchemeHostAndPort() async throws {
        try await withTestServer { server in
            let (cookie, csrf) = try await server.signIn()
            let port = try await server.adminPort()
            let rule = #"{"action": "reject", "reason": "BadDeviceToken"}"#
            let headers = ["Cookie": cookie, "Content-Type": "application/json", "X-CSRF-Token": csrf]
            for origin in ["https://127.0.0.1:\(port)", "http://localhost:\(port)", "http://127.0.0.1", "http://127.0.0.1:\(port)x", "null"] {
                let answer = try await server.console("POST", "/v1/faults", headers: headers.merging(["Origin": origin]) { $1 }, body: rule)
                #expect(answer.status == 403, "\(origin)")
                #expect(answer.message?.contains("another site") == true, "\(origin)")
            }
            #expect((try await server.admin("GET", "/v1/faults").object["faults"] as? [Any])?.count == 0)
            let own = try await server.console("POST", "/v1/faults", headers: headers.merging(["Origin": "http://127.0.0.1:\(port)"]) { $1 }, body: rule)
            #expect(own.status == 201, "\(own.message ?? "")")
        }
    }

    /// A request whose `Host` does not name the server (its admin address,
    /// the loopback names, the certificate's names) with its port is
    /// refused, the console's page and the unauthenticated endpoints
    /// included: a site whose name was made to resolve to this machine (DNS
    /// rebinding) reads nothing.
    @Test func aHostThatDoesNotNameTheServerIsRefused() async throws {
        try await withTestServer { server in
            let port = try await server.adminPort()
            let (cookie, _) = try await server.signIn()
            func answer(_ path: String, host: String?, cookie: String? = nil) async throws -> String {
                let connection = try await RawHTTPConnection.open(port: port)
                var request = "GET \(path) HTTP/1.1\r\nConnection: close\r\n"
                if let host { request += "Host: \(host)\r\n" }
                if let cookie { request += "Cookie: \(cookie)\r\n" }
                try await connection.send(request + "\r\n")
                return try #require(await connection.readToEnd(limit: .seconds(20)))
            }
            let refused: [String?] = [
                "attacker.example:\(port)", "127.0.0.1.attacker.example:\(port)", "127.0.0.1:\(port + 1)", "127.0.0.1", "::1:\(port)",
                "127.0.0.1:\(port)\r\nHost: attacker.example:\(port)", nil,
            ]
            for host in refused {
                for path in ["/", "/health/ready", "/metrics", "/v1/status"] {
                    let text = try await answer(path, host: host, cookie: cookie)
                    #expect(text.hasPrefix("HTTP/1.1 421"), "\(host ?? "no Host") \(path): \(text.prefix(60))")
                }
            }
            for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST:\(port)", "[::1]:\(port)"] {
                let text = try await answer("/v1/status", host: host, cookie: cookie)
                #expect(text.hasPrefix("HTTP/1.1 200"), "\(host): \(text.prefix(60))")
            }
        }
    }

    @Test func aSessionEndsAtSignOutAndTwelveHoursAfterSignIn() async throws {
        try await withTestServer { server in
            let (cookie, csrf) = try await server.signIn()
            let forged = try await server.console("DELETE", "/console/session", headers: ["Cookie": cookie])
            #expect(forged.status == 403)
            let out = try await server.console("DELETE", "/console/session", headers: ["Cookie": cookie, "X-CSRF-Token": csrf])
            #expect(out.status == 200)
            let cleared = try #require(out.header("Set-Cookie"))
            #expect(cleared.contains("Max-Age=0"))
            #expect(try await server.console("GET", "/v1/status", headers: ["Cookie": cookie]).status == 401)
            #expect(try await server.console("GET", "/console/session", headers: ["Cookie": cookie]).status == 401)

            // Signing in again in the same browser ends the session it had.
            let (first, _) = try await server.signIn()
            let again = try await server.console(
                "POST", "/console/session", headers: ["Content-Type": "application/json", "Cookie": first],
                body: #"{"token": "\#(server.application.report.adminToken)"}"#)
            #expect(again.status == 201)
            #expect(try await server.console("GET", "/v1/status", headers: ["Cookie": first]).status == 401)

            let (later, _) = try await server.signIn()
            server.clock.advance(by: 12 * 3600 - 1)
            #expect(try await server.console("GET", "/v1/status", headers: ["Cookie": later]).status == 200)
            server.clock.advance(by: 2)
            #expect(try await server.console("GET", "/v1/status", headers: ["Cookie": later]).status == 401)
        }
    }

    /// Test pushes sent at once for a team without a console key make one
    /// key between them: the first looks it up or makes it, the others wait.
    @Test func testPushesAtOnceMakeOneKey() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = Hex.encode(try await device.client.register("com.example.demo"))
            func keys() async throws -> [String] {
                let teams = try await server.admin("GET", "/v1/teams").object["teams"] as? [[String: Any]] ?? []
                let team = teams.first { $0["id"] as? String == "DEMOTEAM01" }
                return (team?["authKeys"] as? [[String: Any]] ?? []).compactMap { $0["keyID"] as? String }
            }
            let before = try await keys()
            let statuses = try await withThrowingTaskGroup(of: Int?.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await server.admin(
                            "POST", "/v1/push",
                            body: #"{"environment": "production", "team": "DEMOTEAM01", "topic": "com.example.demo", "token": "\#(token)", "payload": "{}"}"#
                        ).object["status"] as? Int
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 200, count: 8))
            #expect(try await keys().count == before.count + 1, "one key made for the eight")
            await server.disconnect(device)
        }
    }

    @Test func theTestPushGoesThroughTheHTTP2APIItsInboxAndItsFaults() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = Hex.encode(try await device.client.register("com.example.demo"))
            func push(_ extra: String = "") async throws -> AdminAnswer {
                try await server.admin(
                    "POST", "/v1/push",
                    body: #"{"environment": "production", "team": "DEMOTEAM01", "topic": "com.example.demo", "token": "\#(token)", "payload": "{\"aps\":{\"alert\":\"from the console\"}}", "pushType": "alert", "priority": 10\#(extra)}"#
                )
            }
            let first = try await push()
            #expect(first.status == 200, "\(first.message ?? "")")
            #expect(first.object["status"] as? Int == 200)
            let apnsID = try #require(first.object["apnsID"] as? String)
            let received = try #require(await device.next())
            #expect(String(decoding: received.payload, as: UTF8.self).contains("from the console"))
            // Recorded as any provider's push: HTTP/2, token trust, the team's key.
            let entry = try #require(try await server.inboxEntries("?apns-id=\(apnsID)").first)
            #expect(entry["interface"] as? String == "http2")
            #expect(entry["teamID"] as? String == "DEMOTEAM01")
            let provider = try #require(entry["provider"] as? String)
            #expect(provider.hasPrefix("key "))

            // A fault rule acts on it.
            #expect(try await server.admin("POST", "/v1/faults", body: #"{"match": {"token": "\#(token)"}, "action": "reject", "reason": "BadDeviceToken", "count": 1}"#).status == 201)
            let refused = try await push()
            #expect(refused.status == 200)
            #expect(refused.object["status"] as? Int == 400)
            #expect(refused.object["reason"] as? String == "BadDeviceToken")

            // The console's key is kept in the data directory, the owner's only.
            let keyID = String(provider.dropFirst("key ".count))
            let keyFile = server.directory + "/console/DEMOTEAM01/AuthKey_\(keyID).p8"
            let attributes = try FileManager.default.attributesOfItem(atPath: keyFile)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)

            // A fault rule answering InvalidProviderToken is answered as it is: no new key.
            #expect(
                try await server.admin("POST", "/v1/faults", body: #"{"match": {"token": "\#(token)"}, "action": "reject", "reason": "InvalidProviderToken", "count": 1}"#)
                    .status == 201)
            let faulted = try await push()
            #expect(faulted.object["status"] as? Int == 403)
            #expect(faulted.object["reason"] as? String == "InvalidProviderToken")
            func keys() async throws -> [String] {
                let teams = try await server.admin("GET", "/v1/teams").object["teams"] as? [[String: Any]] ?? []
                let team = teams.first { $0["id"] as? String == "DEMOTEAM01" }
                return (team?["authKeys"] as? [[String: Any]] ?? []).compactMap { $0["keyID"] as? String }
            }
            let keysBefore = try await keys()
            #expect(try await push().object["status"] as? Int == 200)
            _ = try #require(await device.next())
            #expect(try await keys() == keysBefore)

            // Its key revoked, the console makes another and the push goes through.
            #expect(try await server.admin("POST", "/v1/keys/\(keyID)/revoke").status == 200)
            let again = try await push(#", "apnsID": "0a0b0c0d-0000-4000-8000-000000000001""#)
            #expect(again.object["status"] as? Int == 200, "\(again.object)")
            #expect(again.object["apnsID"] as? String == "0a0b0c0d-0000-4000-8000-000000000001")
            _ = try #require(await device.next())
            #expect(try await keys().count == keysBefore.count + 1)
            #expect(!FileManager.default.fileExists(atPath: keyFile))

            // What the server checks is answered by the HTTP/2 API itself.
            let badPayload = try await server.admin(
                "POST", "/v1/push", body: #"{"environment": "production", "team": "DEMOTEAM01", "topic": "com.example.demo", "token": "\#(token)", "payload": "not json"}"#)
            #expect(badPayload.object["status"] as? Int == 400)
            #expect(badPayload.object["reason"] as? String == "PayloadEmpty")
            // What the form gets wrong is a 422 naming it; an unknown team a 404.
            let badToken = try await server.admin(
                "POST", "/v1/push", body: #"{"environment": "production", "team": "DEMOTEAM01", "topic": "com.example.demo", "token": "zz", "payload": "{}"}"#)
            #expect(badToken.status == 422)
            #expect(badToken.message?.contains("'token'") == true)
            let badPriority = try await server.admin(
                "POST", "/v1/push", body: #"{"environment": "production", "team": "DEMOTEAM01", "topic": "com.example.demo", "token": "\#(token)", "payload": "{}", "priority": 7}"#)
            #expect(badPriority.status == 422)
            #expect(badPriority.message?.contains("'priority'") == true)
            let noTeam = try await server.admin(
                "POST", "/v1/push", body: #"{"environment": "production", "team": "NOSUCHTEAM", "topic": "com.example.demo", "token": "\#(token)", "payload": "{}"}"#)
            #expect(noTeam.status == 404)
        }
    }

    @Test func pushesAtOnceForATeamMakeOneKey() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = Hex.encode(try await device.client.register("com.example.demo"))
            let body = #"{"environment": "production", "team": "DEMOTEAM01", "topic": "com.example.demo", "token": "\#(token)", "payload": "{}"}"#
            let statuses = try await withThrowingTaskGroup(of: Int?.self) { group in
                for _ in 0..<8 { group.addTask { try await server.admin("POST", "/v1/push", body: body).object["status"] as? Int } }
                return try await group.reduce(into: [Int?]()) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 200, count: 8))
            let entries = try await server.inboxEntries("?interface=http2")
            #expect(Set(entries.compactMap { $0["provider"] as? String }).count == 1)
            let keyFiles = try FileManager.default.contentsOfDirectory(atPath: server.directory + "/console/DEMOTEAM01")
            #expect(keyFiles.count == 1)
            // A team that does not exist gets no folder.
            let noTeam = try await server.admin(
                "POST", "/v1/push", body: #"{"environment": "production", "team": "../../x", "topic": "t", "token": "\#(token)", "payload": "{}"}"#)
            #expect(noTeam.status == 404)
            #expect(!FileManager.default.fileExists(atPath: server.directory + "/console/../../x"))
        }
    }

    @Test func theInboxStreamSendsEachEntryAsAServerSentEvent() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let http2 = try await server.http2Client()
            let first = try await http2.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"one"}}"#.utf8), topic: "com.example.demo"))
            let port = try await server.adminPort()
            let stream = try await EventStream.open(port: port, path: "/v1/inbox/stream?topic=com.example.demo", token: server.application.report.adminToken)
            let head = try await stream.read(until: first.apnsID)
            #expect(head.hasPrefix("HTTP/1.1 200"))
            #expect(head.lowercased().contains("content-type: text/event-stream"))
            #expect(head.contains("event: entry\ndata: {"))
            #expect(head.contains("id: 1\n"))
            // The next one comes as it is received.
            let second = try await http2.send(HTTP2Push(token: token, payload: Array(#"{"aps":{"alert":"two"}}"#.utf8), topic: "com.example.demo"))
            let more = try await stream.read(until: second.apnsID)
            #expect(more.contains("id: 2\n"))
            await stream.close()

            // Resumed after what the browser saw (Last-Event-ID): only what is newer,
            // though the URL still asks for everything (as an EventSource's does).
            let resumed = try await EventStream.open(
                port: port, path: "/v1/inbox/stream?after=0", token: server.application.report.adminToken, lastEventID: "1")
            let text = try await resumed.read(until: second.apnsID)
            #expect(!text.contains(first.apnsID))
            await resumed.close()
            let refused = try await server.console("GET", "/v1/inbox/stream")
            #expect(refused.status == 401)
        }
    }

    @Test func statusNamesTheListenersAndCertificatesCanBeDownloaded() async throws {
        try await withTestServer { server in
            let status = try await server.admin("GET", "/v1/status")
            let listeners = try #require(status.object["listeners"] as? [String: Int])
            #expect(listeners["admin"] == (try await server.adminPort()))
            #expect(listeners["http2.production"] == (try await server.application.ports.port(.http2, .production)))
            let limits = try #require(status.object["payloadLimits"] as? [String: Int])
            #expect(limits["http2"] == 4096 && limits["http2VoIP"] == 5120)
            let certificates = try await server.admin("GET", "/v1/certificates?kind=provider").object["certificates"] as? [[String: Any]] ?? []
            let pem = try #require(certificates.first?["certificatePEM"] as? String)
            #expect(pem.hasPrefix("-----BEGIN CERTIFICATE-----"))
        }
    }
}

/// A server-sent-event stream read off a plain TCP connection, as a browser's
/// EventSource reads it (the response never ends).
actor EventStream {
    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    private var inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    private var pending = ""

    private init(channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>) {
        self.channel = channel
        inbound = channel.inbound.makeAsyncIterator()
    }

    static func open(port: Int, path: String, token: String, lastEventID: String? = nil) async throws -> EventStream {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
        }
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Bearer \(token)\r\nAccept: text/event-stream\r\n"
        if let lastEventID { request += "Last-Event-ID: \(lastEventID)\r\n" }
        request += "\r\n"
        try await channel.outbound.write(ByteBuffer(string: request))
        return EventStream(channel: channel)
    }

    /// What arrived since the last read, up to the chunk that has `text`.
    func read(until text: String) async throws -> String {
        while !pending.contains(text) {
            var iterator = inbound
            let next = try await iterator.next(isolation: self)
            inbound = iterator
            guard let buffer = next else { throw CancellationError() }
            pending += String(buffer: buffer)
        }
        defer { pending = "" }
        return pending.replacingOccurrences(of: "\r\n", with: "\n")
    }

    func close() async {
        try? await channel.channel.close()
    }
}
