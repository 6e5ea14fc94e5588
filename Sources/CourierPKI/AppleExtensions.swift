import CourierCore
import SwiftASN1
import X509

extension ASN1ObjectIdentifier {
    /// Apple's push extensions and the UID attribute of the subject.
    public enum Courier {
        /// The topics a provider certificate may push to.
        public static let topics: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 6]
        /// The certificate may be used in the sandbox (development) environment.
        public static let sandbox: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 1]
        /// The certificate may be used in the production environment.
        public static let production: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 2]
        /// userId (UID), which holds the bundle id in Apple's provider certificates.
        public static let userID: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]
    }
}

/// The topics extension (OID 1.2.840.113635.100.6.3.6) of a provider
/// certificate.
///
/// Written the way Apple writes it, a SEQUENCE alternating each topic (a
/// UTF8String) with a SEQUENCE holding its kind (`app`, `voip`,
/// `complication`; Courier names its other kinds as `TopicKind` does). Read in that layout and in the plain SEQUENCE of
/// UTF8Strings that other tools write.
public struct PushTopicsExtension: Sendable, Hashable, CertificateExtensionConvertible {
    public var topics: [Topic]

    public init(topics: [Topic]) {
        self.topics = topics
    }

    public init(_ ext: Certificate.Extension) throws {
        guard ext.oid == .Courier.topics else {
            throw PKIError(.badCertificate, "extension \(ext.oid) is not the topics extension")
        }
        let root = try DER.parse(ext.value)
        guard case .constructed(let children) = root.content, root.identifier == .sequence else {
            throw PKIError(.badCertificate, "the topics extension is not a SEQUENCE")
        }
        var topics: [Topic] = []
        for child in children {
            if child.identifier == .sequence {
                // The kind that belongs to the topic before it; the kind is
                // also in the topic's own suffix, so it is only checked.
                guard let last = topics.last, case .constructed(let kinds) = child.content, let kindNode = kinds.first(where: { _ in true }) else {
                    throw PKIError(.badCertificate, "a topic kind without a topic in the topics extension")
                }
                // A kind Courier does not name is left to the topic's suffix.
                let kind = String(try ASN1UTF8String(derEncoded: kindNode))
                guard TopicKind(rawValue: kind).map({ $0 == last.kind }) ?? true else {
                    throw PKIError(.badCertificate, "topic \(last) is marked as kind \(kind)")
                }
            } else {
                topics.append(Topic(String(try ASN1UTF8String(derEncoded: child))))
            }
        }
        self.topics = topics
    }

    public func makeCertificateExtension() throws -> Certificate.Extension {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { sequence in
            for topic in topics {
                try sequence.serialize(ASN1UTF8String(topic.description))
                try sequence.appendConstructedNode(identifier: .sequence) { kind in
                    try kind.serialize(ASN1UTF8String(topic.kind.rawValue))
                }
            }
        }
        return Certificate.Extension(oid: .Courier.topics, critical: false, value: serializer.serializedBytes[...])
    }

    /// The plain layout: a SEQUENCE of UTF8Strings, as other tools write it.
    public func makePlainCertificateExtension() throws -> Certificate.Extension {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { sequence in
            for topic in topics { try sequence.serialize(ASN1UTF8String(topic.description)) }
        }
        return Certificate.Extension(oid: .Courier.topics, critical: false, value: serializer.serializedBytes[...])
    }
}

/// One of Apple's environment extensions; its value is an ASN.1 NULL.
public struct PushEnvironmentExtension: Sendable, Hashable, CertificateExtensionConvertible {
    public var environment: Environment

    public init(_ environment: Environment) {
        self.environment = environment
    }

    public static func oid(for environment: Environment) -> ASN1ObjectIdentifier {
        switch environment {
        case .production: .Courier.production
        case .sandbox: .Courier.sandbox
        }
    }

    public func makeCertificateExtension() throws -> Certificate.Extension {
        var serializer = DER.Serializer()
        try serializer.serialize(ASN1Null())
        return Certificate.Extension(oid: Self.oid(for: environment), critical: false, value: serializer.serializedBytes[...])
    }
}

/// What a provider certificate allows, read from the certificate.
public struct ProviderCertificateInfo: Sendable, Hashable {
    /// The subject's UID: the bundle id, the default topic.
    public var bundleID: String?
    /// The subject's OU: the team id.
    public var teamID: String?
    /// The topics; when the certificate has no topics extension, the UID
    /// alone.
    public var topics: [Topic]
    /// The environments the certificate is good for.
    public var environments: Set<Environment>

    public init(bundleID: String?, teamID: String?, topics: [Topic], environments: Set<Environment>) {
        self.bundleID = bundleID
        self.teamID = teamID
        self.topics = topics
        self.environments = environments
    }

    public init(certificate: Certificate) throws {
        var uid: String?
        var organizationalUnit: String?
        for rdn in certificate.subject {
            for attribute in rdn {
                if attribute.type == .Courier.userID { uid = String(attribute.value) }
                if attribute.type == .RDNAttributeType.organizationalUnitName { organizationalUnit = String(attribute.value) }
            }
        }
        var topics: [Topic] = []
        if let ext = certificate.extensions[oid: .Courier.topics] {
            topics = try PushTopicsExtension(ext).topics
        } else if let uid {
            topics = [Topic(uid)]
        }
        var environments = Set<Environment>()
        for environment in Environment.allCases where certificate.extensions[oid: PushEnvironmentExtension.oid(for: environment)] != nil {
            environments.insert(environment)
        }
        self.init(bundleID: uid, teamID: organizationalUnit, topics: topics, environments: environments)
    }
}
