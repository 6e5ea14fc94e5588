import CourierCore
import Foundation
import Hummingbird

/// Devices over the admin API (docs/admin-api.md): the devices connected
/// (with several nodes, every node's), and a token marked unregistered
/// without its device.
struct DeviceRoutes {
    let dispatcher: Dispatcher
    let scope: AdminScope

    func add(to api: RouterGroup<BasicRequestContext>) {
        api.get("devices") { [dispatcher, scope] request, _ in
            let limit = try InboxQuery.integer(query(request), "limit", default: 100, range: 1...1000)
            // This node's devices and, with several nodes, the others'.
            let node = scope.node
            let remote = scope.remoteDevices()
            let all =
                dispatcher.connectedDevices(limit: limit).map { (key: $0.key, node: node, since: $0.connectedAt) }
                + remote.map { (key: $0.key, node: Optional($0.node), since: $0.since) }
            var devices: [DeviceJSON] = []
            for device in all.sorted(by: { ($0.since, $0.key.deviceID) < ($1.since, $1.key.deviceID) }).prefix(limit) {
                let registrations = try await dispatcher.registrations(ofDevice: device.key.deviceID).filter { $0.environment == device.key.environment }
                devices.append(DeviceJSON(device.key, node: device.node, connectedAt: device.since, registrations: registrations))
            }
            return DeviceList(online: dispatcher.devicesOnline + remote.count, devices: devices)
        }
        api.post("tokens/:token/unregister") { [dispatcher] request, context in
            let text = try context.parameters.require("token")
            guard let token = Hex.decode(text), !token.isEmpty else { throw HTTPError(.badRequest, message: "'\(text)' is not a device token in hex") }
            let body = try await request.decode(as: UnregisterBody.self, context: context)
            guard let environment = Environment(rawValue: body.environment) else {
                throw HTTPError(.unprocessableContent, message: "'environment' must be production or sandbox")
            }
            let at = try body.at.map { try InboxQuery.date($0.text, "at") } ?? dispatcher.clock.now()
            guard try await dispatcher.markUnregistered(token: token, topic: body.topic, environment: environment, at: at) else {
                throw HTTPError(.notFound, message: "\(text) is not an active registration of \(body.topic) in \(environment.rawValue)")
            }
            return Unregistered(token: Hex.encode(token), topic: body.topic, environment: environment.rawValue, unregisteredAt: adminTime(at))
        }
    }
}

struct UnregisterBody: Decodable {
    var environment: String
    var topic: String
    var at: TimeValue?
}

/// A time in a request body: seconds since 1970, or ISO 8601 text.
struct TimeValue: Decodable {
    var text: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let seconds = try? container.decode(Double.self) {
            text = String(seconds)
        } else {
            text = try container.decode(String.self)
        }
    }
}

struct Unregistered: ResponseCodable {
    var token: String
    var topic: String
    var environment: String
    var unregisteredAt: String
}

struct DeviceJSON: Codable {
    struct Registration: Codable {
        var bundleID: String
        var token: String
        var active: Bool
        var registeredAt: String
        var unregisteredAt: String?
    }
    /// The device id in hex, as its certificate names it.
    var deviceID: String
    var environment: String
    /// The node it is connected to, with several nodes.
    var node: String?
    var connectedAt: String
    var registrations: [Registration]

    init(_ key: DeviceKey, node: String?, connectedAt: Date, registrations: [AppRegistration]) {
        deviceID = String(key.deviceID, radix: 16)
        environment = key.environment.rawValue
        self.node = node
        self.connectedAt = adminTime(connectedAt)
        self.registrations = registrations.map {
            Registration(
                bundleID: $0.bundleID, token: Hex.encode($0.token), active: $0.active, registeredAt: adminTime($0.registeredAt),
                unregisteredAt: $0.unregisteredAt.map(adminTime))
        }
    }
}

struct DeviceList: ResponseCodable {
    /// Devices connected now, all of them (to every node).
    var online: Int
    /// The longest connected first, at most `limit`.
    var devices: [DeviceJSON]
}
