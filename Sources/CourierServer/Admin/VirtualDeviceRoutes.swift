import CourierCore
import Foundation
import Hummingbird
import NIOCore

/// Virtual devices over the admin API (docs/admin-api.md, "Virtual
/// devices"): an app's tokens that Courier did not issue, registered,
/// listed, set offline or online, uninstalled and removed.
struct VirtualDeviceRoutes {
    let dispatcher: Dispatcher

    /// Tokens one request registers at most.
    static let maximumTokens = 100_000
    /// A body of that many tokens in hex, with room for the JSON around them.
    static let bodyLimit = 8 * 1024 * 1024

    /// Whether a path is the registration route's, `/v1/apps/{bundleID}/virtual-tokens`:
    /// the one request whose body may be `bodyLimit`.
    static func isRegistration(_ path: String) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 5 && parts[0].isEmpty && parts[1] == "v1" && parts[2] == "apps" && !parts[3].isEmpty && parts[4] == "virtual-tokens"
    }

    func add(to api: RouterGroup<BasicRequestContext>) {
        api.post("apps/:bundleID/virtual-tokens") { [dispatcher] request, context in
            let bundleID = try await Self.app(context, dispatcher)
            let body: NewVirtualTokens
            do {
                body = try JSONDecoder().decode(NewVirtualTokens.self, from: try await request.body.collect(upTo: Self.bodyLimit))
            } catch is NIOTooManyBytesError {
                throw HTTPError(.contentTooLarge, message: AdminRequestChecks.tooLarge(Self.bodyLimit))
            }
            let environment = try Self.environment(body.environment)
            guard !body.tokens.isEmpty, body.tokens.count <= Self.maximumTokens else {
                throw HTTPError(.unprocessableContent, message: "'tokens' must hold 1 to \(Self.maximumTokens) tokens, not \(body.tokens.count)")
            }
            let tokens = try body.tokens.enumerated().map { index, text in
                guard let token = Hex.decode(text) else { throw HTTPError(.unprocessableContent, message: "token \(index) ('\(text.prefix(80))') is not hex") }
                return token
            }
            do {
                let added = try await dispatcher.addVirtualTokens(tokens, bundleID: bundleID, environment: environment)
                let total = try await dispatcher.virtualTokenCount(bundleID: bundleID, environment: environment)
                return EditedResponse(
                    status: .created,
                    response: VirtualTokensAdded(bundleID: bundleID, environment: environment.rawValue, added: added, existing: tokens.count - added, total: total))
            } catch let refusal as Dispatcher.VirtualTokenRefusal {
                throw HTTPError(.unprocessableContent, message: refusal.message)
            }
        }
        api.get("apps/:bundleID/virtual-tokens") { [dispatcher] request, context in
            let bundleID = try await Self.app(context, dispatcher)
            let parameters = query(request)
            let environment = try Self.environment(parameters["environment"])
            let limit = try InboxQuery.integer(parameters, "limit", default: 1000, range: 1...10_000)
            let after = try parameters["after"].map { text in
                guard let token = Hex.decode(text), !token.isEmpty else { throw HTTPError(.badRequest, message: "'after' ('\(text.prefix(80))') is not a token in hex") }
                return token
            }
            let (tokens, total) = try await dispatcher.virtualTokens(bundleID: bundleID, environment: environment, after: after, limit: limit)
            return VirtualTokenList(
                bundleID: bundleID, environment: environment.rawValue, total: total, tokens: tokens.map(VirtualTokenJSON.init),
                next: tokens.count == limit ? tokens.last.map { Hex.encode($0.token) } : nil)
        }
        api.patch("apps/:bundleID/virtual-tokens/:token") { [dispatcher] request, context in
            let bundleID = try await Self.app(context, dispatcher)
            let token = try Self.token(context)
            let body = try await request.decode(as: VirtualTokenChange.self, context: context)
            let environment = try Self.environment(body.environment)
            var uninstalled: Date??
            switch body.uninstalledAt {
            case nil: uninstalled = nil
            case .some(nil): uninstalled = .some(nil)
            case .some(.some(let at)): uninstalled = .some(at.text == "now" ? dispatcher.clock.now() : try InboxQuery.date(at.text, "uninstalledAt"))
            }
            guard
                let changed = try await dispatcher.changeVirtualToken(
                    token, bundleID: bundleID, environment: environment, offline: body.online.map { !$0 }, uninstalled: uninstalled)
            else { throw HTTPError(.notFound, message: "\(Hex.encode(token)) is not a virtual token of \(bundleID) in \(environment.rawValue)") }
            return VirtualTokenJSON(changed)
        }
        api.delete("apps/:bundleID/virtual-tokens/:token") { [dispatcher] request, context in
            let bundleID = try await Self.app(context, dispatcher)
            let token = try Self.token(context)
            let environment = try Self.environment(query(request)["environment"])
            guard try await dispatcher.removeVirtualTokens([token], bundleID: bundleID, environment: environment) == 1 else {
                throw HTTPError(.notFound, message: "\(Hex.encode(token)) is not a virtual token of \(bundleID) in \(environment.rawValue)")
            }
            return VirtualTokensRemoved(removed: 1)
        }
        api.delete("apps/:bundleID/virtual-tokens") { [dispatcher] request, context in
            let bundleID = try await Self.app(context, dispatcher)
            let environment = try Self.environment(query(request)["environment"])
            return VirtualTokensRemoved(removed: try await dispatcher.removeVirtualTokens(nil, bundleID: bundleID, environment: environment))
        }
    }

    /// The app the path names; 404 when there is none.
    private static func app(_ context: BasicRequestContext, _ dispatcher: Dispatcher) async throws -> String {
        let raw = try context.parameters.require("bundleID")
        let bundleID = raw.removingPercentEncoding ?? raw
        guard try await dispatcher.team(ofApp: bundleID) != nil else { throw HTTPError(.notFound, message: "no app \(bundleID)") }
        return bundleID
    }

    private static func token(_ context: BasicRequestContext) throws -> [UInt8] {
        let text = try context.parameters.require("token")
        guard let token = Hex.decode(text), !token.isEmpty else { throw HTTPError(.badRequest, message: "'\(text.prefix(80))' is not a token in hex") }
        return token
    }

    private static func environment(_ text: String?) throws -> CourierCore.Environment {
        guard let text else { throw HTTPError(.badRequest, message: "'environment' is missing: production or sandbox") }
        guard let environment = Environment(rawValue: text) else {
            throw HTTPError(.badRequest, message: "'environment' must be production or sandbox, not '\(text.prefix(40))'")
        }
        return environment
    }
}

