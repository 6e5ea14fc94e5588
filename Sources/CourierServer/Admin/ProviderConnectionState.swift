import CourierCore
import Foundation
import NIOCore
import Synchronization

/// One open provider connection as the admin API shows it
/// (`GET /v1/connections`).
struct ProviderConnectionState: Sendable {
    var interface: ProviderInterface
    var environment: Environment
    /// "certificate <serial>" or "key <key id>"; nil while a token
    /// connection has shown no valid token.
    var provider: String?
    var teamID: String?
    /// The peer's address.
    var address: String?
    /// When its TLS handshake finished.
    var since: Date
    /// Notifications (binary frames, HTTP/2 requests) it sent.
    var requests: Int
}

/// One binary provider connection: its provider, the peer's address,
/// since when, and the frames it sent (counted per read, not per frame).
final class BinaryProviderConnection: Sendable {
    let identity: ProviderIdentity
    let address: String?
    let since: Date
    let requests = Atomic<Int>(0)

    init(identity: ProviderIdentity, address: String?, since: Date) {
        self.identity = identity
        self.address = address
        self.since = since
    }

    func count(_ frames: Int) {
        if frames > 0 { requests.wrappingAdd(frames, ordering: .relaxed) }
    }
}

/// The binary gateway's open connections, for the admin API: each
/// registered once its handshake named the provider, gone when it closes.
final class BinaryConnections: Sendable {
    private let open = Mutex<[ObjectIdentifier: BinaryProviderConnection]>([:])

    /// Registers `channel`'s connection until it closes.
    func register(_ channel: any Channel, identity: ProviderIdentity, now: Date) -> BinaryProviderConnection {
        let entry = BinaryProviderConnection(identity: identity, address: channel.remoteAddress?.description, since: now)
        let key = ObjectIdentifier(channel)
        open.withLock { $0[key] = entry }
        channel.closeFuture.whenComplete { _ in _ = self.open.withLock { $0.removeValue(forKey: key) } }
        return entry
    }

    func states(_ environment: Environment) -> [ProviderConnectionState] {
        open.withLock { Array($0.values) }.map {
            ProviderConnectionState(
                interface: .binary, environment: environment, provider: $0.identity.name, teamID: $0.identity.teamID, address: $0.address,
                since: $0.since, requests: $0.requests.load(ordering: .relaxed))
        }
    }
}
