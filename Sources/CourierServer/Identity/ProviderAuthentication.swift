import CourierCore
import CourierPKI
import Crypto
import Foundation
import Logging
import Synchronization

/// The auth keys and teams' topics the HTTP/2 API needs, read from the store
/// once and kept; `refreshRevocations` (the gateway's sweep) drops revoked
/// keys so that their tokens stop working.
final class ProviderKeys: Sendable {
    struct Key: Sendable {
        var record: AuthKeyRecord
        var publicKey: P256.Signing.PublicKey
    }

    private struct State {
        var keys: [String: Key] = [:]
        var topics: [String: Set<String>] = [:]
        var revoked: Set<String> = []
        var removedTeams: Set<String> = []
    }

    private let store: any ProvisioningStore
    private let state = Mutex(State())

    init(store: any ProvisioningStore) {
        self.store = store
    }

    /// The key with this id, unless unknown or revoked.
    func key(_ id: String) async throws -> Key? {
        if let cached = state.withLock({ $0.keys[id] }) { return cached }
        guard let record = try await store.authKey(id: id), record.revokedAt == nil,
            let publicKey = try? P256.Signing.PublicKey(x963Representation: record.publicKey)
        else { return nil }
        let key = Key(record: record, publicKey: publicKey)
        state.withLock { $0.keys[id] = key }
        return key
    }

    func isRevoked(_ id: String) -> Bool { state.withLock { $0.revoked.contains(id) } }

    func isRemoved(team: String) -> Bool { state.withLock { $0.removedTeams.contains(team) } }

    /// The topics of the team's apps that `key` may push to (all for a
    /// team-scoped key); nil when there is no such team.
    func topics(of key: AuthKeyRecord, refresh: Bool = false) async throws -> Set<String>? {
        guard let topics = try await topics(team: key.teamID, refresh: refresh) else { return nil }
        return key.bundleIDs == nil ? topics : topics.filter { key.covers(Topic($0)) }
    }

    /// The topics of the team's apps; nil when there is no such team.
    func topics(team: String, refresh: Bool = false) async throws -> Set<String>? {
        if !refresh, let cached = state.withLock({ $0.topics[team] }) { return cached }
        guard try await store.team(id: team) != nil else {
            state.withLock { state in
                state.topics.removeValue(forKey: team)
                state.removedTeams.insert(team)
            }
            return nil
        }
        let topics = Set(try await store.apps(teamID: team).flatMap { $0.topics.map(\.description) })
        state.withLock { state in
            state.topics[team] = topics
            state.removedTeams.remove(team)
        }
        return topics
    }

    /// Reads again what is kept (the gateways' sweep): keys revoked since
    /// (`isRevoked` then says so), teams gone, apps added.
    func refresh() async throws {
        let (ids, teams) = state.withLock { (Array($0.keys.keys), Array($0.topics.keys)) }
        var revoked: Set<String> = []
        for id in ids {
            let record = try await store.authKey(id: id)
            if record == nil || record?.revokedAt != nil { revoked.insert(id) }
        }
        state.withLock { state in
            for id in revoked { state.keys.removeValue(forKey: id) }
            state.revoked.formUnion(revoked)
        }
        for team in teams { _ = try await topics(team: team, refresh: true) }
    }
}

/// Token trust on one connection (the seeds' "Provider Authentication
/// Tokens"; docs/protocol.md §2): ES256 only, the key by `kid`, `iss` its team, one
/// team per connection, stale after an hour, replaced at most every 20
/// minutes; the key's scope (its environments, a topic-specific key's
/// apps) as Apple's keys have it since 2025, and a topic-specific key's
/// connection keeps to that key. The verified token is kept, so a request that carries it again
/// costs a string comparison, not a signature check.
final class TokenTrust: Sendable {
    /// How long a token is valid after its `iat`.
    static let lifetime: TimeInterval = 3600
    /// The shortest time between two tokens on one connection.
    static let minimumUpdateInterval: TimeInterval = 20 * 60
    /// How far in the future an `iat` may lie (clocks differ).
    static let clockSkew: TimeInterval = 300

    private struct Current {
        /// The `authorization` header as sent.
        var header: String
        var token: ProviderToken
        var key: AuthKeyRecord
        var installedAt: Date
        var identity: ProviderIdentity
    }

    private struct State {
        var current: Current?
        var team: String?
    }

    private let state = Mutex(State())
    /// The environment of the connection's port.
    let environment: Environment

    init(environment: Environment) {
        self.environment = environment
    }

    /// The key of the token in use on this connection (revoking it closes the connection).
    var keyID: String? { state.withLock { $0.current?.token.keyID } }

    /// The provider of the token in use; nil before a valid one.
    var identity: ProviderIdentity? { state.withLock { $0.current?.identity } }

