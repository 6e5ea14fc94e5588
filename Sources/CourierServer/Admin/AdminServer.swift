import CourierCore
import CourierPKI
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import ServiceLifecycle

/// The admin API (docs/admin-api.md): JSON over HTTP on
/// `network.adminHost`:`network.adminPort` (HTTPS with the server
/// certificate off the loopback), every endpoint but the health checks,
/// the metrics and the OpenAPI document behind the admin token. It reads what
/// the running service knows — the inbox, the delivery log, devices and
/// connections — through the parts that hold it, never the store's tables.
public struct AdminServer: Service {
    let configuration: CourierConfiguration
    let token: String
    let inbox: NotificationInbox
    let faults: FaultInjector
    let dispatcher: Dispatcher
    /// The server's counters, for `/metrics`.
    let metrics: ServerMetrics
    let connections: ConnectionCounts
    let ports: BoundPorts
    /// Teams, apps, keys, certificates and devices (`ProvisioningRoutes`).
    let provisioner: Provisioner
    /// Closes what a revocation ended, at once.
    let afterRevocation: @Sendable () async -> Void
    /// The provider connections open now.
    let providerConnections: @Sendable () -> [ProviderConnectionState]
    /// True once every protocol listener is bound and the store answers.
    let ready: @Sendable () async -> Bool
    let logger: Logger
    /// The web console's sign-in sessions.
    let sessions: ConsoleSessions
    /// The web console's test pushes.
    let consoleProvider: ConsoleProvider
    /// One node's state or several nodes', chosen once.
    let scope: AdminScope

    init(
        configuration: CourierConfiguration, token: String, inbox: NotificationInbox, faults: FaultInjector, dispatcher: Dispatcher,
        metrics: ServerMetrics, cluster: Cluster?, connections: ConnectionCounts, ports: BoundPorts, provisioner: Provisioner, afterRevocation: @escaping @Sendable () async -> Void,
        providerConnections: @escaping @Sendable () -> [ProviderConnectionState], ready: @escaping @Sendable () async -> Bool, logger: Logger
    ) {
        self.configuration = configuration
        self.token = token
        self.inbox = inbox
        self.faults = faults
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.connections = connections
        self.ports = ports
        self.provisioner = provisioner
        self.afterRevocation = afterRevocation
        self.providerConnections = providerConnections
        self.ready = ready
        self.logger = logger
        sessions = ConsoleSessions(clock: dispatcher.clock, secure: configuration.network.adminUsesTLS)
        consoleProvider = ConsoleProvider(provisioner: provisioner, configuration: configuration, ports: ports, logger: logger)
        scope = AdminScope(cluster: cluster, faults: faults, inbox: inbox)
    }

