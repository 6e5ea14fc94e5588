import ArgumentParser
import CourierCore
import CourierProvider
import CourierServer
import Foundation
import Logging

/// `courier channel …`: Apple's channel management API for broadcast
/// channels (docs/protocol.md, "Broadcast channels").
struct ChannelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channel",
        abstract: "Create, read, delete and list an app's broadcast channels.",
        discussion: """
            Speaks the channel management API (default port 2198, sandbox 12198) with an auth key (--p8, --team-id) \
            or a provider certificate (--cert, --key). Each command prints one line: the channel id and what the server \
            answered, or the status and reason, and exits non-zero when refused.
            """,
        subcommands: [Create.self, Read.self, Delete.self, List.self])

    /// What every channel command takes.
    struct Common: ParsableArguments {
        @OptionGroup var provider: ProviderOptions
        @Option(help: ArgumentHelp("The app's bundle id.", valueName: "bundle-id")) var app: String
        @Option(help: "The server's channel management port (default: 2198, sandbox 12198).") var port: Int?

        func validate() throws {
            try provider.checkFiles()
            try provider.checkCredentials()
            guard Identifiers.isBundleID(app) else { throw ValidationError("--app '\(app)' is not a bundle id") }
        }

        /// Runs `request` on a client of the management port; a refusal is one line and a failure exit.
        func perform(_ request: (HTTP2ProviderClient) async throws -> HTTP2ChannelResult) async throws -> HTTP2ChannelResult {
            var logger = Logger(label: "courier-channel")
            logger.logLevel = .warning
            let port = self.port ?? (provider.sandbox ? CourierConfiguration.EnvironmentPorts.sandbox : .production).channels
            let client = try provider.client(port: port, logger: logger)
            let result: HTTP2ChannelResult
            do {
                result = try await request(client)
                await client.close()
            } catch {
                await client.close()
                throw ValidationError(connectionProblem(error, host: provider.host, port: port, ca: provider.ca))
            }
            guard result.isSuccess else { throw refusal(result) }
            return result
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a channel; prints its id.")
        @OptionGroup var common: Common
        @Option(
            name: .customLong("storage-policy"),
            help: "message-storage-policy: 0 keeps nothing, 1 keeps the most recent broadcast for devices that subscribe later.")
        var storagePolicy: Int = 0

        func validate() throws {
            guard MessageStoragePolicy(rawValue: storagePolicy) != nil else { throw ValidationError("--storage-policy must be 0 or 1") }
        }

        func run() async throws {
            let policy = MessageStoragePolicy(rawValue: storagePolicy)!
            let result = try await common.perform { try await $0.createChannel(bundleID: common.app, policy: policy) }
            say("\(result.channelID ?? "?"): \(result.status) created (message-storage-policy \(storagePolicy), apns-request-id \(result.requestID))\n")
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Read a channel's configuration.")
        @OptionGroup var common: Common
        @Option(name: .customLong("channel"), help: ArgumentHelp("The channel id (apns-channel-id).", valueName: "id")) var channelID: String

        func run() async throws {
            let result = try await common.perform { try await $0.channel(bundleID: common.app, id: channelID) }
            say("\(channelID): message-storage-policy \(result.storagePolicy?.rawValue ?? -1), push-type LiveActivity\n")
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a channel.")
        @OptionGroup var common: Common
        @Option(name: .customLong("channel"), help: ArgumentHelp("The channel id (apns-channel-id).", valueName: "id")) var channelID: String

        func run() async throws {
            let result = try await common.perform { try await $0.deleteChannel(bundleID: common.app, id: channelID) }
            say("\(channelID): \(result.status) deleted\n")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the app's channel ids, one a line.")
        @OptionGroup var common: Common

        func run() async throws {
            let result = try await common.perform { try await $0.channels(bundleID: common.app) }
            let channels = result.channels ?? []
            if channels.isEmpty { FileHandle.standardError.write(Data("courier: \(common.app) has no channels\n".utf8)) }
            for channel in channels { say(channel + "\n") }
        }
    }
}

/// `courier broadcast`: one broadcast on a channel (`POST /4/broadcasts/apps/…`).
struct BroadcastCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "broadcast",
        abstract: "Send one broadcast on a channel to every device subscribed to it.",
        discussion: """
            Speaks the HTTP/2 provider API's broadcast path (default port 2197, sandbox 12197) with an auth key or a \
            provider certificate, prints the apns-request-id and the outcome, and exits non-zero when refused.
            """)

    @OptionGroup var provider: ProviderOptions
    @Option(help: ArgumentHelp("The app's bundle id.", valueName: "bundle-id")) var app: String
    @Option(name: .customLong("channel"), help: ArgumentHelp("The channel id (apns-channel-id).", valueName: "id")) var channelID: String
    @Option(help: ArgumentHelp("The payload: JSON, @file or - for standard input.", valueName: "json")) var payload: String
    @Option(help: "Expiration, seconds since 1970 (a channel of storage policy 0 takes only 0).") var expiration: UInt32?
    @Option(help: "Priority: 10 or 5.") var priority: UInt8?
    @Option(help: "The server port (default: 2197, sandbox 12197).") var port: Int?

    func validate() throws {
        try provider.checkFiles()
        try provider.checkCredentials()
        guard Identifiers.isBundleID(app) else { throw ValidationError("--app '\(app)' is not a bundle id") }
        if let priority, priority != 5, priority != 10 { throw ValidationError("--priority must be 10 or 5") }
        if !payload.hasPrefix("@"), payload != "-" { _ = try readPayload(payload) }
    }

    func run() async throws {
        let body = try readPayload(payload)
        var logger = Logger(label: "courier-broadcast")
        logger.logLevel = .warning
        let port = self.port ?? (provider.sandbox ? CourierConfiguration.EnvironmentPorts.sandbox : .production).http2
        let client = try provider.client(port: port, logger: logger)
        let broadcast = HTTP2Broadcast(
            bundleID: app, channelID: channelID, payload: body, expiration: expiration.map { Date(timeIntervalSince1970: TimeInterval($0)) },
            priority: priority.flatMap(Priority.init(rawValue:)))
        let result: HTTP2ChannelResult
        do {
            result = try await client.broadcast(broadcast)
            await client.close()
        } catch {
            await client.close()
            throw ValidationError(connectionProblem(error, host: provider.host, port: port, ca: provider.ca))
        }
        guard result.isSuccess else { throw refusal(result) }
        say("apns-request-id \(result.requestID): 200 sent on channel \(channelID)\n")
    }
}

/// A refused broadcast API request: its line on standard output, as
/// `courier push` prints a refusal, and a failure exit.
private func refusal(_ result: HTTP2ChannelResult) -> ExitCode {
    say("apns-request-id \(result.requestID): \(result.status) \(result.reason?.rawValue ?? "(no reason)")\n")
    return ExitCode.failure
}
