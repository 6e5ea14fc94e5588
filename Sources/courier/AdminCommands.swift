import ArgumentParser
import AsyncHTTPClient
import CourierCore
import CourierServer
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// How the admin commands reach a running server's admin API.
struct AdminOptions: ParsableArguments {
    @OptionGroup var data: DataOptions

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The admin API's URL (default: that of the server running on the data directory, from its ports.json, else the configuration's, http://127.0.0.1:8080; https is checked against the data directory's CA).",
            valueName: "url"))
    var url: String?

    @Option(
        name: .customLong("admin-token"),
        help: ArgumentHelp("The admin token (default: COURIER_ADMIN_TOKEN, else the data directory's admin-token file).", valueName: "token"))
    var adminToken: String?

    func client() throws -> AdminClient {
        let configuration = try data.load()
        // The server running on the data directory says where it listens (ports.json), port 0 in its configuration or not.
        let base = url ?? PortsFile.read(dataDirectory: configuration.dataDirectory)?.admin ?? configuration.network.adminURL(port: configuration.network.adminPort)
        guard let parsed = URL(string: base), parsed.scheme == "http" || parsed.scheme == "https", parsed.host != nil else {
            throw ValidationError("--url \(base) is not an http(s) URL")
        }
        guard let token = adminToken ?? AdminToken.find(dataDirectory: configuration.dataDirectory) else {
            throw ValidationError(
                "no admin token: none in \(configuration.dataDirectory)/\(AdminToken.fileName); give --data, --admin-token or COURIER_ADMIN_TOKEN")
        }
        return AdminClient(base: parsed, token: token, caPath: configuration.dataDirectory + "/pki/ca.pem")
    }
}

/// A client of the admin API (AsyncHTTPClient): one request, JSON back,
/// every failure one line that names what to check. HTTPS is checked
/// against Courier's CA (`caPath`), as the server's certificate is its.
struct AdminClient {
    let base: URL
    let token: String
    let caPath: String

    func get(_ path: String, query: [(String, String)] = [], timeout: TimeInterval = 30) async throws -> Data {
        try await send("GET", path, query: query, timeout: timeout)
    }

    func send(_ method: String, _ path: String, query: [(String, String)] = [], body: Data? = nil, timeout: TimeInterval = 30) async throws -> Data {
        var components = URLComponents(url: base.appendingPathComponent(path), resolvingAgainstBaseURL: false)!
        if !query.isEmpty { components.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) } }
        var request = HTTPClientRequest(url: components.url!.absoluteString)
        request.method = HTTPMethod(rawValue: method)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let body {
            request.body = .bytes(ByteBuffer(bytes: body))
            request.headers.add(name: "Content-Type", value: "application/json")
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        if base.scheme == "https" {
            guard FileManager.default.fileExists(atPath: caPath) else {
                throw ValidationError("\(base.absoluteString) is HTTPS and there is no CA at \(caPath) to check it with; give --data")
            }
            tls.trustRoots = .file(caPath)
        }
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(tlsConfiguration: tls))
        let answer: Result<(status: Int, data: Data), any Error>
        do {
            // Bounded: a huge timeout must not overflow NIO's nanoseconds.
            let response = try await client.execute(request, timeout: .seconds(Int64(min(max(timeout, 0), 86_400)) + 5))
            answer = .success((Int(response.status.code), Data(buffer: try await response.body.collect(upTo: 64 << 20))))
        } catch {
            answer = .failure(error)
        }
        try? await client.shutdown()
        let status: Int
        let data: Data
        switch answer {
        case .success(let received): (status, data) = received
        case .failure(let error):
            throw ValidationError(
                "no Courier admin API at \(base.absoluteString) (\(Self.describe(error))); is 'courier serve' running? check --url or network.adminPort")
        }
        guard (200..<300).contains(status) else {
            let message = (try? JSONDecoder().decode(ErrorBody.self, from: data))?.error.message ?? "HTTP status \(status)"
            if status == 401 {
                throw ValidationError(
                    "the server at \(base.absoluteString) refused the admin token; its token is in its data directory's admin-token file (give that --data, or --admin-token)")
            }
            throw AdminFailure(status: status, message: message)
        }
        return data
    }

    /// A failure to reach the API, in a few words.
    private static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError, error == .connectTimeout || error == .deadlineExceeded { return "timed out" }
        if let error = error as? NIOSSLError { return "TLS: \(error)" }
        if error is NIOConnectionError { return "connection refused" }
        // The libraries' own texts nest ("connection reset (error set): Connection refused (errno: 111)"): the few words they mean.
        switch ConnectionFailure(error) {
        case .refused: return "connection refused"
        case .unresolved: return "host not found"
        case .timedOut: return "timed out"
        case .closedBeforeHandshake: return "the connection was closed at once"
        case .untrustedServer: return "its certificate is not of this data directory's CA"
        case .certificateRefused, nil: return "\(error)"
        }
    }

    private struct ErrorBody: Decodable {
        struct Inner: Decodable { var message: String }
        var error: Inner
    }
}

