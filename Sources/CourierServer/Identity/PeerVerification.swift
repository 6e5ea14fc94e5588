import CourierBoringSSL
import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import Synchronization
import X509

/// Where a connection's TLS handshake leaves what it learned about the
/// peer (`PeerVerifier`): its certificate as the store knows it. A
/// `PeerIdentityBox`, or a connection that holds it itself (a device's,
/// `DeviceConnection`: one object fewer for every idle device).
protocol PeerIdentityHolder: AnyObject, Sendable {
    /// The check's result.
    func set(_ record: CertificateRecord)
    /// The TLS handler's verification callback, which the handler keeps
    /// for the connection's life. The holder makes it, capturing itself
    /// alone (it holds what the check needs): a closure with no context of
    /// its own to allocate.
    func verificationCallback() -> NIOSSLCustomVerificationCallback
}

/// A certificate record in an allocation of its own, so that a holder
/// whose record was taken keeps a pointer's size for it.
final class HeldRecord: Sendable {
    let record: CertificateRecord
    init(_ record: CertificateRecord) { self.record = record }
}

/// What the TLS handshake learned about the peer, filled in by the
/// verification callback and read by the connection once the handshake is
/// done: the holder of the provider interfaces' connections.
final class PeerIdentityBox: PeerIdentityHolder {
    private let value = Mutex<HeldRecord?>(nil)
    private let verifier: PeerVerifier
    /// The connection's close, until which an admitted provider certificate counts as open.
    private let closed: EventLoopFuture<Void>
    /// Where the check runs.
    private let work: ConnectionWork
    /// Told when the certificate passed (the connection authenticated).
    private let release: ConnectionRelease

    init(verifier: PeerVerifier, closed: EventLoopFuture<Void>, work: ConnectionWork, release: ConnectionRelease) {
        self.verifier = verifier
        self.closed = closed
        self.work = work
        self.release = release
    }

    func verificationCallback() -> NIOSSLCustomVerificationCallback {
        { [self] chain, promise in verify(chain, promise: promise) }
    }

    func verify(_ chain: [NIOSSLCertificate], promise: EventLoopPromise<NIOSSLVerificationResult>) {
        verifier.verify(chain, into: self, closed: closed, work: work, promise: promise)
    }

    var record: CertificateRecord? { value.withLock { $0?.record } }
    func set(_ record: CertificateRecord) {
        value.withLock { $0 = HeldRecord(record) }
        release.authenticated()
    }
}

/// Checks client certificates during the TLS handshake: the chain must
/// lead to Courier's CA (RFC 5280 rules, validity dates), and the
/// certificate must be one the store knows, of the expected kind and not
/// revoked. Anything else fails the handshake.
///
/// One per port, shared by its connections: each connection's
/// verification callback, which its TLS handler keeps as long as the
/// connection is open, holds a reference rather than a copy of all this.
final class PeerVerifier: Sendable {
    let authority: Certificate
    let certificates: CertificateConnections
    let kind: CertificateKind
    let logger: Logger
    /// For provider certificates: the environment the port serves, which
    /// the certificate must carry.
    let environment: Environment?
    /// Provider certificates that connect too often, or hold too many
    /// connections, are refused.
    let providers: ProviderLimits?
    /// For provider certificates: the other authorities trusted for them.
    let authorities: ProviderAuthorities?
    /// Refusals are lines a peer causes: at most one per cause per interval.
    let peerLog: PeerLog

    init(
        authority: Certificate, certificates: CertificateConnections, kind: CertificateKind, logger: Logger, environment: Environment? = nil,
        providers: ProviderLimits? = nil, authorities: ProviderAuthorities? = nil, peerLog: PeerLog = PeerLog(interval: 10)
    ) {
        self.peerLog = peerLog
        self.authority = authority
        self.certificates = certificates
        self.kind = kind
        self.logger = logger
        self.environment = environment
        self.providers = providers
        self.authorities = authorities
    }

    /// The handlers every listener's connection starts with: TLS whose
    /// peer certificate `peer`'s callback checks (the identity into
    /// `peer`), then the close of a handshake not done within
    /// `handshakeTimeout`, and `failed` called if the handshake fails.
    static func tlsHandlers(
        context: NIOSSLContext, peer: some PeerIdentityHolder, handshakeTimeout: TimeAmount, failed: @escaping @Sendable () -> Void
    ) -> [any ChannelHandler] {
        [
            NIOSSLServerHandler(context: context, customVerificationCallback: peer.verificationCallback()),
            ConnectionTimeout(.handshake, timeout: handshakeTimeout),
            HandshakeFailure(failed),
        ]
    }

