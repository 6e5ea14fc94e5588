import CourierCore
import CourierServer
import CourierTestSupport
import Foundation
import Testing

/// `courier push` over HTTP/2 and the ready-to-paste commands `courier
/// serve` prints, run as a user would run them.
@Suite(.timeLimit(.minutes(2))) struct HTTP2CommandLineTests {
    @Test func theBannersCourierPushAndCurlCommandsReachTheDemoDevice() async throws {
        try await withTestServer { server in
            // The demo device holds the demo app's token from the first start.
            let directory: String = try #require(server.application.report.demoDeviceDirectory)
            let device = try await server.device(directory: directory)
            let port = try await server.http2Port()
            let demo = try #require(DemoCommands.demo(server.application, port: port))
            #expect(try await device.client.register("com.example.demo") == Hex.decode(demo.deviceToken))

            let push = try await runProgram("/bin/bash", ["-c", DemoCommands.courierPush(demo).replacingOccurrences(of: "swift run courier", with: courier)])
            #expect(push.status == 0, "\(push.stderr)")
            #expect(push.stdout.hasSuffix(": 200 accepted\n"), "\(push.stdout)")
            #expect(String(decoding: try #require(await device.next()).payload, as: UTF8.self) == #"{"aps":{"alert":"Hello from Courier"}}"#)

            // Apple's recipe: openssl makes the JWT (a DER signature), curl sends it over HTTP/2.
            let curl = try await runProgram("/bin/bash", ["-c", DemoCommands.curl(demo)])
            #expect(curl.status == 0, "\(curl.stderr)")
            #expect(curl.stderr.contains("< HTTP/2 200"), "\(curl.stderr)")
            #expect(curl.stderr.contains("< apns-id: "))
            #expect(String(decoding: try #require(await device.next()).payload, as: UTF8.self) == #"{"aps":{"alert":"Hello from curl"}}"#)

            // Certificate trust; a refusal prints the reason and exits non-zero.
            let certificate = [
                "push", "--cert", server.demoDirectory + "/com.example.demo.pem", "--key", server.demoDirectory + "/com.example.demo-key.pem",
                "--topic", "com.example.demo", "--port", "\(port)", "--ca", server.caPath, "--payload", #"{"aps":{"alert":"by certificate"}}"#,
            ]
            let id = UUID().uuidString.lowercased()
            let accepted = try await runProgram(courier, certificate + ["--token", demo.deviceToken, "--id", id, "--priority", "10", "--expiration", "0", "--push-type", "alert"])
            #expect(accepted.status == 0, "\(accepted.stderr)")
            #expect(accepted.stdout == "apns-id \(id): 200 accepted\n")
            #expect(try #require(await device.next()).id.uuidString.lowercased() == id)
            let refused = try await runProgram(courier, certificate + ["--token", String(repeating: "ab", count: 32)])
            #expect(refused.status != 0)
            #expect(refused.stdout.hasSuffix(": 400 BadDeviceToken\n"), "\(refused.stdout)")
            let missing = try await runProgram(courier, certificate + ["--token", demo.deviceToken, "--payload", "@" + server.directory + "/no-such-payload.json"])
            #expect(missing.status != 0)
            #expect(missing.stderr == "courier: cannot read payload file \(server.directory)/no-such-payload.json\n")
            await server.disconnect(device)
        }
    }
}
