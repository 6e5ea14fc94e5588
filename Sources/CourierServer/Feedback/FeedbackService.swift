import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle

/// The feedback service of one environment: on connect it streams the
/// (timestamp, token) tuples of the certificate's topics, then closes. An
/// entry is removed only after it was written.
final class FeedbackService: Service {
    let environment: Environment
    let configuration: CourierConfiguration
    let context: NIOSSLContext
    let authority: ServerTLS
    let list: FeedbackList
    let ports: BoundPorts
    let logger: Logger
    /// What peers may hold, and who uses which certificate.
    let policy: ConnectionPolicy

    init(
        environment: Environment, configuration: CourierConfiguration, tls: ServerTLS, provisioner: Provisioner, policy: ConnectionPolicy,
        feedback list: FeedbackList, ports: BoundPorts, logger: Logger
    ) throws {
        self.environment = environment
        self.policy = policy
        self.configuration = configuration
        self.authority = tls
        context = try ServerTLS.context(provisioner: provisioner, maximumVersion: .tlsv12)
        self.list = list
        self.ports = ports
        var logger = logger
        logger[metadataKey: "courier.listener"] = "feedback.\(environment.rawValue)"
        self.logger = logger
    }

    func run() async throws {
        let verifier = PeerVerifier(authority: authority.authority, certificates: policy.certificates, kind: .provider, logger: logger, environment: environment, providers: policy.providers)
        let context = self.context
        let timeout = configuration.handshakeTimeout
        let guardian = policy.guardFor(.feedback, logger: logger)
        let lifetime = policy.connections.feedbackLifetime
        let server = try await bindListener(.feedback, environment, configuration.network) { host, port in
            try await listenerBootstrap()
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try guardian.admit(channel)
                        // A client that does not read cannot hold the connection.
                        try channel.pipeline.syncOperations.addHandler(ConnectionTimeout(.lifetime, timeout: lifetime))
                        return try verifier.handshakingConnection(channel, context: context, handshakeTimeout: timeout)
                    }
                }
        }
        ports.listening(.feedback, environment, on: server.channel, logger: logger)
        try await acceptConnections(on: server) { connection, box, handshake in
            await self.serve(connection, peer: box, handshake: handshake)
        }
    }

    private func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>, peer: PeerIdentityBox, handshake: EventLoopFuture<Void>) async {
        do {
            try await connection.executeThenClose { _, outbound in
                // Transmission begins as soon as the handshake is done; no command is needed.
                try await handshake.get()
                guard let record = peer.record else { return }
                let channel = connection.channel
                policy.certificates.register(serial: record.serial, channel: channel) { channel.close(promise: nil) }
                let (_, info) = try ProviderIdentity.certificate(record)
                for topic in info.topics.map(\.description) {
                    let entries = try await list.entries(environment: environment, topic: topic)
                    guard !entries.isEmpty else { continue }
                    var buffer = connection.channel.allocator.buffer(capacity: entries.count * (6 + configuration.limits.tokenLength))
                    for entry in entries {
                        FeedbackTuple(timestamp: UInt32(clamping: Int64(entry.timestamp.timeIntervalSince1970)), token: entry.token).write(to: &buffer)
                    }
                    try await outbound.write(buffer)
                    try await list.sent(entries)
                    logger.info("feedback sent", metadata: ["courier.topic": "\(topic)", "courier.entries": "\(entries.count)"])
                }
            }
        } catch {
            logger.debug("feedback connection ended", metadata: ["courier.error": "\(error)"])
        }
    }
}

