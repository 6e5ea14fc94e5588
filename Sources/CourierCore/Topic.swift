/// What a push topic addresses: the app itself or one of the services
/// Apple gives a topic of its own, each named by a suffix of the bundle id
/// and taking the push types of `pushTypes` (docs/protocol.md, "Push types
/// and topics").
public enum TopicKind: String, Sendable, Hashable, Codable, CaseIterable {
    case app
    case voip
    case complication
    case fileprovider
    case location
    case liveactivity
    case pushtotalk
    case widgets
    case controls

    /// The suffix this kind adds to the bundle id.
    public var suffix: String {
        switch self {
        case .app: ""
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .location: ".location-query"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        }
    }

    /// The `apns-push-type` values a topic of this kind takes
    /// (`PushType.topicKind`), in Apple's order: alert first for the app's.
    public var pushTypes: [PushType] { PushType.allCases.filter { $0.topicKind == self } }

    /// False for the kinds Apple serves only to token (JWT) trust:
    /// provider certificates do not carry their topics, and a certificate
    /// connection is refused them (`TopicDisallowed`) whatever its
    /// certificate lists.
    public var allowsCertificates: Bool {
        switch self {
        case .app, .voip, .complication, .fileprovider, .pushtotalk: true
        case .location, .liveactivity, .widgets, .controls: false
        }
    }

    /// What a command or the admin API says of a kind it does not know.
    public static func unknown(_ name: String) -> String {
        "unknown topic kind '\(name)': use one of \(allCases.map(\.rawValue).joined(separator: ", "))"
    }

    /// The kinds a topic string may end in, longest suffix first.
    static let suffixed = allCases.filter { $0 != .app }.sorted { $0.suffix.utf8.count > $1.suffix.utf8.count }
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
        // On the string's bytes: every HTTP/2 request's topic comes here.
        var text = topic
        let found = text.withUTF8 { bytes -> (kind: TopicKind, bundleID: String)? in
            for kind in TopicKind.suffixed {
                let suffix = kind.suffix.utf8
                guard bytes.count > suffix.count, bytes[(bytes.count - suffix.count)...].elementsEqual(suffix) else { continue }
                return (kind, String(decoding: bytes[..<(bytes.count - suffix.count)], as: UTF8.self))
            }
            return nil
        }
        if let found {
            self.init(bundleID: found.bundleID, kind: found.kind)
        } else {
            self.init(bundleID: topic, kind: .app)
        }
    }

    public var description: String { bundleID + kind.suffix }

    /// Every topic of a bundle id, one per kind.
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
        // One pass over the bytes: every HTTP/2 request's topic comes here.
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= 155 else { return false }
        var parts = 1
        var partLength = 0
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "."):
                guard partLength > 0 else { return false }
                parts += 1
                partLength = 0
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"):
                partLength += 1
            default:
                return false
            }
        }
        return parts >= 2 && partLength > 0
    }
}
