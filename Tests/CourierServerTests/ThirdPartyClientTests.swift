import CourierCore
import CourierTestSupport
import Foundation
import Testing

/// The Python interpreter with the third-party APNs clients: $COURIER_PYTHON
/// (what .ci/run sets up), or a virtual environment this test makes once in
/// .build/python-thirdparty.
func thirdPartyPython() throws -> String {
    if let python = ProcessInfo.processInfo.environment["COURIER_PYTHON"] { return python }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let venv = root.appendingPathComponent(".build/python-thirdparty").path
    let python = venv + "/bin/python"
    let ready = try FileManager.default.fileExists(atPath: python) && runProgram(python, ["-c", "import apns3, aioapns"]).status == 0
    if !ready {
        _ = try runProgram("python3", ["-m", "venv", venv])
        let install = try runProgram(venv + "/bin/pip", ["install", "-q", "-r", root.appendingPathComponent("Tests/ThirdParty/requirements.txt").path])
        guard install.status == 0 else { throw ThirdPartySetupError(message: install.stderr) }
    }
    return python
}

struct ThirdPartySetupError: Error {
    let message: String
}

let thirdPartyScripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("ThirdParty")

@Suite(.timeLimit(.minutes(3))) struct ThirdPartyClientTests {
    /// PyAPNs (apns3 1.0.0 on PyPI), unchanged but for host and port.
    @Test func pyAPNsSendsThroughTheBinaryAPIAndReadsFeedback() async throws {
        let python = try thirdPartyPython()
        let script = thirdPartyScripts.appendingPathComponent("pyapns_binary.py").path
        try await withTestServer { server in
            let device = try await server.device()
            let token = Hex.encode(try await device.client.register("com.example.demo"))
            let binaryPort = try await server.application.ports.port(.binary, .production)
            let feedbackPort = try await server.application.ports.port(.feedback, .production)
            let cert = server.directory + "/demo/com.example.demo.pem"
            let key = server.directory + "/demo/com.example.demo-key.pem"

            let simple = try await runProgram(python, [script, "send", "127.0.0.1", "\(binaryPort)", cert, key, token, "from PyAPNs"])
            #expect(simple.status == 0, "\(simple.stderr)")
            let first = try #require(await device.next())
            let object = try JSONSerialization.jsonObject(with: Data(first.payload)) as? [String: Any]
            #expect((object?["aps"] as? [String: Any])?["alert"] as? String == "from PyAPNs")

            let enhanced = try await runProgram(python, [script, "send", "127.0.0.1", "\(binaryPort)", cert, key, token, "enhanced PyAPNs", "enhanced"])
            #expect(enhanced.status == 0, "\(enhanced.stderr)")
            #expect(enhanced.stdout.contains("error-response 8 2"), "the library got status 8 for its bad token: \(enhanced.stdout)")
            let second = try #require(await device.next())
            #expect(String(decoding: second.payload, as: UTF8.self).contains("enhanced PyAPNs"))

            // A command-2 frame (the library's Frame) with a payload over the 2048-byte limit: status 7
            // with that notification's identifier, and the one before it delivered.
            let oversized = try await runProgram(python, [script, "oversized", "127.0.0.1", "\(binaryPort)", cert, key, token, "3000"])
            #expect(oversized.status == 0, "\(oversized.stderr)")
            #expect(oversized.stdout.contains("error-response 7 42"), "the library got status 7 for notification 42: \(oversized.stdout)")
            let before = try #require(await device.next())
            #expect(String(decoding: before.payload, as: UTF8.self).contains("before the large one"))

            try await device.client.unregister("com.example.demo")
            let toRemoved = try await runProgram(python, [script, "send", "127.0.0.1", "\(binaryPort)", cert, key, token, "to a removed app"])
            #expect(toRemoved.status == 0)
            // The feedback entry appears once the gateway has handled that push.
            var entries = ""
            for _ in 0..<100 {
                let feedback = try await runProgram(python, [script, "feedback", "127.0.0.1", "\(feedbackPort)", cert, key])
                #expect(feedback.status == 0, "\(feedback.stderr)")
                entries += feedback.stdout
                if entries.contains("feedback \(token)") { break }
            }
            #expect(entries.contains("feedback \(token)"))
            await server.disconnect(device)
        }
    }

    /// aioapns (4.0 on PyPI, HTTP/2), unchanged but for host, port and CA:
    /// token trust and certificate trust, an accepted push and a refused one.
    @Test(arguments: ["token", "cert"])
    func aioapnsSendsThroughTheHTTP2API(_ mode: String) async throws {
        let python = try thirdPartyPython()
        let script = thirdPartyScripts.appendingPathComponent("aioapns_http2.py").path
        try await withTestServer { server in
            let device = try await server.device()
            let token = Hex.encode(try await device.client.register("com.example.demo"))
            let port = try await server.http2Port()
            var arguments = [script, mode, "localhost", "\(port)", server.caPath]
            if mode == "token" {
                let key = try server.demoAuthKey()
                arguments += [try #require(server.application.report.demoAuthKeyPath), key.keyID, "DEMOTEAM01"]
            } else {
                // aioapns takes the certificate and its key in one PEM file.
                let both = server.directory + "/demo-cert-and-key.pem"
                let certificate = try String(contentsOfFile: server.demoDirectory + "/com.example.demo.pem", encoding: .utf8)
                let key = try String(contentsOfFile: server.demoDirectory + "/com.example.demo-key.pem", encoding: .utf8)
                try (certificate + key).write(toFile: both, atomically: true, encoding: .utf8)
                arguments.append(both)
            }
            arguments += ["com.example.demo", token, "from aioapns"]
            let run = try await runProgram(python, arguments)
            #expect(run.status == 0, "\(run.stderr)")
            let results = run.stdout.split(separator: "\n").filter { $0.hasPrefix("result ") }.map { $0.split(separator: " ").map(String.init) }
            #expect(results.count == 2, "\(run.stdout) \(run.stderr)")
            #expect(results.first?[2] == "200")
            #expect(results.last?[2] == "400")
            #expect(results.last?[3] == "BadDeviceToken")
            let received = try #require(await device.next())
            #expect(received.id.uuidString.lowercased() == results.first?[1])
            #expect(String(decoding: received.payload, as: UTF8.self).contains("from aioapns"))
            // What a CI job asserts on: the inbox, waited on through the admin API.
            let waited = try await server.admin("GET", "/v1/inbox/wait?token=\(token)&outcome=accepted&timeout=10")
            #expect(waited.status == 200)
            #expect(waited.object["apnsID"] as? String == results.first?[1])
            #expect((waited.object["payload"] as? String)?.contains("from aioapns") == true)
            #expect((waited.object["provider"] as? String)?.hasPrefix(mode == "token" ? "key " : "certificate ") == true)
            let refused = try await server.admin("GET", "/v1/inbox/wait?outcome=BadDeviceToken&timeout=10")
            #expect(refused.status == 200)
            #expect(refused.object["apnsID"] as? String == results.last?[1])
            await server.disconnect(device)
        }
    }
}
