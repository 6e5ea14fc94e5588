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
    let ready = try FileManager.default.fileExists(atPath: python) && runProgram(python, ["-c", "import apns3"]).status == 0
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
        let server = try await TestServer()
        let device = try await server.device()
        let token = Hex.encode(try await device.client.register("com.example.demo"))
        let binaryPort = await server.application.ports.port(.binary, .production)
        let feedbackPort = await server.application.ports.port(.feedback, .production)
        let cert = server.directory + "/demo/com.example.demo.pem"
        let key = server.directory + "/demo/com.example.demo-key.pem"

        let simple = try runProgram(python, [script, "send", "127.0.0.1", "\(binaryPort)", cert, key, token, "from PyAPNs"])
        #expect(simple.status == 0, "\(simple.stderr)")
        let first = try #require(await device.next())
        let object = try JSONSerialization.jsonObject(with: Data(first.payload)) as? [String: Any]
        #expect((object?["aps"] as? [String: Any])?["alert"] as? String == "from PyAPNs")

        let enhanced = try runProgram(python, [script, "send", "127.0.0.1", "\(binaryPort)", cert, key, token, "enhanced PyAPNs", "enhanced"])
        #expect(enhanced.status == 0, "\(enhanced.stderr)")
        #expect(enhanced.stdout.contains("error-response 8 2"), "the library got status 8 for its bad token: \(enhanced.stdout)")
        let second = try #require(await device.next())
        #expect(String(decoding: second.payload, as: UTF8.self).contains("enhanced PyAPNs"))

        try await device.client.unregister("com.example.demo")
        let toRemoved = try runProgram(python, [script, "send", "127.0.0.1", "\(binaryPort)", cert, key, token, "to a removed app"])
        #expect(toRemoved.status == 0)
        // The feedback entry appears once the gateway has handled that push.
        var entries = ""
        for _ in 0..<100 {
            let feedback = try runProgram(python, [script, "feedback", "127.0.0.1", "\(feedbackPort)", cert, key])
            #expect(feedback.status == 0, "\(feedback.stderr)")
            entries += feedback.stdout
            if entries.contains("feedback \(token)") { break }
        }
        #expect(entries.contains("feedback \(token)"))
        await server.disconnect(device)
        try await server.stop()
    }
}
