import ArgumentParser
import CourierCore
import CourierPKI
import CourierServer
import Foundation
import Logging

struct PKI: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pki",
        abstract: "Create and revoke Courier's certificates, keys, teams and apps.",
        discussion: """
            Every file is standard PEM (certificates) or PKCS#8 PEM (private keys), usable by curl, openssl and \
            every APNs client. All commands work on the data directory (--data, default ./courier-data); \
            'courier serve' creates the CA there on first start, or run 'courier pki ca'.
            """,
        subcommands: [
            CA.self, ServerCert.self, TeamCommand.self, AppCommand.self, ProviderCert.self, AuthKeyCommand.self, DeviceCert.self,
            TrustCA.self, Revoke.self, List.self,
        ]
    )
}

/// Runs `body` with a provisioner over the data directory, turning
/// provisioning errors into one-line command-line errors.
func withProvisioner<T>(_ options: DataOptions, _ body: (Provisioner) async throws -> T) async throws -> T {
    let configuration = try options.load()
    let provisioner: Provisioner
    do {
        provisioner = try await Provisioner.open(configuration: configuration, logger: .courier(level: "warning"))
    } catch {
        throw ValidationError("\(error)")
    }
    do {
        let result = try await body(provisioner)
        try await provisioner.close()
        return result
    } catch let error as ValidationError {
        try? await provisioner.close()
        throw error
    } catch {
        try? await provisioner.close()
        throw ValidationError("\(error)")
    }
}

func report(_ files: [ProvisionedFile]) {
    for file in files { say("\(file.created ? "created" : "found  ")  \(file.what): \(file.path)\n") }
}

extension PKI {
    /// `--env`: production, sandbox or both.
    static func environments(_ env: String) throws -> Set<Environment> {
        switch env {
        case "both": Set(Environment.allCases)
        case "production": [.production]
        case "sandbox": [.sandbox]
        default: throw ValidationError("--env must be production, sandbox or both, not '\(env)'")
        }
    }

    struct CA: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create the certificate authority (ca.pem, ca-key.pem in the data directory's pki folder).",
            discussion: "Does nothing when a CA exists, unless --force replaces it (every certificate it signed stops being trusted).")

        @OptionGroup var options: DataOptions
        @Flag(help: "Replace an existing CA.") var force = false

