import CourierCore
import CourierPKI
@testable import CourierServer
import Foundation
import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Testing

/// The sending end of direct hand-overs, against peers that are not nodes
/// or do not answer: each send returns false (its pushes then go through
/// the store's queue), and the node is left alone for a while.
@Suite(.timeLimit(.minutes(1)))
struct NodeLinksTests {
    let logger = Logger(label: "node-links-test")

    static func pending() -> PendingNotification {
        PendingNotification(
            deviceID: 1, bundleID: "com.example.app", environment: .production,
            notification: PushNotification(id: UUID(), token: [1], topic: "com.example.app", payload: Array("{}".utf8), expiration: nil, priority: .immediate),
            acceptedAt: Date())
    }

    static func tls() throws -> NodeTLS {
        let authority = try CertificateAuthority.create(now: Date())
        return try NodeTLS(
            authority: CertificateAuthority(certificate: authority.certificate, key: authority.privateKey), node: "node-a", now: Date())
    }

    /// A listener that accepts connections and never says a word.
    static func silentListener() async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    /// Links to `node-b` at `address`, running (their links are their
    /// service's child tasks) while `body` hands pushes over; what falls
    /// back to the store is read from the stream `body` is given.
    func running(
        _ tls: TLSConfiguration, to address: String, limit: Duration = .milliseconds(300),
        _ body: @Sendable (NodeLinks, AsyncStream<[HandedOver]>) async throws -> Void
    ) async throws {
        let (stranded, strandedInput) = AsyncStream.makeStream(of: [HandedOver].self)
        let links = NodeLinks(tls: tls, limit: limit, pause: .seconds(60), logger: logger) { strandedInput.yield($0) }
        links.update(["node-b": address])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await links.run() }
            try await body(links, stranded)
            group.cancelAll()
        }
    }

    @Test func aPeerThatNeverAnswersIsGivenUpAndItsPushesGoThroughTheStore() async throws {
        let listener = try await Self.silentListener()
        try await running(try Self.tls().client, to: "127.0.0.1:\(listener.localAddress!.port!)") { links, stranded in
            let pending = Self.pending()
            #expect(links.handOver(pending, to: "node-b"))
            var fallen = stranded.makeAsyncIterator()
            #expect(await fallen.next()?.map(\.pending) == [pending])
            // Left alone now: the next push is not taken (it goes to the store at once).
            #expect(!links.handOver(Self.pending(), to: "node-b"))
        }
        try await listener.close()
    }

    /// A peer with a node's certificate that speaks HTTP/2 and never
    /// answers a request: the request is given up within the limit, and
    /// its pushes, with those that came meanwhile, go through the store.
    @Test func aRequestNeverAnsweredIsGivenUpAndEveryPushWaitingGoesThroughTheStore() async throws {
        let tls = try Self.tls()
        var serverTLS = tls.server
        serverTLS.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: serverTLS)
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                }.flatMap {
                    channel.configureHTTP2Pipeline(mode: .server) { stream in stream.eventLoop.makeSucceededVoidFuture() }.map { _ in }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        try await running(tls.client, to: "127.0.0.1:\(listener.localAddress!.port!)") { links, stranded in
            let pushes = (0..<5).map { _ in Self.pending() }
            for pending in pushes { #expect(links.handOver(pending, to: "node-b")) }
            var fallen: [PendingNotification] = []
            for await part in stranded {
                fallen += part.map(\.pending)
                if fallen.count >= pushes.count { break }
            }
            #expect(Set(fallen.map(\.notification.deliveryID)) == Set(pushes.map(\.notification.deliveryID)))
        }
        try await listener.close()
    }

    @Test func aNodeWithNoAddressIsNotSentTo() async throws {
        let links = NodeLinks(tls: try Self.tls().client, logger: logger) { _ in }
        #expect(!links.handOver(Self.pending(), to: "node-b"))
    }

    /// A node recorded at an address that is not one: its push is taken,
    /// and falls back to the store.
    @Test func anAddressThatIsNotOneFallsBackToTheStore() async throws {
        try await running(try Self.tls().client, to: "not an address", limit: .seconds(3)) { links, stranded in
            let pending = Self.pending()
            #expect(links.handOver(pending, to: "node-b"))
            var fallen = stranded.makeAsyncIterator()
            #expect(await fallen.next()?.map(\.pending) == [pending])
        }
    }

    /// Every node derives the same cluster authority from the same CA, and
    /// only that authority: a certificate the CA itself signs (a device's,
    /// a provider's) does not verify against it.
    @Test func theClusterAuthorityIsTheCAsAloneAndSignsOnlyNodes() throws {
        let issued = try CertificateAuthority.create(now: Date())
        let ca = try CertificateAuthority(certificate: issued.certificate, key: issued.privateKey)
        let one = try ca.clusterAuthority(now: Date())
        let two = try ca.clusterAuthority(now: Date().addingTimeInterval(3600))
        #expect(one.certificate.publicKey == two.certificate.publicKey)
        let another = try CertificateAuthority.create(now: Date())
        let anotherCluster = try CertificateAuthority(certificate: another.certificate, key: another.privateKey).clusterAuthority(now: Date())
        #expect(anotherCluster.certificate.publicKey != one.certificate.publicKey)
        #expect(one.certificate.publicKey != ca.certificate.publicKey)
        let node = try one.issueNodeCertificate(node: "node-a", now: Date())
        #expect(node.certificate.issuer == one.certificate.subject)
        #expect(one.certificate.publicKey.isValidSignature(node.certificate.signature, for: node.certificate))
        let device = try ca.issueDeviceCertificate(deviceID: 7, now: Date())
        #expect(!one.certificate.publicKey.isValidSignature(device.certificate.signature, for: device.certificate))
    }
}
