import CourierCore
import CourierPKI
import CourierProvider
import CourierTestSupport
@testable import CourierServer
import Foundation
import Testing

/// A token of Apple's format that Courier did not issue (random: it opens
/// under no key of Courier's but with probability 2^-64).
func appleToken() -> [UInt8] { (0..<32).map { _ in UInt8.random(in: 0...255) } }

extension TestServer {
    /// Registers tokens as virtual devices of an app over the admin API.
    @discardableResult
    func addVirtualTokens(_ tokens: [[UInt8]], app: String = "com.example.demo", environment: Environment = .production) async throws -> AdminAnswer {
        let list = tokens.map { "\"\(Hex.encode($0))\"" }.joined(separator: ",")
        return try await admin("POST", "/v1/apps/\(app)/virtual-tokens", body: #"{"environment":"\#(environment.rawValue)","tokens":[\#(list)]}"#)
    }

    func changeVirtualToken(_ token: [UInt8], _ change: String, app: String = "com.example.demo") async throws -> AdminAnswer {
        try await admin("PATCH", "/v1/apps/\(app)/virtual-tokens/\(Hex.encode(token))", body: change)
    }
}

/// Virtual devices (docs/virtual-devices.md): a provider team's own Apple
/// tokens, registered to its app, go through every check a real token's
/// push does on both provider APIs, and never reach a real device or
/// another team.
@Suite(.timeLimit(.minutes(2))) struct VirtualDeviceTests {
    let payload = Array(#"{"aps":{"alert":"to a virtual device"}}"#.utf8)

    @Test func registeredTokensTakePushesAtOnceAndAreListed() async throws {
        try await withTestServer { server in
            let tokens = [appleToken(), appleToken()]
            let added = try await server.addVirtualTokens(tokens + [tokens[0]])
            #expect(added.status == 201, "\(added.message ?? "")")
            #expect(added.object["added"] as? Int == 2)
            #expect(added.object["existing"] as? Int == 1)
            #expect(added.object["total"] as? Int == 2)

            let client = try await server.http2Client()
            let id = UUID()
            let result = try await client.send(HTTP2Push(token: tokens[0], payload: payload, topic: "com.example.demo", id: id))
            #expect(result.status == 200)
            #expect(try await server.events(id) == [.accepted, .deliveredToVirtualDevice])
            #expect(try await server.application.provisioner.store.pendingCount() == 0, "nothing held for an online virtual device")
            // The inbox has the push, under the token.
            let entries = try await server.inboxEntries("?token=\(Hex.encode(tokens[0]))")
            #expect(entries.count == 1)
            // Its timeline ends with the virtual delivery.
            let timeline = try await server.admin("GET", "/v1/notifications/\(id.uuidString)")
            let kinds = (timeline.object["events"] as? [[String: Any]] ?? []).compactMap { $0["event"] as? String ?? $0["kind"] as? String }
            #expect(kinds.last == "deliveredToVirtualDevice", "\(timeline.object)")

            // The header and payload checks come first, as for any token.
            var badType = HTTP2Push(token: tokens[0], payload: payload, topic: "com.example.demo")
            badType.pushType = "nonsense"
            #expect(try await client.send(badType).reason == .invalidPushType)
            let empty = try await client.send(HTTP2Push(token: tokens[0], payload: [], topic: "com.example.demo"))
            #expect(empty.reason == .payloadEmpty)

            // A token no one registered is a bad token, as before.
            let unknown = try await client.send(HTTP2Push(token: appleToken(), payload: payload, topic: "com.example.demo"))
            #expect(unknown.status == 400)
            #expect(unknown.reason == .badDeviceToken)

            let list = try await server.admin("GET", "/v1/apps/com.example.demo/virtual-tokens?environment=production&limit=1")
            #expect(list.status == 200)
            #expect(list.object["total"] as? Int == 2)
            let first = try #require((list.object["tokens"] as? [[String: Any]])?.first)
            #expect(first["token"] as? String == tokens.map(Hex.encode).min())
            #expect(first["online"] as? Bool == true)
            let next = try #require(list.object["next"] as? String)
            let second = try await server.admin("GET", "/v1/apps/com.example.demo/virtual-tokens?environment=production&after=\(next)")
            #expect((second.object["tokens"] as? [[String: Any]])?.compactMap { $0["token"] as? String } == [tokens.map(Hex.encode).max()!])
            #expect(second.object["next"] is NSNull || second.object["next"] == nil)
            // `after` is a token: not empty, not text.
            for bad in ["", "zz"] {
                let refused = try await server.admin("GET", "/v1/apps/com.example.demo/virtual-tokens?environment=production&after=\(bad)")
                #expect(refused.status == 400, "after=\(bad)")
            }
            // Per environment.
            let sandbox = try await server.admin("GET", "/v1/apps/com.example.demo/virtual-tokens?environment=sandbox")
            #expect(sandbox.object["total"] as? Int == 0)
            let sandboxClient = try await server.http2Client(.sandbox)
            let wrongEnvironment = try await sandboxClient.send(HTTP2Push(token: tokens[0], payload: payload, topic: "com.example.demo"))
            #expect(wrongEnvironment.reason == .badDeviceToken)

            // Removed: a bad token again.
            #expect(try await server.admin("DELETE", "/v1/apps/com.example.demo/virtual-tokens/\(Hex.encode(tokens[1]))?environment=production").status == 200)
            #expect(try await server.admin("DELETE", "/v1/apps/com.example.demo/virtual-tokens/\(Hex.encode(tokens[1]))?environment=production").status == 404)
            let removed = try await client.send(HTTP2Push(token: tokens[1], payload: payload, topic: "com.example.demo"))
            #expect(removed.reason == .badDeviceToken)
            let all = try await server.admin("DELETE", "/v1/apps/com.example.demo/virtual-tokens?environment=production")
            #expect(all.object["removed"] as? Int == 1)
        }
    }

    @Test func badListsAreRefusedWithAMessageAndRegisterNothing() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let issued = try await device.client.register("com.example.demo")
            let good = appleToken()
            func refused(_ answer: AdminAnswer, _ status: Int, _ words: String) {
                #expect(answer.status == status, "\(answer.message ?? "")")
                #expect(answer.message?.contains(words) == true, "\(answer.message ?? "") should say \(words)")
            }
            refused(try await server.addVirtualTokens([good, issued]), 422, "token 1 is one Courier issued")
            refused(try await server.addVirtualTokens([good, Array(good.prefix(31))]), 422, "token 1 has 31 bytes")
            refused(try await server.admin("POST", "/v1/apps/com.example.demo/virtual-tokens", body: #"{"environment":"production","tokens":["zz"]}"#), 422, "not hex")
            refused(try await server.admin("POST", "/v1/apps/com.example.demo/virtual-tokens", body: #"{"environment":"staging","tokens":[]}"#), 400, "production or sandbox")
            refused(try await server.admin("POST", "/v1/apps/com.example.demo/virtual-tokens", body: #"{"environment":"production","tokens":[]}"#), 422, "1 to 100000")
            refused(try await server.addVirtualTokens([good], app: "com.example.none"), 404, "no app com.example.none")
            refused(try await server.admin("GET", "/v1/apps/com.example.demo/virtual-tokens"), 400, "'environment' is missing")
            refused(try await server.changeVirtualToken(good, #"{"environment":"production","online":false}"#), 404, "is not a virtual token")
            refused(try await server.changeVirtualToken(good, #"{"environment":"production"}"#), 404, "is not a virtual token")
            let list = try await server.admin("GET", "/v1/apps/com.example.demo/virtual-tokens?environment=production")
            #expect(list.object["total"] as? Int == 0)
            await server.disconnect(device)
        }
    }

    /// 100,000 tokens in one request (a body of about 6.6 MB, over the
    /// 2 MiB other requests may have) are registered; one more is refused
    /// with a message, and nothing of that request is registered.
    @Test func aHundredThousandTokensInOneRequest() async throws {
        // A request must arrive whole within `connections.unfinishedFrameTimeout`: 10 s by default,
        // which a loaded machine (the test suite's other tests beside it) can take for 6.6 MB.
        try await withTestServer(configure: { $0.connections.unfinishedFrameTimeout = 120 }) { server in
            let tokens = (0..<VirtualDeviceRoutes.maximumTokens).map { _ in appleToken() }
            let added = try await server.addVirtualTokens(tokens)
            #expect(added.status == 201, "\(added.message ?? "")")
            #expect(added.object["added"] as? Int == 100_000)
            #expect(server.dispatcher.virtuals.count == 100_000)
            let client = try await server.http2Client()
            #expect(try await client.send(HTTP2Push(token: tokens[99_999], payload: payload, topic: "com.example.demo")).status == 200)
            let tooMany = try await server.addVirtualTokens(tokens + [appleToken()])
            #expect(tooMany.status == 422)
            #expect(tooMany.message == "'tokens' must hold 1 to 100000 tokens, not 100001")
            #expect(server.dispatcher.virtuals.count == 100_000)
        }
    }

    /// Offline, a push that may be stored is held (and a newer one
    /// replaces it) and one with expiration 0 expires; online again, what
    /// is held is taken, what expired meanwhile expires.
    @Test func offlineVirtualDevicesHoldWhatMayBeStored() async throws {
        try await withTestServer { server in
            let token = appleToken()
            try await server.addVirtualTokens([token])
            #expect(try await server.changeVirtualToken(token, #"{"environment":"production","online":false}"#).object["online"] as? Bool == false)
            let later = server.clock.now().addingTimeInterval(3600)
            let (first, accepted) = await server.push(token, expiration: later)
            #expect(accepted == .accepted)
            #expect(try await server.events(first) == [.accepted, .stored])
            let (second, _) = await server.push(token, expiration: later)
            let (never, _) = await server.push(token, expiration: Date(timeIntervalSince1970: 0))
            #expect(try await server.events(never) == [.accepted, .expired])
            #expect(try await server.events(first) == [.accepted, .stored, .replaced])
            #expect(try await server.application.provisioner.store.pendingCount() == 1)

            let online = try await server.changeVirtualToken(token, #"{"environment":"production","online":true}"#)
            #expect(online.status == 200)
            #expect(try await server.events(second) == [.accepted, .stored, .deliveredToVirtualDevice])
            #expect(try await server.application.provisioner.store.pendingCount() == 0)

            // Held past its expiration: expired when the device comes back.
            _ = try await server.changeVirtualToken(token, #"{"environment":"production","online":false}"#)
            let (stale, _) = await server.push(token, expiration: server.clock.now().addingTimeInterval(10))
            server.clock.advance(by: 20)
            _ = try await server.changeVirtualToken(token, #"{"environment":"production","online":true}"#)
            #expect(try await server.events(stale) == [.accepted, .stored, .expired])
        }
    }

    /// Uninstalled at a time: 410 with that time, and a feedback entry for
    /// the binary API's feedback service; installed again, pushes go through.
    @Test func uninstalledVirtualTokensAnswerUnregisteredWithTheirTime() async throws {
        try await withTestServer { server in
            let (token, other) = (appleToken(), appleToken())
            try await server.addVirtualTokens([token, other])
            let at = Date(timeIntervalSince1970: 1_790_000_000)
            let changed = try await server.changeVirtualToken(token, #"{"environment":"production","uninstalledAt":1790000000}"#)
            #expect(changed.status == 200, "\(changed.message ?? "")")
            #expect(changed.object["uninstalledAt"] as? String == adminTime(at))
            // Nothing to change: the token as it is.
            let same = try await server.changeVirtualToken(token, #"{"environment":"production"}"#)
            #expect(same.status == 200)
            #expect(same.object["uninstalledAt"] as? String == adminTime(at))
            let client = try await server.http2Client()
            let result = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(result.status == 410)
            #expect(result.reason == .unregistered)
            #expect(result.timestamp == at)
            let feedback = try await server.application.provisioner.store.feedback(environment: .production, topic: "com.example.demo")
            #expect(feedback.map(\.token) == [token])
            #expect(feedback.first?.timestamp == at)

            // The admin API's unregister of a real token does the same to a virtual one.
            let body = #"{"environment":"production","topic":"com.example.demo","at":1790000100}"#
            #expect(try await server.admin("POST", "/v1/tokens/\(Hex.encode(other))/unregister", body: body).status == 200)
            #expect(try await server.admin("POST", "/v1/tokens/\(Hex.encode(other))/unregister", body: body).status == 404, "uninstalled already")
            #expect(try await client.send(HTTP2Push(token: other, payload: payload, topic: "com.example.demo")).status == 410)

            #expect(try await server.changeVirtualToken(token, #"{"environment":"production","uninstalledAt":null}"#).object["uninstalledAt"] == nil)
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
        }
    }

    /// The binary API: a push to a virtual token is taken; an unknown one is status 8.
    @Test func theBinaryAPIPushesToVirtualTokens() async throws {
        try await withTestServer { server in
            let token = appleToken()
            try await server.addVirtualTokens([token])
            let client = try await server.binaryClient()
            try await client.send(token: token, payload: payload, expiry: 0, priority: 10, identifier: 1)
            try await client.send(token: appleToken(), payload: payload, expiry: 0, priority: 10, identifier: 2)
            let failure = try #require(await nextFailure(client))
            #expect(failure.identifier == 2)
            #expect(failure.status.rawValue == 8)
            await server.dispatcher.flushLog()
            let entries = try await server.inboxEntries("?token=\(Hex.encode(token))")
            let id = try #require(entries.first?["apnsID"] as? String)
            #expect(try await server.events(try #require(UUID(uuidString: id))) == [.accepted, .deliveredToVirtualDevice])

            // Uninstalled: no answer (the binary API reports no Unregistered), and a feedback entry with the time.
            let uninstalled = appleToken()
            try await server.addVirtualTokens([uninstalled])
            _ = try await server.changeVirtualToken(uninstalled, #"{"environment":"production","uninstalledAt":1790000000}"#)
            await client.close()
            let second = try await server.binaryClient()
            try await second.send(token: uninstalled, payload: payload, expiry: 0, priority: 10, identifier: 3)
            try await second.send(token: appleToken(), payload: payload, expiry: 0, priority: 10, identifier: 4)
            #expect(try #require(await nextFailure(second)).identifier == 4, "the uninstalled token's frame has no answer")
            await second.close()
            let feedback = try await server.application.provisioner.store.feedback(environment: .production, topic: "com.example.demo")
            #expect(feedback.map(\.token) == [uninstalled])
            #expect(feedback.first?.timestamp == Date(timeIntervalSince1970: 1_790_000_000))
        }
    }

    /// Another team reaches no virtual token of this app, even with the
    /// same bytes registered for its own; a real device connected with the
    /// app gets none of the virtual token's pushes; the rate limit and the
    /// fault rules apply per token, as to a real one.
    @Test func virtualTokensStayTheirAppsAndFollowEveryRule() async throws {
        try await withTestServer(qos: QoSConfiguration(tokenRateLimit: 3, tokenRateWindow: 60)) { server in
            let otherKey = try await server.otherTeam()
            let token = appleToken()
            try await server.addVirtualTokens([token])
            let client = try await server.http2Client()
            let other = try await server.http2Client(credentials: .token(otherKey, teamID: "OTHERTEAM1"))
            // Not its topic; and under its own app the token is none of its app's.
            #expect(try await other.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).reason == .topicDisallowed)
            #expect(try await other.send(HTTP2Push(token: token, payload: payload, topic: "com.example.foreign")).reason == .badDeviceToken)
            // The same bytes registered for its own app are its own virtual device, with its own rate window.
            try await server.addVirtualTokens([token], app: "com.example.foreign")
            for _ in 0..<3 { #expect(try await other.send(HTTP2Push(token: token, payload: payload, topic: "com.example.foreign")).status == 200) }
            #expect(try await other.send(HTTP2Push(token: token, payload: payload, topic: "com.example.foreign")).status == 429)

            // A real device with the app: a virtual push is never its.
            let device = try await server.device()
            let real = try await device.client.register("com.example.demo")
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200)
            let mine = try await client.send(HTTP2Push(token: real, payload: Array(#"{"aps":{"alert":"real"}}"#.utf8), topic: "com.example.demo"))
            let received = try #require(await device.next())
            #expect(received.id.uuidString.lowercased() == mine.apnsID, "the real device's first notification is its own")

            // A fault rule for the token acts on its push.
            let rule = try await server.admin(
                "POST", "/v1/faults", body: #"{"match":{"token":"\#(Hex.encode(token))"},"action":"reject","reason":"InternalServerError","count":1}"#)
            #expect(rule.status == 201, "\(rule.message ?? "")")
            let faulted = try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo"))
            #expect(faulted.status == 500)
            // Its rate window (3 a minute) is this app's own: one taken before the
            // rule (which the refused push did not use), two left.
            for _ in 0..<2 { #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 200) }
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 429)
            await server.disconnect(device)
        }
    }

    /// An app configured to take any token: a token of Apple's format is
    /// registered on its first push and is a virtual device from then on;
    /// other apps are not so.
    @Test func anAppThatTakesAnyTokenRegistersItOnFirstUse() async throws {
        try await withTestServer(configure: { $0.virtualDevices.acceptAnyToken["production"] = ["com.example.demo"] }) { server in
            _ = try await server.otherTeam()
            let token = appleToken()
            let client = try await server.http2Client()
            let id = UUID()
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo", id: id)).status == 200)
            #expect(try await server.events(id) == [.accepted, .deliveredToVirtualDevice])
            let list = try await server.admin("GET", "/v1/apps/com.example.demo/virtual-tokens?environment=production")
            #expect((list.object["tokens"] as? [[String: Any]])?.compactMap { $0["token"] as? String } == [Hex.encode(token)])
            // Not of Apple's length: refused as before.
            #expect(try await client.send(HTTP2Push(token: Array(token.prefix(16)), payload: payload, topic: "com.example.demo")).reason == .badDeviceToken)
            // Uninstalled, it stays so (it is not registered again).
            _ = try await server.changeVirtualToken(token, #"{"environment":"production","uninstalledAt":"now"}"#)
            #expect(try await client.send(HTTP2Push(token: token, payload: payload, topic: "com.example.demo")).status == 410)
            // Sandbox is not configured so.
            let sandbox = try await server.http2Client(.sandbox)
            #expect(try await sandbox.send(HTTP2Push(token: appleToken(), payload: payload, topic: "com.example.demo")).reason == .badDeviceToken)
        }
    }

    /// Virtual tokens are in the store: what a start loads (`load`, as
    /// `CourierApplication.build` does) finds them, in their state.
    @Test func virtualTokensAreLoadedFromTheStore() async throws {
        try await withTestServer { server in
            let (token, other) = (appleToken(), appleToken())
            try await server.addVirtualTokens([token, other])
            _ = try await server.changeVirtualToken(token, #"{"environment":"production","uninstalledAt":1790000000}"#)
            _ = try await server.changeVirtualToken(other, #"{"environment":"production","online":false}"#)
            let loaded = VirtualDevices(store: server.application.provisioner.store, rules: server.dispatcher.rules, acceptAnyToken: [])
            #expect(loaded.count == 0)
            try await loaded.load()
            #expect(loaded.count == 2)
            let app = AppNumber("com.example.demo")
            guard case .found(let uninstalled) = loaded.take(token, environment: .production, app: app, bundleID: "com.example.demo", now: server.clock.now())
            else { Issue.record("the uninstalled token was not loaded"); return }
            #expect(uninstalled.problem == .removed(at: Date(timeIntervalSince1970: 1_790_000_000)))
            guard case .found(let offline) = loaded.take(other, environment: .production, app: app, bundleID: "com.example.demo", now: server.clock.now())
            else { Issue.record("the offline token was not loaded"); return }
            #expect(offline.offline && offline.problem == nil && offline.refusal == nil)
            #expect(offline.deviceID == VirtualDevices.deviceID(environment: .production, bundleID: "com.example.demo", token: other))
            guard case .none = loaded.take(other, environment: .sandbox, app: app, bundleID: "com.example.demo", now: server.clock.now()) else {
                Issue.record("a production token found in sandbox")
                return
            }
        }
    }

    /// `courier virtual` over the admin API: add (arguments and a file),
    /// list, set, rm; a refusal is one line naming the problem.
    @Test func virtualDevicesFromTheCommandLine() async throws {
        try await withTestServer { server in
            let admin = ["--data", server.directory, "--url", "http://127.0.0.1:\(try await server.adminPort())"]
            let app = ["--app", "com.example.demo"]
            let tokens = (0..<3).map { _ in Hex.encode(appleToken()) }.sorted()
            let file = server.directory + "/tokens.txt"
            try "# fixtures\n\(tokens[1])\n\n\(tokens[2])\n".write(toFile: file, atomically: true, encoding: .utf8)
            let added = try await runProgram(courier, ["virtual", "add", tokens[0], "--file", file] + app + admin)
            #expect(added.status == 0, "\(added.stderr)")
            #expect(added.stdout == "Registered 3 virtual token(s) of com.example.demo in production (0 registered already; 3 in all).\n")

            let set = try await runProgram(courier, ["virtual", "set", tokens[1], "--offline", "--uninstalled-at", "1790000000"] + app + admin)
            #expect(set.status == 0, "\(set.stderr)")
            #expect(set.stdout == "\(tokens[1]): offline, uninstalled 2026-09-21T14:13:20.000Z.\n")
            let listed = try await runProgram(courier, ["virtual", "list"] + app + admin)
            #expect(listed.stdout == "\(tokens[0])  online\n\(tokens[1])  offline  uninstalled 2026-09-21T14:13:20.000Z\n\(tokens[2])  online\n")

            let client = try await server.http2Client()
            let id = UUID()
            #expect(try await client.send(HTTP2Push(token: try #require(Hex.decode(tokens[0])), payload: payload, topic: "com.example.demo", id: id)).status == 200)
            let waited = try await runProgram(courier, ["inbox", "--wait", "--token", tokens[0], "--timeout", "10"] + admin)
            #expect(waited.stdout.contains(id.lowercasedString))
            await server.dispatcher.flushLog()
            let log = try await runProgram(courier, ["log", id.uuidString] + admin)
            #expect(log.stdout.contains("deliveredToVirtualDevice"), "\(log.stdout)")

            let bad = try await runProgram(courier, ["virtual", "add", "00ff"] + app + admin)
            #expect(bad.status != 0)
            #expect(bad.stderr == "courier: token 0 has 2 bytes: a device token of Apple's has 32 (64 hex digits)\n")
            let removed = try await runProgram(courier, ["virtual", "rm", tokens[0]] + app + admin)
            #expect(removed.stdout == "Removed 1 virtual token(s).\n")
            let all = try await runProgram(courier, ["virtual", "rm", "--all"] + app + admin)
            #expect(all.stdout == "Removed 2 virtual token(s).\n")
            let none = try await runProgram(courier, ["virtual", "list"] + app + admin)
            #expect(none.stdout == "No virtual tokens of com.example.demo in production.\n")
        }
    }

    /// An app that takes any token takes at most `firstUseLimit` of them
    /// per environment: its providers choose how many tokens it meets, and
    /// memory is every team's. Then a new token is BadDeviceToken, and the
    /// ones taken stay.
    @Test func anAppTakesAtMostItsLimitOfTokensOnFirstUse() async throws {
        try await withTestServer { server in
            let app = VirtualDevices.AppKey(environment: .production, bundleID: "com.example.demo")
            let virtuals = VirtualDevices(
                store: server.application.provisioner.store, rules: server.dispatcher.rules, acceptAnyToken: [app], firstUseLimit: 2)
            let number = AppNumber("com.example.demo")
            let now = server.clock.now()
            let tokens = (0..<3).map { _ in appleToken() }
            for token in tokens.prefix(2) {
                guard case .firstUse = virtuals.take(token, environment: .production, app: number, bundleID: app.bundleID, now: now) else {
                    Issue.record("a token under the limit was not taken on first use")
                    return
                }
                #expect(virtuals.belongs(token, environment: .production, app: number, bundleID: app.bundleID))
                try await virtuals.registerOnFirstUse(token, environment: .production, bundleID: app.bundleID, now: now)
            }
            guard case .none = virtuals.take(tokens[2], environment: .production, app: number, bundleID: app.bundleID, now: now) else {
                Issue.record("a token past the limit was taken")
                return
            }
            #expect(!virtuals.belongs(tokens[2], environment: .production, app: number, bundleID: app.bundleID))
            guard case .found = virtuals.take(tokens[0], environment: .production, app: number, bundleID: app.bundleID, now: now) else {
                Issue.record("a token taken before the limit was lost")
                return
            }
            // The limit is per environment.
            let sandbox = VirtualDevices(
                store: server.application.provisioner.store, rules: server.dispatcher.rules,
                acceptAnyToken: [VirtualDevices.AppKey(environment: .sandbox, bundleID: app.bundleID)], firstUseLimit: 2)
            try await sandbox.load()
            guard case .firstUse = sandbox.take(tokens[2], environment: .sandbox, app: number, bundleID: app.bundleID, now: now) else {
                Issue.record("sandbox's limit counted production's tokens")
                return
            }
        }
    }

    /// The layout the memory figure of docs/benchmarks.md counts on.
    @Test func aVirtualTokenIsFortyBytesOfKeyAndTwentyFourOfEntry() {
        #expect(MemoryLayout<VirtualTokenKey>.stride == 40)
        #expect(MemoryLayout<VirtualEntry>.stride == 24)
    }
}
