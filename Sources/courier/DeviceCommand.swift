import ArgumentParser
import CourierCore
import CourierDevice
import CourierWire
import Dispatch
import Foundation
import Logging

struct DeviceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device",
        abstract: "Act as a device: receive notifications for an app, or report an app as removed.",
        discussion: "Identities come from 'courier pki device-cert --out DIR' (the first 'courier serve' makes one in courier-data/demo/device).",
        subcommands: [Run.self, Uninstall.self]
    )
}

/// Options of both device commands.
struct DeviceOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The device identity folder.", valueName: "dir")) var identity: String
    @Option(help: ArgumentHelp("The app's bundle id.", valueName: "bundle-id")) var app: String
    @Flag(help: "Use the sandbox device gateway instead of production.") var sandbox = false
    @Option(help: "The gateway host (default: identity.json's).") var host: String?
    @Option(help: "The gateway port (default: identity.json's).") var port: Int?
    @Option(
        name: .customLong("gateway"),
        help: ArgumentHelp(
            "A gateway of one of several nodes (repeatable): tried in turn, a lost connection moves on to the next.", valueName: "host:port"))
    var gateways: [String] = []

    var environment: Environment { sandbox ? .sandbox : .production }

    func validate() throws {
        guard Identifiers.isBundleID(app) else { throw ValidationError("'\(app)' is not a bundle id") }
        if let port, !(1...65_535).contains(port) { throw ValidationError("--port \(port) is not a port") }
        for gateway in gateways where DeviceClient.Gateway(gateway) == nil {
            throw ValidationError("--gateway '\(gateway)' is not host:port")
        }
        if !gateways.isEmpty, host != nil || port != nil { throw ValidationError("--gateway replaces --host and --port; give one or the other") }
    }

    /// `reconnect`: keep trying for ever (a refusal still ends it), saying
    /// each change of the connection on standard error.
    func client(reconnect: Bool = false) throws -> DeviceClient {
        let credentials: DeviceCredentials
        do {
            credentials = try DeviceCredentials.load(from: identity)
        } catch {
            throw ValidationError("\(error)")
        }
        var logger = Logger(label: "courier-device")
        logger.logLevel = .warning
        var onChange: (@Sendable (ConnectionChange) -> Void)?
        if reconnect {
            onChange = { @Sendable change in
                FileHandle.standardError.write(Data(("courier: " + DeviceOptions.describe(change) + "\n").utf8))
            }
        }
        return try DeviceClient(
            credentials: credentials, environment: environment,
            options: .init(
                host: host, port: port, gateways: gateways.compactMap(DeviceClient.Gateway.init), attempts: reconnect ? nil : 3 * max(1, gateways.count),
                onChange: onChange, stopOnRefusal: reconnect), logger: logger)
    }

    static func describe(_ change: ConnectionChange) -> String {
        switch change {
        case .connected(let endpoint, let again): "\(again ? "connected again" : "connected") to \(endpoint)"
        case .lost(let endpoint, let reason): "lost the connection to \(endpoint) (\(reason)); reconnecting"
        case .unreachable(let endpoint, let reason):
            "cannot connect to \(endpoint) (\(reason)); trying again, backing off up to 30 s — is 'courier serve' running there? (the port is identity.json's unless --port gives another)"
        case .refused(let endpoint, let reason): "\(endpoint) refused this device (\(reason))"
        }
    }
}

/// Runs `body` with a connected client; SIGINT and SIGTERM stop it.
func withConnectedDevice(
    _ options: DeviceOptions, reconnect: Bool = false, _ body: @escaping @Sendable (DeviceClient) async throws -> Void
) async throws {
    let client = try options.client(reconnect: reconnect)
    let running = Task { await client.run() }
    signal(SIGINT, SIG_IGN)
    signal(SIGTERM, SIG_IGN)
    let sources = [SIGINT, SIGTERM].map { number in
        let source = DispatchSource.makeSignalSource(signal: number)
        source.setEventHandler { Task { await client.stop() } }
        source.resume()
        return source
    }
    defer { sources.forEach { $0.cancel() } }
    do {
        try await client.waitUntilConnected()
        try await body(client)
    } catch {
        await client.stop()
        await running.value
        if let refusal = await client.refusal { throw ValidationError("the gateway refused this device: \(refusal)") }
        // Stopped by a signal before it connected: not a failure.
        if case DeviceClientError.stopped = error { return }
        throw ValidationError("\(error)")
    }
    await client.stop()
    await running.value
}

