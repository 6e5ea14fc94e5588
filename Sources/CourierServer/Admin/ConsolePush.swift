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
/// makes, the first time it sends for a team, an auth key of that team
/// (listed with the team's keys, revocable; its private key stays in this
/// process's memory). A revoked key is replaced at the next push.
actor ConsoleProvider {
    let provisioner: Provisioner
    let configuration: CourierConfiguration
    let ports: BoundPorts
    let logger: Logger
    private var keys: [String: AuthKey] = [:]
    private var clients: [String: HTTP2ProviderClient] = [:]

    init(provisioner: Provisioner, configuration: CourierConfiguration, ports: BoundPorts, logger: Logger) {
        self.provisioner = provisioner
        self.configuration = configuration
        self.ports = ports
        self.logger = logger
    }

    /// Sends one push for `teamID` to `environment`'s HTTP/2 port.
    func send(_ push: HTTP2Push, teamID: String, environment: CourierCore.Environment) async throws -> HTTP2PushResult {
        let result = try await client(teamID: teamID, environment: environment).send(push)
        guard result.reason == Reason(.invalidProviderToken) else { return result }
        // The console's key was revoked: a new one, and the push once more.
        await forget(teamID: teamID)
        return try await client(teamID: teamID, environment: environment).send(push)
    }

    private func client(teamID: String, environment: CourierCore.Environment) async throws -> HTTP2ProviderClient {
        let name = "\(teamID).\(environment.rawValue)"
        if let client = clients[name] { return client }
        let key: AuthKey
        if let known = keys[teamID] {
            key = known
        } else {
            let created = try await provisioner.createAuthKey(teamID: teamID)
            key = try AuthKey(keyID: created.record.keyID, p8PEM: created.p8)
            keys[teamID] = key
        }
        let network = configuration.network
        let wildcard = ["0.0.0.0", "::", ""].contains(network.host)
        let options = HTTP2ProviderClient.Options(
            host: wildcard ? "127.0.0.1" : network.host, port: try await ports.port(.http2, environment), caPath: provisioner.caCertificatePath,
            serverName: network.serverDNSNames.first, connections: 1)
        let client = try HTTP2ProviderClient(options: options, credentials: .token(key, teamID: teamID), logger: logger)
        clients[name] = client
        return client
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

    init(_ result: HTTP2PushResult) {
        status = result.status
        apnsID = result.apnsID
        apnsUniqueID = result.uniqueID?.lowercasedString
        reason = result.reason?.rawValue
        timestamp = result.timestamp.map(adminTime)
    }
}