/// The admin API refused a request: its status and message.
struct AdminFailure: Error, CustomStringConvertible {
    var status: Int
    var message: String
    var description: String { message }
}

/// Prints JSON as it came, indented.
private func printJSON(_ data: Data) {
    if let object = try? JSONSerialization.jsonObject(with: data),
        let pretty = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
    {
        say(String(decoding: pretty, as: UTF8.self) + "\n")
    } else {
        say(String(decoding: data, as: UTF8.self) + "\n")
    }
}

/// One inbox entry as a line: sequence, time, interface and environment,
/// apns-id, token, topic, outcome, payload.
private func describe(_ entry: [String: Any]) -> String {
    let outcome = entry["outcome"] as? [String: Any]
    let accepted = outcome?["accepted"] as? Bool ?? false
    var answer = accepted ? "accepted" : (outcome?["reason"] as? String ?? "refused")
    if !accepted, let status = outcome?["status"] as? Int { answer += " (\(status))" }
    // A notification names its token; a broadcast or a channel management request its method and path instead.
    let kind = entry["kind"] as? String ?? "notification"
    let headers = (entry["headers"] as? [[String: Any]] ?? []).reduce(into: [String: String]()) { found, header in
        if let name = header["name"] as? String, found[name] == nil { found[name] = header["value"] as? String }
    }
    let target = kind == "notification" ? "token \(entry["token"] as? String ?? "-")" : "\(kind) \(headers[":method"] ?? "") \(headers[":path"] ?? "")"
    let fields: [String] = [
        "#\(entry["sequence"] ?? "?")", entry["receivedAt"] as? String ?? "", "\(entry["interface"] ?? "")/\(entry["environment"] ?? "")",
        entry["apnsID"] as? String ?? "", target, "topic \(entry["topic"] as? String ?? "-")", answer,
    ]
    return fields.joined(separator: "  ") + "\n    " + (entry["payload"] as? String ?? "(\(entry["payloadSize"] ?? 0) bytes, not UTF-8)")
}

struct InboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inbox",
        abstract: "List the notifications a running server received, or wait for one.",
        discussion: """
            Lists the admin API's inbox (oldest first), filtered. With --wait, waits for the first notification \
            after --after that matches (one received already, or the next) and exits 1 if none came in time — \
            so a CI job can push with the provider code under test and check what Courier received.
            """)

    @OptionGroup var admin: AdminOptions
    @Option(help: "Only this apns-topic.") var topic: String?
    @Option(help: ArgumentHelp("Only this device token (hex).", valueName: "hex")) var token: String?
    @Option(name: .customLong("apns-id"), help: "Only this apns-id.") var apnsID: String?
    @Option(help: ArgumentHelp("Only this provider team.", valueName: "team-id")) var team: String?
    @Option(help: "Only http2 or binary.") var interface: String?
    @Option(help: "Only notification, broadcast, channel (channel management) or other.") var kind: String?
    @Option(help: "Only production or sandbox.") var environment: String?
    @Option(help: "accepted, refused, or a reason (BadDeviceToken, ...).") var outcome: String?
    @Option(help: "Only entries after this sequence number.") var after: UInt64?
    @Option(help: "Entries at most (1-1000).") var limit: Int?
    @Flag(help: "Wait for the first entry that matches.") var wait = false
    @Option(help: "Seconds to wait (0-300).") var timeout: Int = 30
    @Flag(help: "Print the API's JSON.") var json = false

    func run() async throws {
        let client = try admin.client()
        var query: [(String, String)] = []
        for (name, value) in [
            ("topic", topic), ("token", token), ("apns-id", apnsID), ("team", team), ("interface", interface), ("kind", kind),
            ("environment", environment), ("outcome", outcome), ("after", after.map(String.init)),
        ] {
            if let value { query.append((name, value)) }
        }
        if wait {
            query.append(("timeout", String(timeout)))
            let data: Data
            do {
                data = try await client.get("v1/inbox/wait", query: query, timeout: TimeInterval(min(max(timeout, 0), 3_600)) + 10)
            } catch let failure as AdminFailure where failure.status == 404 {
                FileHandle.standardError.write(Data("courier: \(failure.message)\n".utf8))
                throw ExitCode(1)
            }
            if json { return printJSON(data) }
            if let entry = try JSONSerialization.jsonObject(with: data) as? [String: Any] { say(describe(entry) + "\n") }
            return
        }
        if let limit { query.append(("limit", String(limit))) }
        let data = try await client.get("v1/inbox", query: query)
        if json { return printJSON(data) }
        guard let page = try JSONSerialization.jsonObject(with: data) as? [String: Any], let entries = page["entries"] as? [[String: Any]] else { return }
        if entries.isEmpty { say("No notifications match.\n") }
        for entry in entries { say(describe(entry) + "\n") }
        if page["more"] as? Bool == true, let last = entries.last?["sequence"] {
            say("More match: add --after \(last).\n")
        }
    }
}