    /// `closed`: the connection's close, until which an admitted provider
    /// certificate counts as open.
    func verify(
        _ chain: [NIOSSLCertificate], into holder: some PeerIdentityHolder, closed: EventLoopFuture<Void>, work: ConnectionWork,
        promise: EventLoopPromise<NIOSSLVerificationResult>
    ) {
        let certificates: [Certificate]
        do {
            certificates = try chain.map { try Certificate(derEncoded: try $0.toDERBytes()) }
        } catch {
            promise.succeed(.failed)
            return
        }
        guard let leaf = certificates.first else {
            promise.succeed(.failed)
            return
        }
        work.start { [self] in
            let others = kind == .provider ? authorities?.current() ?? [] : []
            var verifier = Verifier(rootCertificates: CertificateStore([authority] + others)) { RFC5280Policy() }
            let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(certificates.dropFirst()))
            guard case .validCertificate(let chain) = result else {
                peerLog.log(.info, "refused a peer certificate not issued by a trusted CA", metadata: ["courier.subject": "\(leaf.subject)"], to: logger)
                promise.succeed(.failed)
                return
            }
            let serial = Hex.encode(leaf.serialNumber.bytes)
            do {
                var found = try await self.certificates.record(serial: serial)
                if chain.last != authority, let authorities {
                    // Another authority's: its serial numbers are not
                    // Courier's, so the record must hold this very certificate.
                    if let record = found, (try? Certificate(pemEncoded: record.pem)) != leaf {
                        peerLog.log(
                            .warning, "refused a certificate whose serial number is another certificate's", metadata: ["courier.serial": "\(serial)"], to: logger)
                        promise.succeed(.failed)
                        return
                    }
                    if found == nil {
                        switch try await authorities.adopt(leaf) {
                        case .success(let record):
                            logger.notice("took a provider certificate of a trusted authority", metadata: ["courier.serial": "\(serial)", "courier.subject": "\(leaf.subject)"])
                            found = record
                        case .failure(let refusal):
                            peerLog.log(
                                .info, "refused a provider certificate of a trusted authority", metadata: ["courier.serial": "\(serial)", "courier.why": "\(refusal.why)"],
                                to: logger)
                            promise.succeed(.failed)
                            return
                        }
                    }
                }
                guard let record = found, record.kind == kind, record.revokedAt == nil else {
                    peerLog.log(.info, "refused an unknown, revoked or wrong-kind certificate", metadata: ["courier.serial": "\(serial)"], to: logger)
                    promise.succeed(.failed)
                    return
                }
                if let environment, !record.environments.contains(environment) {
                    peerLog.log(.info, "refused a certificate without this environment", metadata: ["courier.serial": "\(serial)"], to: logger)
                    promise.succeed(.failed)
                    return
                }
                switch providers?.admit("certificate " + serial, until: closed) ?? .admitted {
                case .admitted: break
                case .tooFast:
                    peerLog.log(.warning, "refusing a provider certificate that reconnects too fast", metadata: ["courier.serial": "\(serial)"], to: logger)
                    promise.succeed(.failed)
                    return
                case .tooMany:
                    peerLog.log(
                        .warning, "refusing a provider certificate that holds its connections",
                        metadata: ["courier.serial": "\(serial)", "courier.open": "\(providers?.maxOpen ?? 0)"], to: logger)
                    promise.succeed(.failed)
                    return
                }
                // A device's connection needs its certificate's serial and
                // device id (at Connect), not its text: a connection that
                // never sends Connect does not keep the PEM and subject.
                var kept = record
                if kind == .device {
                    kept.pem = ""
                    kept.subject = ""
                }
                holder.set(kept)
                promise.succeed(.certificateVerified)
            } catch {
                logger.error("store failed during a handshake", metadata: ["courier.error": "\(error)"])
                promise.succeed(.failed)
            }
        }
    }
}

/// TLS server settings from the data directory's server certificate and CA.
struct ServerTLS: Sendable {
    let context: NIOSSLContext
    let authority: Certificate
    /// The other authorities trusted for provider certificates.
    let providerAuthorities: ProviderAuthorities

    init(provisioner: Provisioner) throws {
        context = try Self.context(provisioner: provisioner, keepingPeerCertificates: false)
        authority = try provisioner.authority().certificate
        providerAuthorities = ProviderAuthorities(provisioner: provisioner)
    }

    /// The admin API's HTTPS (`network.adminUsesTLS`): the server
    /// certificate, no client certificate (the admin token authenticates).
    static func adminConfiguration(provisioner: Provisioner) throws -> TLSConfiguration {
        let chain = try NIOSSLCertificate.fromPEMFile(provisioner.serverCertificatePath)
        let key = try NIOSSLPrivateKey(file: provisioner.serverKeyPath, format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        return configuration
    }

    /// A server context that asks for a client certificate from the CA.
    ///
    /// `keepingPeerCertificates` false: once a handshake is over, TLS keeps
    /// only a hash of the client's certificate, not the certificate (its
    /// DER and the objects BoringSSL parses it into, kept with the
    /// session): about 6 KiB less per connection (docs/benchmarks.md). The
    /// device gateway's context does this: a device's certificate is
    /// checked during the handshake (`PeerVerifier`), which leaves what the
    /// connection needs in its `DeviceConnection`, and nothing reads it
    /// later. swift-nio-ssl has no setting for it, so BoringSSL's is set on
    /// the context's SSL_CTX directly (`keepOnlyPeerCertificateHashes`).
    static func context(
        provisioner: Provisioner, maximumVersion: TLSVersion? = nil, alpn: [String] = [], verification: CertificateVerification = .noHostnameVerification,
        keepingPeerCertificates: Bool = true
    ) throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMFile(provisioner.serverCertificatePath)
        let key = try NIOSSLPrivateKey(file: provisioner.serverKeyPath, format: .pem)
        let ca = try NIOSSLCertificate.fromPEMFile(provisioner.caCertificatePath)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.maximumTLSVersion = maximumVersion
        configuration.trustRoots = .certificates(ca)
        configuration.certificateVerification = verification
        configuration.applicationProtocols = alpn
        let context = try NIOSSLContext(configuration: configuration)
        if !keepingPeerCertificates { context.keepOnlyPeerCertificateHashes() }
        return context
    }
}

