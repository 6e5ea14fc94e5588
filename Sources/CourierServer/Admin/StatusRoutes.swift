import CourierCore
import Foundation
import Hummingbird

/// The server's status and its provider connections over the admin API
/// (docs/admin-api.md, "Status", "Provider connections").
struct StatusRoutes {
    let configuration: CourierConfiguration
    let dispatcher: Dispatcher
    let inbox: NotificationInbox
    let connections: ConnectionCounts
    let ports: BoundPorts
    let providerConnections: @Sendable () -> [ProviderConnectionState]

    func add(to api: RouterGroup<BasicRequestContext>) {
        api.get("status") { [dispatcher, connections, inbox, ports, configuration] _, _ in
            ServerStatus(
                listeners: ports.all, payloadLimits: ["http2": configuration.limits.payload.http2, "http2VoIP": configuration.limits.payload.http2VoIP],
                devicesOnline: dispatcher.devicesOnline, connections: connections.counts(),
                notificationsHeld: try await dispatcher.heldCount(),
                inbox: ServerStatus.InboxStatus(entries: inbox.count, capacity: inbox.capacity),
                deliveryLogBacklog: dispatcher.deliveryLogBacklog)
        }
        api.get("connections") { [providerConnections] request, _ in
            let parameters = query(request)
            var interface: ProviderInterface?
            if let text = parameters["interface"] {
                guard let value = ProviderInterface(rawValue: text) else { throw HTTPError(.badRequest, message: "'interface' must be http2 or binary") }
                interface = value
            }
            let connections = providerConnections().filter { interface == nil || $0.interface == interface }.sorted { $0.since < $1.since }
            return ConnectionList(connections: connections.map(ConnectionJSON.init))
        }
    }
}

struct ConnectionList: ResponseCodable {
    var connections: [ConnectionJSON]
}

/// One provider connection (`ProviderConnectionState`).
struct ConnectionJSON: Codable {
    var interface: String
    var environment: String
    var provider: String?
    var teamID: String?
    var address: String?
    var since: String
    var requests: Int

    init(_ state: ProviderConnectionState) {
        interface = state.interface.rawValue
        environment = state.environment.rawValue
        provider = state.provider
        teamID = state.teamID
        address = state.address
        since = adminTime(state.since)
        requests = state.requests
    }
}