extension DeviceCommand {
    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Connect, print the app's token in hex, then print each notification as one JSON line and acknowledge it.",
            discussion: """
                With --live-activity-push-to-start it also prints the app's Live Activity push-to-start token, and with \
                --live-activities N starts N Live Activities and prints each one's update token (pushes of type \
                liveactivity to <bundle>.push-type.liveactivity, token trust). With --subscribe CHANNEL (repeatable) the app \
                subscribes to those broadcast channels, again on every reconnection. A notification's line names the token it \
                was sent to, and a broadcast's its channel.
                """)

        @OptionGroup var options: DeviceOptions
        @Flag(help: "Also print the app's Live Activity push-to-start token.") var liveActivityPushToStart = false
        @Option(help: "Start this many Live Activities and print their update tokens.") var liveActivities = 0
        @Option(help: ArgumentHelp("Subscribe the app to this broadcast channel (repeatable).", valueName: "channel-id")) var subscribe: [String] = []

        func validate() throws {
            guard (0...100).contains(liveActivities) else { throw ValidationError("--live-activities must be 0 to 100, not \(liveActivities)") }
        }

        func run() async throws {
            let app = options.app
            try await withConnectedDevice(options, reconnect: true) { client in
                let token = try await client.register(app)
                say("token \(Hex.encode(token))\n")
                if liveActivityPushToStart {
                    say("push-to-start token \(Hex.encode(try await client.liveActivityPushToStartToken(app)))\n")
                }
                for _ in 0..<liveActivities {
                    let activity = try await client.startLiveActivity(app)
                    say("live activity \(activity.activity) token \(Hex.encode(activity.token))\n")
                }
                for channel in subscribe {
                    try await client.subscribe(app, to: channel)
                    say("subscribed to channel \(channel)\n")
                }
                for await notification in client.notifications {
                    say(Run.jsonLine(notification) + "\n")
                    try? await client.acknowledge(notification)
                }
                // The notifications end when the client stops: by a signal
                // (exit 0), or because the gateway refused the device.
                if let refusal = await client.refusal { throw ValidationError("the gateway refused this device: \(refusal)") }
            }
        }

        /// `{"id":…,"topic":…,"priority":…,"token":…,"pushType":…,"channel":…,"payload":{…}}`
        /// (`pushType` when sent, `channel` for a broadcast)
        static func jsonLine(_ notification: DeviceNotification) -> String {
            let payload = String(validating: notification.payload, as: UTF8.self).flatMap { text in
                (try? JSONSerialization.jsonObject(with: Data(text.utf8))) != nil ? JSONText.compact(text) : nil
            }
            let topic = String(decoding: (try? JSONSerialization.data(withJSONObject: [notification.topic])) ?? Data("[\"\"]".utf8), as: UTF8.self)
                .dropFirst().dropLast()
            let body = payload ?? "\"\(Data(notification.payload).base64EncodedString())\""
            // Apple's push types are lower-case letters: nothing to escape; any other value is left out.
            let pushType = notification.pushType.flatMap(PushType.init(rawValue:)).map { #","pushType":"\#($0.rawValue)""# } ?? ""
            // A channel id the server sent is base64: nothing to escape; any other value is left out.
            let channel = notification.channelID.flatMap { BroadcastChannel.isWellFormedID($0) ? #","channel":"\#($0)""# : nil } ?? ""
            return #"{"id":"\#(notification.id.lowercasedString)","topic":\#(topic),"priority":\#(notification.priority),"token":"\#(Hex.encode(notification.token))"\#(pushType)\#(channel),"payload":\#(body)}"#
        }
    }

    struct Uninstall: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Report the app as removed from the device: pushes to its token become Unregistered.")

        @OptionGroup var options: DeviceOptions

        func run() async throws {
            let app = options.app
            try await withConnectedDevice(options) { client in
                try await client.unregister(app)
                say("unregistered \(app)\n")
            }
        }
    }
}
