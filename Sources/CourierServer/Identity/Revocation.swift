import CourierCore
import Foundation
import Logging
import NIOCore
import Synchronization

/// The certificates peers present: their records, and every open
/// connection that a certificate authenticated, on every
/// interface (binary, feedback, HTTP/2, device), by the certificate (`Key`):
/// revoking a certificate closes all of them, each with its
/// protocol's own signal (docs/protocol.md, docs/device-protocol.md).
///
/// A revoked certificate is refused at the handshake (`PeerVerifier`), so
/// only connections opened before the revocation need closing. The store
/// is asked once per sweep for what was revoked lately — not once per
/// connection — so `courier pki revoke` run by another process is seen too.
final class CertificateConnections: Sendable {
    /// A certificate as the register keys it: a hash of its serial
    /// number, with the process's random seed (Swift's `Hasher`), in one
    /// word — not the serial's 40-character string, which every idle
    /// device connection would keep. Two serials with the same hash would
    /// share an entry, so revoking one would also close the other's
    /// connections (which then connect again, their certificate being
    /// good): about one chance in 2^64 per pair, and not one a peer can
    /// aim for, the seed being unknown outside the process.
    struct Key: Hashable, Sendable {
        private let hash: Int

        init(serial: String) {
            var hasher = Hasher()
            hasher.combine(serial)
            hash = hasher.finalize()
        }
    }

    /// The connections of one certificate. Most have one (a device's):
    /// kept without a dictionary of its own, which would cost every idle
    /// device connection a few hundred bytes, and as the connection
    /// itself, an entry of 24 bytes (a closure beside the connection's
    /// identity would make it 40).
    private enum Connections {
        case one(any RevocableConnection)
        case several([ObjectIdentifier: any RevocableConnection])

        mutating func add(_ connection: any RevocableConnection) {
            let key = ObjectIdentifier(connection)
            switch self {
            case .one(let only):
                self = ObjectIdentifier(only) == key ? .one(connection) : .several([ObjectIdentifier(only): only, key: connection])
            case .several(var all):
                self = .several([:])  // `all` alone holds the dictionary: changed in place
                all[key] = connection
                self = .several(all)
            }
        }

        /// Forgets `key`; true when no connection is left.
        mutating func remove(_ key: ObjectIdentifier) -> Bool {
            switch self {
            case .one(let only):
                return ObjectIdentifier(only) == key
            case .several(var all):
                self = .several([:])
                all[key] = nil
                self = .several(all)
                return all.isEmpty
            }
        }

        var all: [any RevocableConnection] {
            switch self {
            case .one(let only): [only]
            case .several(let all): Array(all.values)
            }
        }

        var count: Int {
            switch self {
            case .one: 1
            case .several(let all): all.count
            }
        }
    }

    private struct State {
        var byCertificate: [Key: Connections] = [:]
        /// When the last sweep began; the next asks for revocations from
        /// a while before it (another process's clock may differ).
        var lastSweep: Date?
    }

    /// How far back of the last sweep a sweep looks: clocks of the
    /// processes that revoke may be this far apart.
    static let clockMargin: TimeInterval = 3600

    private let state = Mutex(State())
    private let store: any ProvisioningStore
    private let clock: any WallClock
    private let logger: Logger

    init(store: any ProvisioningStore, clock: any WallClock, logger: Logger) {
        self.store = store
        self.clock = clock
        self.logger = logger
    }

    /// `channel` uses the certificate `serial`; `revoke` closes it (with
    /// the protocol's signal) once the certificate is revoked. Forgotten
    /// when the channel closes.
    func register(serial: String, channel: any Channel, revoke: @escaping @Sendable () -> Void) {
        let certificate = Key(serial: serial)
        let connection = ChannelRevocation(revoke)
        register(certificate, connection: connection)
        channel.closeFuture.whenComplete { _ in self.forget(certificate, connection: ObjectIdentifier(connection)) }
    }

    /// `connection` uses `certificate`; its `revoke` ends it once the
    /// certificate is revoked. It stays until `forget`: for a connection
    /// that says when it has ended (a device's), rather than a close
    /// callback on its channel.
    func register(_ certificate: Key, connection: any RevocableConnection) {
        state.withLock { state in
            if state.byCertificate[certificate]?.add(connection) == nil { state.byCertificate[certificate] = .one(connection) }
        }
    }

    /// The connection `connection`, registered with `certificate`, has ended.
    func forget(_ certificate: Key, connection: ObjectIdentifier) {
        state.withLock { state in
            if state.byCertificate[certificate]?.remove(connection) == true { state.byCertificate[certificate] = nil }
        }
    }

    /// The connections of the certificates `serials`, which are forgotten.
    func takeConnections(of serials: [String]) -> [any RevocableConnection] {
        state.withLock { state in serials.flatMap { state.byCertificate.removeValue(forKey: Key(serial: $0))?.all ?? [] } }
    }

    /// The store's record of a certificate (the handshake's question,
    /// `PeerVerifier`).
    func record(serial: String) async throws -> CertificateRecord? {
        try await store.certificate(serial: serial)
    }

    /// Connections open now, for tests and logs.
    var count: Int { state.withLock { $0.byCertificate.values.reduce(0) { $0 + $1.count } } }

    /// Closes the connections of every certificate revoked since the last
    /// sweep (the application's timer, every `qos.tickInterval`).
    func sweep() async {
        let now = clock.now()
        let since = state.withLock { ($0.lastSweep ?? now).addingTimeInterval(-Self.clockMargin) }
        let revoked: [String]
        do {
            revoked = try await store.certificatesRevoked(since: since)
        } catch {
            // The next sweep looks from the same time again.
            logger.error("store failed while reading revocations", metadata: ["courier.error": "\(error)"])
            return
        }
        state.withLock { $0.lastSweep = now }
        let connections = takeConnections(of: revoked)
        guard !connections.isEmpty else { return }
        logger.info("closing connections whose certificate was revoked", metadata: ["courier.connections": "\(connections.count)"])
        for connection in connections { connection.revoke() }
    }
}

/// A connection that a certificate authenticated (`CertificateConnections`).
protocol RevocableConnection: AnyObject, Sendable {
    /// The certificate was revoked: end the connection, with its protocol's signal.
    func revoke()
}

/// A connection registered by its channel: what ends it.
private final class ChannelRevocation: RevocableConnection {
    private let end: @Sendable () -> Void

    init(_ end: @escaping @Sendable () -> Void) {
        self.end = end
    }

    func revoke() { end() }
}