    /// The outcome of one request's `authorization` header.
    enum Outcome: Sendable {
        /// Valid; `first` is true for the connection's first valid token.
        case valid(ProviderIdentity, first: Bool)
        case rejected(Reason)
    }

    /// The outcome when it is known without the store: no header, or the
    /// header already verified on this connection (only its age and its
    /// key matter then). Nil otherwise; nothing was done.
    func authenticateAtOnce(_ authorization: String?, now: Date, keys: ProviderKeys) -> Outcome? {
        guard let authorization else { return .rejected(.missingProviderToken) }
        guard let current = state.withLock({ $0.current }), current.header == authorization else { return nil }
        if keys.isRevoked(current.token.keyID) { return .rejected(.invalidProviderToken) }
        if keys.isRemoved(team: current.token.teamID) { return .rejected(.forbidden) }
        if now.timeIntervalSince(current.token.issuedAt) > Self.lifetime { return .rejected(.expiredProviderToken) }
        return .valid(current.identity, first: false)
    }

    func authenticate(_ authorization: String?, now: Date, keys: ProviderKeys) async -> Outcome {
        if let outcome = authenticateAtOnce(authorization, now: now, keys: keys) { return outcome }
        guard let authorization else { return .rejected(.missingProviderToken) }
        guard let compact = Self.bearerToken(authorization) else { return .rejected(.invalidProviderToken) }
        guard !compact.isEmpty else { return .rejected(.missingProviderToken) }

        let token: ProviderToken
        do {
            token = try ProviderToken(compact: compact)
        } catch {
            return .rejected(.invalidProviderToken)
        }
        let key: ProviderKeys.Key?
        let topics: Set<String>?
        do {
            key = try await keys.key(token.keyID)
            if let key { topics = try await keys.topics(of: key.record) } else { topics = nil }
        } catch {
            return .rejected(.serviceUnavailable)
        }
        guard let key, key.record.teamID == token.teamID, token.isSigned(by: key.publicKey) else { return .rejected(.invalidProviderToken) }
        let age = now.timeIntervalSince(token.issuedAt)
        guard age <= Self.lifetime else { return .rejected(.expiredProviderToken) }
        guard age >= -Self.clockSkew else { return .rejected(.invalidProviderToken) }
        guard let topics else { return .rejected(.forbidden) }
        guard key.record.environments.contains(environment) else { return .rejected(.badEnvironmentKeyIdInToken) }

        let identity = ProviderIdentity(name: "key \(token.keyID)", teamID: token.teamID, topics: topics)
        return state.withLock { state -> Outcome in
            if let team = state.team, team != token.teamID { return .rejected(.invalidProviderToken) }
            // Team-scoped keys of one team may follow each other; a
            // topic-specific key's connection takes no other key, nor it
            // another's connection.
            if let current = state.current, current.key.keyID != key.record.keyID, current.key.bundleIDs != nil || key.record.bundleIDs != nil {
                return .rejected(.unrelatedKeyIdInToken)
            }
            var installedAt = now
            if let current = state.current {
                if current.token.hasSameClaims(as: token) {
                    // The same token signed again: not an update.
                    installedAt = current.installedAt
                } else if now.timeIntervalSince(current.installedAt) < Self.minimumUpdateInterval,
                    now.timeIntervalSince(current.token.issuedAt) <= Self.lifetime
                {
                    return .rejected(.tooManyProviderTokenUpdates)
                }
            }
            let first = state.current == nil
            state.team = token.teamID
            state.current = Current(header: authorization, token: token, key: key.record, installedAt: installedAt, identity: identity)
            return .valid(identity, first: first)
        }
    }

    /// The token of a `bearer <token>` header (the scheme in any case,
    /// spaces around the token ignored); nil for another scheme.
    static func bearerToken(_ header: String) -> Substring? {
        let utf8 = header.utf8
        guard utf8.count >= 6, utf8.prefix(6).lazy.map({ $0 | 0x20 }).elementsEqual("bearer".utf8) else { return nil }
        let rest = header.utf8.dropFirst(6)
        guard rest.isEmpty || rest.first == UInt8(ascii: " ") else { return nil }
        guard let start = rest.firstIndex(where: { $0 != UInt8(ascii: " ") }) else { return "" }
        let end = rest.lastIndex(where: { $0 != UInt8(ascii: " ") })!
        return Substring(header.utf8[start...end])
    }

    /// The connection's team's topics, read again (an app created after the
    /// token was verified).
    func refreshTopics(keys: ProviderKeys) async -> ProviderIdentity? {
        guard let current = state.withLock({ $0.current }),
            let topics = try? await keys.topics(of: current.key, refresh: true)
        else { return nil }
        return state.withLock { state in
            guard state.current?.header == current.header else { return state.current?.identity }
            state.current?.identity.topics = topics
            return state.current?.identity
        }
    }
}