struct LogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log", abstract: "Show a notification's delivery log by its apns-id or apns-unique-id: how it came in and what became of it.")

    @OptionGroup var admin: AdminOptions
    @Argument(help: "The apns-id, or the sandbox's apns-unique-id.") var apnsID: String
    @Option(
        help: ArgumentHelp(
            "The app whose notification it is, when apps of two teams used the apns-id (each has its own log).", valueName: "bundle-id"))
    var app: String?
    @Flag(help: "Print the API's JSON.") var json = false

    func run() async throws {
        let client = try admin.client()
        let data: Data
        do {
            data = try await client.get("v1/notifications/\(apnsID)", query: app.map { [("app", $0)] } ?? [])
        } catch let failure as AdminFailure {
            throw ValidationError(failure.message)
        }
        if json { return printJSON(data) }
        guard let timeline = try JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }
        say("Notification \(timeline["apnsID"] ?? apnsID)" + ((timeline["app"] as? String).map { " of \($0)" } ?? "") + "\n")
        for entry in timeline["received"] as? [[String: Any]] ?? [] { say("received " + describe(entry) + "\n") }
        let events = timeline["events"] as? [[String: Any]] ?? []
        if events.isEmpty { say("No delivery-log events.\n") }
        for event in events {
            var line = "  \(event["at"] as? String ?? "")  \(event["event"] as? String ?? "")"
            if let detail = event["detail"] as? String { line += "  \(detail)" }
            say(line + "\n")
        }
    }
}

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show a running server's devices online, notifications held, open connections, inbox and delivery-log backlog.")

    @OptionGroup var admin: AdminOptions
    @Flag(help: "Print the API's JSON.") var json = false

    func run() async throws {
        let client = try admin.client()
        let data = try await client.get("v1/status")
        if json { return printJSON(data) }
        guard let status = try JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }
        var text = "Courier at \(client.base.absoluteString)\n"
        text += "  devices online        \(status["devicesOnline"] ?? 0)\n"
        text += "  notifications held    \(status["notificationsHeld"] ?? 0)\n"
        if let inbox = status["inbox"] as? [String: Any] {
            text += "  inbox                 \(inbox["entries"] ?? 0) of \(inbox["capacity"] ?? 0)\n"
        }
        text += "  delivery-log backlog  \(status["deliveryLogBacklog"] ?? 0)\n"
        text += "  open connections:\n"
        for (name, count) in (status["connections"] as? [String: Any] ?? [:]).sorted(by: { $0.key < $1.key }) {
            text += "    \(name.padding(toLength: 20, withPad: " ", startingAt: 0)) \(count)\n"
        }
        say(text)
    }
}

