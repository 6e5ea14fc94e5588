import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
import CourierTestSupport
import CourierWire
import Foundation
import NIOHPACK
import Testing

@testable import CourierServer

extension TestServer {
    /// A client of the channel management port, with the demo team's key or `credentials`.
    func channelClient(_ environment: Environment = .production, credentials: HTTP2Credentials? = nil) async throws -> HTTP2ProviderClient {
        let port = try await application.ports.port(.channels, environment)
        let credentials = try credentials ?? .token(demoAuthKey(), teamID: "DEMOTEAM01")
        return try HTTP2ProviderClient(
            options: .init(host: "127.0.0.1", port: port, caPath: caPath, serverName: "localhost", connections: 1), credentials: credentials,
            clock: clock, logger: logger)
    }

    /// One raw request to the channel management port (`channels`) or the push port.
    func rawChannelRequest(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil, channels: Bool = true,
        environment: Environment = .production, token: String?
    ) async throws -> HTTP2RawResponse {
        let port = try await application.ports.port(channels ? .channels : .http2, environment)
        let tls = try ProviderTLS(certificatePath: nil, keyPath: nil, caPath: caPath).configuration()
        let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: port, tls: tls, serverName: "localhost")
        defer { Task { await connection.close() } }
        var all: [(name: String, value: String, indexing: HPACKIndexing)] = [
            (":method", method, .indexable), (":scheme", "https", .indexable), (":path", path, .indexable), (":authority", "localhost", .indexable),
        ]
        if let token { all.append(("authorization", "bearer " + token, .nonIndexable)) }
        all += headers.map { ($0.0, $0.1, .indexable) }
        return try await connection.request(all, body: body)
    }
}

