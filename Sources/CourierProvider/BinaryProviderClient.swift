import CourierCore
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// A provider's TLS credentials: its certificate and key (none with token
/// trust), and the CA that signed the server's certificate (nil: the
/// system's roots).
public struct ProviderTLS: Sendable {
    public var certificatePath: String?
    public var keyPath: String?
    public var caPath: String?

    public init(certificatePath: String?, keyPath: String?, caPath: String?) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
        self.caPath = caPath
    }

    /// The client TLS configuration every provider connection starts from.
    public func configuration(maximumVersion: TLSVersion? = nil) throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let certificatePath, let keyPath {
            do {
                configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
            } catch {
                throw ProviderCredentialError(path: certificatePath, what: "a PEM certificate")
            }
            do {
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: keyPath, format: .pem))
            } catch {
                throw ProviderCredentialError(path: keyPath, what: "a PEM private key")
            }
        }
        if let caPath { configuration.trustRoots = .file(caPath) }
        configuration.maximumTLSVersion = maximumVersion
        return configuration
    }

    func context(maximumVersion: TLSVersion? = nil) throws -> NIOSSLContext {
        try NIOSSLContext(configuration: configuration(maximumVersion: maximumVersion))
    }
}

/// A provider certificate or key file that cannot be used: which, and
/// what it should be (the TLS library's own error is a bare code).
public struct ProviderCredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    public var path: String
    public var what: String
    public var description: String {
        FileManager.default.fileExists(atPath: path) ? "\(path) is not \(what)" : "no file \(path)"
    }
}

/// Errors of the provider clients.
public enum BinaryClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The server refused the TLS handshake (certificate unknown, revoked,
    /// or without this environment).
    case handshakeFailed(String)
    /// The server closed the connection before the handshake, with no TLS
    /// alert: over one of its connection limits (docs/security.md).
    case refusedBeforeHandshake(String)
    /// The server's certificate did not verify against the CA given (or the system's).
    case untrustedServer(String)

    public var description: String {
        switch self {
        case .handshakeFailed(let endpoint): "the TLS handshake with \(endpoint) failed: the server refused the certificate, or the CA does not match"
        case .refusedBeforeHandshake(let endpoint):
            "the server at \(endpoint) closed the connection before its TLS handshake: it refused it (over a connection limit)"
        case .untrustedServer(let endpoint): "the server at \(endpoint) has a certificate that is not trusted"
        }
    }
}

/// A notification the binary API refused, with the status it gave.
public struct BinaryPushFailure: Sendable, Hashable {
    public var identifier: UInt32
    public var status: BinaryStatus

    public init(identifier: UInt32, status: BinaryStatus) {
        self.identifier = identifier
        self.status = status
    }
}