    public func run() async throws {
        var logger = logger
        logger[metadataKey: "courier.listener"] = "admin"
        // Bounded as the protocol ports are (`AdminChannel`): the listener's
        // and each address's connections capped, a request's headers and
        // body due within a deadline, and a connection idle between
        // requests for a minute closed (a long poll being answered is not idle).
        let limits = ListenerGuard(
            maxOpen: configuration.connections.maxPerListener, maxPerAddress: configuration.connections.maxPerAddress,
            logInterval: configuration.connections.refusalLogInterval, logger: logger)
        let requestDeadline = configuration.connections.unfinishedFrame
        let http1 = HTTPServerBuilder { responder in
            AdminChannel(responder: responder, limits: limits, requestDeadline: requestDeadline, idleTimeout: .seconds(60))
        }
        let server: HTTPServerBuilder =
            configuration.network.adminUsesTLS ? try .tls(http1, tlsConfiguration: ServerTLS.adminConfiguration(provisioner: provisioner)) : http1
        let app = Application(
            router: router(),
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.network.adminHost, port: configuration.network.adminPort), serverName: "Courier"),
            onServerRunning: { [ports, logger] channel in ports.listening(admin: channel, logger: logger) },
            logger: logger)
        // Hummingbird waits for requests in flight: a long poll ends first.
        do {
            try await withGracefulShutdownHandler {
                try await app.run()
            } onGracefulShutdown: { [inbox] in
                inbox.close()
            }
        } catch let error as IOError where ports.all["admin"] == nil {
            // It never listened: said as the other listeners say it, with the key to change.
            let network = configuration.network
            throw ListenerBindError(
                listener: "admin", host: network.adminHost, port: network.adminPort, reason: String(cString: strerror(error.errnoCode)),
                key: "network.adminPort")
        }
        await consoleProvider.close()
    }

    func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: JSONErrors())
        router.add(middleware: AdminRequestChecks(hosts: AdminHosts(configuration.network) { [ports] in ports.all["admin"] }))
        router.get("/health/live") { _, _ in Status(status: "live") }
        router.get("/health/ready") { [ready] _, _ in
            guard await ready() else { throw HTTPError(.serviceUnavailable, message: "not ready: a listener is not bound or the store does not answer") }
            return Status(status: "ready")
        }
        let held = HeldCount { [dispatcher] in try await dispatcher.heldCount() }
        router.get("/metrics") { [dispatcher, metrics, connections, inbox] _, _ in
            let snapshot = ServerMetrics.Snapshot(
                connections: connections.counts(), devicesOnline: dispatcher.devicesOnline, deliveryLogBacklog: dispatcher.deliveryLogBacklog,
                notificationsHeld: await held.value(now: dispatcher.clock.now()), inboxEntries: inbox.count)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: metrics.page(snapshot))))
        }
        router.get("/openapi.json") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: AdminOpenAPI.document)))
        }
        ConsoleRoutes(token: token, sessions: sessions).add(to: router)
        let api = router.group("v1").add(middleware: AdminAccess(token: token, sessions: sessions))
        InboxRoutes(inbox: inbox, dispatcher: dispatcher, scope: scope, consoleProvider: consoleProvider).add(to: api)
        FaultRoutes(rules: scope.faults, clock: dispatcher.clock).add(to: api)
        StatusRoutes(
            configuration: configuration, dispatcher: dispatcher, inbox: inbox, connections: connections, ports: ports,
            providerConnections: providerConnections
        ).add(to: api)
        ProvisioningRoutes(provisioner: provisioner, afterRevocation: afterRevocation).add(to: api)
        VirtualDeviceRoutes(dispatcher: dispatcher).add(to: api)
        DeviceRoutes(dispatcher: dispatcher, scope: scope).add(to: api)
        return router
    }
}

/// A request's query parameters (the first of a repeated one).
func query(_ request: Request) -> [String: String] {
    Dictionary(request.uri.queryParameters.map { (String($0.key), String($0.value)) }, uniquingKeysWith: { first, _ in first })
}

// MARK: Middleware

/// Every error as JSON with a one-line message: the router's own (an
/// unknown path), a body over the limit (413, not logged as an error) and
/// any other that is not an `HTTPError` (500, logged).
struct JSONErrors: RouterMiddleware {
    typealias Context = BasicRequestContext

    /// The paths the API has (`*` one segment) and their methods: another
    /// method on one of them is a 405, with `Allow`.
    static let routes: [(path: [Substring], methods: [HTTPRequest.Method])] = [
        ("", [.get]), ("console.js", [.get]), ("console.css", [.get]), ("console/session", [.get, .post, .delete]), ("health/live", [.get]),
        ("health/ready", [.get]), ("metrics", [.get]), ("openapi.json", [.get]), ("v1/inbox", [.get, .delete]), ("v1/inbox/wait", [.get]),
        ("v1/inbox/stream", [.get]), ("v1/push", [.post]),
        ("v1/notifications/*", [.get]), ("v1/tokens/*/notifications", [.get]), ("v1/status", [.get]), ("v1/connections", [.get]), ("v1/faults", [.get, .post]),
        ("v1/faults/*", [.delete]), ("v1/tokens/*/unregister", [.post]), ("v1/devices", [.get, .post]), ("v1/teams", [.get, .post]),
        ("v1/apps", [.post]), ("v1/teams/*/keys", [.post]), ("v1/keys/*/revoke", [.post]), ("v1/certificates", [.get]),
        ("v1/apps/*/certificates", [.post]), ("v1/certificates/*/revoke", [.post]),
    ].map { (path: $0.0.split(separator: "/"), methods: $0.1) }

