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
final class FeedbackService: ListenerInterface {
    let basics: PortBasics
    let list: FeedbackList

    init(
        environment: Environment, configuration: CourierConfiguration, tls: ServerTLS, provisioner: Provisioner, policy: ConnectionPolicy,
        feedback list: FeedbackList, logger: Logger
    ) throws {
        basics = PortBasics(
            .feedback, environment, configuration: configuration, policy: policy, authority: tls,
            context: try ServerTLS.context(provisioner: provisioner, maximumVersion: .tlsv12), peers: .providers(checkingEnvironment: true), logger: logger)
        self.list = list
    }

    /// A feedback connection: its channel, the peer's identity, and the end of the handshake.
    typealias Connection = (channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, peer: PeerIdentityBox, handshake: EventLoopFuture<Void>)

    func setUp(_ channel: any Channel, peer: PeerIdentityBox, work: ConnectionWork, release: ConnectionRelease) throws -> Connection? {
        let handshake = HandshakeSignal(promise: channel.eventLoop.makePromise())
        // A client that does not read cannot hold the connection.
        try channel.pipeline.syncOperations.addHandlers(ConnectionTimeout(.lifetime, timeout: policy.connections.feedbackLifetime), handshake)
        return (try NIOAsyncChannel(wrappingChannelSynchronously: channel), peer, handshake.promise.futureResult)
    }

    func serve(_ connection: Connection) async {
        await serve(connection.channel, peer: connection.peer, handshake: connection.handshake)
    }

    /// Those connected finish what they send.
    func farewell(_ channel: any Channel) {}

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