struct FaultCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fault",
        abstract: "Add, list and remove fault rules: the error cases a running server answers on demand.",
        subcommands: [Add.self, List.self, Remove.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a rule: notifications that match get a refusal, a delayed answer, or the connection's end.",
            discussion: """
                Exactly one of --reject REASON (a reason of docs/protocol.md; --timestamp for Unregistered, \
                --binary-status for the binary API), --delay MS, --close (--close-reason REASON for another GOAWAY \
                reason than Shutdown). Without --count or --seconds a rule stays until it is removed.
                """)

        @OptionGroup var admin: AdminOptions
        @Option(help: ArgumentHelp("Only this device token.", valueName: "hex")) var token: String?
        @Option(help: "Only this topic.") var topic: String?
        @Option(help: ArgumentHelp("Only this provider team.", valueName: "team-id")) var team: String?
        @Option(name: .customLong("key-id"), help: "Only this auth key's provider tokens.") var keyID: String?
        @Option(name: .customLong("certificate-serial"), help: "Only this provider certificate (hex serial).") var certificateSerial: String?
        @Option(help: "Only http2 or binary.") var interface: String?
        @Option(help: "Only production or sandbox.") var environment: String?
        @Option(help: ArgumentHelp("Refuse with this reason.", valueName: "reason")) var reject: String?
        @Option(help: ArgumentHelp("Unregistered's time (ISO 8601 or seconds since 1970).", valueName: "time")) var timestamp: String?
        @Option(name: .customLong("binary-status"), help: "The binary API's status for the refusal.") var binaryStatus: Int?
        @Option(help: ArgumentHelp("Answer after this many milliseconds.", valueName: "ms")) var delay: Int?
        @Flag(help: "End the connection (HTTP/2 GOAWAY Shutdown, binary status 10).") var close = false
        @Option(
            name: .customLong("close-reason"), help: ArgumentHelp("With --close: the GOAWAY's reason instead of Shutdown.", valueName: "reason"))
        var closeReason: String?
        @Option(help: "Act on this many notifications, then end.") var count: Int?
        @Option(help: "Stay this many seconds, then end.") var seconds: Double?
        @Flag(help: "Print the API's JSON.") var json = false

        func run() async throws {
            let actions = [reject != nil, delay != nil, close].filter { $0 }.count
            guard actions == 1 else { throw ValidationError("give exactly one of --reject REASON, --delay MS, --close") }
            if closeReason != nil, !close { throw ValidationError("--close-reason goes with --close") }
            var match: [String: String] = [:]
            for (key, value) in [
                ("token", token), ("topic", topic), ("team", team), ("keyID", keyID), ("certificateSerial", certificateSerial),
                ("interface", interface), ("environment", environment),
            ] {
                if let value { match[key] = value }
            }
            var body: [String: Any] = ["match": match]
            if let reject {
                body["action"] = "reject"
                body["reason"] = reject
                if let timestamp { body["timestamp"] = timestamp }
                if let binaryStatus { body["binaryStatus"] = binaryStatus }
            } else if let delay {
                body["action"] = "delay"
                body["milliseconds"] = delay
            } else {
                body["action"] = "close"
                if let closeReason { body["reason"] = closeReason }
            }
            if let count { body["count"] = count }
            if let seconds { body["seconds"] = seconds }
            let client = try admin.client()
            let data: Data
            do {
                data = try await client.send("POST", "v1/faults", body: JSONSerialization.data(withJSONObject: body))
            } catch let failure as AdminFailure {
                throw ValidationError(failure.message)
            }
            if json { return printJSON(data) }
            let rule = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
            say("Added fault rule \(rule["id"] ?? "?").\n")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the fault rules in force.")
        @OptionGroup var admin: AdminOptions
        @Flag(help: "Print the API's JSON.") var json = false

        func run() async throws {
            let data = try await admin.client().get("v1/faults")
            if json { return printJSON(data) }
            let rules = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["faults"] as? [[String: Any]] ?? []
            if rules.isEmpty { say("No fault rules.\n") }
            for rule in rules {
                var what = "\(rule["action"] ?? "")"
                if let reason = rule["reason"] { what += " \(reason)" }
                if let milliseconds = rule["milliseconds"] { what += " \(milliseconds) ms" }
                let match = (rule["match"] as? [String: Any] ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                var line = "\(rule["id"] ?? "?")  \(what)  \(match.isEmpty ? "every notification" : match.joined(separator: " "))  hits \(rule["hits"] ?? 0)"
                if let remaining = rule["remaining"] { line += ", \(remaining) left" }
                if let until = rule["until"] { line += ", until \(until)" }
                say(line + "\n")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rm", abstract: "Remove a fault rule.")
        @OptionGroup var admin: AdminOptions
        @Argument(help: "The rule's id (f1, f2, ...).") var id: String

        func run() async throws {
            do {
                _ = try await admin.client().send("DELETE", "v1/faults/\(id)")
            } catch let failure as AdminFailure {
                throw ValidationError(failure.message)
            }
            say("Removed fault rule \(id).\n")
        }
    }
}