/// Broadcast channels (docs/protocol.md, "Broadcast channels"): channel
/// management on its own port, broadcasts on the push port, devices that
/// subscribe through the device protocol and library.
@Suite(.timeLimit(.minutes(2))) struct BroadcastTests {
    let bundleID = "com.example.demo"
    let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#.utf8)

    func broadcast(_ channelID: String, payload: [UInt8]? = nil, expiration: Date? = nil) -> HTTP2Broadcast {
        HTTP2Broadcast(bundleID: bundleID, channelID: channelID, payload: payload ?? update, expiration: expiration)
    }

    @Test func aBroadcastReachesEverySubscriberAndAStoredOneThoseWhoSubscribeLater() async throws {
        try await withTestServer { server in
            let channels = try await server.channelClient()
            let push = try await server.http2Client()

            // Create: 201, the channel's id, the request id echoed.
            let requestID = UUID()
            let created = try await channels.createChannel(bundleID: bundleID, policy: .mostRecent, requestID: requestID)
            #expect(created.status == 201, "\(created)")
            #expect(created.requestID == requestID.lowercasedString)
            let channelID = try #require(created.channelID)
            #expect(BroadcastChannel.isWellFormedID(channelID))
            let read = try await channels.channel(bundleID: bundleID, id: channelID)
            #expect(read.status == 200)
            #expect(read.storagePolicy == .mostRecent)
            #expect(UUID(uuidString: read.requestID) != nil, "a request id is made when none was sent")
            #expect(try await channels.channels(bundleID: bundleID).channels == [channelID])

            // Two devices subscribe; a third has the app and is not subscribed.
            let first = try await server.device()
            let second = try await server.device()
            let bystander = try await server.device()
            let firstToken = try await first.client.register(bundleID)
            let secondToken = try await second.client.register(bundleID)
            _ = try await bystander.client.register(bundleID)
            try await first.client.subscribe(bundleID, to: channelID)
            try await second.client.subscribe(bundleID, to: channelID)

            let sent = try await push.broadcast(broadcast(channelID, expiration: server.clock.now().addingTimeInterval(3600)))
            #expect(sent.status == 200, "\(sent)")
            for (device, token) in [(first, firstToken), (second, secondToken)] {
                let got = try #require(await device.next())
                #expect(got.channelID == channelID)
                #expect(got.payload == update)
                #expect(got.token == token, "each subscriber gets its own app token")
                #expect(got.topic == "com.example.demo.push-type.liveactivity")
                #expect(got.pushType == "liveactivity")
            }

            // A device that subscribes later gets the stored broadcast at once.
            let late = try await server.device()
            _ = try await late.client.register(bundleID)
            try await late.client.subscribe(bundleID, to: channelID)
            let stored = try #require(await late.next())
            #expect(stored.payload == update)
            #expect(stored.channelID == channelID)

            // A reconnecting device subscribes again: not the stored one twice, the next one yes.
            try await first.client.ping()
            await first.client.dropConnection()
            try await first.client.waitUntilConnected()
            try await first.client.ping()
            let next = Array(#"{"aps":{"timestamp":1700000100,"event":"update","content-state":{"score":"3-1"}}}"#.utf8)
            #expect(try await push.broadcast(broadcast(channelID, payload: next)).status == 200)
            #expect(try #require(await first.next()).payload == next, "the stored broadcast was not sent again; the new one came")
            #expect(try #require(await late.next()).payload == next)

            // Unsubscribed: no more. The bystander never got one.
            try await second.client.unsubscribe(bundleID, from: channelID)
            #expect(try #require(await second.next()).payload == next)
            let last = Array(#"{"aps":{"timestamp":1700000200,"event":"end","content-state":{}}}"#.utf8)
            #expect(try await push.broadcast(broadcast(channelID, payload: last)).status == 200)
            #expect(try #require(await first.next()).payload == last)
            try await second.client.ping()
            try await bystander.client.ping()
            #expect(await second.next(limit: 0.3) == nil)
            #expect(await bystander.next(limit: 0.3) == nil)

            // Deleted: gone for management and for broadcasts.
            #expect(try await channels.deleteChannel(bundleID: bundleID, id: channelID).status == 204)
            #expect(try await channels.channel(bundleID: bundleID, id: channelID).reason == .channelNotRegistered)
            #expect(try await channels.deleteChannel(bundleID: bundleID, id: channelID).reason == .channelNotRegistered)
            #expect(try await push.broadcast(broadcast(channelID)).reason == .channelNotRegistered)
            #expect(try await channels.channels(bundleID: bundleID).channels == [])
            await #expect(throws: DeviceClientError.unknownChannel(channelID)) { try await late.client.subscribe(bundleID, to: channelID) }

            await channels.close()
            await push.close()
            for device in [first, second, bystander, late] { await server.disconnect(device) }
        }
    }

    /// A channel of policy 0 keeps nothing and takes only expiration 0; a
    /// certificate that carries the app may manage and broadcast too.
    /// The inbox says what each request was: a channel management request
    /// (no token), a broadcast, a notification; `kind=` selects them.
    @Test func theInboxSaysWhatEachRequestWas() async throws {
        try await withTestServer { server in
            let channels = try await server.channelClient()
            let push = try await server.http2Client()
            let created = try await channels.createChannel(bundleID: bundleID, policy: .noStorage)
            let channelID = try #require(created.channelID)
            #expect(try await push.broadcast(broadcast(channelID)).status == 200)
            let device = try await server.device()
            let token = try await device.client.register(bundleID)
            #expect(try await push.send(HTTP2Push(token: token, payload: update, topic: bundleID)).status == 200)
            let entries = try await server.inboxEntries()
            #expect(entries.compactMap { $0["kind"] as? String } == ["channel", "broadcast", "notification"], "\(entries)")
            #expect(entries.first?["token"] == nil)
            #expect(entries.first?["apnsID"] as? String == created.requestID, "a channel request is named by its apns-request-id")
            let managed = try await server.inboxEntries("?kind=channel")
            #expect(managed.count == 1)
            #expect(try await server.admin("GET", "/v1/inbox?kind=push").status == 400)
            await channels.close()
            await push.close()
            await server.disconnect(device)
        }
    }

    @Test func aChannelWithoutStorageKeepsNothingAndCertificatesMayBroadcast() async throws {
        try await withTestServer { server in
            let channels = try await server.channelClient(credentials: server.demoCertificate)
            let push = try await server.http2Client(credentials: server.demoCertificate)
            let channelID = try #require(try await channels.createChannel(bundleID: bundleID, policy: .noStorage).channelID)
            #expect(try await channels.channel(bundleID: bundleID, id: channelID).storagePolicy == .noStorage)
            let device = try await server.device()
            _ = try await device.client.register(bundleID)
            try await device.client.subscribe(bundleID, to: channelID)
            let kept = try await push.broadcast(broadcast(channelID, expiration: server.clock.now().addingTimeInterval(60)))
            #expect(kept.reason == .badExpirationDate, "\(kept)")
            #expect(try await push.broadcast(broadcast(channelID, expiration: Date(timeIntervalSince1970: 0))).status == 200)
            #expect(try #require(await device.next()).channelID == channelID)
            #expect(try await push.broadcast(broadcast(channelID)).status == 200, "no expiration: now or never")
            _ = try #require(await device.next())
            // Nothing stored for a device that subscribes later.
            let late = try await server.device()
            _ = try await late.client.register(bundleID)
            try await late.client.subscribe(bundleID, to: channelID)
            try await late.client.ping()
            #expect(await late.next(limit: 0.3) == nil)
            await channels.close()
            await push.close()
            await server.disconnect(device)
            await server.disconnect(late)
        }
    }

    /// Every reason of the broadcast API on the wire (docs/protocol.md
    /// "Broadcast channels"), each with the request id echoed.
    @Test func broadcastReasonRows() async throws {
        try await withTestServer(configure: { $0.limits.channelsPerApp = 2 }) { server in
            let provisioner = server.application.provisioner
            _ = try await provisioner.createApp(bundleID: "com.example.plain", teamID: "DEMOTEAM01", kinds: [.app])
            let otherKey = try await server.otherTeam()
            let channels = try await server.channelClient()
            let push = try await server.http2Client()
            let token = try #require(await channels.currentToken())
            let policy = Array(#"{"message-storage-policy":1,"push-type":"LiveActivity"}"#.utf8)
            func create(_ body: [UInt8]?, bundle: String = "com.example.demo") async throws -> HTTP2RawResponse {
                try await server.rawChannelRequest("POST", "/1/apps/\(bundle)/channels", body: body, token: token)
            }
            func reason(_ response: HTTP2RawResponse) -> String? { HTTP2ErrorBody.decode(response.body)?.reason }

            // Paths and methods.
            let badPath = try await server.rawChannelRequest("GET", "/1/apps/com.example.demo/other", headers: [("apns-request-id", "0a0b0c0d-0000-4000-8000-000000000001")], token: token)
            #expect(badPath.status == 404 && reason(badPath) == "BadPath")
            #expect(badPath.headers["apns-request-id"] == "0a0b0c0d-0000-4000-8000-000000000001")
            let device = try await server.rawChannelRequest("POST", "/3/device/00", body: update, token: token)
            #expect(device.status == 404 && reason(device) == "BadPath", "the management port has no /3/device")
            let put = try await server.rawChannelRequest("PUT", "/1/apps/com.example.demo/channels", token: token)
            #expect(put.status == 405 && reason(put) == "MethodNotAllowed")
            let getBroadcast = try await server.rawChannelRequest(
                "GET", "/4/broadcasts/apps/com.example.demo", headers: [("apns-request-id", "0a0b0c0d-0000-4000-8000-000000000002")], channels: false, token: token)
            #expect(getBroadcast.status == 405 && reason(getBroadcast) == "MethodNotAllowed")
            #expect(getBroadcast.headers["apns-request-id"] == "0a0b0c0d-0000-4000-8000-000000000002" && getBroadcast.headers["apns-id"] == nil)

            // Trust.
            let anonymous = try await server.rawChannelRequest("GET", "/1/apps/com.example.demo/all-channels", token: nil)
            #expect(anonymous.status == 403 && reason(anonymous) == "MissingProviderToken")

            // Create's body.
            #expect(reason(try await create(nil)) == "PayloadEmpty")
            #expect(reason(try await create(Array("[1]".utf8))) == "BadRequestPayload")
            #expect(reason(try await create(Array(#"{"push-type":"LiveActivity"}"#.utf8))) == "BadRequestParams")
            #expect(reason(try await create(Array(#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#.utf8))) == "BadRequestParams")
            #expect(reason(try await create(Array(#"{"message-storage-policy":1}"#.utf8))) == "MissingPushType")
            #expect(reason(try await create(Array(#"{"message-storage-policy":1,"push-type":""}"#.utf8))) == "MissingPushType")
            #expect(reason(try await create(Array(#"{"message-storage-policy":1,"push-type":null}"#.utf8))) == "MissingPushType")
            #expect(reason(try await create(Array(#"{"message-storage-policy":1,"push-type":7}"#.utf8))) == "InvalidPushType")
            #expect(reason(try await create(Array(#"{"message-storage-policy":true,"push-type":"LiveActivity"}"#.utf8))) == "BadRequestParams")
            #expect(reason(try await create(Array(#"{"message-storage-policy":1,"push-type":"alert"}"#.utf8))) == "InvalidPushType")
            let unknownKey = try await create(Array(#"{"message-storage-policy":1,"push-type":"LiveActivity","foo":1}"#.utf8))
            #expect(unknownKey.status == 400 && reason(unknownKey) == "BadRequestParams", "a key Apple does not define")
            let liveActivityLowercase = try await create(Array(#"{"message-storage-policy":0,"push-type":"liveactivity"}"#.utf8))
            #expect(liveActivityLowercase.status == 201)

            // The app: Live Activities on, the provider's, its own topic.
            let plain = try await create(policy, bundle: "com.example.plain")
            #expect(plain.status == 400 && reason(plain) == "FeatureNotEnabled")
            let foreignApp = try await create(policy, bundle: "com.example.foreign")
            #expect(foreignApp.status == 403 && reason(foreignApp) == "TopicMismatch", "another team's app, token trust")
            #expect(reason(try await create(policy, bundle: "com.example.demo.voip")) == "TopicDisallowed", "a topic, not an app")
            let other = try await server.channelClient(credentials: .token(otherKey, teamID: "OTHERTEAM1"))
            #expect(try await other.createChannel(bundleID: bundleID, policy: .mostRecent).reason == .topicMismatch)
            _ = try await provisioner.issueProviderCertificate(bundleID: "com.example.foreign", environments: [.production], directory: server.directory)
            let foreignCertificate = HTTP2Credentials.certificate(
                certificatePath: server.directory + "/com.example.foreign.pem", keyPath: server.directory + "/com.example.foreign-key.pem")
            let certified = try await server.channelClient(credentials: foreignCertificate)
            let mismatch = try await certified.createChannel(bundleID: bundleID, policy: .mostRecent)
            #expect(mismatch.status == 403 && mismatch.reason == .topicMismatch, "\(mismatch)")

            // The limit per app and environment (2 here; 10,000 by default).
            let channelID = try #require(try await channels.createChannel(bundleID: bundleID, policy: .mostRecent).channelID)
            #expect(try await channels.createChannel(bundleID: bundleID, policy: .mostRecent).reason == .cannotCreateChannelConfig)
            let sandbox = try await server.channelClient(.sandbox)
            #expect(try await sandbox.createChannel(bundleID: bundleID, policy: .mostRecent).status == 201, "the other environment has its own")
            #expect(try await sandbox.channel(bundleID: bundleID, id: channelID).reason == .channelNotRegistered, "channels are per environment")
            // A sandbox broadcast's 200 carries apns-unique-id, as a device push's does; production's none.
            let sandboxChannel = try #require(try await sandbox.channels(bundleID: bundleID).channels?.first)
            let sandboxBroadcast = try await server.rawChannelRequest(
                "POST", "/4/broadcasts/apps/com.example.demo", headers: [("apns-push-type", "liveactivity"), ("apns-channel-id", sandboxChannel)], body: update,
                channels: false, environment: .sandbox, token: token)
            #expect(sandboxBroadcast.status == 200)
            #expect(sandboxBroadcast.uniqueID.flatMap(UUID.init(uuidString:)) != nil, "\(sandboxBroadcast.headers)")
            let productionBroadcast = try await server.rawChannelRequest(
                "POST", "/4/broadcasts/apps/com.example.demo", headers: [("apns-push-type", "liveactivity"), ("apns-channel-id", channelID)], body: update,
                channels: false, token: token)
            #expect(productionBroadcast.status == 200 && productionBroadcast.uniqueID == nil)

            // Channel ids.
            let missing = try await server.rawChannelRequest("GET", "/1/apps/com.example.demo/channels", token: token)
            #expect(reason(missing) == "MissingChannelId")
            let bad = try await server.rawChannelRequest("DELETE", "/1/apps/com.example.demo/channels", headers: [("apns-channel-id", "abc")], token: token)
            #expect(reason(bad) == "BadChannelId")
            #expect(try await channels.channel(bundleID: bundleID, id: BroadcastChannel.newID()).reason == .channelNotRegistered)
            let badRequestID = try await server.rawChannelRequest("GET", "/1/apps/com.example.demo/all-channels", headers: [("apns-request-id", "x")], token: token)
            #expect(reason(badRequestID) == "BadMessageId")
            #expect(badRequestID.headers["apns-request-id"] == "x", "echoed as sent")

            // Another team cannot reach the channel: not through its own app's path, not through ours.
            #expect(try await other.channel(bundleID: "com.example.foreign", id: channelID).reason == .channelNotRegistered)
            #expect(try await other.deleteChannel(bundleID: bundleID, id: channelID).reason == .topicMismatch)
            let attacker = try await server.http2Client(credentials: .token(otherKey, teamID: "OTHERTEAM1"))
            let hijack = HTTP2Broadcast(bundleID: "com.example.foreign", channelID: channelID, payload: update)
            #expect(try await attacker.broadcast(hijack).reason == .channelNotRegistered)
            #expect(try await attacker.broadcast(broadcast(channelID)).reason == .topicMismatch)
            #expect(try await channels.channel(bundleID: bundleID, id: channelID).status == 200, "still there")

            // Broadcast header values and payload.
            var noType = broadcast(channelID)
            noType.pushType = ""
            #expect(try await push.broadcast(noType).reason == .missingPushType)
            var alert = broadcast(channelID)
            alert.pushType = "alert"
            #expect(try await push.broadcast(alert).reason == .invalidPushType)
            var capitalised = broadcast(channelID)
            capitalised.pushType = "LiveActivity"
            #expect(try await push.broadcast(capitalised).status == 200, "push type in any case")
            var lowest = broadcast(channelID)
            lowest.priority = .lowest
            #expect(try await push.broadcast(lowest).status == 200, "priority 1, as Apple lists it")
            #expect(try await push.broadcast(broadcast(channelID, payload: [])).reason == .payloadEmpty)
            #expect(try await push.broadcast(broadcast(channelID, payload: Array("nope".utf8))).reason == .badRequestPayload)
            let large = Array(#"{"aps":{"alert":""#.utf8) + Array(repeating: UInt8(ascii: "x"), count: 5_121) + Array(#""}}"#.utf8)
            let tooLarge = try await server.rawChannelRequest(
                "POST", "/4/broadcasts/apps/com.example.demo",
                headers: [("apns-push-type", "liveactivity"), ("apns-channel-id", channelID), ("apns-request-id", "0a0b0c0d-0000-4000-8000-000000000003")],
                body: large, channels: false, token: token)
            #expect(tooLarge.status == 413 && reason(tooLarge) == "PayloadTooLarge")
            #expect(tooLarge.headers["apns-request-id"] == "0a0b0c0d-0000-4000-8000-000000000003" && tooLarge.headers["apns-id"] == nil)
            // Cut where trust is known: without credentials, the refusal is for those.
            let anonymousLarge = try await server.rawChannelRequest(
                "POST", "/4/broadcasts/apps/com.example.demo", headers: [("apns-push-type", "liveactivity"), ("apns-channel-id", channelID)], body: large,
                channels: false, token: nil)
            #expect(anonymousLarge.status == 403 && reason(anonymousLarge) == "MissingProviderToken")
            #expect(anonymousLarge.headers["apns-request-id"] != nil && anonymousLarge.headers["apns-id"] == nil)
            let largeCreate = try await create(Array(#"{"message-storage-policy":1,"push-type":"LiveActivity","x":""#.utf8) + large + Array(#""}"#.utf8))
            #expect(largeCreate.status == 413 && reason(largeCreate) == "PayloadTooLarge" && largeCreate.headers["apns-id"] == nil)
            let noChannel = try await server.rawChannelRequest(
                "POST", "/4/broadcasts/apps/com.example.demo", headers: [("apns-push-type", "liveactivity")], body: update, channels: false, token: token)
            #expect(reason(noChannel) == "MissingChannelId")
            var silentNow = broadcast(channelID, payload: Array(#"{"aps":{"content-available":1}}"#.utf8))
            silentNow.priority = .immediate
            #expect(try await push.broadcast(silentNow).reason == .badPriority)
            let twice = try await server.rawChannelRequest(
                "POST", "/4/broadcasts/apps/com.example.demo",
                headers: [("apns-push-type", "liveactivity"), ("apns-channel-id", channelID), ("apns-channel-id", channelID)], body: update, channels: false,
                token: token)
            #expect(reason(twice) == "DuplicateHeaders")
            let plainBroadcast = HTTP2Broadcast(bundleID: "com.example.plain", channelID: channelID, payload: update)
            #expect(try await push.broadcast(plainBroadcast).reason == .featureNotEnabled)

            for client in [channels, push, other, certified, sandbox, attacker] { await client.close() }
        }
    }

    /// The device protocol's Subscribe: an app the device has, a channel of that app.
    @Test func devicesSubscribeOnlyToChannelsOfTheirApps() async throws {
        try await withTestServer { server in
            _ = try await server.otherTeam()
            let channels = try await server.channelClient()
            let channelID = try #require(try await channels.createChannel(bundleID: bundleID, policy: .mostRecent).channelID)
            let device = try await server.device()
            await #expect(throws: DeviceClientError.unknownApp(bundleID)) { try await device.client.subscribe(bundleID, to: channelID) }
            _ = try await device.client.register(bundleID)
            _ = try await device.client.register("com.example.foreign")
            await #expect(throws: DeviceClientError.unknownChannel(channelID)) { try await device.client.subscribe("com.example.foreign", to: channelID) }
            await #expect(throws: DeviceClientError.unknownChannel("nonsense")) { try await device.client.subscribe(bundleID, to: "nonsense") }
            await #expect(throws: DeviceClientError.unknownChannel(channelID)) { try await device.client.unsubscribe(bundleID, from: channelID) }
            try await device.client.subscribe(bundleID, to: channelID)
            #expect(await device.client.subscribedChannels == [channelID: bundleID])
            // The app removed: its subscriptions end with it.
            try await device.client.unregister(bundleID)
            let push = try await server.http2Client()
            #expect(try await push.broadcast(broadcast(channelID)).status == 200)
            try await device.client.ping()
            #expect(await device.next(limit: 0.3) == nil)
            await channels.close()
            await push.close()
            await server.disconnect(device)
        }
    }

    /// `courier channel` and `courier broadcast` speak the two APIs;
    /// `courier device run --subscribe` prints the broadcast with its channel.
    @Test func theCommandLineManagesChannelsBroadcastsAndSubscribes() async throws {
        try await withTestServer { server in
            let keyID = try #require(server.application.report.demoKeyID)
            let keyPath = try #require(server.application.report.demoAuthKeyPath)
            let auth = ["--p8", keyPath, "--key-id", keyID, "--team-id", "DEMOTEAM01", "--ca", server.caPath]
            let channelPort = "\(try await server.application.ports.port(.channels, .production))"
            let pushPort = "\(try await server.http2Port())"
            let created = try await runProgram(
                courier, ["channel", "create", "--app", bundleID, "--storage-policy", "1", "--port", channelPort] + auth)
            #expect(created.status == 0, "\(created)")
            let channelID = try #require(created.stdout.split(separator: ":").first.map(String.init))
            #expect(BroadcastChannel.isWellFormedID(channelID), "\(created.stdout)")
            let read = try await runProgram(courier, ["channel", "read", "--app", bundleID, "--channel", channelID, "--port", channelPort] + auth)
            #expect(read.stdout == "\(channelID): message-storage-policy 1, push-type LiveActivity\n", "\(read)")
            let listed = try await runProgram(courier, ["channel", "list", "--app", bundleID, "--port", channelPort] + auth)
            #expect(listed.stdout == channelID + "\n")

            let devicePort = try await server.devicePort()
            let run = try RunningProgram(
                courier,
                [
                    "device", "run", "--identity", server.demoDirectory + "/device", "--app", bundleID, "--port", "\(devicePort)",
                    "--subscribe", channelID,
                ], mergeStandardError: true)
            defer { run.signal(SIGTERM) }
            _ = try #require(await run.waitForLine(containing: "subscribed to channel \(channelID)"), "\(run.output)")
            let sent = try await runProgram(
                courier, ["broadcast", "--app", bundleID, "--channel", channelID, "--payload", String(decoding: update, as: UTF8.self), "--port", pushPort] + auth)
            #expect(sent.status == 0, "\(sent)")
            #expect(sent.stdout.hasSuffix(": 200 sent on channel \(channelID)\n"), "\(sent.stdout)")
            let line = try #require(await run.waitForLine(containing: #""channel":"\#(channelID)""#), "\(run.output)")
            #expect(line.contains(#""pushType":"liveactivity""#))

            // Refusals: the status and reason on standard output, a failure exit; bad input a one-line error.
            let unknown = try await runProgram(
                courier, ["broadcast", "--app", bundleID, "--channel", BroadcastChannel.newID(), "--payload", "{}", "--port", pushPort] + auth)
            #expect(unknown.status != 0)
            #expect(unknown.stdout.hasSuffix(": 400 ChannelNotRegistered\n"), "\(unknown)")
            let badPolicy = try await runProgram(courier, ["channel", "create", "--app", bundleID, "--storage-policy", "7"] + auth)
            #expect(badPolicy.status != 0)
            #expect(badPolicy.stderr.contains("--storage-policy must be 0 or 1"), "\(badPolicy.stderr)")
            let deleted = try await runProgram(courier, ["channel", "delete", "--app", bundleID, "--channel", channelID, "--port", channelPort] + auth)
            #expect(deleted.stdout == "\(channelID): 204 deleted\n", "\(deleted)")
        }
    }

    /// A channel takes `qos.tokenRateLimit` broadcasts per window, as a
    /// device token takes pushes; a background payload without a priority
    /// is taken as priority 5.
    @Test func broadcastsPerChannelAreRateLimited() async throws {
        try await withTestServer(qos: QoSConfiguration(tokenRateLimit: 2, tokenRateWindow: 60)) { server in
            let channels = try await server.channelClient()
            let push = try await server.http2Client()
            let channelID = try #require(try await channels.createChannel(bundleID: bundleID, policy: .noStorage).channelID)
            let other = try #require(try await channels.createChannel(bundleID: bundleID, policy: .noStorage).channelID)
            let background = Array(#"{"aps":{"content-available":1}}"#.utf8)
            #expect(try await push.broadcast(broadcast(channelID, payload: background)).status == 200)
            #expect(try await push.broadcast(broadcast(channelID)).status == 200)
            let third = try await push.broadcast(broadcast(channelID))
            #expect(third.status == 429 && third.reason == .tooManyRequests, "\(third)")
            #expect(try await push.broadcast(broadcast(other)).status == 200, "another channel has its own window")
            server.clock.advance(by: 61)
            #expect(try await push.broadcast(broadcast(channelID)).status == 200, "a new window")
            await channels.close()
            await push.close()
        }
    }

    /// Policy 1 keeps the most recent broadcast: one of expiration 0
    /// replaces the one before and is never sent again; one past its
    /// expiration (or 8 hours) is not sent.
    @Test func theStoredBroadcastIsTheMostRecentOneWhileItLasts() async throws {
        try await withTestServer { server in
            let channels = try await server.channelClient()
            let push = try await server.http2Client()
            let channelID = try #require(try await channels.createChannel(bundleID: bundleID, policy: .mostRecent).channelID)
            // A device that subscribes after each broadcast (and unsubscribes: it then has nothing of the channel).
            let device = try await server.device()
            _ = try await device.client.register(bundleID)
            func lateSubscriber() async throws -> DeviceNotification? {
                try await device.client.subscribe(bundleID, to: channelID)
                try await device.client.ping()
                let got = await device.next(limit: 0.5)
                try await device.client.unsubscribe(bundleID, from: channelID)
                return got
            }
            #expect(try await push.broadcast(broadcast(channelID)).status == 200)
            #expect(try await lateSubscriber()?.payload == update)
            #expect(try await push.broadcast(broadcast(channelID, payload: Array(#"{"aps":{"event":"now"}}"#.utf8), expiration: Date(timeIntervalSince1970: 0))).status == 200)
            #expect(try await lateSubscriber() == nil, "the most recent could not be kept: nothing is sent")
            let soon = server.clock.now().addingTimeInterval(60)
            #expect(try await push.broadcast(broadcast(channelID, expiration: soon)).status == 200)
            #expect(try await lateSubscriber() != nil)
            server.clock.advance(by: 61)
            #expect(try await lateSubscriber() == nil, "expired")
            #expect(try await push.broadcast(broadcast(channelID)).status == 200)
            server.clock.advance(by: 8 * 3600 + 1)
            #expect(try await lateSubscriber() == nil, "kept 8 hours at most")
            await channels.close()
            await push.close()
            await server.disconnect(device)
        }
    }

    /// One connection holds at most 1,000 subscriptions; an app marked
    /// removed through the admin API loses its subscriptions too.
    @Test func subscriptionsAreBoundedAndEndWithTheApp() async throws {
        try await withTestServer { server in
            let broadcasts = server.dispatcher.broadcasts
            var ids: [String] = []
            for _ in 0...Broadcasts.maxSubscriptionsPerConnection {
                ids.append(try #require(try await broadcasts.create(bundleID: bundleID, environment: .production, policy: .noStorage)).id)
            }
            let device = try await server.device()
            let token = try await device.client.register(bundleID)
            for id in ids.dropLast() { try await device.client.subscribe(bundleID, to: id) }
            await #expect(throws: DeviceClientError.tooManySubscriptions) { try await device.client.subscribe(bundleID, to: ids.last!) }
            try await device.client.subscribe(bundleID, to: ids[0])
            try await device.client.unsubscribe(bundleID, from: ids[0])
            try await device.client.subscribe(bundleID, to: ids.last!)

            let push = try await server.http2Client()
            #expect(try await push.broadcast(broadcast(ids.last!)).status == 200)
            _ = try #require(await device.next())
            #expect(try await server.dispatcher.markUnregistered(token: token, topic: bundleID, environment: .production, at: server.clock.now()))
            #expect(try await push.broadcast(broadcast(ids.last!)).status == 200)
            try await device.client.ping()
            #expect(await device.next(limit: 0.3) == nil, "the app's subscriptions ended with it")
            await push.close()
            await server.disconnect(device)
        }
    }

    /// A store that fails: 500 InternalServerError, and nothing half done.
    @Test func aFailingStoreIsAnInternalServerError() async throws {
        try await withFaultyStoreServer { server, store in
            let channels = try await server.channelClient()
            let push = try await server.http2Client()
            let channelID = try #require(try await channels.createChannel(bundleID: bundleID, policy: .mostRecent).channelID)
            store.failChannels(true)
            let create = try await channels.createChannel(bundleID: bundleID, policy: .mostRecent)
            #expect(create.status == 500 && create.reason == .internalServerError, "\(create)")
            #expect(try await push.broadcast(broadcast(channelID)).reason == .internalServerError)
            store.failChannels(false)
            #expect(try await channels.channels(bundleID: bundleID).channels == [channelID], "nothing was created")
            #expect(try await push.broadcast(broadcast(channelID)).status == 200)
            await channels.close()
            await push.close()
        }
    }
}
