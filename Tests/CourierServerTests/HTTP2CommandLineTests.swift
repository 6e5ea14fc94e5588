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

            let push = try await runProgram("/bin/bash", ["-c", DemoCommands.courierPush(demo, command: courier)])
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

    /// What goes wrong on the network is one line that names host, port and what to check.
    @Test func networkFailuresAreOneLineNamingWhatToCheck() async throws {
        try await withTestServer { server in
            let certificate = [
                "--cert", server.demoDirectory + "/com.example.demo.pem", "--key", server.demoDirectory + "/com.example.demo-key.pem",
            ]
            let token = String(repeating: "ab", count: 32)
            // Nothing listens on port 1.
            let refused = try await runProgram(
                courier, ["push", "--token", token, "--topic", "com.example.demo", "--payload", "{}", "--port", "1", "--ca", server.caPath] + certificate)
            #expect(refused.stderr == "courier: cannot connect to localhost:1 (connection refused): is 'courier serve' running there? check --host and --port\n")
            // The server's CA not given: the machine's CAs do not trust it.
            let port = try await server.http2Port()
            let untrusted = try await runProgram(
                courier, ["push", "--token", token, "--topic", "com.example.demo", "--payload", "{}", "--port", "\(port)"] + certificate)
            #expect(untrusted.status != 0)
            #expect(
                untrusted.stderr
                    == "courier: the server at localhost:\(port) has a certificate this command does not trust: use --ca courier-data/pki/ca.pem (the server's CA)\n")
            // The feedback service with nothing to say says so, on standard error.
            let feedbackPort = try await server.application.ports.port(.feedback, .production)
            let feedback = try await runProgram(courier, ["feedback", "--port", "\(feedbackPort)", "--ca", server.caPath] + certificate)
            #expect(feedback.status == 0, "\(feedback.stderr)")
            #expect(feedback.stdout.isEmpty)
            #expect(feedback.stderr == "courier: no feedback entries: no app was removed since the last read\n")
        }
    }

    /// A connection the server closes at accept (over a connection limit)
    /// is told as that, not as a certificate to check: the command line
    /// says the server refused it before its handshake, and why it may have.
    @Test func aConnectionRefusedAtAcceptIsToldAsARefusal() async throws {
        try await withTestServer(configure: { $0.connections.maxPerAddress = 1 }) { server in
            let certificate = [
                "--cert", server.demoDirectory + "/com.example.demo.pem", "--key", server.demoDirectory + "/com.example.demo-key.pem",
            ]
            let port = try await server.http2Port()
            // The address's one connection, held.
            let held = try await server.http2Connection()
            let token = String(repeating: "ab", count: 32)
            let refused = try await runProgram(
                courier, ["push", "--token", token, "--topic", "com.example.demo", "--payload", "{}", "--port", "\(port)", "--ca", server.caPath] + certificate)
            #expect(refused.status != 0)
            #expect(refused.stderr.hasPrefix("courier: the server at localhost:\(port) refused the connection before its TLS handshake"), "\(refused.stderr)")
            #expect(!refused.stderr.contains("--cert"), "not told to check its certificate")
            #expect(refused.stderr.split(separator: "\n").count == 1)
            await held.close()
        }
    }
}
