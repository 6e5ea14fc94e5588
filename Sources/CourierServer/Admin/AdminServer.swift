import CourierCore
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// The admin API (docs/admin-api.md): JSON over HTTP on
/// `network.adminHost`:`network.adminPort`, every endpoint but the health
/// checks and the OpenAPI document behind the admin token. It reads what
/// the running service knows — the inbox, the delivery log, devices and
/// connections — through the parts that hold it, never the store's tables.
public struct AdminServer: Service {
    let configuration: CourierConfiguration
    let token: String
    let inbox: NotificationInbox
    let dispatcher: Dispatcher
    let connections: ConnectionCounts
    let ports: BoundPorts
    /// True once every protocol listener is bound and the store answers.
    let ready: @Sendable () async -> Bool
    let logger: Logger

    public func run() async throws {
        var logger = logger
        logger[metadataKey: "courier.listener"] = "admin"
        let app = Application(
            router: router(),
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.network.adminHost, port: configuration.network.adminPort), serverName: "Courier"),
            onServerRunning: { [ports, logger] channel in ports.listening(admin: channel, logger: logger) },
            logger: logger)
        try await app.run()
    }

    func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: JSONErrors())
        router.get("/health/live") { _, _ in Status(status: "live") }
        router.get("/health/ready") { [ready] _, _ in
            guard await ready() else { throw HTTPError(.serviceUnavailable, message: "not ready: a listener is not bound or the store does not answer") }
            return Status(status: "ready")
        }
        router.get("/openapi.json") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: AdminOpenAPI.document)))
        }
        let api = router.group("v1").add(middleware: BearerToken(token: token))
        api.get("inbox") { [inbox] request, _ in
            let query = try InboxQuery(query(request))
            let (entries, more) = inbox.list(query.filter, after: query.after, limit: query.limit)
            return InboxPage(entries: entries.map(InboxEntryJSON.init), more: more, last: inbox.lastSequence)
        }
        api.get("inbox/wait") { [inbox] request, _ in
            let query = try InboxQuery(query(request))
            guard let entry = await inbox.wait(for: query.filter, after: query.after, timeout: .seconds(query.timeout)) else {
                throw HTTPError(.notFound, message: "no notification matched within \(query.timeout) s")
            }
            return InboxEntryJSON(entry)
        }
        api.delete("inbox") { [inbox] _, _ in
            let cleared = inbox.count
            inbox.clear()
            return Cleared(cleared: cleared)
        }
        api.get("notifications/:apnsID") { [inbox, dispatcher] _, context in
            let text = try context.parameters.require("apnsID")
            guard let id = UUID(uuidString: text) else { throw HTTPError(.badRequest, message: "'\(text)' is not an apns-id (a UUID)") }
            let received = inbox.list(InboxFilter(apnsID: text), limit: 100).entries
            let events = try await dispatcher.deliveryLog(of: id)
            guard !received.isEmpty || !events.isEmpty else {
                throw HTTPError(.notFound, message: "no notification \(text.lowercased()) in the inbox or the delivery log")
            }
            return Timeline(apnsID: id.uuidString.lowercased(), received: received.map(InboxEntryJSON.init), events: events.map(EventJSON.init))
        }
        api.get("tokens/:token/notifications") { [inbox, dispatcher] request, context in
            let text = try context.parameters.require("token")
            guard let token = Hex.decode(text), !token.isEmpty else { throw HTTPError(.badRequest, message: "'\(text)' is not a device token in hex") }
            let limit = try InboxQuery.integer(query(request), "limit", default: 20, range: 1...100)
            var timelines: [Timeline] = []
            for entry in inbox.recent(token: token, limit: limit) {
                var events: [DeliveryEvent] = []
                if let id = UUID(uuidString: entry.apnsID) { events = try await dispatcher.deliveryLog(of: id) }
                timelines.append(Timeline(apnsID: entry.apnsID, received: [InboxEntryJSON(entry)], events: events.map(EventJSON.init)))
            }
            return TokenTimelines(token: Hex.encode(token), notifications: timelines)
        }
        api.get("status") { [dispatcher, connections, inbox] _, _ in
            ServerStatus(
                devicesOnline: dispatcher.sessions.online, connections: connections.counts(),
                inbox: ServerStatus.InboxStatus(entries: inbox.count, capacity: inbox.capacity),
                deliveryLogBacklog: dispatcher.log.backlog)
        }
        return router
    }
}