    static func methods(for path: String) -> [HTTPRequest.Method]? {
        let segments = path.split(separator: "/")
        return routes.first { route in
            route.path.count == segments.count && zip(route.path, segments).allSatisfy { $0 == "*" || $0 == $1 }
        }?.methods
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let methods = Self.methods(for: request.uri.path), !methods.contains(request.method),
            !(request.method == .head && methods.contains(.get))
        {
            throw HTTPError(
                .methodNotAllowed, headers: [.allow: methods.map(\.rawValue).joined(separator: ", ")],
                message: "\(request.method) is not allowed on \(request.uri.path)")
        }
        do {
            return try await next(request, context)
        } catch var error as HTTPError {
            if error.body == nil { error.body = Self.message(for: error.status, request) }
            throw error
        } catch let error as PKIError {
            // Provisioning: the message names the problem.
            let status: HTTPResponse.Status =
                switch error.code {
                case .invalidArgument: .unprocessableContent
                case .notFound: .notFound
                case .alreadyExists, .notAllowed: .conflict
                case .badFile, .badCertificate: .internalServerError
                }
            throw HTTPError(status, message: error.message)
        } catch let error as DecodingError {
            throw HTTPError(.badRequest, message: "the request body is not what this endpoint takes: \(error)")
        } catch let error as NIOTooManyBytesError {
            // A body over the limit that did not announce its length
            // (`AdminRequestChecks` refuses one that does): the caller's
            // mistake, which anyone may make, so no error line.
            context.logger.debug("request body too large", metadata: ["courier.limit": "\(error.maxBytes ?? context.maxUploadSize)"])
            throw HTTPError(.contentTooLarge, message: AdminRequestChecks.tooLarge(context))
        } catch {
            context.logger.error("admin request failed", metadata: ["courier.error": "\(error)"])
            throw HTTPError(.internalServerError, message: "internal error")
        }
    }

    static func message(for status: HTTPResponse.Status, _ request: Request) -> String {
        switch status {
        case .notFound: "no such endpoint: \(request.method) \(request.uri.path)"
        case .methodNotAllowed: "\(request.method) is not allowed on \(request.uri.path)"
        default: status.reasonPhrase
        }
    }
}

// MARK: Queries

/// The inbox's query parameters (docs/admin-api.md).
struct InboxQuery {
    var filter = InboxFilter()
    var after: UInt64 = 0
    var limit = 100
    /// Seconds a wait may take.
    var timeout = 30

    static let known: Set<String> = [
        "topic", "token", "apns-id", "team", "interface", "environment", "outcome", "since", "until", "after", "limit", "timeout", "kind",
    ]

