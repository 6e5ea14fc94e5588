import ArgumentParser
import CourierServer
import Foundation
import Logging

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run Courier.",
        discussion: """
            On first start with an empty data directory this creates everything a newcomer needs: a CA, a \
            server certificate for localhost, 127.0.0.1 and ::1, the device-token keys of both environments, \
            and a demo team with the app com.example.demo, an auth key and a provider certificate. It prints \
            where each file is. Later starts reuse the directory. SIGINT or SIGTERM stop it cleanly.
            """
    )

    @OptionGroup var options: DataOptions

    func run() async throws {
        // Before anything uses NIO's shared event loops.
        ProcessorAffinity.fitSharedThreads()
        let configuration = try options.load()
        if configuration.threads.realtimePriority > 0 {
            try RealtimeScheduling.applyToSharedEventLoops(priority: configuration.threads.realtimePriority)
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = Logger.Level(rawValue: configuration.logLevel) ?? .info
            return handler
        }
        let logger = Logger.courier(level: configuration.logLevel)
        // Every connection is a descriptor: the soft limit goes up to the
        // hard one, and the listeners' limits are fitted to it.
        let descriptors = DescriptorLimit.raise()
        let application: CourierApplication
        do {
            application = try await CourierApplication.build(configuration: configuration, logger: logger)
        } catch {
            throw ValidationError("\(error)")
        }
        let banner = Self.describe(application)
            + application.configuration.connections.describe(descriptorLimit: descriptors, configured: configuration.connections)
        try await application.serviceGroup(
            logger: logger,
            onReady: { ports in
                let data = application.configuration.dataDirectory
                let admin = ports["admin"].map { application.configuration.network.adminURL(port: $0) }
                do {
                    try PortsFile(admin: admin, ports: ports, pid: getpid()).write(dataDirectory: data)
                } catch {
                    logger.warning("could not write the ports file", metadata: ["courier.path": "\(PortsFile.path(dataDirectory: data))", "courier.error": "\(error)"])
                }
                BootstrapReport.firstStartFinished(dataDirectory: data)
                var text = banner
                if let device = application.report.demoDeviceDirectory, let bundle = application.report.demoBundleID {
                    // The port only when it is not the default the command takes.
                    let port = ports["device.production"].flatMap { $0 == 5223 ? nil : " --port \($0)" } ?? ""
                    text += "Run the demo device:\n  \(ProgramName.invocation) device run --identity \(device) --app \(bundle)\(port)\n"
                }
                if let port = ports["http2.production"], let demo = DemoCommands.demo(application, port: port) {
                    text += "Push to the demo device with courier (HTTP/2, token trust):\n" + DemoCommands.courierPush(demo, command: ProgramName.invocation) + "\n"
                    text += "or with curl and a JWT made by openssl, as Apple documents it (bash):\n" + DemoCommands.curl(demo) + "\n"
                }
                if let port = ports["admin"] {
                    text += Self.describe(admin: application, port: port)
                }
                say(text + Self.describe(ports: ports))
            }
        ).run()
        PortsFile.remove(dataDirectory: application.configuration.dataDirectory)
        say("Courier stopped.\n")
    }

    static func describe(_ application: CourierApplication) -> String {
        let report = application.report
        var text = "Courier data directory: \(application.configuration.dataDirectory)\n"
        if report.isFirstStart {
            text += "First start: created what a newcomer needs.\n"
        } else if report.finishesAnEarlierFirstStart {
            text += "First start: what a newcomer needs was created by a start that stopped before it was ready.\n"
        } else {
            text += "Reusing the existing data directory.\n"
        }
        text += "Store: \(application.configuration.storeDescription)\n"
        if let node = application.node { text += "Node: \(node) (several nodes may share this store)\n" }
        for file in report.files {
            text += "  \(file.created ? "created" : "found  ")  \(file.path)  (\(file.what))\n"
        }
        if let team = report.demoTeamID, let bundle = report.demoBundleID {
            text += "Demo: team \(team), app \(bundle)"
            if let key = report.demoKeyID { text += ", auth key \(key)" }
            text += "\n"
        }
        let virtual = application.configuration.virtualDevices.acceptAnyToken
        for environment in ["production", "sandbox"] where !(virtual[environment] ?? []).isEmpty {
            text += "Virtual devices: \(environment) apps that take any token on first use: \(virtual[environment]!.joined(separator: ", "))\n"
        }
        return text
    }

    static func describe(admin application: CourierApplication, port: Int) -> String {
        let url = application.configuration.network.adminURL(port: port)
        let ca = application.configuration.network.adminUsesTLS ? " --cacert \(application.provisioner.caCertificatePath)" : ""
        return "Admin API: \(url)  (token: \(application.report.adminToken))\n"
            + "  curl\(ca) -H 'Authorization: Bearer \(application.report.adminToken)' \(url)/v1/inbox\n"
            + "Web console: \(url)/  (sign in with the admin token)\n"
    }

    static func describe(ports: [String: Int]) -> String {
        var text = "Listening:\n"
        for (name, port) in ports.sorted(by: { $0.key < $1.key }) {
            text += "  \(name.padding(toLength: 20, withPad: " ", startingAt: 0)) \(port)\n"
        }
        text += "Courier is running. Press Ctrl-C to stop.\n"
        return text
    }
}
