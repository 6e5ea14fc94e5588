import CourierCore
import CourierPKI
import Foundation
import Hummingbird

/// Provisioning over the admin API (docs/admin-api.md, "Provisioning"):
/// the operations of `courier pki`, through the same `Provisioner`.
/// Secrets — an auth key's `.p8`, a certificate's private key — are in
/// the answer that made them and nowhere else: Courier does not keep them.
/// A revocation takes effect at once: the connections it ends are closed
/// before the answer (`afterRevocation`).
struct ProvisioningRoutes {
    let provisioner: Provisioner
    let afterRevocation: @Sendable () async -> Void

    func add(to api: RouterGroup<BasicRequestContext>) {
        api.get("teams") { [provisioner] _, _ in
            // The console's own key of a team is kept under console/<team>/ (ConsolePush): marked, so that the list explains it.
            let console = provisioner.configuration.resolve("console")
            return TeamList(
                teams: try await provisioner.inventory().map { entry in
                    TeamJSON(entry) { FileManager.default.fileExists(atPath: "\(console)/\(entry.team.id)/AuthKey_\($0).p8") }
                })
        }
        api.post("teams") { [provisioner] request, context in
            let body = try await request.decode(as: NewTeam.self, context: context)
            let team = try await provisioner.createTeam(id: body.id, name: body.name)
            return EditedResponse(status: .created, response: TeamJSON((team, [], [])))
        }
        api.post("apps") { [provisioner] request, context in
            let body = try await request.decode(as: NewApp.self, context: context)
            var kinds = Set(TopicKind.allCases)
            if let names = body.topicKinds {
                kinds = Set(
                    try names.map { name in
                        guard let kind = TopicKind(rawValue: name) else {
                            throw HTTPError(.unprocessableContent, message: TopicKind.unknown(name))
                        }
                        return kind
                    })
                guard !kinds.isEmpty else { throw HTTPError(.unprocessableContent, message: "'topicKinds' is empty: give at least one") }
            }
            let app = try await provisioner.createApp(bundleID: body.bundleID, teamID: body.teamID, kinds: kinds)
            return EditedResponse(status: .created, response: AppJSON(app))
        }
        api.post("teams/:teamID/keys") { [provisioner] request, context in
            let teamID = try decoded(context, "teamID")
            let body = try await request.body.collect(upTo: 64 * 1024)
            // No body, or one without a .p8: a new key. With a .p8: a key
            // the team has, imported.
            let given = body.readableBytes > 0 ? try JSONDecoder().decode(KeyRequest.self, from: body) : KeyRequest()
            let scope = Provisioner.AuthKeyScope(environments: try environments(given.environments), bundleIDs: given.bundleIDs.map(Set.init))
            guard let p8 = given.p8 else {
                guard given.keyID == nil else { throw HTTPError(.unprocessableContent, message: "'keyID' goes with 'p8': a new key gets its own id") }
                let created = try await provisioner.createAuthKey(teamID: teamID, scope: scope)
                return EditedResponse(status: .created, response: KeyAnswer.created(NewAuthKeyJSON(created)))
            }
            guard let keyID = given.keyID else { throw HTTPError(.unprocessableContent, message: "'p8' needs 'keyID': the key's id") }
            let record = try await provisioner.importAuthKey(teamID: teamID, keyID: keyID, p8: p8, scope: scope)
            return EditedResponse(status: .created, response: KeyAnswer.imported(ImportedKeyJSON(record)))
        }
        api.post("keys/:keyID/revoke") { [provisioner, afterRevocation] _, context in
            let keyID = try decoded(context, "keyID")
            try await provisioner.revokeAuthKey(keyID: keyID)
            await afterRevocation()
            return Revoked(revoked: keyID)
        }
        api.get("certificates") { [provisioner] request, _ in
            var kind: CertificateKind?
            if let text = query(request)["kind"] {
                guard let value = CertificateKind(rawValue: text) else {
                    throw HTTPError(.badRequest, message: "'kind' must be one of \(CertificateKind.allNames)")
                }
                kind = value
            }
            return CertificateList(certificates: try await provisioner.certificates(kind: kind).map(CertificateJSON.init))
        }
        api.post("apps/:bundleID/certificates") { [provisioner] request, context in
            let bundleID = try decoded(context, "bundleID")
            let body = try await request.decode(as: NewProviderCertificate.self, context: context)
            let layout = try body.topicsLayout.map { name in
                guard let layout = CertificateAuthority.TopicsLayout(rawValue: name) else {
                    throw HTTPError(.unprocessableContent, message: "unknown topics layout '\(name)': use apple, plain or uid-only")
                }
                return layout
            }
            let issued = try await provisioner.issueProviderCertificate(
                bundleID: bundleID, environments: try environments(body.environments), layout: layout ?? .apple)
            return EditedResponse(status: .created, response: IssuedCertificateJSON(issued))
        }
        api.post("certificates/:serial/revoke") { [provisioner, afterRevocation] _, context in
            let serial = try decoded(context, "serial")
            try await provisioner.revokeCertificate(serial: serial)
            await afterRevocation()
            return Revoked(revoked: serial.lowercased().replacingOccurrences(of: ":", with: ""))
        }
        api.post("devices") { [provisioner] _, _ in
            EditedResponse(status: .created, response: DeviceIdentityJSON(try await provisioner.issueDeviceIdentity()))
        }
    }
}

