import ArgumentParser
import CourierCore
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
    guard (try? JSONSerialization.jsonObject(with: Data(bytes))) is [String: Any] else {
        throw ValidationError("the payload is not a JSON object")
    }
    return bytes
}

struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Send one notification.",
        discussion: """
            With --binary it speaks the legacy binary provider API (command 2 by default) with a provider \
            certificate. The binary API answers only failures, so the command waits --wait seconds for an error \
            response and reports "no error response" otherwise.
            """)

    @Flag(help: "Use the legacy binary provider API.") var binary = false
    @Option(help: ArgumentHelp("The provider certificate (PEM).", valueName: "file")) var cert: String?
    @Option(help: ArgumentHelp("The provider key (PEM).", valueName: "file")) var key: String?
    @Option(help: ArgumentHelp("The device token in hex.", valueName: "hex")) var token: String
    @Option(help: ArgumentHelp("The payload: JSON, @file or - for standard input.", valueName: "json")) var payload: String
    @Option(help: "Expiration, seconds since 1970 (0: do not store).") var expiry: UInt32?
    @Option(help: "Priority, 10 or 5.") var priority: UInt8?
    @Option(help: "The notification identifier (binary API).") var id: UInt32?
    @Flag(help: "Use the sandbox environment.") var sandbox = false
    @Option(help: "The server host.") var host: String = "localhost"
    @Option(help: "The server port (default: 2195 production, 12195 sandbox).") var port: Int?
    @Option(help: ArgumentHelp("The CA that signed the server certificate (PEM).", valueName: "file")) var ca: String?
    @Option(help: "Binary command: 0, 1 or 2.") var command: UInt8 = 2
    @Option(help: "Seconds to wait for a binary error response.") var wait: Double = 1

    func validate() throws {
        guard let bytes = Hex.decode(token), !bytes.isEmpty else { throw ValidationError("--token '\(token)' is not hexadecimal") }
        if let priority, priority != 5, priority != 10 { throw ValidationError("--priority must be 5 or 10") }
        guard binary else { throw ValidationError("the HTTP/2 provider API is not in this build yet: use --binary") }
        guard cert != nil, key != nil else { throw ValidationError("--binary needs --cert and --key") }
        guard BinaryProviderClient.Command(rawValue: command) != nil else { throw ValidationError("--command must be 0, 1 or 2") }
        for path in [cert, key, ca].compactMap({ $0 }) where !FileManager.default.fileExists(atPath: path) {
            throw ValidationError("no file \(path)")
        }
    }

    func run() async throws {
        let body = try readPayload(payload)
        let token = Hex.decode(self.token)!
        var logger = Logger(label: "courier-push")
        logger.logLevel = .warning
        let port = self.port ?? (sandbox ? 12195 : 2195)
        let client = try BinaryProviderClient(
            host: host, port: port, tls: ProviderTLS(certificatePath: cert!, keyPath: key!, caPath: ca), command: .init(rawValue: command)!, logger: logger)
        let identifier: UInt32
        do {
            identifier = try await client.send(token: token, payload: body, expiry: expiry, priority: priority, identifier: id)
        } catch {
            throw ValidationError("\(error)")
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
        do {
            entries = try await FeedbackReader.read(
                host: host, port: port ?? (sandbox ? 12196 : 2196), tls: ProviderTLS(certificatePath: cert, keyPath: key, caPath: ca))
        } catch {
            throw ValidationError("\(error)")
        }
        for entry in entries { say("\(Int(entry.date.timeIntervalSince1970)) \(Hex.encode(entry.token))\n") }
    }
}
