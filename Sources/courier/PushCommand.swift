import ArgumentParser
import CourierCore
import CourierPKI
import CourierProvider
import Foundation
import Logging

/// Where a command's payload comes from: inline JSON, @file, or - (stdin).
func readPayload(_ argument: String) throws -> [UInt8] {
    let bytes: [UInt8]
    if argument == "-" {
        bytes = Array(FileHandle.standardInput.readDataToEndOfFile())
    } else if argument.hasPrefix("@") {
        let path = String(argument.dropFirst())
        guard let data = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read payload file \(path)") }
        bytes = Array(data)
    } else {
        bytes = Array(argument.utf8)
    }
    guard PayloadRules.isJSONObject(bytes) else {
        // Where it stops being JSON, as Foundation's parser says it ("around line 1, column 12").
        do {
            _ = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        } catch {
            let detail = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
            throw ValidationError("the payload is not valid JSON" + (detail.map { ": \($0)" } ?? ""))
        }
        throw ValidationError("the payload is JSON but not an object: a payload is {\"aps\": {...}}")
    }
    return bytes
}

/// How a command reaches a provider API and proves who it is: an auth key
/// (token trust) or a provider certificate.
struct ProviderOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The team's auth key (AuthKey_<KEYID>.p8): token trust.", valueName: "file")) var p8: String?
    @Option(name: .customLong("key-id"), help: "The auth key's id (default: from the .p8 file name).") var keyID: String?
    @Option(name: .customLong("team-id"), help: "The team id the auth key belongs to.") var teamID: String?
    @Option(help: ArgumentHelp("The provider certificate (PEM): certificate trust.", valueName: "file")) var cert: String?
    @Option(help: ArgumentHelp("The provider certificate's key (PEM).", valueName: "file")) var key: String?
    @Flag(help: "Use the sandbox environment.") var sandbox = false
    @Option(help: "The server host.") var host: String = "localhost"
    @Option(help: ArgumentHelp("The CA that signed the server certificate (PEM).", valueName: "file")) var ca: String?

    /// Every file named exists.
    func checkFiles() throws {
        for path in [p8, cert, key, ca].compactMap({ $0 }) where !FileManager.default.fileExists(atPath: path) {
            throw ValidationError("no file \(path)")
        }
    }

    /// An auth key with its team and id, or a certificate with its key.
    func checkCredentials() throws {
        switch (p8, cert) {
        case (nil, nil): throw ValidationError("give --p8 with --team-id (token trust) or --cert with --key (certificate trust)")
        case (.some, .some): throw ValidationError("give either --p8 or --cert, not both")
        case (.some, nil):
            guard teamID != nil else { throw ValidationError("--p8 needs --team-id") }
            guard resolvedKeyID != nil else { throw ValidationError("--p8 needs --key-id (the file is not named AuthKey_<KEYID>.p8)") }
        case (nil, .some):
            guard key != nil else { throw ValidationError("--cert needs --key") }
        }
    }

    /// --key-id, or the id in an `AuthKey_<KEYID>.p8` file name.
    var resolvedKeyID: String? {
        if let keyID { return keyID }
        guard let p8 else { return nil }
        let name = (p8 as NSString).lastPathComponent
        guard name.hasPrefix("AuthKey_"), name.hasSuffix(".p8") else { return nil }
        return String(name.dropFirst("AuthKey_".count).dropLast(".p8".count))
    }

    /// A client of the HTTP/2 API (or the channel management port) on `port`.
    func client(port: Int, logger: Logger) throws -> HTTP2ProviderClient {
        let credentials: HTTP2Credentials
        if let p8 {
            let text: String
            do {
                text = try String(contentsOfFile: p8, encoding: .utf8)
            } catch {
                throw ValidationError("cannot read \(p8)")
            }
            do {
                credentials = .token(try AuthKey(keyID: resolvedKeyID!, p8PEM: text), teamID: teamID!)
            } catch {
                throw ValidationError("\(p8): \(error)")
            }
        } else {
            credentials = .certificate(certificatePath: cert!, keyPath: key!)
        }
        do {
            return try HTTP2ProviderClient(options: .init(host: host, port: port, caPath: ca, connections: 1), credentials: credentials, logger: logger)
        } catch {
            throw ValidationError("\(error)")
        }
    }
}

struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Send one notification.",
        discussion: """
            By default it speaks the HTTP/2 provider API, with an auth key (--p8, --key-id, --team-id: token \
            trust) or a provider certificate (--cert, --key), prints the apns-id and the outcome, and exits non-zero \
            when the notification is refused. With --binary it speaks the legacy binary provider API (command 2 by \
            default) with a provider certificate; that API answers only failures, so the command waits --wait \
            seconds for an error response and reports "no error response" otherwise.
            """)

    @Flag(help: "Use the legacy binary provider API.") var binary = false
    @OptionGroup var provider: ProviderOptions
    @Option(help: "The topic (apns-topic); with a certificate of one topic it may be left out.") var topic: String?
    @Option(help: ArgumentHelp("The device token in hex.", valueName: "hex")) var token: String
    @Option(help: ArgumentHelp("The payload: JSON, @file or - for standard input.", valueName: "json")) var payload: String
    @Option(name: [.customLong("expiration"), .customLong("expiry")], help: "Expiration, seconds since 1970 (0: do not store).")
    var expiration: UInt32?
    @Option(help: "Priority: 10, 5, or 1 (HTTP/2 only).") var priority: UInt8?
    @Option(name: .customLong("collapse-id"), help: "Collapse identifier (HTTP/2).") var collapseID: String?
    @Option(
        name: .customLong("push-type"),
        help: "apns-push-type (HTTP/2): alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets or controls; each goes to its topic (docs/protocol.md).")
    var pushType: String?
    @Option(help: "The notification id: a UUID for HTTP/2 (apns-id), a number for the binary API.") var id: String?
    @Option(help: "The server port (default: HTTP/2 2197, sandbox 12197; binary 2195, sandbox 12195).") var port: Int?
    @Option(help: "Binary command: 0, 1 or 2.") var command: UInt8 = 2
    @Option(help: "Seconds to wait for a binary error response.") var wait: Double = 1

    func validate() throws {
        guard let bytes = Hex.decode(token), !bytes.isEmpty else {
            let digits = token.allSatisfy(\.isHexDigit)
            throw ValidationError(
                digits && !token.isEmpty
                    ? "--token has \(token.count) hex digits, an odd number: a token is whole bytes, two digits each (64 for 32 bytes)"
                    : "--token '\(token)' is not hexadecimal")
        }
        if let priority, Priority(rawValue: priority) == nil { throw ValidationError("--priority must be 10, 5 or 1") }
        if priority == 1, binary { throw ValidationError("--priority 1 is the HTTP/2 API's: the binary API takes 5 or 10") }
        if let pushType {
            guard !binary else { throw ValidationError("--push-type is the HTTP/2 API's: the binary API has none") }
            guard PushType(rawValue: pushType) != nil else {
                throw ValidationError("--push-type '\(pushType)' is not one of Apple's: \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }
        try provider.checkFiles()
        if !payload.hasPrefix("@"), payload != "-" { _ = try readPayload(payload) }
        if binary {
            guard provider.cert != nil, provider.key != nil else { throw ValidationError("--binary needs --cert and --key") }
            guard BinaryProviderClient.Command(rawValue: command) != nil else { throw ValidationError("--command must be 0, 1 or 2") }
            if let id, UInt32(id) == nil { throw ValidationError("--id must be a number from 0 to 4294967295 with --binary") }
            return
        }
        if let id, UUID(uuidString: id) == nil { throw ValidationError("--id '\(id)' is not a UUID") }
        try provider.checkCredentials()
    }

    func run() async throws {
        let body = try readPayload(payload)
        let token = Hex.decode(self.token)!
        var logger = Logger(label: "courier-push")
        logger.logLevel = .warning
        if binary {
            try await sendBinary(token: token, body: body, logger: logger)
        } else {
            try await sendHTTP2(token: token, body: body, logger: logger)
        }
    }

    private func sendHTTP2(token: [UInt8], body: [UInt8], logger: Logger) async throws {
        let port = self.port ?? (provider.sandbox ? 12197 : 2197)
        let client = try provider.client(port: port, logger: logger)
        let (host, ca) = (provider.host, provider.ca)
        let push = HTTP2Push(
            token: token, payload: body, topic: topic, id: id.flatMap(UUID.init(uuidString:)),
            expiration: expiration.map { Date(timeIntervalSince1970: TimeInterval($0)) }, priority: priority.flatMap(Priority.init(rawValue:)),
            collapseID: collapseID, pushType: pushType)
        let result: HTTP2PushResult
        do {
            result = try await client.send(push)
            await client.close()
        } catch {
            await client.close()
            throw ValidationError(connectionProblem(error, host: host, port: port, ca: ca))
        }
        // The sandbox's apns-unique-id, for `courier log`.
        let unique = result.uniqueID.map { " (apns-unique-id \($0.lowercasedString))" } ?? ""
        if result.isAccepted {
            say("apns-id \(result.apnsID)\(unique): 200 accepted\n")
            return
        }
        var line = "apns-id \(result.apnsID)\(unique): \(result.status) \(result.reason?.rawValue ?? "(no reason)")"
        if let timestamp = result.timestamp {
            line += ", \(result.reason == .expiredToken ? "expired" : "unregistered") at \(ISO8601DateFormatter().string(from: timestamp))"
        }
        say(line + "\n")
        throw ExitCode.failure
    }

    private func sendBinary(token: [UInt8], body: [UInt8], logger: Logger) async throws {
        let port = self.port ?? (provider.sandbox ? 12195 : 2195)
        let (host, ca) = (provider.host, provider.ca)
        let client = try BinaryProviderClient(
            host: host, port: port, tls: ProviderTLS(certificatePath: provider.cert!, keyPath: provider.key!, caPath: ca), command: .init(rawValue: command)!,
            logger: logger)
        let identifier: UInt32
        do {
            identifier = try await client.send(token: token, payload: body, expiry: expiration, priority: priority, identifier: id.flatMap { UInt32($0) })
        } catch {
            throw ValidationError(connectionProblem(error, host: host, port: port, ca: ca))
        }
        let failures = await client.settle(seconds: wait)
        await client.close()
        if let failure = failures.first {
            throw ValidationError("notification \(failure.identifier) refused: status \(failure.status)")
        }
        say("sent notification \(identifier): no error response within \(wait) s\n")
    }
}

struct FeedbackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "feedback", abstract: "Read the feedback service: one line per removed app, 'timestamp token'.")

    @Option(help: ArgumentHelp("The provider certificate (PEM).", valueName: "file")) var cert: String
    @Option(help: ArgumentHelp("The provider key (PEM).", valueName: "file")) var key: String
    @Flag(help: "Use the sandbox environment.") var sandbox = false
    @Option(help: "The server host.") var host: String = "localhost"
    @Option(help: "The server port (default: 2196 production, 12196 sandbox).") var port: Int?
    @Option(help: ArgumentHelp("The CA that signed the server certificate (PEM).", valueName: "file")) var ca: String?

    func validate() throws {
        for path in [cert, key] + [ca].compactMap({ $0 }) where !FileManager.default.fileExists(atPath: path) {
            throw ValidationError("no file \(path)")
        }
    }

    func run() async throws {
        let entries: [(date: Date, token: [UInt8])]
        let port = self.port ?? (sandbox ? 12196 : 2196)
        do {
            entries = try await FeedbackReader.read(host: host, port: port, tls: ProviderTLS(certificatePath: cert, keyPath: key, caPath: ca))
        } catch {
            throw ValidationError(connectionProblem(error, host: host, port: port, ca: ca))
        }
        // Standard output stays one line per entry; that there were none goes to standard error.
        if entries.isEmpty { FileHandle.standardError.write(Data("courier: no feedback entries: no app was removed since the last read\n".utf8)) }
        for entry in entries { say("\(Int(entry.date.timeIntervalSince1970)) \(Hex.encode(entry.token))\n") }
    }
}