/// The binary provider API's client: keeps a connection open, sends
/// notifications with identifiers (command 2 by default, 1 and 0
/// selectable), reads error responses as they come, and after an error or
/// a shutdown (status 10) reconnects and sends again every notification
/// sent after the failed one — the provider's duty the seeds describe.
public actor BinaryProviderClient {
    public enum Command: UInt8, Sendable {
        case simple = 0
        case enhanced = 1
        case frame = 2
    }

    public let host: String
    public let port: Int
    public let command: Command
    private let context: NIOSSLContext
    private let serverName: String?
    private let logger: Logger

    private var writer: NIOAsyncChannelOutboundWriter<ByteBuffer>?
    private var channel: (any Channel)?
    private var generation = 0
    private var reader: Task<Void, Never>?
    /// Frames sent on the current connection, oldest first, for resending.
    private var sent = CircularBuffer<(identifier: UInt32, frame: ByteBuffer)>()
    private var nextIdentifier: UInt32 = 1
    private var failureSink: AsyncStream<BinaryPushFailure>.Continuation
    /// Every error response, as the server sends it (status 10 included,
    /// naming the last notification accepted).
    public nonisolated let failures: AsyncStream<BinaryPushFailure>
    private var reported: [BinaryPushFailure] = []
    /// How many notifications are kept for resending.
    public var resendWindow = 100_000

    public init(host: String, port: Int, tls: ProviderTLS, command: Command = .frame, serverName: String? = nil, logger: Logger) throws {
        self.host = host
        self.port = port
        self.command = command
        self.serverName = serverName ?? (host.first?.isNumber == true ? nil : host)
        self.logger = logger
        context = try tls.context()
        (failures, failureSink) = AsyncStream.makeStream(of: BinaryPushFailure.self)
    }

    /// Sends one notification and returns its identifier. Nothing comes
    /// back for an accepted notification; a refused one appears in `failures`.
    @discardableResult
    public func send(token: [UInt8], payload: [UInt8], expiry: UInt32? = nil, priority: UInt8? = nil, identifier: UInt32? = nil) async throws -> UInt32 {
        let id = identifier ?? nextIdentifier
        nextIdentifier = id &+ 1
        var frame = ByteBuffer()
        switch command {
        case .frame: frame.writeBinaryNotification(token: token, payload: payload, identifier: id, expiry: expiry, priority: priority)
        case .enhanced: frame.writeEnhancedNotification(token: token, payload: payload, identifier: id, expiry: expiry ?? 0)
        case .simple: frame.writeSimpleNotification(token: token, payload: payload)
        }
        try await write(frame, identifier: id)
        return id
    }

    private func write(_ frame: ByteBuffer, identifier: UInt32) async throws {
        let writer = try await connected()
        sent.append((identifier, frame))
        // A ring: dropping the oldest is O(1), not a shift of the whole window.
        while sent.count > resendWindow { sent.removeFirst() }
        try await writer.write(frame)
    }

    private func connected() async throws -> NIOAsyncChannelOutboundWriter<ByteBuffer> {
        if let writer { return writer }
        let context = self.context
        let serverName = self.serverName
        let (connection, handshake) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handshake = HandshakeSignal(promise: channel.eventLoop.makePromise())
                    try channel.pipeline.syncOperations.addHandlers([try NIOSSLClientHandler(context: context, serverHostname: serverName), handshake])
                    return (try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel), handshake.promise.futureResult)
                }
            }
        do {
            try await handshake.get()
        } catch {
            // Closing through executeThenClose finishes the channel's writer, as NIO requires.
            try? await connection.executeThenClose { _, _ in }
            if ConnectionFailure(error) == .untrustedServer { throw BinaryClientError.untrustedServer("\(host):\(port)") }
            if ConnectionFailure(error) == .closedBeforeHandshake { throw BinaryClientError.refusedBeforeHandshake("\(host):\(port)") }
            throw BinaryClientError.handshakeFailed("\(host):\(port)")
        }
        generation += 1
        let generation = self.generation
        sent.removeAll()
        channel = connection.channel
        return try await withCheckedThrowingContinuation { continuation in
            reader = Task {
                do {
                    try await connection.executeThenClose { inbound, outbound in
                        self.attach(outbound, continuation: continuation)
                        await self.read(inbound, generation: generation)
                    }
                } catch {
                    self.logger.debug("binary connection ended", metadata: ["courier.error": "\(error)"])
                }
                self.detach(generation)
            }
        }
    }

    private func attach(_ outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>, continuation: CheckedContinuation<NIOAsyncChannelOutboundWriter<ByteBuffer>, any Error>) {
        writer = outbound
        continuation.resume(returning: outbound)
    }

    private func detach(_ generation: Int) {
        guard generation == self.generation else { return }
        writer = nil
        channel = nil
    }

    private func read(_ inbound: NIOAsyncChannelInboundStream<ByteBuffer>, generation: Int) async {
        var pending = ByteBuffer()
        do {
            for try await chunk in inbound {
                var chunk = chunk
                pending.writeBuffer(&chunk)
                if let response = try BinaryErrorResponse.read(from: &pending) {
                    await failed(response, generation: generation)
                    return
                }
            }
        } catch {
            logger.debug("binary connection ended", metadata: ["courier.error": "\(error)"])
        }
    }

    /// An error response: report the bad notification, then send again on a
    /// new connection everything that followed it.
    private func failed(_ response: BinaryErrorResponse, generation: Int) async {
        guard generation == self.generation else { return }
        channel?.close(promise: nil)
        writer = nil
        channel = nil
        let index = sent.firstIndex { $0.identifier == response.identifier }
        let failure = BinaryPushFailure(identifier: response.identifier, status: response.status)
        reported.append(failure)
        failureSink.yield(failure)
        // Status 10 names the last accepted notification; an error names the bad one. Either way, what follows is resent.
        let resend = index.map { Array(sent[sent.index(after: $0)...]) } ?? (response.status == .shutdown ? Array(sent) : [])
        sent.removeAll()
        logger.info("binary error response", metadata: ["courier.status": "\(response.status)", "courier.resend": "\(resend.count)"])
        for (identifier, frame) in resend {
            do {
                try await write(frame, identifier: identifier)
            } catch {
                logger.error("resending failed", metadata: ["courier.error": "\(error)"])
                return
            }
        }
    }

    /// Waits `seconds` (real time) for error responses to what was sent and
    /// returns those that came since the last call. For tools: the binary
    /// API has no positive answer, so silence for a while is success.
    public func settle(seconds: Double) async -> [BinaryPushFailure] {
        try? await Task.sleep(for: .seconds(seconds))
        defer { reported.removeAll() }
        return reported
    }

    /// Sends bytes as they are (for testing a server with malformed input);
    /// `identifier` is what an error response for them would name.
    public func sendRaw(_ bytes: ByteBuffer, identifier: UInt32) async throws {
        try await write(bytes, identifier: identifier)
    }

    /// Returns when the current connection has ended (closed by the server
    /// or by `close()`).
    public func waitForDisconnect() async {
        await reader?.value
    }

    public func close() async {
        channel?.close(promise: nil)
        writer = nil
        channel = nil
        await reader?.value
        failureSink.finish()
    }
}

/// Reads the feedback service: every (date, token) of the certificate's
/// topics, until the server closes.
public enum FeedbackReader {
    public static func read(host: String, port: Int, tls: ProviderTLS, serverName: String? = nil) async throws -> [(date: Date, token: [UInt8])] {
        let context = try tls.context()
        let name = serverName ?? (host.first?.isNumber == true ? nil : host)
        let connection = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([
                        try NIOSSLClientHandler(context: context, serverHostname: name),
                        ByteToMessageHandler(FeedbackTupleDecoder()),
                    ])
                    return try NIOAsyncChannel<FeedbackTuple, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await connection.executeThenClose { inbound, _ in
            var entries: [(date: Date, token: [UInt8])] = []
            do {
                for try await tuple in inbound {
                    entries.append((Date(timeIntervalSince1970: TimeInterval(tuple.timestamp)), tuple.token))
                }
            } catch let error as NIOSSLError where error == .uncleanShutdown {
                // Some servers close without close_notify; what was read stands.
            }
            return entries
        }
    }
}