struct NewVirtualTokens: Decodable {
    var environment: String?
    var tokens: [String]
}

/// A change of a virtual token: `uninstalledAt` absent leaves it, null
/// installs the app again, a time (or "now") uninstalls it then.
struct VirtualTokenChange: Decodable {
    var environment: String?
    var online: Bool?
    var uninstalledAt: TimeValue??

    private enum CodingKeys: String, CodingKey { case environment, online, uninstalledAt }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        environment = try container.decodeIfPresent(String.self, forKey: .environment)
        online = try container.decodeIfPresent(Bool.self, forKey: .online)
        if container.contains(.uninstalledAt) {
            uninstalledAt = .some(try container.decodeNil(forKey: .uninstalledAt) ? nil : try container.decode(TimeValue.self, forKey: .uninstalledAt))
        }
    }
}

struct VirtualTokenJSON: ResponseCodable {
    var token: String
    var environment: String
    var online: Bool
    var registeredAt: String
    var uninstalledAt: String?

    init(_ token: VirtualToken) {
        self.token = Hex.encode(token.token)
        environment = token.environment.rawValue
        online = !token.offline
        registeredAt = adminTime(token.registeredAt)
        uninstalledAt = token.uninstalledAt.map(adminTime)
    }
}

struct VirtualTokenList: ResponseCodable {
    var bundleID: String
    var environment: String
    /// Every virtual token the app has in the environment.
    var total: Int
    var tokens: [VirtualTokenJSON]
    /// The `after` of the next page; nil on the last.
    var next: String?
}

struct VirtualTokensAdded: ResponseCodable {
    var bundleID: String
    var environment: String
    var added: Int
    /// Tokens of the request registered already (their state kept).
    var existing: Int
    var total: Int
}

struct VirtualTokensRemoved: ResponseCodable {
    var removed: Int
}
