import CourierCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The web console (docs/console.md), served by the admin server at `/`:
/// its page, script and style sheet are compiled into the binary
/// (`Sources/CourierServer/Console`, embedded by the package manager) and
/// load nothing from any other host. The console signs in with the admin
/// token (`/console/session`) and then uses the admin API under `/v1` with
/// its session cookie.
struct ConsoleRoutes {
    let token: String
    let sessions: ConsoleSessions

    /// What every console asset is sent with: nothing from another origin, no
    /// inline script, no framing.
    static let assetHeaders: HTTPFields = [
        .contentSecurityPolicy:
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        .xContentTypeOptions: "nosniff",
        HTTPField.Name("Referrer-Policy")!: "no-referrer",
        .cacheControl: "no-cache",
    ]

    static let assets: [(path: String, type: String, bytes: [UInt8])] = [
        ("/", "text/html; charset=utf-8", PackageResources.index_html),
        ("/console.js", "text/javascript; charset=utf-8", PackageResources.console_js),
        ("/console.css", "text/css; charset=utf-8", PackageResources.console_css),
    ]

    func add(to router: Router<BasicRequestContext>) {
        for asset in Self.assets {
            let body = ByteBuffer(bytes: asset.bytes)
            var headers = Self.assetHeaders
            headers[.contentType] = asset.type
            router.get(RouterPath(asset.path)) { [headers] _, _ in
                Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: body))
            }
        }
        router.get("/console/session") { [sessions] request, _ in
            guard let (_, session) = sessions.session(of: request) else {
                throw HTTPError(.unauthorized, message: "not signed in: give the admin token")
            }
            return SessionAnswer(csrf: session.csrf, expiresAt: adminTime(session.expires))
        }
        router.post("/console/session") { [token, sessions] request, context in
            // JSON only: a form of another site cannot send it without the
            // browser asking this server first, which it never allows.
            guard request.headers[.contentType]?.lowercased().hasPrefix("application/json") == true else {
                throw HTTPError(.unsupportedMediaType, message: "sign in with a JSON body: {\"token\": \"<admin token>\"}")
            }
            let body = try await request.decode(as: SignIn.self, context: context)
            guard AdminToken.matches(Substring(body.token.trimmingCharacters(in: .whitespacesAndNewlines)), token) else {
                throw HTTPError(.unauthorized, message: "the admin token was refused")
            }
            // Signing in again ends the session the browser had.
            if let (old, _) = sessions.session(of: request) { sessions.end(old) }
            let (id, session) = sessions.create()
            var response = EditedResponse(status: .created, response: SessionAnswer(csrf: session.csrf, expiresAt: adminTime(session.expires)))
            response.setCookie(sessions.cookie(id, maxAge: Int(ConsoleSessions.lifetime)))
            return response
        }
        router.delete("/console/session") { [sessions] request, _ in
            guard let (id, session) = sessions.session(of: request) else {
                throw HTTPError(.unauthorized, message: "not signed in")
            }
            try AdminAccess.checkForgery(request, session: session, scheme: sessions.scheme)
            sessions.end(id)
            var response = EditedResponse(status: .ok, response: SignedOut(signedOut: true))
            response.setCookie(sessions.cookie("", maxAge: 0))
            return response
        }
    }

    struct SignIn: Decodable {
        var token: String
    }

    struct SessionAnswer: ResponseCodable {
        /// The anti-forgery token: `X-CSRF-Token` on every request that changes something.
        var csrf: String
        var expiresAt: String
    }

    struct SignedOut: ResponseCodable {
        var signedOut: Bool
    }
}

/// `GET /v1/inbox/stream`: the inbox as server-sent events, the entries
/// after the browser's `Last-Event-ID` (a reconnection), else after `after`, that match the inbox's
/// filters, each as an `entry` event whose id is its sequence, then each new
/// one as it comes. A comment every 15 s keeps the connection from being
/// idle; the stream ends when the server shuts down, and when its client
/// goes (its connection closes) at once, not at the next comment.
struct InboxStream {
    static let heartbeat: Duration = .seconds(15)

    static func response(_ request: Request, inbox: NotificationInbox, dispatcher: Dispatcher) throws -> Response {
        var parameters = query(request)
        // A reconnecting EventSource sends the last id it saw; its URL still has the first `after`.
        if let last = request.headers[HTTPField.Name("Last-Event-ID")!] { parameters["after"] = last }
        let query = try InboxQuery(parameters)
        let body = ResponseBody { writer in
            // Its client gone, the wait is cancelled and the error thrown
            // here closes the connection.
            try await request.body.consumeWithCancellationOnInboundClose { _ in
                var after = query.after
                let encoder = JSONEncoder()
                try await writer.write(ByteBuffer(string: ": courier inbox\n\n"))
                while !inbox.isClosed, !Task.isCancelled {
                    guard let entry = await inbox.wait(for: query.filter, after: after, timeout: heartbeat) else {
                        if !inbox.isClosed, !Task.isCancelled { try await writer.write(ByteBuffer(string: ": still here\n\n")) }
                        continue
                    }
                    after = entry.sequence
                    let json = try encoder.encode(InboxEntryJSON(entry, dispatcher))
                    var buffer = ByteBuffer(string: "id: \(entry.sequence)\nevent: entry\ndata: ")
                    buffer.writeBytes(json)
                    buffer.writeString("\n\n")
                    try await writer.write(buffer)
                }
            }
            try await writer.finish(nil)
        }
        return Response(
            status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-store", .xContentTypeOptions: "nosniff"], body: body)
    }
}
