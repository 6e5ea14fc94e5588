import CourierCore
import Foundation
import NIOCore
import NIOHTTP2
import Synchronization

/// How a connection's provider proved who it is.
enum ProviderTrust: Sendable {
    /// A client certificate from Courier's CA: topics and environments from it.
    case certificate(CertificateRecord, ProviderIdentity, defaultTopic: String?)
    /// A certificate the store knows but that is not a usable provider
    /// certificate (no topics): every request is `BadCertificate`.
    case unusableCertificate(CertificateRecord)
    /// No certificate: each request carries a JWT.
    case token(TokenTrust)

    var isCertificate: Bool {
        if case .token = self { return false }
        return true
    }
}

/// What the gateway keeps of one open connection, for sweeps and shutdown.
final class HTTP2ConnectionHandle: Sendable {
    let channel: any Channel
    let trust: ProviderTrust
    /// When its TLS handshake finished.
    let openedAt: Date
    /// The peer's address.
    let address: String?
    private let state: Mutex<(lastActivity: Date, endRequested: Bool, requests: Int)>

    init(channel: any Channel, trust: ProviderTrust, now: Date) {
        self.channel = channel
        self.trust = trust
        openedAt = now
        address = channel.remoteAddress?.description
        state = Mutex((now, false, 0))
    }

    /// A request began.
    func touch(_ now: Date) {
        state.withLock {
            $0.lastActivity = now
            $0.requests += 1
        }
    }

    /// What the admin API shows of it.
    func state(_ environment: Environment) -> ProviderConnectionState {
        let identity: ProviderIdentity? =
            switch trust {
            case .certificate(_, let identity, _): identity
            case .unusableCertificate(let record): ProviderIdentity(name: "certificate \(record.serial)", teamID: nil, topics: [])
            case .token(let trust): trust.identity
            }
        return ProviderConnectionState(
            interface: .http2, environment: environment, provider: identity?.name, teamID: identity?.teamID, address: address,
            since: openedAt, requests: state.withLock { $0.requests })
    }

    var idleSince: Date { state.withLock { $0.lastActivity } }

    /// Ends the connection (from any thread; the first reason stands):
    /// requests that arrive from now on are answered with `reason` (an
    /// idle connection's with `Shutdown`), those in flight finish, then
    /// GOAWAY carries `{"reason": …}` and the connection closes
    /// (`HTTP2ConnectionStateMachine`).
    func goAway(_ reason: Reason) {
        let first = state.withLock { state in
            defer { state.endRequested = true }
            return !state.endRequested
        }
        if first { channel.pipeline.fireUserInboundEventTriggered(HTTP2GoAwayRequest(reason: reason)) }
    }
}

/// Tells a connection's handler to end the connection.
struct HTTP2GoAwayRequest: Sendable {
    var reason: Reason
}
