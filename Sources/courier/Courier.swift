import ArgumentParser
import CourierServer
import Foundation
import Logging

@main
struct Courier: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier",
        abstract: "A self-hosted Apple Push Notification service.",
        discussion: """
            Courier speaks APNs' provider APIs (binary and HTTP/2) and feedback service, and delivers to \
            devices over its own TLS device protocol. Start with 'courier serve'.
            """,
        version: CourierVersion.text,
        subcommands: [
            Serve.self, PKI.self, DeviceCommand.self, PushCommand.self, BroadcastCommand.self, ChannelCommand.self, FeedbackCommand.self, InboxCommand.self, LogCommand.self, StatusCommand.self,
            FaultCommand.self, VirtualCommand.self,
        ]
    )

    /// Runs the command line. Help goes to standard output; any error is
    /// one line on standard error, "courier: <problem>", and a non-zero exit.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            // A command that printed its outcome and only sets the exit code.
            if let exit = error as? ExitCode { Foundation.exit(exit.rawValue) }
            let message = fullMessage(for: error)
            if code == .success {
                if !message.isEmpty { say(message + "\n") }
                Foundation.exit(0)
            }
            var line = message.split(separator: "\n").first.map(String.init) ?? "failed"
            if line.hasPrefix("Error: ") { line.removeFirst("Error: ".count) }
            FileHandle.standardError.write(Data("courier: \(line)\n".utf8))
            Foundation.exit(code.rawValue == 0 ? 1 : code.rawValue)
        }
    }
}

/// Options every command that works on a data directory takes.
struct DataOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The data directory (certificates, keys, database).", valueName: "dir"))
    var data: String?

    @Option(name: .long, help: ArgumentHelp("A JSON configuration file (see docs/configuration.md).", valueName: "file"))
    var config: String?

    /// The configuration: the file's, then `--data` over it.
    func load() throws -> CourierConfiguration {
        var configuration = CourierConfiguration()
        if let config {
            do {
                configuration = try CourierConfiguration.load(contentsOf: config)
            } catch let error as ConfigurationError {
                throw ValidationError(error.message)
            }
        }
        if let data { configuration.dataDirectory = data }
        return configuration
    }
}

extension Logger {
    /// The command line's logger, writing to standard error.
    static func courier(level: String) -> Logger {
        var logger = Logger(label: "courier")
        logger.logLevel = Logger.Level(rawValue: level) ?? .info
        return logger
    }
}

/// Writes to standard output at once (no buffering), so that a program
/// reading the output sees each line when it happens.
func say(_ text: String) {
    FileHandle.standardOutput.write(Data(text.utf8))
}
