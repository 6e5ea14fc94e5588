import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
import CourierServer
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import Testing

/// Nothing a provider of one team controls decides what another team's
/// notifications do (docs/security.md): ids, headers, notifications a
/// device cannot read. Real server, real TLS, real clients.
@Suite(.timeLimit(.minutes(2))) struct TenantIsolationTests {
    let attackerPayload = Array(#"{"aps":{"alert":"attacker"}}"#.utf8)
    let victimPayload = Array(#"{"aps":{"alert":"victim"}}"#.utf8)

    /// `id` with `steps` added to its last 48 bits: the ids the server
    /// made next when it counted up from a random base.
    static func counted(_ id: UUID, plus steps: UInt64) -> UUID {
        var bytes = id.uuid
        withUnsafeMutableBytes(of: &bytes) { raw in
            var low: UInt64 = 0
            for index in 10..<16 { low = low << 8 | UInt64(raw[index]) }
            low = (low &+ steps) & 0xFFFF_FFFF_FFFF
            for index in (10..<16).reversed() {
                raw[index] = UInt8(truncatingIfNeeded: low)
                low >>= 8
            }
        }
        return UUID(uuid: bytes)
    }

    /// A team that pushes to its own app on a device it shares with
    /// another team, with the ids it expects the server to give the other
    /// team's next pushes, and with an id the other team chose: the
    /// other team's notifications all arrive.
    @Test func apnsIDsOfAnotherTeamPredictedOrRepeatedSuppressNothing() async throws {
        try await withTestServer { server in
            let attackerKey = try await server.otherTeam()
            let device = try await server.device()
            let victimToken = try await device.client.register("com.example.demo")
            let attackerToken = try await device.client.register("com.example.foreign")
            let victim = try await server.http2Client()
            let attacker = try await server.http2Client(credentials: .token(attackerKey, teamID: "OTHERTEAM1"))

            // The attacker reads one id the server made.
            let seen = try await attacker.send(HTTP2Push(token: attackerToken, payload: attackerPayload, topic: "com.example.foreign"))
            #expect(seen.status == 200)
            let base = try #require(UUID(uuidString: seen.apnsID))
            #expect(await device.next()?.topic == "com.example.foreign")

            // It pushes to its own app with the ids that would follow its own
            // requests, and with an id the victim will choose; the device
            // handles every one.
            let attacks = 8
            let chosen = UUID()
            var ids = (0..<attacks).map { Self.counted(base, plus: UInt64(attacks + 2 + $0)) }
            ids.append(chosen)
            for id in ids {
                let result = try await attacker.send(HTTP2Push(token: attackerToken, payload: attackerPayload, topic: "com.example.foreign", id: id))
                #expect(result.status == 200)
                let received = try #require(await device.next())
                #expect(received.id == id)
                #expect(received.topic == "com.example.foreign")
                try await device.client.acknowledge(received)
            }

            // The victim's pushes, with ids the server makes and with the one it chose, all reach its app.
            for _ in 0..<attacks {
                let result = try await victim.send(HTTP2Push(token: victimToken, payload: victimPayload, topic: "com.example.demo"))
                #expect(result.status == 200)
                let received = try #require(await device.next(), "the victim's notification \(result.apnsID) did not arrive")
                #expect(received.topic == "com.example.demo")
                #expect(received.id.uuidString.lowercased() == result.apnsID)
                #expect(received.payload == victimPayload)
            }
            let same = try await victim.send(HTTP2Push(token: victimToken, payload: victimPayload, topic: "com.example.demo", id: chosen))
            #expect(same.status == 200)
            let received = try #require(await device.next(), "the victim's notification with a repeated apns-id did not arrive")
            #expect(received.id == chosen)
            #expect(received.topic == "com.example.demo")

            await attacker.close()
            await victim.close()
            await server.disconnect(device)
        }
    }

    /// Two notifications with the same apns-id are two notifications, for
    /// the same app too: both arrive, each acknowledged on its own.
    @Test func twoPushesWithOneAPNsIDAreTwoNotifications() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let id = UUID()
            let later = server.clock.now().addingTimeInterval(3600)
            let (_, first) = await server.push(token, payload: #"{"aps":{"alert":"one"}}"#, expiration: later, id: id)
            let (_, second) = await server.push(token, payload: #"{"aps":{"alert":"two"}}"#, expiration: later, id: id)
            #expect(first == .accepted)
            #expect(second == .accepted)
            let one = try #require(await device.next())
            let two = try #require(await device.next())
            #expect(one.id == id && two.id == id)
            #expect(one.payload == Array(#"{"aps":{"alert":"one"}}"#.utf8))
            #expect(two.payload == Array(#"{"aps":{"alert":"two"}}"#.utf8))
            #expect(one.deliveryID != two.deliveryID)
            await server.disconnect(device)
        }
    }

    /// Headers the device protocol could not carry are refused with
    /// Apple's reasons; an empty collapse id is none. Then another team's
    /// push reaches the same device: nothing blocked it.
    @Test func headersADeviceCouldNotReadAreRefusedAndNothingIsBlocked() async throws {
        try await withTestServer { server in
            let otherKey = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let otherToken = try await device.client.register("com.example.foreign")
            let authorization = jwt(key: try server.demoAuthKey(), issuedAt: server.clock.now())
            let connection = try await server.http2Connection()
            func answer(_ headers: [(String, String)]) async throws -> (Int, String?) {
                var push = RawPush(token: token, authorization: authorization)
                push.headers += headers + [("apns-expiration", String(Int(server.clock.now().timeIntervalSince1970) + 3600))]
                let (status, reason, _) = try await push.send(on: connection)
                return (status, reason)
            }
            #expect(try await answer([("apns-push-type", String(repeating: "p", count: 300))]) == (400, "InvalidPushType"))
            #expect(try await answer([("apns-push-type", "")]) == (400, "InvalidPushType"))
            #expect(try await answer([("apns-collapse-id", String(repeating: "c", count: 65))]) == (400, "BadCollapseId"))
            #expect(try await answer([("apns-collapse-id", "")]) == (200, nil))
            let emptyCollapse = try #require(await device.next())
            #expect(emptyCollapse.collapseID == nil)

            let other = try await server.http2Client(credentials: .token(otherKey, teamID: "OTHERTEAM1"))
            let result = try await other.send(HTTP2Push(token: otherToken, payload: victimPayload, topic: "com.example.foreign"))
            #expect(result.status == 200)
            let received = try #require(await device.next())
            #expect(received.topic == "com.example.foreign")
            #expect(received.id.uuidString.lowercased() == result.apnsID)
            await other.close()
            await connection.close()
            await server.disconnect(device)
        }
    }

    /// A held notification no device could read (as an older Courier
    /// accepted it: a 300-byte push type) is dropped and logged, not sent
    /// again at every connect; the device gets what comes after it.
    @Test func aHeldNotificationADeviceCannotReadIsDroppedAndDeliveryGoesOn() async throws {
        try await withTestServer { server in
            _ = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let otherToken = try await device.client.register("com.example.foreign")
            let deviceID = await device.client.deviceID
            await server.disconnect(device)

            let unreadable = PushNotification(
                id: UUID(), token: token, topic: "com.example.demo", payload: Array(#"{"aps":{"alert":"old"}}"#.utf8),
                expiration: server.clock.now().addingTimeInterval(3600), priority: .immediate, pushType: String(repeating: "p", count: 300))
            let store = server.application.provisioner.store
            _ = try await store.storePending([
                PendingNotification(deviceID: deviceID, bundleID: "com.example.demo", environment: .production, notification: unreadable, acceptedAt: server.clock.now())
            ])

            let again = try await server.device(directory: device.directory)
            await again.client.waitUntilDrained()
            #expect(try await store.pending(deviceID: deviceID, environment: .production) == [], "removed from the store")
            #expect(try await server.events(unreadable.id) == [.discarded])
            let (next, accepted) = await server.push(otherToken, topic: "com.example.foreign", from: ProviderIdentity(name: "other", teamID: "OTHERTEAM1", topics: ["com.example.foreign"]))
            #expect(accepted == .accepted)
            let received = try #require(await again.next())
            #expect(received.id == next, "the first notification the device gets is the one after")
            await server.disconnect(again)
        }
    }

    /// A device that cannot read a notification refuses it by its delivery
    /// id (Ack status 1): the server drops it from the store and logs it;
    /// the connection goes on, and it is not delivered again.
    @Test func aNotificationTheDeviceRefusesIsDroppedNotResent() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let deviceID = await device.client.deviceID
            await server.disconnect(device)
            let (held, accepted) = await server.push(token, expiration: server.clock.now().addingTimeInterval(3600))
            #expect(accepted == .accepted)

            // The device's own identity, spoken to by hand.
            let connection = try await DeviceGatewayTests().rawConnection(server, directory: device.directory)
            let answers = try await connection.executeThenClose { inbound, outbound in
                try await outbound.write(DeviceMessage.connect(version: 1, tokens: [token], keepAlive: nil, generation: nil).frame)
                var messages: [DeviceMessage] = []
                for try await frame in inbound {
                    let message = try DeviceMessage(frame: frame)
                    messages.append(message)
                    switch message {
                    case .notification(let notification):
                        try await outbound.write(DeviceMessage.ack(deliveryID: notification.deliveryID, status: DeviceAckStatus.unreadable).frame)
                        // Answered only after the Ack before it was handled.
                        try await outbound.write(DeviceMessage.keepAlive.frame)
                    case .keepAliveAck:
                        return messages
                    default:
                        continue
                    }
                }
                return messages
            }
            let delivered = answers.compactMap { if case .notification(let n) = $0 { n } else { nil } }
            #expect(delivered.map(\.id) == [held])
            #expect(try await server.application.provisioner.store.pending(deviceID: deviceID, environment: .production) == [])
            #expect(try await server.events(held) == [.accepted, .stored, .delivered, .discarded])

            // The next connection gets only what comes after.
            let again = try await server.device(directory: device.directory)
            let (next, _) = await server.push(token)
            #expect(await again.next()?.id == next)
            await server.disconnect(again)
        }
    }

    static let foreignProvider = ProviderIdentity(name: "other provider", teamID: "OTHERTEAM1", topics: ["com.example.foreign"])

    /// Another team's silent pushes on a device both teams' apps share
    /// use up that team's budget, not this one's: the budget is the app's
    /// on the device (docs/security.md, "Tenant isolation").
    @Test func anotherTeamsSilentPushesLeaveThisTeamsBudgetAlone() async throws {
        try await withTestServer(qos: QoSConfiguration(burstWindow: 1, silentBudgetPerHour: 2)) { server in
            _ = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let foreignToken = try await device.client.register("com.example.foreign")
            let silent = #"{"aps":{"content-available":1}}"#
            var foreign: [UUID] = []
            for _ in 0..<3 {
                foreign.append(
                    await server.push(foreignToken, payload: silent, topic: "com.example.foreign", priority: .conservePower, silent: true, from: Self.foreignProvider).0)
            }
            #expect(try await server.events(foreign[2]) == [.accepted, .throttled])
            var own: [UUID] = []
            for _ in 0..<2 { own.append(await server.push(token, payload: silent, priority: .conservePower, silent: true).0) }
            // Held and queued, not throttled (the second replaces the first in the store, as for any app).
            #expect(try await server.events(own[0]) == [.accepted, .stored, .replaced])
            #expect(try await server.events(own[1]) == [.accepted, .stored])
            server.clock.advance(by: 1)
            await server.dispatcher.tick()
            var arrived: Set<UUID> = []
            for _ in 0..<4 { if let received = try await device.nextAcknowledged() { arrived.insert(received.id) } }
            #expect(arrived == Set(foreign.prefix(2) + own))
            await server.disconnect(device)
        }
    }

    /// Each app's priority-5 burst on a device is its own: another team's
    /// push opens no window that this team's joins, and closes none.
    @Test func anotherTeamsBurstIsNotThisTeams() async throws {
        try await withTestServer(qos: QoSConfiguration(burstWindow: 10)) { server in
            _ = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let foreignToken = try await device.client.register("com.example.foreign")
            let (foreign, _) = await server.push(foreignToken, topic: "com.example.foreign", priority: .conservePower, from: Self.foreignProvider)
            server.clock.advance(by: 5)
            let (own, _) = await server.push(token, priority: .conservePower)
            // The other team's window ends: its burst goes, this team's waits for its own.
            server.clock.advance(by: 5)
            await server.dispatcher.tick()
            #expect(try await device.nextAcknowledged()?.id == foreign)
            let (now, _) = await server.push(token)
            #expect(try await device.nextAcknowledged()?.id == now)
            server.clock.advance(by: 5)
            await server.dispatcher.tick()
            #expect(try await device.nextAcknowledged()?.id == own)
            await server.disconnect(device)
        }
    }

    /// A fault rule on one team's token is matched only after the checks
    /// that decide whose a request is: another team pushing that token
    /// under its own topic gets `DeviceTokenNotForTopic` (binary: status 8)
    /// and neither meets nor uses up the rule, which then acts on the
    /// owner's own push — on both provider interfaces.
    @Test func anotherTeamNeitherMeetsNorUsesUpAFaultRuleOnThisTeamsToken() async throws {
        try await withTestServer { server in
            let otherKey = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            _ = try await server.addFault(#"{"match": {"token": "\#(Hex.encode(token))"}, "action": "reject", "reason": "Unregistered", "count": 1}"#)
            let attacker = try await server.http2Client(credentials: .token(otherKey, teamID: "OTHERTEAM1"))
            let taken = try await attacker.send(HTTP2Push(token: token, payload: attackerPayload, topic: "com.example.foreign"))
            #expect(taken.status == 400)
            #expect(taken.reason == .deviceTokenNotForTopic)
            let victim = try await server.http2Client()
            let owned = try await victim.send(HTTP2Push(token: token, payload: victimPayload, topic: "com.example.demo"))
            #expect(owned.status == 410, "the rule was used up by another team's push")
            #expect(owned.reason == .unregistered)

            // The binary API: a `close` rule on the token, and another team's certificate.
            _ = try await server.addFault(#"{"match": {"token": "\#(Hex.encode(token))", "interface": "binary"}, "action": "close", "count": 1}"#)
            _ = try await server.application.provisioner.issueProviderCertificate(
                bundleID: "com.example.foreign", environments: [.production], directory: server.directory)
            let foreign = try await server.binaryClient(
                certificate: server.directory + "/com.example.foreign.pem", key: server.directory + "/com.example.foreign-key.pem")
            try await foreign.send(token: token, payload: attackerPayload, expiry: 0, priority: 10)
            #expect(try #require(await nextFailure(foreign)).status == .invalidToken)
            await foreign.close()
            let own = try await server.binaryClient()
            try await own.send(token: token, payload: victimPayload, expiry: 0, priority: 10)
            #expect(try #require(await nextFailure(own)).status == .shutdown, "the rule was used up by another team's frame")
            await own.close()
            await attacker.close()
            await victim.close()
            await server.disconnect(device)
        }
    }

    /// The rest of the state two teams' pushes reach on a shared device
    /// (docs/security.md, "Tenant isolation"): another team's pushes to
    /// this team's token under its own topic are refused and take nothing
    /// from the token's rate window; its held notification for its own app
    /// replaces nothing of this team's; its collapse id coalesces nothing
    /// of this team's.
    @Test func anotherTeamsPushesReachNoneOfThisTeamsState() async throws {
        try await withTestServer(qos: QoSConfiguration(burstWindow: 1, tokenRateLimit: 3)) { server in
            _ = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let foreignToken = try await device.client.register("com.example.foreign")
            // The rate window.
            for _ in 0..<5 {
                let (_, taken) = await server.push(token, topic: "com.example.foreign", from: Self.foreignProvider)
                #expect(taken == .rejected(.deviceTokenNotForTopic))
            }
            for _ in 0..<3 {
                let (_, own) = await server.push(token)
                #expect(own == .accepted, "the token's window was taken by another team's refused pushes")
                _ = try await device.nextAcknowledged()
            }
            server.clock.advance(by: 60)  // a new rate window
            // Collapse ids, in the bursts.
            let (ownCollapsed, _) = await server.push(token, priority: .conservePower, collapseID: "score")
            let (foreignCollapsed, _) = await server.push(
                foreignToken, topic: "com.example.foreign", priority: .conservePower, collapseID: "score", from: Self.foreignProvider)
            server.clock.advance(by: 1)
            await server.dispatcher.tick()
            var arrived: Set<UUID> = []
            for _ in 0..<2 { if let received = try await device.nextAcknowledged() { arrived.insert(received.id) } }
            #expect(arrived == [ownCollapsed, foreignCollapsed])
            // Held slots, one per device and app.
            await server.disconnect(device)
            let later = server.clock.now().addingTimeInterval(3600)
            let (held, _) = await server.push(token, expiration: later)
            let (foreignHeld, _) = await server.push(foreignToken, topic: "com.example.foreign", expiration: later, from: Self.foreignProvider)
            #expect(try await server.events(held) == [.accepted, .stored])
            #expect(try await server.events(foreignHeld) == [.accepted, .stored])
            let again = try await server.device(directory: device.directory)
            var delivered: Set<UUID> = []
            for _ in 0..<2 { if let received = try await again.nextAcknowledged() { delivered.insert(received.id) } }
            #expect(delivered == [held, foreignHeld])
            await server.disconnect(again)
        }
    }

    /// The inbox keeps each team's entries in their own ring: another
    /// team's flood of pushes (or anonymous requests' refusals) pushes out
    /// only its own entries, and this team's entry is still listed and
    /// waited for; reading every team merges them in the order received.
    @Test func anotherTeamsFloodLeavesThisTeamsInboxEntries() async throws {
        try await withTestServer(configure: { $0.inbox.capacity = 3 }) { server in
            let otherKey = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let foreignToken = try await device.client.register("com.example.foreign")
            let victim = try await server.http2Client()
            let own = UUID()
            #expect(try await victim.send(HTTP2Push(token: token, payload: victimPayload, topic: "com.example.demo", id: own)).status == 200)
            let attacker = try await server.http2Client(credentials: .token(otherKey, teamID: "OTHERTEAM1"))
            var foreign: [UUID] = []
            for _ in 0..<10 {
                let id = UUID()
                foreign.append(id)
                _ = try await attacker.send(HTTP2Push(token: foreignToken, payload: attackerPayload, topic: "com.example.foreign", id: id))
            }
            let ownID = own.uuidString.lowercased()
            let listed = try await server.inboxEntries("?team=DEMOTEAM01")
            #expect(listed.compactMap { $0["apnsID"] as? String } == [ownID], "another team's pushes pushed this team's entry out")
            let waited = try await server.admin("GET", "/v1/inbox/wait?apns-id=\(ownID)&timeout=0")
            #expect(waited.status == 200)
            // Every team: this team's one, then the other team's newest three, in the order received.
            let all = try await server.inboxEntries()
            #expect(all.compactMap { $0["apnsID"] as? String } == [ownID] + foreign.suffix(3).map { $0.uuidString.lowercased() })
            #expect(server.application.inbox.count == 4)
            await attacker.close()
            await victim.close()
            await server.disconnect(device)
        }
    }

    /// The delivery log and the timelines are keyed by app and apns-id:
    /// another team that reuses this team's apns-id — pushing its own
    /// app, this team's token under its own topic, and this team's topic —
    /// puts none of its events or entries in this team's timeline. Without
    /// `app=` an id two apps used is a 409 naming both; a token's
    /// timelines show each entry with its own app's events.
    @Test func anotherTeamsReuseOfAnAPNsIDStaysOutOfThisTeamsTimeline() async throws {
        try await withTestServer { server in
            let otherKey = try await server.otherTeam()
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let foreignToken = try await device.client.register("com.example.foreign")
            let id = UUID()
            let victim = try await server.http2Client()
            #expect(try await victim.send(HTTP2Push(token: token, payload: victimPayload, topic: "com.example.demo", id: id)).status == 200)
            _ = try await device.nextAcknowledged()
            let attacker = try await server.http2Client(credentials: .token(otherKey, teamID: "OTHERTEAM1"))
            let own = try await attacker.send(HTTP2Push(token: foreignToken, payload: attackerPayload, topic: "com.example.foreign", id: id))
            #expect(own.status == 200)
            _ = try await device.nextAcknowledged()
            let notForTopic = try await attacker.send(HTTP2Push(token: token, payload: attackerPayload, topic: "com.example.foreign", id: id))
            #expect(notForTopic.reason == .deviceTokenNotForTopic)
            let disallowed = try await attacker.send(HTTP2Push(token: token, payload: attackerPayload, topic: "com.example.demo", id: id))
            #expect(disallowed.reason == .topicDisallowed)
            let path = "/v1/notifications/\(id.lowercasedString)"
            func events(_ answer: AdminAnswer) -> [String] { (answer.object["events"] as? [[String: Any]] ?? []).compactMap { $0["event"] as? String } }
            func teams(_ answer: AdminAnswer) -> [String] { (answer.object["received"] as? [[String: Any]] ?? []).compactMap { $0["teamID"] as? String } }
            // The acknowledgement is logged once the server read it.
            var demo = try await server.admin("GET", path + "?app=com.example.demo")
            for _ in 0..<500 where !events(demo).contains("acknowledged") {
                try await Task.sleep(for: .milliseconds(10))
                demo = try await server.admin("GET", path + "?app=com.example.demo")
            }
            #expect(demo.status == 200)
            #expect(demo.object["app"] as? String == "com.example.demo")
            #expect(events(demo) == ["accepted", "stored", "delivered", "acknowledged"], "another team's events in this team's timeline")
            #expect(teams(demo) == ["DEMOTEAM01"], "another team's requests in this team's timeline")
            let foreign = try await server.admin("GET", path + "?app=com.example.foreign")
            // Its own push and its refusal share its key (its app, the id); its acknowledgement may come before or after.
            #expect(events(foreign).filter { $0 != "acknowledged" } == ["accepted", "stored", "delivered", "rejected"])
            #expect(teams(foreign) == ["OTHERTEAM1", "OTHERTEAM1"])
            let either = try await server.admin("GET", path)
            #expect(either.status == 409)
            #expect(either.message?.contains("com.example.demo, com.example.foreign") == true, "\(either.message ?? "")")
            // By token: each entry with its own app's events; the push to a topic that was not the provider's has none.
            let byToken = try await server.admin("GET", "/v1/tokens/\(Hex.encode(token))/notifications")
            let timelines = byToken.object["notifications"] as? [[String: Any]] ?? []
            let apps = timelines.map { $0["app"] as? String ?? "none" }
            #expect(apps == ["none", "com.example.foreign", "com.example.demo"])
            let eventsByApp = timelines.map { ($0["events"] as? [[String: Any]] ?? []).compactMap { $0["event"] as? String }.filter { $0 != "acknowledged" } }
            #expect(eventsByApp == [[], ["accepted", "stored", "delivered", "rejected"], ["accepted", "stored", "delivered"]])
            await attacker.close()
            await victim.close()
            await server.disconnect(device)
        }
    }
}
