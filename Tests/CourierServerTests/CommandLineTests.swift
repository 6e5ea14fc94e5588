import CourierServer
import CourierTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

let courier = productsDirectory().appendingPathComponent("courier").path

func courierRun(_ arguments: [String], directory: String? = nil) throws -> ProcessResult {
    try runProgram(courier, arguments, directory: directory)
}

@Suite struct CommandLineTests {
    @Test(arguments: [
        [], ["serve"], ["pki"], ["pki", "ca"], ["pki", "server-cert"], ["pki", "team"], ["pki", "app"], ["pki", "provider-cert"],
        ["pki", "auth-key"], ["pki", "device-cert"], ["pki", "revoke"], ["pki", "list"], ["push"], ["feedback"], ["device", "run"],
    ])
    func everyCommandExplainsItself(_ command: [String]) throws {
        let result = try courierRun(command + ["--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("OVERVIEW:"), "\(command)")
        #expect(result.stdout.contains("USAGE:"), "\(command)")
    }

    @Test(arguments: [
        (["pki", "provider-cert", "--bundle", "com.example.x", "--env", "moon"], "--env must be production, sandbox or both"),
        (["pki", "provider-cert"], "--bundle"),
        (["pki", "revoke", "--serial", "zz"], "not hexadecimal"),
        (["pki", "revoke"], "give exactly one of --serial and --key-id"),
        (["pki", "server-cert", "--out", "a", "--key-out", "b"], "give at least one --dns or --ip"),
        (["pki", "team", "--id", "bad", "--name", "X"], "team id 'bad' is not ten characters"),
        (["pki", "app", "--bundle", "com.example.x", "--team", "NOSUCHTEAM"], "team NOSUCHTEAM does not exist"),
        (["pki", "app", "--bundle", "com.example.x", "--team", "NOSUCHTEAM", "--topic-kind", "sms"], "unknown topic kind 'sms'"),
        (["pki", "device-cert", "--out", "dev"], "no CA in"),
        (["serve", "--config", "missing.json"], "cannot read configuration file missing.json: no such file"),
        (["serve", "--config", "/"], "cannot read configuration file /: it is a folder"),
        (["serve", "--data", "/dev/null"], "the data directory /dev/null is a file, not a folder: give --data another path"),
        (["serve", "--data", "/proc/version/data"], "cannot create the data directory /proc/version/data: Not a directory"),
        (["frobnicate"], "Unexpected argument 'frobnicate'"),
        (["push", "--token", "xyz", "--payload", "{}", "--p8", "k.p8"], "--token 'xyz' is not hexadecimal"),
        (["push", "--token", "00ff", "--payload", "{not json"], "the payload is not valid JSON: "),
        (["push", "--token", "00ff", "--payload", "[1, 2]"], "the payload is JSON but not an object"),
        (["push", "--token", "00ff", "--payload", "@missing.json", "--binary", "--cert", "c", "--key", "k"], "no file c"),
        (["push", "--token", "00ff", "--payload", "{}"], "give --p8 with --team-id (token trust) or --cert with --key (certificate trust)"),
        (["push", "--token", "00ff", "--payload", "{}", "--p8", "AuthKey_ABCDE12345.p8", "--team-id", "T"], "no file AuthKey_ABCDE12345.p8"),
        (["push", "--token", "00ff", "--payload", "{}", "--binary"], "--binary needs --cert and --key"),
        (["push", "--token", "00ff", "--payload", "{}", "--priority", "7", "--p8", "k.p8"], "--priority must be 10, 5 or 1"),
        (["push", "--token", "00ff", "--payload", "{}", "--priority", "1", "--binary", "--cert", "c", "--key", "k"], "--priority 1 is the HTTP/2 API's: the binary API takes 5 or 10"),
        (
            ["push", "--token", "00ff", "--payload", "{}", "--push-type", "Alert", "--p8", "k.p8"],
            "--push-type 'Alert' is not one of Apple's: alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets, controls"
        ),
        (["push", "--token", "00ff", "--payload", "{}", "--push-type", "voip", "--binary", "--cert", "c", "--key", "k"], "--push-type is the HTTP/2 API's: the binary API has none"),
        (["push", "--token", "00ff", "--payload", "{}", "--id", "12", "--p8", "k.p8"], "no file k.p8"),
        (["feedback", "--cert", "c.pem", "--key", "k.pem"], "no file c.pem"),
        (["push", "--token", "0ff", "--payload", "{}", "--p8", "k.p8"], "--token has 3 hex digits, an odd number: a token is whole bytes"),
        (["push", "--token", "00ff", "--payload", "{}", "--binary", "--cert", "/dev/null", "--key", "/dev/null", "--port", "1"], "/dev/null is not a PEM certificate"),
        (["inbox", "--url", "http://127.0.0.1:1", "--admin-token", "x"], "no Courier admin API at http://127.0.0.1:1 (connection refused); is 'courier serve' running?"),
        (["device", "run", "--identity", "d", "--app", "com.example.x", "--gateway", "localhost"], "--gateway 'localhost' is not host:port"),
        (["device", "run", "--identity", "d", "--app", "com.example.x", "--gateway", "a:5223", "--port", "1"], "--gateway replaces --host and --port"),
    ])
    func badArgumentsGiveOneLineAndAFailure(_ arguments: [String], _ message: String) throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let result = try courierRun(arguments + (arguments.first == "pki" && arguments.count > 1 ? ["--data", directory + "/data"] : []), directory: directory)
        #expect(result.status != 0)
        #expect(result.stderr.hasPrefix("courier: "), "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
    }

    @Test func aConfigurationFileWithAnUnknownKeyStopsServe() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        try #"{"network": {"adminPrt": 1}}"#.write(toFile: directory + "/courier.json", atomically: true, encoding: .utf8)
        let result = try courierRun(["serve", "--config", directory + "/courier.json", "--data", directory + "/data"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("unknown key 'network.adminPrt'"))
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    /// A PostgreSQL store that cannot be used stops `serve` at once with
    /// one line naming it, never the password.
    @Test func anUnusablePostgreSQLStoreStopsServeWithAOneLineMessage() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let port = try freePort()
        func serve(_ store: String) throws -> ProcessResult {
            try #"{"store": {"kind": "postgresql", "port": \#(port), \#(store)}, "logLevel": "critical"}"#
                .write(toFile: directory + "/courier.json", atomically: true, encoding: .utf8)
            return try courierRun(["serve", "--config", directory + "/courier.json", "--data", directory + "/data"])
        }
        try "secret-password\n".write(toFile: directory + "/pgpass", atomically: true, encoding: .utf8)
        let unreachable = try serve(#""passwordFile": "\#(directory)/pgpass""#)
        #expect(unreachable.status != 0)
        #expect(unreachable.stderr.hasPrefix("courier: unavailable: cannot connect to postgresql://courier@127.0.0.1:\(port)/courier: "), "\(unreachable.stderr)")
        #expect(unreachable.stderr.split(separator: "\n").count == 1, "\(unreachable.stderr)")
        #expect(!unreachable.stderr.contains("secret-password"))

        let noFile = try serve(#""passwordFile": "\#(directory)/missing""#)
        #expect(noFile.status != 0)
        #expect(noFile.stderr == "courier: cannot read the PostgreSQL password file \(directory)/missing ('store.passwordFile')\n", "\(noFile.stderr)")

        let noVariable = try serve(#""passwordEnvironment": "COURIER_TEST_NO_SUCH_VARIABLE""#)
        #expect(noVariable.status != 0)
        #expect(
            noVariable.stderr == "courier: the environment variable COURIER_TEST_NO_SUCH_VARIABLE ('store.passwordEnvironment') is not set\n",
            "\(noVariable.stderr)")
    }

    /// The version and the commit; a build from a working tree says so
    /// (deploy/package.sh writes the commit into the packages' builds).
    @Test func versionNamesTheCommit() throws {
        let result = try courierRun(["--version"])
        #expect(result.status == 0)
        #expect(result.stdout.wholeMatch(of: /courier [0-9]+\.[0-9]+\.[0-9]+ \(commit none: built from a working tree\)\n/) != nil, "\(result.stdout)")
    }

    /// As a user that is not root (the Debian package's `courier`): the
    /// server starts, a device connects and receives a push. The listeners
    /// and the device library once asked for SO_DEBUG, which only root may
    /// set: every connection failed, and the first accepted one ended the
    /// device listener and the server.
    @Test func serveAndDevicesRunAsAnUnprivilegedUser() throws {
        let setpriv = "/usr/bin/setpriv"
        guard FileManager.default.isExecutableFile(atPath: setpriv), getuid() == 0 else { return }
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        chmod(directory, 0o777)
        let config = directory + "/courier.json"
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}}"#.write(toFile: config, atomically: true, encoding: .utf8)
        chmod(config, 0o644)
        let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups", courier]
        let data = directory + "/data"
        let server = try RunningProgram(setpriv, nobody + ["serve", "--data", data, "--config", config])
        // Stopped whatever fails below (a failed #require leaves at once).
        defer {
            if server.isRunning {
                server.signal(SIGKILL)
                _ = server.waitForExit()
            }
        }
        #expect(server.waitForLine(containing: "Courier is running") != nil, "\(server.output)")
        let portsFile = try #require(FileManager.default.contents(atPath: data + "/ports.json"))
        let ports = try #require(try JSONSerialization.jsonObject(with: portsFile) as? [String: Any])
        let bound = try #require(ports["ports"] as? [String: Int])
        let devicePort = try #require(bound["device.production"])
        let http2Port = try #require(bound["http2.production"])
        let device = try RunningProgram(
            setpriv, nobody + ["device", "run", "--identity", data + "/demo/device", "--app", "com.example.demo", "--port", "\(devicePort)"],
            mergeStandardError: true)
        defer {
            if device.isRunning {
                device.signal(SIGKILL)
                _ = device.waitForExit()
            }
        }
        let tokenLine = try #require(device.waitForLine(containing: "token "), "\(device.output)")
        let token = String(tokenLine.split(separator: " ").last ?? "")
        let push = try courierRun([
            "push", "--cert", data + "/demo/com.example.demo.pem", "--key", data + "/demo/com.example.demo-key.pem", "--ca", data + "/pki/ca.pem",
            "--port", "\(http2Port)", "--token", token, "--topic", "com.example.demo", "--payload", #"{"aps":{"alert":"as nobody"}}"#,
        ])
        #expect(push.status == 0, "\(push.stderr)")
        #expect(device.waitForLine(containing: "as nobody") != nil, "\(device.output)")
        #expect(server.isRunning)
        device.signal(SIGTERM)
        _ = device.waitForExit()
        server.signal(SIGTERM)
        #expect(server.waitForExit() == 0)
    }

    @Test func aPortAlreadyTakenStopsServeWithAOneLineMessage() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let taken = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).wait()
        defer { try? taken.close().wait() }
        let port = try #require(taken.localAddress?.port)
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        let production = #"{"binary": 0, "feedback": 0, "http2": 0, "device": \#(port), "channels": 0}"#
        try #"{"network": {"production": \#(production), "sandbox": \#(zero), "adminPort": 0}, "logLevel": "critical"}"#
            .write(toFile: directory + "/courier.json", atomically: true, encoding: .utf8)
        let result = try courierRun(["serve", "--config", directory + "/courier.json", "--data", directory + "/data"])
        #expect(result.status == 1)
        #expect(
            result.stderr == "courier: cannot listen for device.production on 127.0.0.1:\(port): Address already in use; "
                + "set 'network.production.device' in the configuration to another port (0: any free one)\n", "\(result.stderr)")
        // The admin port the same way.
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": \#(port)}, "logLevel": "critical"}"#
            .write(toFile: directory + "/courier.json", atomically: true, encoding: .utf8)
        let admin = try courierRun(["serve", "--config", directory + "/courier.json", "--data", directory + "/data"])
        #expect(admin.status == 1)
        #expect(
            admin.stderr == "courier: cannot listen for admin on 127.0.0.1:\(port): Address already in use; "
                + "set 'network.adminPort' in the configuration to another port (0: any free one)\n", "\(admin.stderr)")
        // Those first starts were never ready, so their banner (what they made, the admin token) was never printed:
        // the next start that is ready is still the first, and prints it.
        #expect(FileManager.default.fileExists(atPath: directory + "/data/first-start-unfinished"))
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}}"#
            .write(toFile: directory + "/courier.json", atomically: true, encoding: .utf8)
        let ready = try RunningProgram(courier, ["serve", "--config", directory + "/courier.json", "--data", directory + "/data"])
        #expect(ready.waitForLine(containing: "Courier is running") != nil, "\(ready.output)")
        let banner = ready.output.joined(separator: "\n")
        #expect(banner.contains("First start: what a newcomer needs was created by a start that stopped before it was ready."), "\(banner)")
        #expect(banner.contains("Admin API: http://127.0.0.1:"))
        #expect(!FileManager.default.fileExists(atPath: directory + "/data/first-start-unfinished"), "removed once a start is ready")
        ready.signal(SIGTERM)
        #expect(ready.waitForExit() == 0)
        let later = try RunningProgram(courier, ["serve", "--config", directory + "/courier.json", "--data", directory + "/data"])
        #expect(later.waitForLine(containing: "Courier is running") != nil, "\(later.output)")
        #expect(later.output.contains("Reusing the existing data directory."))
        later.signal(SIGTERM)
        #expect(later.waitForExit() == 0)
    }

    /// `threads.realtimePriority`: the running server's event loops (and
    /// only they) are SCHED_RR at that priority, or, where the process may
    /// not raise them, serve stops with one line saying why.
    @Test func serveRunsItsEventLoopsAtTheRealtimePriorityItIsGiven() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let config = directory + "/courier.json"
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}, "threads": {"realtimePriority": 2}}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        let server = try RunningProgram(courier, ["serve", "--data", directory + "/data", "--config", config], mergeStandardError: true)
        guard server.waitForLine(containing: "Courier is running") != nil else {
            #expect(server.waitForExit() == 1)
            #expect(
                server.output == [
                    "courier: cannot run the event loops at real-time priority 2: not permitted (it needs CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least 2)"
                ], "\(server.output)")
            return
        }
        defer {
            server.signal(SIGTERM)
            _ = server.waitForExit()
        }
        let tasks = "/proc/\(server.processIdentifier)/task"
        var loops = 0
        var others = 0
        for task in try FileManager.default.contentsOfDirectory(atPath: tasks) {
            let name = try String(contentsOfFile: "\(tasks)/\(task)/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            // Field 41 of stat is the policy (after the name in parentheses: the 39th).
            let stat = try String(contentsOfFile: "\(tasks)/\(task)/stat", encoding: .utf8)
            let fields = stat[stat.index(after: try #require(stat.lastIndex(of: ")")))...].split(separator: " ")
            let (priority, policy) = (Int(fields[37]), Int32(fields[38]))
            if name.hasPrefix("NIO-SGLTN-") {
                loops += 1
                #expect(policy == Int32(SCHED_RR), "\(name)")
                #expect(priority == 2, "\(name)")
            } else {
                others += 1
                #expect(policy == Int32(SCHED_OTHER), "\(name)")
            }
        }
        #expect(loops >= 1)
        #expect(others >= 1)
    }

    @Test func provisioningFromTheCommandLine() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let data = ["--data", directory + "/data"]
        #expect(try courierRun(["pki", "ca"] + data).stdout.contains("created  CA certificate"))
        #expect(try courierRun(["pki", "ca"] + data).stdout.contains("found    CA certificate"))
        #expect(try courierRun(["pki", "team", "--id", "TEAM000001", "--name", "One"] + data).status == 0)
        #expect(try courierRun(["pki", "app", "--bundle", "com.example.one", "--team", "TEAM000001"] + data).status == 0)
        let certificate = try courierRun(["pki", "provider-cert", "--bundle", "com.example.one", "--env", "production", "--out", directory] + data)
        #expect(certificate.status == 0, "\(certificate.stderr)")
        #expect(FileManager.default.fileExists(atPath: directory + "/com.example.one.pem"))
        let key = try courierRun(["pki", "auth-key", "--team", "TEAM000001", "--out", directory] + data)
        #expect(key.status == 0)
        let keyID = try #require(key.stdout.split(separator: "\n").first { $0.hasPrefix("key id: ") }).dropFirst("key id: ".count)
        #expect(FileManager.default.fileExists(atPath: directory + "/AuthKey_\(keyID).p8"))
        #expect(try courierRun(["pki", "device-cert", "--out", directory + "/device"] + data).status == 0)
        #expect(try courierRun(["pki", "server-cert", "--dns", "push.local", "--ip", "10.1.2.3", "--out", directory + "/s.pem", "--key-out", directory + "/s-key.pem"] + data).status == 0)

        let list = try courierRun(["pki", "list"] + data)
        #expect(list.stdout.contains("team TEAM000001  One"))
        #expect(list.stdout.contains("app com.example.one"))
        #expect(list.stdout.contains("auth key \(keyID)"))
        let providerLine = try #require(list.stdout.split(separator: "\n").first { $0.hasPrefix("certificate provider") })
        let serial = try #require(providerLine.split(separator: " ").drop { $0 != "serial" }.dropFirst().first)

        #expect(try courierRun(["pki", "revoke", "--serial", String(serial)] + data).status == 0)
        let again = try courierRun(["pki", "revoke", "--serial", String(serial)] + data)
        #expect(again.status != 0)
        #expect(again.stderr.contains("revoked already"))
        #expect(try courierRun(["pki", "revoke", "--key-id", String(keyID)] + data).status == 0)
        let after = try courierRun(["pki", "list"] + data)
        #expect(after.stdout.contains("auth key \(keyID)  REVOKED"))
        #expect(after.stdout.contains("serial \(serial)") && after.stdout.split(separator: "\n").contains { $0.contains(String(serial)) && $0.hasSuffix("REVOKED") })
    }

    /// Started with a soft open-file limit below the hard one, `courier
    /// serve` raises it to the hard one and prints its connection limits.
    @Test func serveRaisesItsOpenFileLimitAndPrintsItsConnectionCapacity() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let config = directory + "/courier.json"
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let hard = try #require(Int(try runProgram("/bin/sh", ["-c", "ulimit -Hn"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        let soft = max(64, hard / 2)
        let server = try RunningProgram(
            "/bin/sh", ["-c", "ulimit -Sn \(soft) && exec \"$0\" serve --data \"$1\" --config \"$2\"", courier, directory + "/data", config])
        defer {
            server.signal(SIGTERM)
            _ = server.waitForExit()
        }
        #expect(server.waitForLine(containing: "Courier is running") != nil, "\(server.output)")
        let processLimits = try String(contentsOfFile: "/proc/\(server.processIdentifier)/limits", encoding: .utf8)
        let line = try #require(processLimits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
        let values = line.split(separator: " ").compactMap { Int($0) }
        #expect(values.first == hard, "soft raised from \(soft) to the hard limit: \(line)")
        let output = server.output.joined(separator: "\n")
        // The defaults, or (under a small hard limit) the defaults fitted to it.
        let limits = CourierConfiguration.Connections().fitted(toDescriptorLimit: hard)
        #expect(
            output.contains(
                "Connections: at most \(limits.maxPerDeviceListener) per device listener, \(limits.maxPerListener) per provider listener, "
                    + "\(limits.maxPerAddress) per address; \(limits.capacity) in all (open files: \(hard))"), "\(output)")
    }

    /// Under a small open-file limit the listeners' limits are lowered to
    /// fit it (and the banner says so): a flood of connections is refused
    /// at accept before the process runs out of descriptors — out of them,
    /// an event loop would spin on the listening socket.
    @Test func serveFitsItsConnectionLimitsToTheOpenFileLimit() async throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let config = directory + "/courier.json"
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let server = try RunningProgram(
            "/bin/sh", ["-c", "ulimit -n 200 && exec \"$0\" serve --data \"$1\" --config \"$2\"", courier, directory + "/data", config])
        defer {
            server.signal(SIGTERM)
            _ = server.waitForExit()
        }
        #expect(await server.waitForLine(containing: "Courier is running") != nil, "\(server.output)")
        let output = server.output.joined(separator: "\n")
        #expect(output.contains("Connections: at most 42 per device listener, 7 per provider listener, 42 per address; 147 in all (open files: 200)"))
        #expect(output.contains("Lowered from the default 21000 to fit the open-file limit"), "nothing configured: the default")
        let line = try #require(server.output.first { $0.contains("device.production") })
        let port = try #require(line.split(separator: " ").last.flatMap { Int($0) })
        var flood: [any Channel] = []
        for _ in 0..<300 {
            if let channel = try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get() {
                flood.append(channel)
            }
        }
        #expect(flood.count == 300, "every connection was accepted (most to be closed at once)")
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(server.processIdentifier)/fd").count
        #expect(open < 200, "\(open) descriptors open: the limit was never reached")
        for channel in flood { try? await channel.close() }
    }

    /// `courier device run` outlives its server: it says on stderr that the
    /// connection is lost, keeps trying, says when it is connected again,
    /// and gets the notifications after; a signal ends it with status 0.
    @Test func deviceRunReconnectsWhenTheServerComesBackAndSaysSo() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let data = directory + "/data"
        let config = directory + "/courier.json"
        // The device port is fixed, so that the restarted server is where the device left it.
        let probe = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).wait()
        let port = try #require(probe.localAddress?.port)
        try probe.close().wait()
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        let production = #"{"binary": 0, "feedback": 0, "http2": 0, "device": \#(port), "channels": 0}"#
        try #"{"network": {"production": \#(production), "sandbox": \#(zero), "adminPort": 0}}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let first = try RunningProgram(courier, ["serve", "--data", data, "--config", config])
        #expect(first.waitForLine(containing: "Courier is running") != nil, "\(first.output)")
        let device = try RunningProgram(
            courier, ["device", "run", "--identity", data + "/demo/device", "--app", "com.example.demo", "--port", "\(port)"], mergeStandardError: true)
        #expect(device.waitForLine(containing: "token ") != nil, "\(device.output)")
        #expect(device.output.contains("courier: connected to localhost:\(port)"), "\(device.output)")

        first.signal(SIGTERM)
        #expect(first.waitForExit() == 0)
        #expect(device.waitForLine(containing: "courier: lost the connection to localhost:\(port)") != nil, "\(device.output)")
        #expect(device.isRunning)

        let second = try RunningProgram(courier, ["serve", "--data", data, "--config", config])
        #expect(second.waitForLine(containing: "Courier is running") != nil, "\(second.output)")
        #expect(device.waitForLine(containing: "courier: connected again to localhost:\(port)") != nil, "\(device.output)")
        // One line per change: however many retries, one "cannot connect" at most.
        #expect(device.output.filter { $0.hasPrefix("courier: cannot connect") }.count <= 1, "\(device.output)")
        device.signal(SIGTERM)
        #expect(device.waitForExit() == 0)
        second.signal(SIGTERM)
        #expect(second.waitForExit() == 0)

        // A refusal is the one thing that ends it, non-zero: the device's certificate revoked.
        let listed = try courierRun(["pki", "list", "--data", data])
        // The word after "serial" (up to 40 hex digits: a serial's leading zero bytes are not written).
        let deviceLine = try #require(listed.stdout.split(separator: "\n").first { $0.hasPrefix("certificate device") })
        let words = deviceLine.split(separator: " ")
        let serial = try #require(words.firstIndex(of: "serial").map { words[$0 + 1] })
        #expect(try courierRun(["pki", "revoke", "--data", data, "--serial", String(serial)]).status == 0)
        let third = try RunningProgram(courier, ["serve", "--data", data, "--config", config])
        #expect(third.waitForLine(containing: "Courier is running") != nil, "\(third.output)")
        let refused = try RunningProgram(
            courier, ["device", "run", "--identity", data + "/demo/device", "--app", "com.example.demo", "--port", "\(port)"], mergeStandardError: true)
        #expect(refused.waitForExit() == 64)
        #expect(refused.output.last == "courier: the gateway refused this device: its certificate was refused (revoked, or not of this server's CA)")
        third.signal(SIGTERM)
        #expect(third.waitForExit() == 0)
    }

    @Test func serveStartsPrintsItsFilesAndStopsOnSIGTERMAndSIGINT() throws {
        let directory = try temporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let data = directory + "/data"
        let config = directory + "/courier.json"
        let zero = #"{"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}"#
        try #"{"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0}}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let first = try RunningProgram(courier, ["serve", "--data", data, "--config", config])
        #expect(first.waitForLine(containing: "Courier is running") != nil, "\(first.output)")
        let output = first.output.joined(separator: "\n")
        #expect(output.contains("First start"))
        #expect(output.contains("created  \(data)/pki/ca.pem"))
        #expect(output.contains("created  \(data)/demo/com.example.demo.pem"))
        #expect(output.contains("Demo: team DEMOTEAM01, app com.example.demo, auth key "))
        // The commands run the binary that printed them, by the path it was started by.
        #expect(output.contains("\n  \(courier) device run --identity \(data)/demo/device --app com.example.demo"), "\(output)")
        #expect(output.contains("\(courier) push --p8 '\(data)/demo/AuthKey_"), "a ready-to-paste courier push")
        #expect(output.contains("curl -v --cacert '\(data)/pki/ca.pem'"), "a ready-to-paste curl command")
        #expect(output.contains("openssl dgst -binary -sha256 -sign"))
        for listener in [
            "device.production", "device.sandbox", "binary.production", "binary.sandbox", "feedback.production", "feedback.sandbox", "http2.production",
            "http2.sandbox",
        ] {
            #expect(output.contains("  \(listener) "), "\(listener) is listening")
        }
        // Port 0: the banner's device command and the admin commands given --data use the ports it has.
        let portsFile = try #require(FileManager.default.contents(atPath: data + "/ports.json"), "ports.json written")
        let ports = try #require(try JSONSerialization.jsonObject(with: portsFile) as? [String: Any])
        let bound = try #require(ports["ports"] as? [String: Int])
        let devicePort = try #require(bound["device.production"])
        #expect(output.contains("courier device run --identity \(data)/demo/device --app com.example.demo --port \(devicePort)"), "\(output)")
        #expect(ports["admin"] as? String == "http://127.0.0.1:\(try #require(bound["admin"]))")
        let status = try courierRun(["status", "--data", data])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("devices online"), "\(status.stdout)")
        first.signal(SIGTERM)
        #expect(first.waitForExit() == 0)
        #expect(first.output.last == "Courier stopped.")
        #expect(!FileManager.default.fileExists(atPath: data + "/ports.json"), "removed when it stopped")

        #expect(!output.contains("Virtual devices:"), "no app takes any token unless configured so")

        // An app that takes any token on first use is named in the banner.
        try #"""
        {"network": {"production": \#(zero), "sandbox": \#(zero), "adminPort": 0},
         "virtualDevices": {"acceptAnyToken": {"sandbox": ["com.example.demo", "com.example.other"]}}}
        """#.write(toFile: config, atomically: true, encoding: .utf8)
        let second = try RunningProgram(courier, ["serve", "--data", data, "--config", config])
        #expect(second.waitForLine(containing: "Courier is running") != nil, "\(second.output)")
        let again = second.output.joined(separator: "\n")
        #expect(again.contains("\nVirtual devices: sandbox apps that take any token on first use: com.example.demo, com.example.other\n"), "\(again)")
        #expect(again.contains("Reusing the existing data directory."))
        #expect(again.contains("found    \(data)/pki/ca.pem"))
        #expect(!again.contains("created"))
        second.signal(SIGINT)
        #expect(second.waitForExit() == 0)
    }
}