/// A request's query parameters (the first of a repeated one).
func query(_ request: Request) -> [String: String] {
    Dictionary(request.uri.queryParameters.map { (String($0.key), String($0.value)) }, uniquingKeysWith: { first, _ in first })
}

// MARK: Middleware

/// Every error as JSON with a one-line message: the router's own (an
/// unknown path) and any that is not an `HTTPError` (500, logged).
struct JSONErrors: RouterMiddleware {
    typealias Context = BasicRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch var error as HTTPError {
            if error.body == nil { error.body = Self.message(for: error.status, request) }
            throw error
        } catch let error as DecodingError {
            throw HTTPError(.badRequest, message: "the request body is not what this endpoint takes: \(error)")
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

/// `Authorization: Bearer <admin token>`, or 401.
struct BearerToken: RouterMiddleware {
    typealias Context = BasicRequestContext
    let token: String

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization] else {
            throw HTTPError(
                .unauthorized, headers: [.wwwAuthenticate: "Bearer"], message: "this endpoint needs the admin token: Authorization: Bearer <token>")
        }
        let prefix = "Bearer "
        guard header.hasPrefix(prefix), AdminToken.matches(header.dropFirst(prefix.count), token) else {
            throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer"], message: "the admin token was refused")
        }
        return try await next(request, context)
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
        "topic", "token", "apns-id", "team", "interface", "environment", "outcome", "since", "until", "after", "limit", "timeout",
    ]

    init(_ parameters: [String: String]) throws {
        for (key, _) in parameters where !Self.known.contains(key) {
            throw HTTPError(.badRequest, message: "unknown query parameter '\(key)'")
        }
        filter.topic = parameters["topic"]
        if let token = parameters["token"] {
            guard let bytes = Hex.decode(token), !bytes.isEmpty else { throw HTTPError(.badRequest, message: "'token' is not a device token in hex") }
            filter.token = bytes
        }
        filter.apnsID = parameters["apns-id"]
        filter.teamID = parameters["team"]
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
        filter.outcome = parameters["outcome"]
        filter.since = try parameters["since"].map { try Self.date($0, "since") }
        filter.until = try parameters["until"].map { try Self.date($0, "until") }
        if let after = parameters["after"] {
            guard let value = UInt64(after) else { throw HTTPError(.badRequest, message: "'after' must be an entry's sequence number") }
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
        if let seconds = Double(text) { return Date(timeIntervalSince1970: seconds) }
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
    var interface: String
    var environment: String
    var apnsID: String
    var token: String?
    var topic: String?
    var provider: String?
    var teamID: String?
    var headers: [Header]
    /// The payload as text (JSON), when it is UTF-8.
    var payload: String?
    var payloadSize: Int
    var outcome: Outcome

    init(_ entry: InboxEntry) {
        sequence = entry.sequence
        receivedAt = adminTime(entry.receivedAt)
        interface = entry.interface.rawValue
        environment = entry.environment.rawValue
        apnsID = entry.apnsID
        token = entry.token.map(Hex.encode)
        topic = entry.topic
        provider = entry.provider
        teamID = entry.teamID
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
    var devicesOnline: Int
    /// Open connections by listener ("http2.production", ...).
    var connections: [String: Int]
    var inbox: InboxStatus
    /// Delivery-log events not yet written.
    var deliveryLogBacklog: Int
}
