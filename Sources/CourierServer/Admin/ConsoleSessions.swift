import CourierCore
import Foundation
import HTTPTypes
import Hummingbird
import Synchronization

/// The web console's sign-in sessions (docs/console.md, "Access"): a
/// session is made by giving the admin token once, and then named by an
/// HttpOnly, SameSite=Strict cookie. Each session has its own anti-forgery
/// token, which the console's script sends in `X-CSRF-Token` with every
/// request that changes something; a page of another site can make the
/// browser send the cookie (were SameSite ignored) but cannot read that
/// token. Sessions live in memory: a restart signs everyone out.
final class ConsoleSessions: Sendable {
    static let csrfHeader = HTTPField.Name("X-CSRF-Token")!
    /// A session lasts this long from its sign-in.
    static let lifetime: TimeInterval = 12 * 3600
    /// Sessions kept at most; signing in past it ends the oldest.
    static let capacity = 1000

    struct Session: Sendable {
        var csrf: String
        var expires: Date
    }

    private let sessions = Mutex<[String: Session]>([:])
    let clock: any WallClock
    /// The admin server speaks HTTPS: the cookie is `Secure`, and named with
    /// the `__Host-` prefix (the browser then takes it only from this host,
    /// over HTTPS, for every path).
    let secure: Bool

    init(clock: any WallClock, secure: Bool) {
        self.clock = clock
        self.secure = secure
    }

    var cookieName: String { secure ? "__Host-courier_session" : "courier_session" }
    /// The console's scheme (the admin server's), as its origin has it.
    var scheme: String { secure ? "https" : "http" }

    /// A new session: its id (the cookie's value) and its anti-forgery token.
    func create() -> (id: String, session: Session) {
        let now = clock.now()
        let id = AdminToken.randomHex()
        let session = Session(csrf: AdminToken.randomHex(), expires: now.addingTimeInterval(Self.lifetime))
        sessions.withLock { sessions in
            sessions = sessions.filter { $0.value.expires > now }
            if sessions.count >= Self.capacity, let oldest = sessions.min(by: { $0.value.expires < $1.value.expires }) {
                sessions.removeValue(forKey: oldest.key)
            }
            sessions[id] = session
        }
        return (id, session)
    }

    /// The session a cookie names, if it is one and has not expired.
    func session(_ id: String) -> Session? {
        let now = clock.now()
        return sessions.withLock { sessions in
            guard let session = sessions[id] else { return nil }
            guard session.expires > now else {
                sessions.removeValue(forKey: id)
                return nil
            }
            return session
        }
    }

    func end(_ id: String) {
        _ = sessions.withLock { $0.removeValue(forKey: id) }
    }

    /// The cookie that names a session (or, with `maxAge` 0, ends it).
    func cookie(_ value: String, maxAge: Int) -> Cookie {
        Cookie(name: cookieName, value: value, maxAge: maxAge, path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    /// The live session a request's cookie names, with its id.
    func session(of request: Request) -> (id: String, session: Session)? {
        guard let id = request.cookies[cookieName]?.value, let session = session(id) else { return nil }
        return (id, session)
    }
}

/// Who may use the admin API: a request with the admin token
/// (`Authorization: Bearer`), or one from a signed-in console (its session
/// cookie) — which, to change anything, must also carry the session's
/// anti-forgery token and come from the console's own origin.
struct AdminAccess: RouterMiddleware {
    typealias Context = BasicRequestContext
    let token: String
    let sessions: ConsoleSessions

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let header = request.headers[.authorization] {
            let prefix = "Bearer "
            guard header.hasPrefix(prefix), AdminToken.matches(header.dropFirst(prefix.count), token) else {
                throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer"], message: "the admin token was refused")
            }
            return try await next(request, context)
        }
        guard let (_, session) = sessions.session(of: request) else {
            throw HTTPError(
                .unauthorized, headers: [.wwwAuthenticate: "Bearer"],
                message: "this endpoint needs the admin token (Authorization: Bearer <token>) or a console session")
        }
        if ![.get, .head].contains(request.method) { try Self.checkForgery(request, session: session, scheme: sessions.scheme) }
        return try await next(request, context)
    }

    /// A request that changes something, made with a session cookie: it must
    /// carry the session's anti-forgery token, and an `Origin` header, when
    /// the browser sends one, must be the console's: its `scheme`, and the
    /// host and port the request was sent to (`AdminHosts`).
    static func checkForgery(_ request: Request, session: ConsoleSessions.Session, scheme: String) throws {
        guard let presented = request.headers[ConsoleSessions.csrfHeader], AdminToken.matches(Substring(presented), session.csrf) else {
            throw HTTPError(.forbidden, message: "a console request that changes something needs the session's X-CSRF-Token header")
        }
        if let origin = request.headers[.origin], !AdminHosts.isConsoleOrigin(origin, scheme: scheme, host: request.head.authority) {
            throw HTTPError(.forbidden, message: "the request comes from another site (\(origin))")
        }
    }
}