        func run() async throws {
            try await withProvisioner(options) { provisioner in
                report(try await provisioner.createAuthority(force: force))
            }
        }
    }

    struct ServerCert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "server-cert",
            abstract: "Issue a TLS server certificate for DNS names and IP addresses.")

        @OptionGroup var options: DataOptions
        @Option(name: .customLong("dns"), help: "A DNS name (repeat for more).") var dnsNames: [String] = []
        @Option(name: .customLong("ip"), help: "An IPv4 or IPv6 address (repeat for more).") var ipAddresses: [String] = []
        @Option(help: ArgumentHelp("Where to write the certificate.", valueName: "file")) var out: String
        @Option(help: ArgumentHelp("Where to write the private key.", valueName: "file")) var keyOut: String

        func validate() throws {
            if dnsNames.isEmpty && ipAddresses.isEmpty { throw ValidationError("give at least one --dns or --ip") }
        }

        func run() async throws {
            try await withProvisioner(options) { provisioner in
                report(try await provisioner.issueServerCertificate(dnsNames: dnsNames, ipAddresses: ipAddresses, certificatePath: out, keyPath: keyOut))
            }
        }
    }

    struct TeamCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "team", abstract: "Create a team.")

        @OptionGroup var options: DataOptions
        @Option(help: "The team id: ten characters A-Z, 0-9 (default: a new random one).") var id: String?
        @Option(help: "The team's name.") var name: String

        func run() async throws {
            try await withProvisioner(options) { provisioner in
                let team = try await provisioner.createTeam(id: id ?? AuthKey.randomID(), name: name)
                say("created  team \(team.id) (\(team.name))\n")
            }
        }
    }

    struct AppCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "app",
            abstract: "Create an app (bundle id) of a team, with its topics: <bundle>, <bundle>.voip, <bundle>.complication and the others of docs/protocol.md.")

        @OptionGroup var options: DataOptions
        @Option(help: "The bundle id, e.g. com.example.app.") var bundle: String
        @Option(help: "The team id.") var team: String
        @Option(name: .customLong("topic-kind"), help: "A topic kind: app, voip, complication, fileprovider, location, liveactivity, pushtotalk, widgets or controls (repeat; default: all).")
        var kinds: [String] = []

        func run() async throws {
            var parsed = Set<TopicKind>()
            for kind in kinds {
                guard let value = TopicKind(rawValue: kind) else { throw ValidationError(TopicKind.unknown(kind)) }
                parsed.insert(value)
            }
            let topicKinds = parsed.isEmpty ? Set(TopicKind.allCases) : parsed
            try await withProvisioner(options) { provisioner in
                let app = try await provisioner.createApp(bundleID: bundle, teamID: team, kinds: topicKinds)
                say("created  app \(app.bundleID) of team \(app.teamID), topics \(app.topics.map(\.description).joined(separator: ", "))\n")
            }
        }
    }

    struct ProviderCert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "provider-cert",
            abstract: "Issue a provider certificate for an app (binary API, feedback, HTTP/2 certificate trust).",
            discussion: "The certificate carries the app's topics (extension 1.2.840.113635.100.6.3.6), the environment extensions and the bundle id as subject UID.")

        @OptionGroup var options: DataOptions
        @Option(help: "The app's bundle id.") var bundle: String
        @Option(help: "production, sandbox or both.") var env: String = "both"
        @Option(help: ArgumentHelp("The folder to write <bundle>.pem and <bundle>-key.pem into.", valueName: "dir")) var out: String = "."
        @Flag(help: "Write the topics as a plain SEQUENCE of UTF8Strings instead of Apple's layout.") var plainTopics = false
        @Flag(help: "No topics extension: the bundle id (the subject's UID) is the only topic, as in Apple's certificates before universal ones.")
        var uidOnly = false

        func validate() throws {
            if plainTopics && uidOnly { throw ValidationError("--plain-topics and --uid-only are two layouts: give one") }
        }

        func run() async throws {
            let environments = try PKI.environments(env)
            try await withProvisioner(options) { provisioner in
                let (_, files) = try await provisioner.issueProviderCertificate(
                    bundleID: bundle, environments: environments, directory: out, layout: uidOnly ? .uidOnly : plainTopics ? .plain : .apple)
                report(files)
            }
        }
    }

    struct AuthKeyCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "auth-key", abstract: "Create an ES256 auth key for a team (AuthKey_<KEYID>.p8) for HTTP/2 token trust.",
            discussion: "With --import, takes a key the team already has (the AuthKey_<KEYID>.p8 Apple gave it) so that its "
                + "provider code keeps its key file and key id; the key id is read from the file name unless --key-id gives it.")

        @OptionGroup var options: DataOptions
        @Option(help: "The team id.") var team: String
        @Option(help: ArgumentHelp("The folder to write the .p8 file into.", valueName: "dir")) var out: String = "."
        @Option(name: .customLong("import"), help: ArgumentHelp("An existing .p8 to take instead of making one.", valueName: "file"))
        var importPath: String?
        @Option(name: .customLong("key-id"), help: "The imported key's id (default: from AuthKey_<KEYID>.p8).") var keyID: String?
        @Option(help: "The environments its tokens are good for: production, sandbox or both (a team-scoped key is one).") var env: String = "both"
        @Option(
            name: .customLong("bundle"),
            help: "A topic-specific key: an app of the team it may push to (repeat; default: a team-scoped key, every app).")
        var bundleIDs: [String] = []

        var scope: Provisioner.AuthKeyScope {
            get throws { Provisioner.AuthKeyScope(environments: try PKI.environments(env), bundleIDs: bundleIDs.isEmpty ? nil : Set(bundleIDs)) }
        }

        /// The key id of an imported key: given, or from Apple's file name.
        func importedKeyID(_ path: String) throws -> String {
            if let keyID { return keyID }
            let name = URL(fileURLWithPath: path).lastPathComponent
            guard name.hasPrefix("AuthKey_"), name.hasSuffix(".p8") else {
                throw ValidationError("\(name) is not named AuthKey_<KEYID>.p8: give --key-id")
            }
            return String(name.dropFirst("AuthKey_".count).dropLast(".p8".count))
        }

        func run() async throws {
            if let importPath {
                let keyID = try importedKeyID(importPath)
                guard let p8 = try? String(contentsOfFile: importPath, encoding: .utf8) else { throw ValidationError("cannot read \(importPath)") }
                try await withProvisioner(options) { provisioner in
                    let key = try await provisioner.importAuthKey(teamID: team, keyID: keyID, p8: p8, scope: try scope)
                    say("imported auth key \(key.keyID) of team \(key.teamID) (Courier keeps its public key; the .p8 stays yours)\n")
                }
                return
            }
            if keyID != nil { throw ValidationError("--key-id goes with --import") }
            try await withProvisioner(options) { provisioner in
                let (key, file) = try await provisioner.createAuthKey(teamID: team, scope: try scope, directory: out)
                report([file])
                say("key id: \(key.keyID)\nteam id: \(key.teamID)\n")
            }
        }
    }

    struct DeviceCert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "device-cert",
            abstract: "Activate a device: a device id, its certificate and key, the CA and identity.json in one folder.")

        @OptionGroup var options: DataOptions
        @Option(help: ArgumentHelp("The identity folder to create.", valueName: "dir")) var out: String

        func run() async throws {
            try await withProvisioner(options) { provisioner in
                let (device, files) = try await provisioner.issueDeviceIdentity(directory: out)
                report(files)
                say("device id: \(String(device.id, radix: 16))\n")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a certificate (by serial) or an auth key (by key id).",
            discussion: "A revoked certificate fails the TLS handshake; a revoked key's tokens are InvalidProviderToken.")

        @OptionGroup var options: DataOptions
        @Option(help: "The certificate's serial number in hex (as 'courier pki list' shows it).") var serial: String?
        @Option(name: .customLong("key-id"), help: "The auth key's id.") var keyID: String?

        func validate() throws {
            if (serial == nil) == (keyID == nil) { throw ValidationError("give exactly one of --serial and --key-id") }
        }

        func run() async throws {
            try await withProvisioner(options) { provisioner in
                if let serial {
                    try await provisioner.revokeCertificate(serial: serial)
                    say("revoked  certificate \(serial.lowercased())\n")
                } else if let keyID {
                    try await provisioner.revokeAuthKey(keyID: keyID)
                    say("revoked  auth key \(keyID)\n")
                }
            }
        }
    }

    struct TrustCA: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "trust-ca", abstract: "Accept the provider certificates of another authority, such as Apple's WWDR.",
            discussion: """
                A certificate of that authority connects unchanged once its team (the subject's OU) and apps exist \
                here ('courier pki team --id', 'courier pki app'); it is then listed and revoked like Courier's own. \
                Running servers take the authority at their next handshake. To stop trusting it, remove its file.
                """)

        @OptionGroup var options: DataOptions
        @Option(help: ArgumentHelp("The authority's certificate, PEM or DER (.cer).", valueName: "file")) var file: String

        func run() async throws {
            guard let contents = FileManager.default.contents(atPath: file) else { throw ValidationError("cannot read \(file)") }
            try await withProvisioner(options) { provisioner in
                let (_, file) = try provisioner.trustProviderAuthority(Array(contents))
                report([file])
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List teams, apps, auth keys and certificates.")

        @OptionGroup var options: DataOptions

        func run() async throws {
            try await withProvisioner(options) { provisioner in
                for (team, apps, keys) in try await provisioner.inventory() {
                    say("team \(team.id)  \(team.name)\n")
                    for app in apps {
                        say("  app \(app.bundleID)  topics \(app.topics.map(\.description).joined(separator: ", "))\n")
                    }
                    for key in keys {
                        let scope = key.environments.count == 2 ? "" : "  \(key.environments.map(\.rawValue).sorted().joined(separator: ", ")) only"
                        let apps = key.bundleIDs.map { "  apps \($0.sorted().joined(separator: ", "))" } ?? ""
                        say("  auth key \(key.keyID)\(scope)\(apps)\(key.revokedAt == nil ? "" : "  REVOKED")\n")
                    }
                }
                for authority in provisioner.providerAuthorities() {
                    say("trusted provider authority  \(authority.subject)\n")
                }
                for certificate in try await provisioner.certificates(kind: nil) {
                    let state = certificate.revokedAt == nil ? "" : "  REVOKED"
                    say("certificate \(certificate.kind.rawValue)  serial \(certificate.serial)  \(certificate.subject)\(state)\n")
                }
            }
        }
    }
}
