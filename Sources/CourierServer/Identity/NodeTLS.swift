import CourierPKI
import Foundation
import NIOSSL

/// TLS between the nodes of several (docs/operations.md): each node's
/// certificate, issued at its start by the cluster authority
/// (`CertificateAuthority.clusterAuthority`, derived from the shared CA's
/// key), serves both ends; each end trusts that authority alone and
/// requires the other's certificate. TLS 1.3.
struct NodeTLS: Sendable {
    let server: TLSConfiguration
    let client: TLSConfiguration

    init(authority: CertificateAuthority, node: String, now: Date) throws {
        let cluster = try authority.clusterAuthority(now: now)
        let issued = try cluster.issueNodeCertificate(node: node, now: now)
        let certificate = try NIOSSLCertificate(bytes: Array(issued.certificatePEM.utf8), format: .pem)
        let key = try NIOSSLPrivateKey(bytes: Array(issued.privateKeyPEM.utf8), format: .pem)
        let root = try NIOSSLCertificate(bytes: Array(cluster.certificatePEM.utf8), format: .pem)
        var server = TLSConfiguration.makeServerConfiguration(certificateChain: [.certificate(certificate)], privateKey: .privateKey(key))
        var client = TLSConfiguration.makeClientConfiguration()
        client.certificateChain = [.certificate(certificate)]
        client.privateKey = .privateKey(key)
        server.trustRoots = .certificates([root])
        client.trustRoots = .certificates([root])
        // The certificate, not a name, says a node: the addresses are whatever the nodes record.
        server.certificateVerification = .noHostnameVerification
        client.certificateVerification = .noHostnameVerification
        server.minimumTLSVersion = .tlsv13
        client.minimumTLSVersion = .tlsv13
        self.server = server
        self.client = client
    }
}
