import CourierCore
import CourierPKI
import CourierProvider
import Foundation
import Hummingbird
import Logging

/// The console's test push (`POST /v1/push`, docs/console.md "Send"): a
/// provider like any other. It sends over Courier's own HTTP/2 port with
/// token trust, so the push is checked, recorded in the inbox, matched by
/// fault rules and delivered exactly as a provider's would be. For that it
/// uses an auth key of the team, made the first time the console sends for
/// that team and kept in the data directory (`console/<team>/AuthKey_<id>.p8`,
/// the owner's only), so that restarts reuse it. A key that was revoked is
/// replaced by a new one at the next push.
actor ConsoleProvider {
    let provisioner: Provisioner
    /// Teams and keys, read to check one: the store's provisioning role alone.
    private let provisioning: any ProvisioningStore
    let configuration: CourierConfiguration
    let ports: BoundPorts
    let logger: Logger
    /// Each team's key, once known.
    private var keys: [String: AuthKey] = [:]
    /// The pushes waiting while a team's key is looked up or made.
    private var lookingUp: [String: [CheckedContinuation<AuthKey, any Error>]] = [:]
    private var clients: [String: HTTP2ProviderClient] = [:]

    init(provisioner: Provisioner, configuration: CourierConfiguration, ports: BoundPorts, logger: Logger) {
        self.provisioner = provisioner
        provisioning = provisioner.store
        self.configuration = configuration
        self.ports = ports
        self.logger = logger
    }

    /// Sends one push for `teamID` to `environment`'s HTTP/2 port.
    func send(_ push: HTTP2Push, teamID: String, environment: CourierCore.Environment) async throws -> HTTP2PushResult {
        let result = try await client(teamID: teamID, environment: environment).send(push)
        // Refused for its key: sent again with a new one only when the key
        // was revoked (not for a fault rule that answers the same reason).
        guard result.reason == Reason(.invalidProviderToken), let key = keys[teamID],
            try await provisioning.authKey(id: key.keyID)?.revokedAt != nil
        else { return result }
        await forget(teamID: teamID)
        return try await client(teamID: teamID, environment: environment).send(push)
    }

    private func client(teamID: String, environment: CourierCore.Environment) async throws -> HTTP2ProviderClient {
        let name = "\(teamID).\(environment.rawValue)"
        if let client = clients[name] { return client }
        let key = try await key(teamID: teamID)
        let port = try await ports.port(.http2, environment)
        // Another push may have made it meanwhile.
        if let client = clients[name] { return client }
        let network = configuration.network
        let options = HTTP2ProviderClient.Options(
            host: CourierConfiguration.Network.reachable(network.host), port: port, caPath: provisioner.caCertificatePath,
            serverName: network.serverDNSNames.first, connections: 1)
        let client = try HTTP2ProviderClient(options: options, credentials: .token(key, teamID: teamID), logger: logger)
        clients[name] = client
        return client
    }

    /// The team's console key: looked up or made once, in the first
    /// push's task, while the pushes that ask meanwhile wait for it.
    private func key(teamID: String) async throws -> AuthKey {
        if let key = keys[teamID] { return key }
        if lookingUp[teamID] != nil {
            return try await withCheckedThrowingContinuation { lookingUp[teamID, default: []].append($0) }
        }
        lookingUp[teamID] = []
        let result: Result<AuthKey, any Error>
        do {
            result = .success(
                try await Self.storedOrNewKey(teamID: teamID, directory: directory(teamID), provisioner: provisioner, provisioning: provisioning))
        } catch {
            result = .failure(error)
        }
        if case .success(let key) = result { keys[teamID] = key }
        for waiting in lookingUp.removeValue(forKey: teamID) ?? [] { waiting.resume(with: result) }
        return try result.get()
    }

    private func directory(_ teamID: String) -> String {
        configuration.resolve("console") + "/" + teamID
    }

    /// The key kept in `directory` while the store has it unrevoked; else a
    /// new one, written there in place of the old.
    private static func storedOrNewKey(
        teamID: String, directory: String, provisioner: Provisioner, provisioning: any ProvisioningStore
    ) async throws -> AuthKey {
        // A team of the store (its id letters and digits only) before its folder is looked at.
        guard Identifiers.isTenCharacterID(teamID), try await provisioning.team(id: teamID) != nil else {
            throw PKIError(.notFound, "team \(teamID) does not exist")
        }
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for file in files where file.hasPrefix("AuthKey_") && file.hasSuffix(".p8") {
            let keyID = String(file.dropFirst("AuthKey_".count).dropLast(".p8".count))
            let path = directory + "/" + file
            if let record = try await provisioning.authKey(id: keyID), record.teamID == teamID, record.revokedAt == nil,
                let text = try? String(contentsOfFile: path, encoding: .utf8), let key = try? AuthKey(keyID: keyID, p8PEM: text)
            {
                return key
            }
            try? FileManager.default.removeItem(atPath: path)
        }
        let (record, file) = try await provisioner.createAuthKey(teamID: teamID, directory: directory)
        return try AuthKey(keyID: record.keyID, p8PEM: String(contentsOfFile: file.path, encoding: .utf8))
    }

    private func forget(teamID: String) async {
        keys[teamID] = nil
        for environment in CourierCore.Environment.allCases {
            await clients.removeValue(forKey: "\(teamID).\(environment.rawValue)")?.close()
        }
    }

    /// Closes the connections (at shutdown).
    func close() async {
        for client in clients.values { await client.close() }
        clients = [:]
    }
}

