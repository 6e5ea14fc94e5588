import CourierCore
import CourierDevice
import CourierPKI
import CourierProvider
import CourierServer
import CourierTestSupport
import CourierWire
import Foundation
import Testing

/// Live Activities (docs/protocol.md, "Live Activities"): tokens issued to
/// a device's app through the device protocol, pushes of type
/// liveactivity to them with token trust, ExpiredToken once an activity
/// ended.
@Suite(.timeLimit(.minutes(2))) struct LiveActivityTests {
    let topic = "com.example.demo.push-type.liveactivity"
    let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"1-0"}}}"#.utf8)

    func liveActivityPush(_ token: [UInt8], topic: String? = nil, payload: [UInt8]? = nil) -> HTTP2Push {
        HTTP2Push(token: token, payload: payload ?? update, topic: topic ?? self.topic, pushType: "liveactivity")
    }

    @Test func pushToStartAndUpdateTokensTakeLiveActivityPushesUntilTheActivityEnds() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let deviceToken = try await device.client.register("com.example.demo")
            _ = try await server.application.provisioner.createApp(bundleID: "com.example.second", teamID: "DEMOTEAM01")
            let client = try await server.http2Client()

            // Push-to-start: the app's own, the same each time, not its device token.
            let pushToStart = try await device.client.liveActivityPushToStartToken("com.example.demo")
            #expect(pushToStart != deviceToken)
            #expect(try await device.client.liveActivityPushToStartToken("com.example.demo") == pushToStart)
            let start = Array(
                #"{"aps":{"timestamp":1700000000,"event":"start","attributes-type":"Score","attributes":{},"content-state":{},"alert":{"title":"Kick-off"}}}"#.utf8)
            #expect(try await client.send(liveActivityPush(pushToStart, payload: start)).status == 200)
            let started = try #require(await device.next())
            #expect(started.token == pushToStart)
            #expect(started.pushType == "liveactivity")
            #expect(started.topic == topic)

            // An activity's update token.
            let activity = try await device.client.startLiveActivity("com.example.demo")
            #expect(activity.token != pushToStart)
            #expect(try await device.client.startLiveActivity("com.example.demo").activity != activity.activity, "each activity has its own")
            #expect(try await client.send(liveActivityPush(activity.token)).status == 200)
            #expect(try #require(await device.next()).token == activity.token)

            // Tokens and topics do not mix.
            #expect(try await client.send(liveActivityPush(deviceToken)).reason == .deviceTokenNotForTopic)
            let alert = HTTP2Push(token: activity.token, payload: Array(#"{"aps":{"alert":"x"}}"#.utf8), topic: "com.example.demo", pushType: "alert")
            #expect(try await client.send(alert).reason == .deviceTokenNotForTopic)
            let otherApp = try await client.send(liveActivityPush(activity.token, topic: "com.example.second.push-type.liveactivity"))
            #expect(otherApp.reason == .deviceTokenNotForTopic, "\(otherApp)")

            // The activity ends: 410 ExpiredToken with the time it ended.
            server.clock.advance(by: 90)
            let endedAt = server.clock.now()
            try await device.client.endLiveActivity(activity)
            server.clock.advance(by: 10)
            let expired = try await client.send(liveActivityPush(activity.token))
            #expect(expired.status == 410)
            #expect(expired.reason == .expiredToken)
            // To the millisecond, as the store keeps times.
            #expect(abs((expired.timestamp ?? .distantPast).timeIntervalSince(endedAt)) < 0.002, "\(String(describing: expired.timestamp)) \(endedAt)")
            await #expect(throws: DeviceClientError.self) { try await device.client.endLiveActivity(activity) }
            // Push-to-start goes on.
            #expect(try await client.send(liveActivityPush(pushToStart)).status == 200)
            _ = try #require(await device.next())

            // The app removed: its Live Activity tokens are Unregistered.
            try await device.client.unregister("com.example.demo")
            #expect(try await client.send(liveActivityPush(pushToStart)).reason == .unregistered)
            await client.close()
            await server.disconnect(device)
        }
    }

    /// A Live Activity token of another device or environment, or one
    /// altered, is refused like any token.
    @Test func liveActivityTokensAreCheckedLikeDeviceTokens() async throws {
        try await withTestServer { server in
            let device = try await server.device()
            let activity = try await device.client.startLiveActivity("com.example.demo")
            let client = try await server.http2Client()
            var altered = activity.token
            altered[5] ^= 1
            #expect(try await client.send(liveActivityPush(altered)).reason == .badDeviceToken)
            let sandbox = try await server.http2Client(.sandbox)
            #expect(try await sandbox.send(liveActivityPush(activity.token)).reason == .badDeviceToken)
            // An app the server does not have gets no token.
            await #expect(throws: DeviceClientError.self) { try await device.client.startLiveActivity("com.example.nosuch") }
            await client.close()
            await sandbox.close()
            await server.disconnect(device)
        }
    }

    /// `courier device run` prints each notification as one JSON line, a
    /// payload the provider sent pretty-printed too: the same keys, in their
    /// order, and strings whose spaces stay.
    @Test func deviceRunPrintsAPrettyPrintedPayloadOnOneLine() async throws {
        try await withTestServer { server in
            let port = try await server.devicePort()
            let run = try RunningProgram(
                courier, ["device", "run", "--identity", server.demoDirectory + "/device", "--app", "com.example.demo", "--port", "\(port)"],
                mergeStandardError: true)
            defer { run.signal(SIGTERM) }
            let token = try #require(await run.waitForLine(containing: "token ")?.split(separator: " ").last.map(String.init), "\(run.output)")
            let payload = "{\n  \"aps\" : {\n    \"alert\" : \"two  spaces, a \\\"quote\\\" and\\na line\"\n  },\n  \"b\" : [ 1, 2 ]\n}\n"
            let client = try await server.http2Client()
            let id = UUID()
            let sent = try await client.send(HTTP2Push(token: try #require(Hex.decode(token)), payload: Array(payload.utf8), topic: "com.example.demo", id: id))
            #expect(sent.status == 200)
            let line = try #require(await run.waitForLine(containing: id.uuidString.lowercased()), "\(run.output)")
            #expect(line.hasSuffix(#""payload":{"aps":{"alert":"two  spaces, a \"quote\" and\na line"},"b":[1,2]}}"#), "\(line)")
            let parsed = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(((parsed?["payload"] as? [String: Any])?["aps"] as? [String: Any])?["alert"] as? String == "two  spaces, a \"quote\" and\na line")
            await client.close()
        }
    }

    /// `courier device run` asks for the tokens and prints them, and names
    /// the token each notification was sent to.
    @Test func deviceRunPrintsLiveActivityTokens() async throws {
        try await withTestServer { server in
            let port = try await server.devicePort()
            let run = try RunningProgram(
                courier,
                [
                    "device", "run", "--identity", server.demoDirectory + "/device", "--app", "com.example.demo", "--port", "\(port)",
                    "--live-activity-push-to-start", "--live-activities", "2",
                ], mergeStandardError: true)
            defer { run.signal(SIGTERM) }
            let pushToStart = try #require(await run.waitForLine(containing: "push-to-start token ")).split(separator: " ").last.map(String.init)
            let first = try #require(await run.waitForLine(containing: "live activity "), "\(run.output)")
            let token = try #require(first.split(separator: " ").last.map(String.init))
            let client = try await server.http2Client()
            #expect(try await client.send(liveActivityPush(try #require(Hex.decode(token)))).status == 200)
            let line = try #require(await run.waitForLine(containing: #""token":"\#(token)""#), "\(run.output)")
            // Both activities were printed before the first notification.
            #expect(run.output.filter { $0.hasPrefix("live activity ") }.count == 2, "\(run.output)")
            #expect(line.contains(#""pushType":"liveactivity""#))
            #expect(pushToStart?.count == 64)
            await client.close()
        }
    }
}