/// A path parameter as the client meant it (percent-encoding undone).
private func decoded(_ context: BasicRequestContext, _ name: String) throws -> String {
    let raw = try context.parameters.require(name)
    guard let text = raw.removingPercentEncoding else { throw HTTPError(.badRequest, message: "'\(raw)' is not a valid \(name)") }
    return text
}

extension CertificateKind {
    static var allNames: String { [CertificateKind.authority, .server, .provider, .device].map(\.rawValue).joined(separator: ", ") }
}

// MARK: Bodies

struct NewTeam: Decodable {
    var id: String
    var name: String
}

struct NewApp: Decodable {
    var bundleID: String
    var teamID: String
    /// `TopicKind` names; default all.
    var topicKinds: [String]?
}

/// The environments a request names; default (none named) both.
private func environments(_ names: [String]?) throws -> Set<CourierCore.Environment> {
    guard let names else { return Set(CourierCore.Environment.allCases) }
    return Set(
        try names.map { name in
            guard let environment = CourierCore.Environment(rawValue: name) else {
                throw HTTPError(.unprocessableContent, message: "unknown environment '\(name)': use production or sandbox")
            }
            return environment
        })
}

/// A new key's scope, or a team's existing key (its id and its `.p8`)
/// with its scope.
struct KeyRequest: Decodable {
    var keyID: String?
    var p8: String?
    /// production, sandbox; default both.
    var environments: [String]?
    /// A topic-specific key's apps; default none (team-scoped).
    var bundleIDs: [String]?
}

struct NewProviderCertificate: Decodable {
    /// production, sandbox; default both.
    var environments: [String]?
    /// apple (default), plain or uid-only.
    var topicsLayout: String?
}

// MARK: Answers

struct TeamList: ResponseCodable {
    var teams: [TeamJSON]
}

struct TeamJSON: ResponseCodable {
    var id: String
    var name: String
    var createdAt: String
    var apps: [AppJSON]
    var authKeys: [AuthKeyJSON]

    /// `isConsoleKey`: whether a key id is the console's own for the team.
    init(_ entry: (team: Team, apps: [App], keys: [AuthKeyRecord]), isConsoleKey: (String) -> Bool = { _ in false }) {
        id = entry.team.id
        name = entry.team.name
        createdAt = adminTime(entry.team.createdAt)
        apps = entry.apps.map(AppJSON.init)
        authKeys = entry.keys.map { key in
            var json = AuthKeyJSON(key)
            if isConsoleKey(key.keyID) { json.usedByConsole = true }
            return json
        }
    }
}

struct AppJSON: ResponseCodable {
    var bundleID: String
    var teamID: String
    var topics: [String]
    var createdAt: String

    init(_ app: App) {
        bundleID = app.bundleID
        teamID = app.teamID
        topics = app.topics.map(\.description)
        createdAt = adminTime(app.createdAt)
    }
}