/// `POST /v1/push`: the console's send form, as JSON.
struct ConsolePushBody: Decodable {
    var environment: String
    var team: String
    var topic: String
    var token: String
    /// The payload as text: sent as it is, so the server's own checks answer it.
    var payload: String
    var pushType: String?
    var priority: Int?
    /// Seconds since 1970; 0: now or never.
    var expiration: Int64?
    var collapseID: String?
    var apnsID: String?

    func push() throws -> (HTTP2Push, CourierCore.Environment) {
        func invalid(_ message: String) -> HTTPError { HTTPError(.unprocessableContent, message: message) }
        guard let environment = CourierCore.Environment(rawValue: environment) else { throw invalid("'environment' must be production or sandbox") }
        guard let bytes = Hex.decode(token), !bytes.isEmpty else { throw invalid("'token' is not a device token in hex") }
        guard !topic.isEmpty else { throw invalid("'topic' is empty") }
        var priorityValue: Priority?
        if let priority {
            guard let value = UInt8(exactly: priority).flatMap(Priority.init(rawValue:)) else { throw invalid("'priority' must be 10, 5 or 1") }
            priorityValue = value
        }
        var id: UUID?
        if let apnsID, !apnsID.isEmpty {
            guard let value = UUID(uuidString: apnsID) else { throw invalid("'apnsID' is not a UUID") }
            id = value
        }
        if let expiration, !(0...253_402_300_799).contains(expiration) { throw invalid("'expiration' must be seconds since 1970, up to 9999") }
        let push = HTTP2Push(
            token: bytes, payload: Array(payload.utf8), topic: topic, id: id,
            expiration: expiration.map { Date(timeIntervalSince1970: Double($0)) }, priority: priorityValue,
            collapseID: collapseID.flatMap { $0.isEmpty ? nil : $0 }, pushType: pushType.flatMap { $0.isEmpty ? nil : $0 })
        return (push, environment)
    }
}

/// The push's answer as the HTTP/2 API gave it.
struct ConsolePushAnswer: ResponseCodable {
    var status: Int
    var apnsID: String
    var apnsUniqueID: String?
    var reason: String?
    var timestamp: String?
    /// The fault rule that answered it (from its inbox entry), when one did.
    var fault: String?

    init(_ result: HTTP2PushResult, fault: String? = nil) {
        self.fault = fault
        status = result.status
        apnsID = result.apnsID
        apnsUniqueID = result.uniqueID?.lowercasedString
        reason = result.reason?.rawValue
        timestamp = result.timestamp.map(adminTime)
    }
}
