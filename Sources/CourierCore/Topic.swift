/// What a push topic addresses: the app itself, its VoIP service or its
/// watch complication. Topics are `<bundle>`, `<bundle>.voip` and
/// `<bundle>.complication`.
public enum TopicKind: String, Sendable, Hashable, Codable, CaseIterable {
    case app
    case voip
    case complication

    /// The suffix this kind adds to the bundle id.
    public var suffix: String {
        switch self {
        case .app: ""
        case .voip: ".voip"
        case .complication: ".complication"
        }
    }
}

/// A push topic split into the bundle id it belongs to and its kind.
public struct Topic: Sendable, Hashable, CustomStringConvertible {
    public var bundleID: String
    public var kind: TopicKind

    public init(bundleID: String, kind: TopicKind = .app) {
        self.bundleID = bundleID
        self.kind = kind
    }

    /// Splits a topic string; `com.a.b.voip` is the VoIP topic of `com.a.b`.
    public init(_ topic: String) {
        for kind in [TopicKind.voip, .complication] where topic.hasSuffix(kind.suffix) && topic.count > kind.suffix.count {
            self.init(bundleID: String(topic.dropLast(kind.suffix.count)), kind: kind)
            return
        }
        self.init(bundleID: topic, kind: .app)
    }

    public var description: String { bundleID + kind.suffix }

    /// The three topics of an app.
    public static func all(of bundleID: String) -> [Topic] {
        TopicKind.allCases.map { Topic(bundleID: bundleID, kind: $0) }
    }
}

/// Rules for identifiers that the provisioning commands accept.
public enum Identifiers {
    /// Team ids and key ids: exactly ten characters A–Z and 0–9.
    public static func isTenCharacterID(_ text: String) -> Bool {
        text.utf8.count == 10
            && text.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    /// Bundle ids: reverse-DNS, letters, digits, `-` and `.`, no empty part,
    /// at most 155 bytes.
    public static func isBundleID(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 155 else { return false }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return false }
        return parts.allSatisfy { part in
            !part.isEmpty
                && part.utf8.allSatisfy { byte in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                }
        }
    }
}
