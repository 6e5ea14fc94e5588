import CourierCore
import CourierPKI
import Crypto
import Foundation
import Synchronization
import X509

extension Provisioner {
    /// Where the authorities trusted for provider certificates besides
    /// Courier's CA are kept, one PEM file each.
    public var providerAuthoritiesDirectory: String { pkiDirectory + "/provider-authorities" }

    /// Trusts a certificate authority's provider certificates (for instance
    /// Apple's WWDR intermediate), so that a team's existing provider
    /// certificates connect unchanged (`courier pki trust-ca`). `contents`:
    /// the CA's certificate, PEM or DER (Apple hands out `.cer` files in
    /// DER). Running servers see it at the next handshake.
    public func trustProviderAuthority(_ contents: [UInt8]) throws -> (certificate: Certificate, file: ProvisionedFile) {
        let certificate: Certificate
        if let pem = try? Certificate(pemEncoded: String(decoding: contents, as: UTF8.self)) {
            certificate = pem
        } else if let der = try? Certificate(derEncoded: contents) {
            certificate = der
        } else {
            throw PKIError(.invalidArgument, "not a certificate (PEM or DER)")
        }
        guard let constraints = try? certificate.extensions.basicConstraints, case .isCertificateAuthority = constraints else {
            throw PKIError(.invalidArgument, "\(certificate.subject) is not a certificate authority")
        }
        let name = Hex.encode(Array(SHA256.hash(data: Array(certificate.subject.description.utf8) + Array(certificate.serialNumber.bytes))).prefix(8))
        let path = providerAuthoritiesDirectory + "/\(name).pem"
        let existed = Files.exists(path)
        try Files.write(try certificate.serializeAsPEM().pemString + "\n", to: path)
        return (certificate, ProvisionedFile(what: "trusted provider authority \(certificate.subject)", path: path, created: !existed))
    }

    /// The authorities trusted for provider certificates besides Courier's CA.
    public func providerAuthorities() -> [Certificate] {
        let directory = providerAuthoritiesDirectory
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".pem") }.sorted().compactMap { name in
            Files.read(directory + "/" + name).flatMap { try? Certificate(pemEncoded: $0) }
        }
    }
}

/// The provider certificates of trusted authorities besides Courier's CA
/// (docs/provisioning.md, "Certificates from another authority"). Their
/// list is read again when the directory changes; a certificate of theirs
/// is taken into the store at its first handshake ("adopted": listed and
/// revoked like Courier's own) when what it claims is the operator's
/// provisioning: its team (the subject's OU) exists, and every topic it
/// names is of an app of that team — so that no authority's certificate
/// reaches another team's apps.
final class ProviderAuthorities: Sendable {
    private let provisioner: Provisioner
    private let cache = Mutex<(modified: Date?, certificates: [Certificate])>((nil, []))

    init(provisioner: Provisioner) {
        self.provisioner = provisioner
    }

    /// The trusted authorities now.
    func current() -> [Certificate] {
        let attributes = try? FileManager.default.attributesOfItem(atPath: provisioner.providerAuthoritiesDirectory)
        let modified = attributes?[.modificationDate] as? Date
        if let cached = cache.withLock({ $0.modified == modified ? $0.certificates : nil }) { return cached }
        let certificates = modified == nil ? [] : provisioner.providerAuthorities()
        cache.withLock { $0 = (modified, certificates) }
        return certificates
    }

    /// The store's record of `leaf`, a certificate of a trusted authority
    /// that has none yet, or why it is refused.
    func adopt(_ leaf: Certificate) async throws -> Result<CertificateRecord, AdoptionRefusal> {
        guard let info = try? ProviderCertificateInfo(certificate: leaf) else { return .failure(AdoptionRefusal("its push extensions cannot be read")) }
        guard let teamID = info.teamID, let bundleID = info.bundleID else { return .failure(AdoptionRefusal("its subject has no OU (team) or no UID (bundle id)")) }
        guard !info.environments.isEmpty else { return .failure(AdoptionRefusal("it names no environment")) }
        let store = provisioner.store
        guard try await store.team(id: teamID) != nil else { return .failure(AdoptionRefusal("team \(teamID) does not exist")) }
        for bundle in Set([bundleID] + info.topics.map(\.bundleID)).sorted() where try await store.app(bundleID: bundle)?.teamID != teamID {
            return .failure(AdoptionRefusal("\(bundle) is not an app of team \(teamID)"))
        }
        // Each topic of a kind its app has, and one certificates may use.
        for topic in info.topics {
            guard try await store.app(bundleID: topic.bundleID)?.topicKinds.contains(topic.kind) == true, topic.kind.allowsCertificates else {
                return .failure(AdoptionRefusal("\(topic) is not a topic of \(topic.bundleID) that a certificate may use"))
            }
        }
        let record = CertificateRecord(
            serial: Hex.encode(leaf.serialNumber.bytes), kind: .provider, subject: leaf.subject.description, teamID: teamID, bundleID: bundleID,
            environments: info.environments, notAfter: leaf.notValidAfter, createdAt: provisioner.clock.now(), pem: try leaf.serializeAsPEM().pemString)
        do {
            try await store.addCertificate(record)
        } catch let error as StoreError where error.code == .duplicate {
            // Adopted meanwhile by another handshake: that record, if it is this certificate.
            guard let kept = try await store.certificate(serial: record.serial), (try? Certificate(pemEncoded: kept.pem)) == leaf else {
                return .failure(AdoptionRefusal("its serial number is another certificate's"))
            }
            return .success(kept)
        }
        return .success(record)
    }

    struct AdoptionRefusal: Error {
        var why: String
        init(_ why: String) { self.why = why }
    }
}
