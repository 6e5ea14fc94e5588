import HTTPTypes
import Hummingbird
import NIOCore

/// The names the admin server answers to, and its origin (docs/security.md,
/// "The web console"). A request whose `Host` names something else is
/// refused: a page of another site whose name was made to resolve to this
/// machine (DNS rebinding) is of its own origin, and its requests carry its
/// own name. And an `Origin` is the console's only with the console's
/// scheme, host and port.
///
/// The names: the address the admin server binds to (not a wildcard one),
/// `localhost`, `127.0.0.1` and `::1` when that is a loopback or a wildcard
/// address, and the server certificate's names and addresses
/// (`network.serverDNSNames`, `network.serverIPAddresses`: the names
/// clients reach Courier by, which an HTTPS client checks anyway). The
/// port must be the one the admin server is bound to.
struct AdminHosts: Sendable {
    /// Lowercased; IP addresses as `SocketAddress` writes them, an IPv6
    /// one without brackets.
    let names: Set<String>
    /// `http` or `https`.
    let scheme: String
    /// The port the admin server is bound to (nil before it is).
    let port: @Sendable () -> Int?

    static let wildcards: Set<String> = ["0.0.0.0", "::"]
    static let loopback: Set<String> = ["localhost", "127.0.0.1", "::1"]

    init(_ network: CourierConfiguration.Network, port: @escaping @Sendable () -> Int?) {
        let bound = Authority.normalized(network.adminHost)
        var names = Set((network.serverDNSNames + network.serverIPAddresses).map(Authority.normalized))
        if Self.wildcards.contains(bound) || Self.loopback.contains(bound) { names.formUnion(Self.loopback) }
        if !Self.wildcards.contains(bound) { names.insert(bound) }
        self.names = names
        scheme = network.adminUsesTLS ? "https" : "http"
        self.port = port
    }

    /// The port of an authority that names none, by scheme.
    static func defaultPort(_ scheme: String) -> Int { scheme == "https" ? 443 : 80 }

    /// True when `authority` (a request's `Host`) is one of the names, with
    /// the admin server's port (none given: the scheme's).
    func accepts(_ authority: String?) -> Bool {
        guard let authority, let parsed = Authority(Substring(authority)), names.contains(parsed.host) else { return false }
        return (parsed.port ?? Self.defaultPort(scheme)) == port()
    }

    /// True when `origin` (`scheme://host[:port]`) is the console's as the
    /// request reached it: the admin server's `scheme`, and the host and
    /// port of the request's `Host` (which `accepts` checked). The scheme
    /// counts: `https://127.0.0.1:8080` is not the origin of a console at
    /// `http://127.0.0.1:8080`.
    static func isConsoleOrigin(_ origin: String, scheme: String, host authority: String?) -> Bool {
        guard let authority, let own = Authority(Substring(authority)), let separator = origin.range(of: "://"),
            origin[..<separator.lowerBound].lowercased() == scheme, let other = Authority(origin[separator.upperBound...])
        else { return false }
        let port = defaultPort(scheme)
        return other.host == own.host && (other.port ?? port) == (own.port ?? port)
    }

    /// `host[:port]` as a `Host` header or an origin writes it.
    struct Authority: Equatable {
        /// Normalized (`normalized`).
        var host: String
        var port: Int?

        /// Nil when `text` is not a host with an optional port (an IPv6
        /// address must be in brackets).
        init?(_ text: Substring) {
            var rest: Substring
            if text.first == "[" {
                guard let close = text.firstIndex(of: "]") else { return nil }
                host = Self.normalized(String(text[text.index(after: text.startIndex)..<close]))
                rest = text[text.index(after: close)...]
            } else {
                let colon = text.firstIndex(of: ":") ?? text.endIndex
                host = Self.normalized(String(text[..<colon]))
                rest = text[colon...]
            }
            guard !host.isEmpty else { return nil }
            guard !rest.isEmpty else {
                port = nil
                return
            }
            // After a colon, the port: one to five digits.
            guard rest.first == ":" else { return nil }
            rest = rest.dropFirst()
            guard (1...5).contains(rest.count), rest.allSatisfy({ ("0"..."9").contains($0) }), let number = Int(rest), number <= 65_535 else {
                return nil
            }
            port = number
        }

        /// A host as the names are kept: lowercased, an IP address as
        /// `SocketAddress` writes it (so `::1` and `0:0:0:0:0:0:0:1` are one).
        static func normalized(_ host: String) -> String {
            let lowercased = host.lowercased()
            guard let address = try? SocketAddress(ipAddress: lowercased, port: 0), let text = address.ipAddress else { return lowercased }
            return text
        }
    }
}

/// What every admin request is checked for before anything else: a `Host`
/// that is one of the server's names (`AdminHosts`; else `421`), and a
/// body no larger than the server takes, when it says its length (else
/// `413` before a byte of it is read; one that does not say is refused as
/// it is read, `JSONErrors`).
struct AdminRequestChecks: RouterMiddleware {
    typealias Context = BasicRequestContext
    let hosts: AdminHosts

    /// A second `Host` header (the first is the request's authority).
    static let host = HTTPField.Name("Host")!

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.headers[Self.host] == nil, hosts.accepts(request.head.authority) else {
            throw HTTPError(.misdirectedRequest, message: "the Host header does not name this server (its admin address or a name of its certificate)")
        }
        let limit = Self.bodyLimit(request, context)
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit {
            // Anyone may send one: no more than a debug line.
            context.logger.debug("request body too large", metadata: ["courier.length": "\(length)"])
            throw HTTPError(.contentTooLarge, message: Self.tooLarge(limit))
        }
        return try await next(request, context)
    }

    static func tooLarge(_ context: Context) -> String { tooLarge(context.maxUploadSize) }

    static func tooLarge(_ limit: Int) -> String {
        "the request body is larger than the \(limit) bytes this server takes"
    }

    /// The largest body a request may have: the router's, or for a list of
    /// virtual tokens (up to 100,000 of 64 hex digits) `VirtualDeviceRoutes.bodyLimit`.
    /// Read only once the request is authenticated (`AdminAccess`).
    static func bodyLimit(_ request: Request, _ context: Context) -> Int {
        request.method == .post && VirtualDeviceRoutes.isRegistration(request.uri.path) ? VirtualDeviceRoutes.bodyLimit : context.maxUploadSize
    }
}