struct AuthKeyJSON: Codable {
    var keyID: String
    var createdAt: String
    var revokedAt: String?
    var environments: [String]
    /// A topic-specific key's apps; nil for a team-scoped key.
    var bundleIDs: [String]?
    /// True for the key the web console made to send its test pushes for the team.
    var usedByConsole: Bool?

    init(_ key: AuthKeyRecord) {
        keyID = key.keyID
        createdAt = adminTime(key.createdAt)
        revokedAt = key.revokedAt.map(adminTime)
        environments = key.environments.map(\.rawValue).sorted()
        bundleIDs = key.bundleIDs?.sorted()
    }
}

/// A new auth key with its `.p8`: the only time Courier gives it out.
struct NewAuthKeyJSON: ResponseCodable {
    var keyID: String
    var teamID: String
    var fileName: String
    var p8: String
    var createdAt: String
    var environments: [String]
    var bundleIDs: [String]?

    init(_ created: Provisioner.CreatedAuthKey) {
        keyID = created.record.keyID
        teamID = created.record.teamID
        fileName = created.fileName
        p8 = created.p8
        createdAt = adminTime(created.record.createdAt)
        environments = created.record.environments.map(\.rawValue).sorted()
        bundleIDs = created.record.bundleIDs?.sorted()
    }
}

/// An imported key: Courier gives no `.p8` back (it keeps the public key).
struct ImportedKeyJSON: Codable {
    var keyID: String
    var teamID: String
    var createdAt: String
    var environments: [String]
    var bundleIDs: [String]?

    init(_ record: AuthKeyRecord) {
        keyID = record.keyID
        teamID = record.teamID
        createdAt = adminTime(record.createdAt)
        environments = record.environments.map(\.rawValue).sorted()
        bundleIDs = record.bundleIDs?.sorted()
    }
}

/// A new key with its `.p8`, or an imported one without.
enum KeyAnswer: ResponseEncodable {
    case created(NewAuthKeyJSON)
    case imported(ImportedKeyJSON)

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .created(let key): try key.encode(to: encoder)
        case .imported(let key): try key.encode(to: encoder)
        }
    }
}

struct CertificateList: ResponseCodable {
    var certificates: [CertificateJSON]
}

struct CertificateJSON: ResponseCodable {
    var serial: String
    var kind: String
    var subject: String
    var teamID: String?
    var bundleID: String?
    /// Hex, as the device's identity names it.
    var deviceID: String?
    var environments: [String]
    var notAfter: String
    var createdAt: String
    var revokedAt: String?
    /// The certificate (public), to download.
    var certificatePEM: String

    init(_ record: CertificateRecord) {
        serial = record.serial
        kind = record.kind.rawValue
        subject = record.subject
        teamID = record.teamID
        bundleID = record.bundleID
        deviceID = record.deviceID.map { String($0, radix: 16) }
        environments = record.environments.map(\.rawValue).sorted()
        notAfter = adminTime(record.notAfter)
        createdAt = adminTime(record.createdAt)
        revokedAt = record.revokedAt.map(adminTime)
        certificatePEM = record.pem
    }
}

/// A new provider certificate with its private key (PEM), given out once.
struct IssuedCertificateJSON: ResponseCodable {
    var certificate: CertificateJSON
    var certificatePEM: String
    var keyPEM: String

    init(_ issued: Provisioner.IssuedProviderCertificate) {
        certificate = CertificateJSON(issued.record)
        certificatePEM = issued.certificatePEM
        keyPEM = issued.keyPEM
    }
}

/// An activated device: what `courier device run --identity DIR` reads,
/// as the four files' contents.
struct DeviceIdentityJSON: ResponseCodable {
    var deviceID: String
    var certificatePEM: String
    var keyPEM: String
    var caPEM: String
    var identity: DeviceIdentityFile

    init(_ bundle: Provisioner.DeviceIdentityBundle) {
        deviceID = bundle.identity.deviceID
        certificatePEM = bundle.certificatePEM
        keyPEM = bundle.keyPEM
        caPEM = bundle.caPEM
        identity = bundle.identity
    }
}

struct Revoked: ResponseCodable {
    var revoked: String
}