    init(_ parameters: [String: String]) throws {
        for (key, _) in parameters where !Self.known.contains(key) {
            throw HTTPError(.badRequest, message: "unknown query parameter '\(key)'")
        }
        // Free text: an empty value is no filter. Every other value must parse.
        func text(_ name: String) -> String? { parameters[name].flatMap { $0.isEmpty ? nil : $0 } }
        filter.topic = text("topic")
        if let token = parameters["token"] {
            guard let bytes = Hex.decode(token), !bytes.isEmpty else { throw HTTPError(.badRequest, message: "'token' is not a device token in hex") }
            filter.token = bytes
        }
        filter.apnsID = text("apns-id")
        filter.teamID = text("team")
        if let kind = parameters["kind"] {
            guard let value = InboxKind(rawValue: kind) else {
                throw HTTPError(.badRequest, message: "'kind' must be one of \(InboxKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            filter.kind = value
        }
        if let interface = parameters["interface"] {
            guard let value = ProviderInterface(rawValue: interface) else {
                throw HTTPError(.badRequest, message: "'interface' must be http2 or binary")
            }
            filter.interface = value
        }
        if let environment = parameters["environment"] {
            guard let value = Environment(rawValue: environment) else {
                throw HTTPError(.badRequest, message: "'environment' must be production or sandbox")
            }
            filter.environment = value
        }
        filter.outcome = text("outcome")
        filter.since = try parameters["since"].map { try Self.date($0, "since") }
        filter.until = try parameters["until"].map { try Self.date($0, "until") }
        if let after = parameters["after"] {
            guard let value = UInt64(after), value <= 9_007_199_254_740_991 else {
                throw HTTPError(.badRequest, message: "'after' must be an entry's sequence number")
            }
            self.after = value
        }
        limit = try Self.integer(parameters, "limit", default: 100, range: 1...1000)
        timeout = try Self.integer(parameters, "timeout", default: 30, range: 0...300)
    }

    static func integer(_ parameters: [String: String], _ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text = parameters[name] else { return value }
        guard let number = Int(text), range.contains(number) else {
            throw HTTPError(.badRequest, message: "'\(name)' must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// An ISO 8601 time, or seconds since 1970.
    static func date(_ text: String, _ name: String) throws -> Date {
        if let seconds = Double(text) {
            guard seconds.isFinite, (0...253_402_300_799).contains(seconds) else {
                throw HTTPError(.badRequest, message: "'\(name)' must be a time from 1970 to 9999")
            }
            return Date(timeIntervalSince1970: seconds)
        }
        if let date = try? Date(text, strategy: .iso8601) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = fractional.date(from: text) { return date }
        throw HTTPError(.badRequest, message: "'\(name)' must be an ISO 8601 time or seconds since 1970")
    }
}

// MARK: Responses

struct Status: ResponseCodable {
    var status: String
}

struct Cleared: ResponseCodable {
    var cleared: Int
}

/// A time as the API writes it: ISO 8601 with milliseconds, UTC.
func adminTime(_ date: Date) -> String {
    date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
}

struct InboxEntryJSON: ResponseCodable {
    struct Header: Codable {
        var name: String
        var value: String
    }
    struct Outcome: Codable {
        var accepted: Bool
        var status: Int?
        var reason: String?
    }

    var sequence: UInt64
    var receivedAt: String
    /// notification, broadcast, channel (a channel management request) or other.
    var kind: String
    var interface: String
    var environment: String
    var apnsID: String
    /// The notification's `apns-unique-id` (sandbox HTTP/2 only).
    var apnsUniqueID: String?
    var token: String?
    var topic: String?
    var provider: String?
    var teamID: String?
    /// The provider connection's peer address.
    var connection: String?
    /// The device the token is for (its id, hex), when the token is one of this server's.
    var device: String?
    var headers: [Header]
    /// The payload as text (JSON), when it is UTF-8.
    var payload: String?
    var payloadSize: Int
    var outcome: Outcome
    /// The fault rule that acted on it.
    var fault: String?
    /// The node that received it (several nodes).
    var node: String?

    init(_ entry: InboxEntry, _ dispatcher: Dispatcher) {
        fault = entry.fault
        node = entry.node
        device = entry.token.flatMap { dispatcher.device(of: $0, in: entry.environment) }.map { String($0, radix: 16) }
        sequence = entry.sequence
        kind = entry.kind.rawValue
        receivedAt = adminTime(entry.receivedAt)
        interface = entry.interface.rawValue
        environment = entry.environment.rawValue
        apnsID = entry.apnsID
        apnsUniqueID = entry.uniqueID?.lowercasedString
        token = entry.token.map(Hex.encode)
        topic = entry.topic
        provider = entry.provider
        teamID = entry.teamID
        connection = entry.connection
        headers = entry.headers.map { Header(name: $0.name, value: $0.value) }
        payload = String(validating: entry.payload, as: UTF8.self)
        payloadSize = entry.payload.count
        switch entry.outcome {
        case .accepted: outcome = Outcome(accepted: true)
        case .refused(let status, let reason): outcome = Outcome(accepted: false, status: status, reason: reason)
        }
    }
}

struct InboxPage: ResponseCodable {
    var entries: [InboxEntryJSON]
    /// More entries match beyond these: ask again with `after` = the last one's sequence.
    var more: Bool
    /// The newest entry's sequence: a wait `after` it sees only what comes next.
    var last: UInt64
}

struct EventJSON: Codable {
    var event: String
    var at: String
    var detail: String?

    init(_ event: DeliveryEvent) {
        self.event = event.kind.rawValue
        at = adminTime(event.at)
        detail = event.detail
    }
}

struct Timeline: ResponseCodable {
    var apnsID: String
    /// Looked up by its `apns-unique-id`: that id.
    var apnsUniqueID: String?
    /// The app (bundle id) whose notification it is; nil when the id
    /// names no app's (requests no team was authenticated for, or to a
    /// topic that was not the provider's).
    var app: String?
    /// How the notification came in (the inbox's entries with its apns-id).
    var received: [InboxEntryJSON]
    /// The delivery log, oldest first.
    var events: [EventJSON]
}

struct TokenTimelines: ResponseCodable {
    var token: String
    /// Newest first.
    var notifications: [Timeline]
}

struct ServerStatus: ResponseCodable {
    struct InboxStatus: Codable {
        var entries: Int
        var capacity: Int
    }
    /// The port each listener is bound to ("http2.production", ..., "admin").
    var listeners: [String: Int]
    /// The HTTP/2 API's payload limits in bytes: `http2`, and `http2VoIP` for VoIP topics.
    var payloadLimits: [String: Int]
    var devicesOnline: Int
    /// Open connections by listener ("http2.production", ...).
    var connections: [String: Int]
    /// Notifications held in the store for devices that are offline (or not yet acknowledged).
    var notificationsHeld: Int
    var inbox: InboxStatus
    /// Delivery-log events not yet written.
    var deliveryLogBacklog: Int
}
