import ArgumentParser
import CourierCore
import Foundation

/// `courier virtual`: virtual devices (docs/virtual-devices.md) over the
/// admin API — a team's own Apple tokens registered to its app.
struct VirtualCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "virtual",
        abstract: "Register, list, change and remove virtual devices: tokens Courier did not issue (a team's own Apple tokens).",
        discussion: """
            A push to a virtual token passes every check a real token's does and is taken at once ("delivered to a \
            virtual device" in its delivery log), held while the token is offline, or refused Unregistered once it \
            is uninstalled.
            """,
        subcommands: [Add.self, List.self, Set.self, Remove.self])

    /// The app and environment every subcommand names.
    struct AppOptions: ParsableArguments {
        @Option(help: ArgumentHelp("The app's bundle id.", valueName: "bundle-id")) var app: String
        @Option(help: "production or sandbox.") var environment: String = "production"

        var path: String { "v1/apps/\(app)/virtual-tokens" }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register tokens (64 hex digits each), from the arguments or a file of one per line ('-': standard input).")
        @OptionGroup var admin: AdminOptions
        @OptionGroup var target: AppOptions
        @Option(help: ArgumentHelp("A file of tokens, one per line ('-' for standard input).", valueName: "path")) var file: String?
        @Argument(help: ArgumentHelp("Tokens in hex.", valueName: "token")) var tokens: [String] = []

        func run() async throws {
            var all = tokens
            if let file {
                let data = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: file)
                guard let data else { throw ValidationError("cannot read \(file)") }
                all += String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter {
                    !$0.isEmpty && !$0.hasPrefix("#")
                }
            }
            guard !all.isEmpty else { throw ValidationError("no tokens: give them as arguments or with --file") }
            let body = try JSONSerialization.data(withJSONObject: ["environment": target.environment, "tokens": all] as [String: Any])
            let data = try await adminCall { try await admin.client().send("POST", target.path, body: body, timeout: 300) }
            let answer = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
            say("Registered \(answer["added"] ?? 0) virtual token(s) of \(target.app) in \(target.environment) (\(answer["existing"] ?? 0) registered already; \(answer["total"] ?? 0) in all).\n")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List an app's virtual tokens, one per line: token, online or offline, uninstalled time.")
        @OptionGroup var admin: AdminOptions
        @OptionGroup var target: AppOptions
        @Option(help: "Tokens at most (every one when not given).") var limit: Int?

        func run() async throws {
            let client = try admin.client()
            var after: String?
            var printed = 0
            repeat {
                let page = min(10_000, limit.map { $0 - printed } ?? 10_000)
                guard page > 0 else { break }
                var query = [("environment", target.environment), ("limit", String(page))]
                if let after { query.append(("after", after)) }
                let data = try await adminCall { try await client.get(target.path, query: query) }
                let answer = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
                if printed == 0, (answer["total"] as? Int ?? 0) == 0 { say("No virtual tokens of \(target.app) in \(target.environment).\n") }
                for token in answer["tokens"] as? [[String: Any]] ?? [] {
                    var line = "\(token["token"] ?? "?")  \(token["online"] as? Bool == false ? "offline" : "online")"
                    if let at = token["uninstalledAt"] as? String { line += "  uninstalled \(at)" }
                    say(line + "\n")
                    printed += 1
                }
                after = answer["next"] as? String
            } while after != nil
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set", abstract: "Set a virtual token offline or online, uninstall it (at a time) or install it again.")
        @OptionGroup var admin: AdminOptions
        @OptionGroup var target: AppOptions
        @Flag(help: "Hold its pushes, as for a device that is offline.") var offline = false
        @Flag(help: "Take its pushes at once, and what was held.") var online = false
        @Flag(help: "Uninstalled: pushes get 410 Unregistered (and a feedback entry).") var uninstalled = false
        @Option(name: .customLong("uninstalled-at"), help: ArgumentHelp("The uninstall's time (ISO 8601 or seconds since 1970).", valueName: "time"))
        var uninstalledAt: String?
        @Flag(help: "Installed again.") var installed = false
        @Argument(help: ArgumentHelp("The token in hex.", valueName: "token")) var token: String

        func run() async throws {
            guard !(offline && online) else { throw ValidationError("give --offline or --online, not both") }
            guard !(installed && (uninstalled || uninstalledAt != nil)) else { throw ValidationError("give --uninstalled or --installed, not both") }
            var body: [String: Any] = ["environment": target.environment]
            if offline || online { body["online"] = online }
            if uninstalled || uninstalledAt != nil { body["uninstalledAt"] = uninstalledAt.map { Double($0).map { $0 as Any } ?? $0 } ?? "now" }
            if installed { body["uninstalledAt"] = NSNull() }
            guard body.count > 1 else { throw ValidationError("nothing to change: give --offline, --online, --uninstalled [--uninstalled-at T] or --installed") }
            let data = try await adminCall {
                try await admin.client().send("PATCH", target.path + "/\(token)", body: JSONSerialization.data(withJSONObject: body))
            }
            let answer = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
            var state = answer["online"] as? Bool == false ? "offline" : "online"
            if let at = answer["uninstalledAt"] as? String { state += ", uninstalled \(at)" }
            say("\(token): \(state).\n")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rm", abstract: "Remove virtual tokens (--all: every one of the app in the environment).")
        @OptionGroup var admin: AdminOptions
        @OptionGroup var target: AppOptions
        @Flag(help: "Every virtual token of the app in the environment.") var all = false
        @Argument(help: ArgumentHelp("Tokens in hex.", valueName: "token")) var tokens: [String] = []

        func run() async throws {
            guard all != !tokens.isEmpty else { throw ValidationError("give tokens, or --all") }
            let client = try admin.client()
            var removed = 0
            if all {
                let data = try await adminCall { try await client.send("DELETE", target.path, query: [("environment", target.environment)]) }
                removed = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["removed"] as? Int ?? 0
            }
            for token in tokens {
                _ = try await adminCall { try await client.send("DELETE", target.path + "/\(token)", query: [("environment", target.environment)]) }
                removed += 1
            }
            say("Removed \(removed) virtual token(s).\n")
        }
    }
}

/// An admin call whose refusal is the command's one-line error.
private func adminCall(_ call: () async throws -> Data) async throws -> Data {
    do {
        return try await call()
    } catch let failure as AdminFailure {
        throw ValidationError(failure.message)
    }
}