extension NIOSSLContext {
    /// Makes BoringSSL keep only a hash of each client certificate once a
    /// handshake is over (see `ServerTLS.context`); false if this
    /// swift-nio-ssl keeps its SSL_CTX elsewhere than in its stored
    /// property `sslContext` (then certificates are kept, as before, and
    /// `ServerTLSTests` fails). Call before any connection uses the context.
    @discardableResult
    func keepOnlyPeerCertificateHashes() -> Bool {
        guard let sslContext = Mirror(reflecting: self).children.first(where: { $0.label == "sslContext" })?.value as? OpaquePointer else {
            return false
        }
        courier_ssl_ctx_retain_only_peer_hash(UnsafeMutableRawPointer(sslContext))
        return true
    }
}

extension Provisioner {
    /// The TLS server context of the device gateway (and, with TLS 1.2 at
    /// most, of the binary and feedback listeners): this data directory's
    /// server certificate, a client certificate from its CA required.
    /// Public for the benchmarks' TLS-only server, which measures the TLS
    /// stack with exactly these settings (`maximumVersion`: TLS 1.2 at
    /// most, as the binary and feedback listeners; `keepingPeerCertificates`:
    /// the clients' certificates kept after the handshake, as the provider
    /// listeners do and the device gateway does not).
    public func serverTLSContext(maximumVersion: TLSVersion? = nil, keepingPeerCertificates: Bool = false) throws -> NIOSSLContext {
        try ServerTLS.context(provisioner: self, maximumVersion: maximumVersion, keepingPeerCertificates: keepingPeerCertificates)
    }
}

/// The ports listeners actually bound (port 0 picks one), for tests and
/// for the start-up banner.
public final class BoundPorts: Sendable {
    public enum Listener: String, Sendable, Hashable {
        case device, binary, feedback, http2, channels
    }

    private struct State {
        var ports: [String: Int] = [:]
        var waiters: [String: [(id: Int, continuation: CheckedContinuation<Int, any Error>)]] = [:]
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// A listener is listening on `channel`: its port is recorded (and
    /// its waiters told) and logged.
    func listening(_ listener: Listener, _ environment: Environment, on channel: any Channel, logger: Logger) {
        record("\(listener.rawValue).\(environment.rawValue)", port: channel.localAddress?.port ?? 0, logger: logger)
    }

    private func record(_ key: String, port: Int, logger: Logger) {
        // The banner lists every port (docs/operations.md); the log says it at debug.
        logger.debug("listening", metadata: ["courier.port": "\(port)"])
        let waiters = state.withLock { state in
            state.ports[key] = port
            return state.waiters.removeValue(forKey: key) ?? []
        }
        for waiter in waiters { waiter.continuation.resume(returning: port) }
    }

    /// The admin server is listening on `channel`.
    func listening(admin channel: any Channel, logger: Logger) {
        record("admin", port: channel.localAddress?.port ?? 0, logger: logger)
    }

    /// The admin server's port, once it is bound (see `port(_:_:)`).
    public func adminPort() async throws -> Int {
        try await port(key: "admin")
    }

    /// The port, once the listener is bound. Throws `CancellationError`
    /// when the waiting task is cancelled (a listener that failed to bind
    /// never sets its port, and the service group cancels its waiters).
    public func port(_ listener: Listener, _ environment: Environment) async throws -> Int {
        try await port(key: "\(listener.rawValue).\(environment.rawValue)")
    }

    private func port(key: String) async throws -> Int {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let ready = state.withLock { state -> Result<Int, any Error>? in
                    if let port = state.ports[key] { return .success(port) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiters[key, default: []].append((id, continuation))
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                let index = state.waiters[key]?.firstIndex { $0.id == id }
                return index.map { state.waiters[key]!.remove(at: $0) }
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// What is bound so far, e.g. "device.production" to 5223.
    public var all: [String: Int] { state.withLock { $0.ports } }
}

/// Calls its closure when the TLS handshake fails (for the metrics);
/// leaves the pipeline once the handshake is done.
final class HandshakeFailure: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private let failed: @Sendable () -> Void

    init(_ failed: @escaping @Sendable () -> Void) {
        self.failed = failed
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if case NIOSSLError.handshakeFailed = error { failed() }
        context.fireErrorCaught(error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        context.fireUserInboundEventTriggered(event)
        // Passed on first: once removed, the handler's context forwards nothing.
        if case .handshakeCompleted = event as? TLSUserEvent {
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }
}
