import CourierCore
import Crypto
import Foundation
import SwiftASN1
import X509

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A certificate and its private key, as PEM text.
public struct IssuedCertificate: Sendable {
    public var certificate: Certificate
    public var privateKey: P256.Signing.PrivateKey

    public var certificatePEM: String { get throws { try certificate.serializeAsPEM().pemString + "\n" } }
    /// PKCS#8 ("BEGIN PRIVATE KEY").
    public var privateKeyPEM: String { privateKey.pemRepresentation + "\n" }
    /// The serial number, lowercase hex.
    public var serialHex: String { Hex.encode(certificate.serialNumber.bytes) }
}

/// Courier's own certificate authority: it signs the server's TLS
/// certificate, provider certificates (with Apple's push extensions) and
/// device certificates. Keys are ECDSA P-256, signatures ECDSA-SHA256.
public struct CertificateAuthority: Sendable {
    public let certificate: Certificate
    private let key: P256.Signing.PrivateKey

    public init(certificate: Certificate, key: P256.Signing.PrivateKey) throws {
        guard Certificate.PublicKey(key.publicKey) == certificate.publicKey else {
            throw PKIError(.badFile, "the CA key does not belong to the CA certificate")
        }
        self.certificate = certificate
        self.key = key
    }

    /// Reads a CA from its PEM certificate and PEM (PKCS#8 or SEC1) key.
    public init(certificatePEM: String, keyPEM: String) throws {
        let certificate: Certificate
        do {
            certificate = try Certificate(pemEncoded: certificatePEM)
        } catch {
            throw PKIError(.badFile, "the CA certificate is not a PEM certificate: \(error)")
        }
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: keyPEM)
        } catch {
            throw PKIError(.badFile, "the CA key is not a PEM P-256 private key: \(error)")
        }
        try self.init(certificate: certificate, key: key)
    }

    /// A new self-signed CA, valid for `years` years from `now`.
    public static func create(commonName: String = "Courier Root CA", now: Date, years: Int = 20) throws -> IssuedCertificate {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName {
            OrganizationName("Courier")
            CommonName(commonName)
        }
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
            Critical(KeyUsage(digitalSignature: true, keyCertSign: true, cRLSign: true))
            SubjectKeyIdentifier(hash: Certificate.PublicKey(key.publicKey))
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PublicKey(key.publicKey),
            notValidBefore: now.addingTimeInterval(-300), notValidAfter: now.addingTimeInterval(Double(years) * 365 * 86_400),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: Certificate.PrivateKey(key))
        return IssuedCertificate(certificate: certificate, privateKey: key)
    }

    public var certificatePEM: String { get throws { try certificate.serializeAsPEM().pemString + "\n" } }
    public var keyPEM: String { key.pemRepresentation + "\n" }

    /// A TLS server certificate for the given DNS names and IP addresses.
    public func issueServerCertificate(dnsNames: [String], ipAddresses: [String], now: Date, days: Int = 825) throws -> IssuedCertificate {
        guard !dnsNames.isEmpty || !ipAddresses.isEmpty else {
            throw PKIError(.invalidArgument, "a server certificate needs at least one DNS name or IP address")
        }
        var names: [GeneralName] = dnsNames.map { .dnsName($0) }
        for address in ipAddresses {
            names.append(.ipAddress(ASN1OctetString(contentBytes: try Self.ipBytes(address)[...])))
        }
        let subject = try DistinguishedName {
            OrganizationName("Courier")
            CommonName(dnsNames.first ?? ipAddresses[0])
        }
        return try issue(subject: subject, now: now, days: days) { publicKey in
            try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true, keyAgreement: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames(names)
                SubjectKeyIdentifier(hash: publicKey)
                authorityKeyIdentifier
            }
        }
    }

    /// How a provider certificate names its topics.
    public enum TopicsLayout: String, Sendable, Hashable, CaseIterable {
        /// Apple's topics extension: each topic, then a SEQUENCE with its kind.
        case apple
        /// The topics extension as a plain SEQUENCE of UTF8Strings, as other tools write it.
        case plain
        /// No topics extension: the subject's UID (the bundle id) is the
        /// only topic and the default one, as in Apple's certificates
        /// before universal ones.
        case uidOnly = "uid-only"
    }

    /// A provider certificate for an app: subject UID = bundle id, OU =
    /// team id, the topics extension (in `layout`) and the extension of
    /// each environment (both = a universal certificate).
    public func issueProviderCertificate(
        bundleID: String, teamID: String, teamName: String, topics: [Topic], environments: Set<Environment>, now: Date,
        days: Int = 365, layout: TopicsLayout = .apple
    ) throws -> IssuedCertificate {
        guard Identifiers.isBundleID(bundleID) else { throw PKIError(.invalidArgument, "'\(bundleID)' is not a bundle id") }
        guard !environments.isEmpty else { throw PKIError(.invalidArgument, "a provider certificate needs at least one environment") }
        let title = environments.count == 2 ? "Apple Push Services" : (environments.contains(.production) ? "Apple Production IOS Push Services" : "Apple Development IOS Push Services")
        let subject = DistinguishedName([
            RelativeDistinguishedName(.init(type: .Courier.userID, utf8String: bundleID)),
            RelativeDistinguishedName(.init(type: .RDNAttributeType.commonName, utf8String: "\(title): \(bundleID)")),
            RelativeDistinguishedName(.init(type: .RDNAttributeType.organizationalUnitName, utf8String: teamID)),
            RelativeDistinguishedName(.init(type: .RDNAttributeType.organizationName, utf8String: teamName)),
        ])
        let topicsExtension = PushTopicsExtension(topics: topics)
        return try issue(subject: subject, now: now, days: days) { publicKey in
            var extensions = try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.clientAuth])
                SubjectKeyIdentifier(hash: publicKey)
                authorityKeyIdentifier
            }
            switch layout {
            case .apple: try extensions.append(topicsExtension.makeCertificateExtension())
            case .plain: try extensions.append(topicsExtension.makePlainCertificateExtension())
            case .uidOnly: break
            }
            for environment in Environment.allCases where environments.contains(environment) {
                try extensions.append(PushEnvironmentExtension(environment).makeCertificateExtension())
            }
            return extensions
        }
    }

    /// A device certificate: the subject's CN is the device id in hex.
    public func issueDeviceCertificate(deviceID: UInt64, now: Date, days: Int = 3650) throws -> IssuedCertificate {
        let subject = try DistinguishedName {
            OrganizationName("Courier Devices")
            CommonName(DeviceIdentity.commonName(for: deviceID))
        }
        return try issue(subject: subject, now: now, days: days) { publicKey in
            try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.clientAuth])
                SubjectKeyIdentifier(hash: publicKey)
                authorityKeyIdentifier
            }
        }
    }

    /// The authority of the nodes of several (docs/operations.md): its
    /// key derived from this CA's key (HKDF-SHA256), so that every node
    /// holding the same `pki/` makes the same one, with nothing more to
    /// copy; it signs only node certificates, and a node trusts only it
    /// on the nodes' port — no provider's or device's certificate, which
    /// this CA signs, opens a connection there.
    public func clusterAuthority(now: Date) throws -> CertificateAuthority {
        var counter: UInt8 = 0
        while true {
            let derived = HKDF<SHA256>.deriveKey(
                inputKeyMaterial: SymmetricKey(data: key.rawRepresentation), info: Array("courier cluster authority v1".utf8) + [counter],
                outputByteCount: 32)
            // Almost every 32 bytes are a P-256 key; the next counter for the rare one that is not.
            if let clusterKey = try? derived.withUnsafeBytes({ try P256.Signing.PrivateKey(rawRepresentation: $0) }) {
                let name = try DistinguishedName {
                    OrganizationName("Courier")
                    CommonName("Courier Cluster CA")
                }
                let extensions = try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true))
                    SubjectKeyIdentifier(hash: Certificate.PublicKey(clusterKey.publicKey))
                }
                let certificate = try Certificate(
                    version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PublicKey(clusterKey.publicKey),
                    notValidBefore: self.certificate.notValidBefore, notValidAfter: self.certificate.notValidAfter,
                    issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
                    issuerPrivateKey: Certificate.PrivateKey(clusterKey))
                return try CertificateAuthority(certificate: certificate, key: clusterKey)
            }
            counter += 1
        }
    }

    /// A node's certificate, for both ends of the nodes' connections
    /// (server and client); the subject's CN is the node's id. Valid from a
    /// day before `now`, so that nodes whose clocks differ accept it.
    public func issueNodeCertificate(node: String, now: Date, days: Int = 3650) throws -> IssuedCertificate {
        let subject = try DistinguishedName {
            OrganizationName("Courier Nodes")
            CommonName(node)
        }
        return try issue(subject: subject, now: now.addingTimeInterval(-86_100), days: days) { publicKey in
            try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth, .clientAuth])
                SubjectKeyIdentifier(hash: publicKey)
                authorityKeyIdentifier
            }
        }
    }

    private var authorityKeyIdentifier: AuthorityKeyIdentifier {
        AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: certificate.publicKey).keyIdentifier)
    }

    private func issue(
        subject: DistinguishedName, now: Date, days: Int,
        extensions: (Certificate.PublicKey) throws -> Certificate.Extensions
    ) throws -> IssuedCertificate {
        guard days > 0 else { throw PKIError(.invalidArgument, "validity must be at least one day") }
        let leafKey = P256.Signing.PrivateKey()
        let publicKey = Certificate.PublicKey(leafKey.publicKey)
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: publicKey,
            notValidBefore: now.addingTimeInterval(-300),
            notValidAfter: min(now.addingTimeInterval(Double(days) * 86_400), self.certificate.notValidAfter),
            issuer: self.certificate.subject, subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try extensions(publicKey), issuerPrivateKey: Certificate.PrivateKey(key))
        return IssuedCertificate(certificate: certificate, privateKey: leafKey)
    }

    /// The 4 or 16 bytes of an IPv4 or IPv6 address in text form.
    static func ipBytes(_ text: String) throws -> [UInt8] {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        throw PKIError(.invalidArgument, "'\(text)' is not an IPv4 or IPv6 address")
    }
}

/// Device identities: the device id travels in the certificate's CN.
public enum DeviceIdentity {
    public static func commonName(for deviceID: UInt64) -> String {
        "device-" + String(deviceID, radix: 16).leftPadded(to: 16)
    }

    /// The device id of a device certificate, or nil for another kind.
    public static func deviceID(of certificate: Certificate) -> UInt64? {
        for rdn in certificate.subject {
            for attribute in rdn where attribute.type == .RDNAttributeType.commonName {
                guard let name = String(attribute.value), name.hasPrefix("device-") else { continue }
                let hex = name.dropFirst("device-".count)
                guard hex.count == 16 else { return nil }
                return UInt64(hex, radix: 16)
            }
        }
        return nil
    }
}

extension String {
    func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}
