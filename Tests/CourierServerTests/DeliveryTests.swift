import CourierCore
import CourierDevice
import CourierPKI
@testable import CourierServer
import CourierWire
import Foundation
import Testing

/// Quality of service end to end: a real server on port 0, real TLS, the
/// real device library; time moves only when the test moves the clock.
@Suite struct DeliveryTests {
    let later: Date = Date().addingTimeInterval(86_400)

    @Test func aPushReachesAnOnlineDevice() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            #expect(token.count == 32)
            #expect(try await device.client.register("com.example.demo") == token, "registering again gives the same token")

            let (id, result) = await server.push(token, payload: #"{"aps":{"alert":"Hello"}}"#)
            #expect(result == .accepted)
            let received = try #require(await device.next())
            #expect(received.id == id)
            #expect(received.payload == Array(#"{"aps":{"alert":"Hello"}}"#.utf8))
            #expect(received.topic == "com.example.demo")
            #expect(received.priority == 10)
            #expect(received.token == token)
            try await device.client.acknowledge(received)
            try await device.client.ping()
            #expect(try await server.events(id) == [.accepted, .stored, .delivered, .acknowledged])
            await server.disconnect(device)
        }
    }

    @Test func offlineDeviceGetsOnlyTheLatestOnReconnect() async throws {
        try await withTestServer { server in
            let first = try await server.device()
            let token = try await first.client.register("com.example.demo")
            await server.disconnect(first)

            let (older, r1) = await server.push(token, payload: #"{"aps":{"alert":"one"}}"#, expiration: later)
            let (newer, r2) = await server.push(token, payload: #"{"aps":{"alert":"two"}}"#, expiration: later)
            #expect(r1 == .accepted && r2 == .accepted)
            #expect(try await server.events(older) == [.accepted, .stored, .replaced])

            let again = try await server.device(directory: first.directory)
            let received = try #require(await again.nextAcknowledged())
            #expect(received.id == newer)
            await again.client.waitUntilDrained()
            // Nothing else was held: a sentinel is the next thing to arrive.
            let (sentinel, _) = await server.push(token, payload: #"{"aps":{"alert":"sentinel"}}"#)
            #expect(await again.next()?.id == sentinel)
            await server.disconnect(again)
        }
    }

    @Test func expirationZeroIsNeverStored() async throws {
        try await withTestServer { server in
            let first = try await server.device()
            let token = try await first.client.register("com.example.demo")
            await server.disconnect(first)

            let (id, result) = await server.push(token, expiration: Date(timeIntervalSince1970: 0))
            #expect(result == .accepted)
            #expect(try await server.events(id) == [.accepted, .expired])
            let again = try await server.device(directory: first.directory)
            await again.client.waitUntilDrained()
            let (sentinel, _) = await server.push(token)
            #expect(await again.next()?.id == sentinel)
            await server.disconnect(again)
        }
    }

    @Test func expiredNotificationsAreNotDelivered() async throws {
        try await withTestServer { server in
            let first = try await server.device()
            let token = try await first.client.register("com.example.demo")
            await server.disconnect(first)

            let (id, _) = await server.push(token, expiration: server.clock.now().addingTimeInterval(60))
            server.clock.advance(by: 61)
            let again = try await server.device(directory: first.directory)
            await again.client.waitUntilDrained()
            let (sentinel, _) = await server.push(token)
            #expect(await again.next()?.id == sentinel)
            #expect(try await server.events(id) == [.accepted, .stored, .expired])

            // Expiring in the store, found by the timer sweep, is logged the same way.
            await server.disconnect(again)
            let (swept, _) = await server.push(token, expiration: server.clock.now().addingTimeInterval(10))
            server.clock.advance(by: 11)
            await server.dispatcher.tick()
            #expect(try await server.events(swept) == [.accepted, .stored, .expired])
            // A notification already expired when it arrives is accepted, not delivered.
            let (stale, staleResult) = await server.push(token, expiration: server.clock.now().addingTimeInterval(-1))
            #expect(staleResult == .accepted)
            #expect(try await server.events(stale) == [.accepted, .expired])
        }
    }

    @Test func collapseIDsCoalesce() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            // Online, priority 5: both wait for the burst; the newer replaces the older.
            let (a, _) = await server.push(token, payload: #"{"aps":{"alert":"score 1-0"}}"#, priority: .conservePower, collapseID: "match")
            let (b, _) = await server.push(token, payload: #"{"aps":{"alert":"score 2-0"}}"#, priority: .conservePower, collapseID: "match")
            server.clock.advance(by: 10)
            await server.dispatcher.tick()
            #expect(await device.next()?.id == b)
            #expect(try await server.events(a).contains(.coalesced))
            #expect(try await server.events(a).contains(.delivered) == false)

            // Offline: the newer one with the same collapse id coalesces the held one.
            await server.disconnect(device)
            let (c, _) = await server.push(token, expiration: later, collapseID: "news")
            let (d, _) = await server.push(token, expiration: later, collapseID: "news")
            #expect(try await server.events(c) == [.accepted, .stored, .coalesced])
            let again = try await server.device(directory: device.directory)
            #expect(await again.next()?.id == d)
            await server.disconnect(again)
        }
    }

    @Test func priorityFiveGoesOutInBursts() async throws {
        try await withTestServer(qos: QoSConfiguration(burstWindow: 30)) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            var quiet: [UUID] = []
            for index in 0..<3 {
                quiet.append(await server.push(token, payload: #"{"aps":{"alert":"batch \#(index)"}}"#, priority: .conservePower).0)
            }
            // Within the window only priority 10 goes out.
            server.clock.advance(by: 29)
            await server.dispatcher.tick()
            let (urgent, _) = await server.push(token, payload: #"{"aps":{"alert":"now"}}"#)
            #expect(await device.next()?.id == urgent)
            // After the window the burst goes out, in order.
            server.clock.advance(by: 1)
            await server.dispatcher.tick()
            var received: [UUID] = []
            for _ in 0..<3 { received.append(try #require(await device.next()).id) }
            #expect(received == quiet)
            await server.disconnect(device)
        }
    }

    @Test func silentPushesHaveAnHourlyBudget() async throws {
        try await withTestServer(qos: QoSConfiguration(burstWindow: 1, silentBudgetPerHour: 2)) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let silent = #"{"aps":{"content-available":1}}"#
            var ids: [UUID] = []
            for _ in 0..<3 { ids.append(await server.push(token, payload: silent, priority: .conservePower, silent: true).0) }
            #expect(try await server.events(ids[2]) == [.accepted, .throttled])
            server.clock.advance(by: 1)
            await server.dispatcher.tick()
            #expect(await device.next()?.id == ids[0])
            #expect(await device.next()?.id == ids[1])
            // A new hour, a new budget.
            server.clock.advance(by: 3600)
            let (fresh, _) = await server.push(token, payload: silent, priority: .conservePower, silent: true)
            #expect(try await server.events(fresh) == [.accepted, .stored])
            await server.disconnect(device)
        }
    }

    @Test func unacknowledgedNotificationsComeBackWithoutDuplicates() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            let (id, _) = await server.push(token, expiration: later)
            #expect(await device.next()?.id == id)
            // The connection drops before the app acknowledged.
            await device.client.dropConnection()
            try await device.client.waitUntilConnected()
            await device.client.waitUntilDrained()
            // The server delivered it again; the library acknowledged it without a second hand-over.
            let (sentinel, _) = await server.push(token, expiration: Date(timeIntervalSince1970: 0))
            #expect(await device.next()?.id == sentinel)
            #expect(await device.client.connections == 2)
            try await device.client.ping()  // the server has handled every frame sent before
            let events = try await server.events(id)
            #expect(events.filter { $0 == .delivered }.count == 2)
            #expect(events.last == .acknowledged)
            await server.disconnect(device)

            // A new app process (no memory of what it saw) gets what was never acknowledged.
            let (unacked, _) = await server.push(token, expiration: later)
            let fresh = try await server.device(directory: device.directory)
            #expect(await fresh.next()?.id == unacked)
            await server.disconnect(fresh)
            let restarted = try await server.device(directory: device.directory)
            let again = try #require(await restarted.next())
            #expect(again.id == unacked, "still not acknowledged, so delivered again")
            try await restarted.client.acknowledge(again)
            await server.disconnect(restarted)
        }
    }

    @Test func uninstalledAppsAreUnregisteredUntilTheyRegisterAgain() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            // Pushed once first (expiration 0: nothing held for later): the
            // dispatcher then knows the token as registered, and must forget that.
            let (first, accepted) = await server.push(token, expiration: Date(timeIntervalSince1970: 0))
            #expect(accepted == .accepted)
            let firstReceived = try #require(await device.next())
            #expect(firstReceived.id == first)
            try await device.client.acknowledge(firstReceived)
            let removedAt = server.clock.now()
            try await device.client.unregister("com.example.demo")
            server.clock.advance(by: 120)
            let (_, result) = await server.push(token)
            guard case .rejected(let reason, let timestamp) = result else {
                Issue.record("expected Unregistered, got \(result)")
                return
            }
            #expect(reason == .unregistered)
            #expect(reason.httpStatus == 410)
            #expect(abs(try #require(timestamp).timeIntervalSince(removedAt)) < 0.001)
            let feedback = try await server.application.provisioner.store.feedback(environment: .production, topic: "com.example.demo")
            #expect(feedback.map(\.token) == [token])
            #expect(abs(feedback[0].timestamp.timeIntervalSince(removedAt)) < 0.001)
            // Pushes at once to the removed app: each is Unregistered after its entry is written
            // (together, in group commits), and the list holds the token once.
            let results = await withTaskGroup(of: AcceptResult.self) { group in
                for _ in 0..<50 { group.addTask { await server.push(token).1 } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.count == 50 && results.allSatisfy { $0 == .rejected(.unregistered, timestamp: timestamp) }, "\(results)")
            #expect(try await server.application.provisioner.store.feedback(environment: .production, topic: "com.example.demo") == feedback)

            #expect(try await device.client.register("com.example.demo") == token)
            let (id, again) = await server.push(token)
            #expect(again == .accepted)
            #expect(await device.next()?.id == id)
            await server.disconnect(device)
        }
    }

    @Test func foreignTamperedAndWrongEnvironmentTokensAreRefused() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            // Another environment.
            #expect(await server.push(token, environment: .sandbox).1 == .rejected(.badDeviceToken))
            // A changed byte.
            var tampered = token
            tampered[5] ^= 0x01
            #expect(await server.push(tampered).1 == .rejected(.badDeviceToken))
            // A topic the provider may not use, and a token of another app.
            #expect(await server.push(token, topic: "com.example.other").1 == .rejected(.topicDisallowed))
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.other", teamID: "DEMOTEAM01")
            let both = ProviderIdentity(name: "both", teamID: "DEMOTEAM01", topics: ["com.example.demo", "com.example.other"])
            #expect(await server.push(token, topic: "com.example.other", from: both).1 == .rejected(.deviceTokenNotForTopic))
            // A well-made token for an app the device never registered.
            let codec = try server.application.provisioner.tokenCodec(.production)
            let unregistered = codec.issue(DeviceTokenContents(deviceID: await device.client.deviceID, generation: 1, bundleID: "com.example.other"))
            #expect(await server.push(unregistered, topic: "com.example.other", from: both).1 == .rejected(.badDeviceToken))

            // At connect, a device presenting another device's token has it refused.
            let other = try await server.device()
            _ = try await other.client.register("com.example.demo")
            await server.disconnect(other)
            var credentials = try DeviceCredentials.load(from: other.directory)
            credentials.setToken(token, for: "com.example.stolen", in: .production)
            try credentials.save()
            let thief = try await server.device(directory: other.directory)
            try await thief.client.waitUntilConnected()
            let reloaded = try DeviceCredentials.load(from: other.directory)
            #expect(reloaded.token(for: "com.example.stolen", in: .production) == nil, "the refused token was dropped")
            #expect(reloaded.token(for: "com.example.demo", in: .production) != nil, "its own token was kept")
            await server.disconnect(thief)
            await server.disconnect(device)
        }
    }

    @Test func tooManyPushesToOneTokenAre429() async throws {
        try await withTestServer(qos: QoSConfiguration(tokenRateLimit: 3, tokenRateWindow: 60)) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            for _ in 0..<3 { #expect(await server.push(token).1 == .accepted) }
            let (id, result) = await server.push(token)
            #expect(result == .rejected(.tooManyRequests))
            #expect(Reason.tooManyRequests.httpStatus == 429)
            #expect(try await server.events(id) == [.rejected])
            server.clock.advance(by: 60)
            #expect(await server.push(token).1 == .accepted)
            // A token that went quiet is forgotten at the next prune (once a minute), not kept forever.
            await server.dispatcher.tick()
            #expect(server.dispatcher.registrations.knownTokens == 1, "its window is still open")
            server.clock.advance(by: 60)
            await server.dispatcher.tick()
            #expect(server.dispatcher.registrations.knownTokens == 0)
            await server.disconnect(device)
        }
    }

    @Test func longOfflineDevicesLoseWhatWasHeld() async throws {
        try await withTestServer(qos: QoSConfiguration(retention: 3600)) { server in
            let device = try await server.device()
            let token = try await device.client.register("com.example.demo")
            await server.disconnect(device)
            let (id, _) = await server.push(token)  // no expiration: held up to the retention limit
            server.clock.advance(by: 3601)
            await server.dispatcher.tick()
            #expect(try await server.events(id) == [.accepted, .stored, .expired])
            let again = try await server.device(directory: device.directory)
            await again.client.waitUntilDrained()
            let (sentinel, _) = await server.push(token)
            #expect(await again.next()?.id == sentinel)
            await server.disconnect(again)
        }
    }

    @Test func aFilterHoldsNotificationsOfDisabledApps() async throws {
        try await withTestServer { server in
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.other", teamID: "DEMOTEAM01")
            let device = try await server.device()
            let demo = try await device.client.register("com.example.demo")
            let other = try await device.client.register("com.example.other")
            try await device.client.setEnabledApps(["com.example.other"])
            let provider = ProviderIdentity(name: "both", teamID: "DEMOTEAM01", topics: ["com.example.demo", "com.example.other"])
            let (held, _) = await server.push(demo, expiration: later, from: provider)
            let (shown, _) = await server.push(other, topic: "com.example.other", from: provider)
            #expect(await device.next()?.id == shown)
            try await device.client.setEnabledApps(["com.example.demo", "com.example.other"])
            #expect(await device.next()?.id == held)
            await server.disconnect(device)
        }
    }
}

@Suite struct TokenKeyTests {
    /// Keys hash only their first eight bytes: tokens that share those
    /// and differ after them are still different keys, each found as
    /// itself; equal bytes in different arrays are the same key.
    @Test func tokensSharingTheirFirstBytesStayApart() {
        let prefix = [UInt8](repeating: 0xAB, count: 8)
        let first = TokenKey(environment: .production, bytes: prefix + [UInt8](repeating: 1, count: 24))
        let second = TokenKey(environment: .production, bytes: prefix + [UInt8](repeating: 1, count: 23) + [2])
        let sandbox = TokenKey(environment: .sandbox, bytes: first.bytes)
        #expect(first.hashValue == second.hashValue)
        #expect(first != second)
        #expect(first != sandbox)
        #expect(first == TokenKey(environment: .production, bytes: Array(first.bytes)))
        #expect(TokenKey(environment: .production, bytes: []) == TokenKey(environment: .production, bytes: []))
        #expect(TokenKey(environment: .production, bytes: [1, 2]) != TokenKey(environment: .production, bytes: [1, 2, 3]))
        let table = [first: 1, second: 2, sandbox: 3]
        #expect(table[first] == 1)
        #expect(table[second] == 2)
        #expect(table[sandbox] == 3)
    }
}
