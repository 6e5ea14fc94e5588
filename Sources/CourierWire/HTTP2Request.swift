import CourierCore
import Foundation

/// The request of the HTTP/2 provider API as its headers give it (the
/// seeds' tables 8-1 and 8-2, plus `apns-push-type`), before any check that
/// needs the connection's identity. `parse` answers the header rows of
/// docs/protocol.md §2 in a fixed order: method, path, duplicates; the
/// values of the `apns-*` headers are checked by `fields`.
public struct HTTP2RequestHead: Sendable, Hashable {
    /// The path's token, as sent (hex).
    public var tokenHex: Substring
    /// `apns-id` as sent; echoed on the response whatever it holds.
    public var apnsID: String?
    public var expiration: String?
    public var priority: String?
    public var topic: String?
    public var collapseID: String?
    public var pushType: String?
    /// The `authorization` header's value.
    public var authorization: String?

    /// Headers that may appear only once (DuplicateHeaders).
    static let single: Set<String> = [
        "authorization", "apns-id", "apns-expiration", "apns-priority", "apns-topic", "apns-collapse-id", "apns-push-type",
    ]

    static let devicePrefix = "/3/device/"

    /// Reads the headers of one request. Names are lowercase, as HTTP/2
    /// requires; headers other than table 8-2's are ignored.
    public static func parse(_ headers: some Sequence<(name: String, value: String)>) -> Result<HTTP2RequestHead, Reason> {
        var method: String?
        var path: String?
        var values: [String: String] = [:]
        var duplicated = false
        for (name, value) in headers {
            switch name {
            case ":method": method = value
            case ":path": path = value
            default:
                guard single.contains(name) else { continue }
                if values.updateValue(value, forKey: name) != nil { duplicated = true }
            }
        }
        guard method == "POST" else { return .failure(.methodNotAllowed) }
        guard let path else { return .failure(.badPath) }
        // A query string is not part of the path.
        let route = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
        if route == "/3/device" || route == devicePrefix { return .failure(.missingDeviceToken) }
        guard route.hasPrefix(devicePrefix) else { return .failure(.badPath) }
        let token = route.dropFirst(devicePrefix.count)
        guard !token.contains("/") else { return .failure(.badPath) }
        guard !duplicated else { return .failure(.duplicateHeaders) }
        return .success(
            HTTP2RequestHead(
                tokenHex: token, apnsID: values["apns-id"], expiration: values["apns-expiration"], priority: values["apns-priority"],
                topic: values["apns-topic"], collapseID: values["apns-collapse-id"], pushType: values["apns-push-type"],
                authorization: values["authorization"]))
    }

    /// The checked values of the `apns-*` headers and the token.
    public struct Fields: Sendable, Hashable {
        public var id: UUID
        public var token: [UInt8]
        /// Nil: none given; `Date(0)`: deliver now or never.
        public var expiration: Date?
        public var priority: UInt8?
        public var collapseID: String?
        public var pushType: String?
    }

    /// Checks the header values in the order of docs/protocol.md §2;
    /// `newID` is the notification's id when the request has no `apns-id`.
    public func fields(tokenLength: Int, newID: UUID) -> Result<Fields, Reason> {
        var id = newID
        if let apnsID {
            guard Self.isCanonicalUUID(apnsID), let parsed = UUID(uuidString: apnsID) else { return .failure(.badMessageId) }
            id = parsed
        }
        var expirationDate: Date?
        if let expiration {
            guard !expiration.isEmpty, expiration.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let seconds = UInt32(expiration) else {
                return .failure(.badExpirationDate)
            }
            expirationDate = Date(timeIntervalSince1970: TimeInterval(seconds))
        }
        var priorityValue: UInt8?
        if let priority {
            guard priority == "5" || priority == "10" else { return .failure(.badPriority) }
            priorityValue = UInt8(priority)
        }
        if let collapseID, collapseID.utf8.count > 64 { return .failure(.badCollapseId) }
        guard tokenHex.utf8.count == tokenLength * 2, let token = Hex.decode(tokenHex) else { return .failure(.badDeviceToken) }
        return .success(Fields(id: id, token: token, expiration: expirationDate, priority: priorityValue, collapseID: collapseID, pushType: pushType))
    }

    /// 8-4-4-4-12 hex digits. Upper-case digits are accepted: clients
    /// written in Swift send `UUID().uuidString`, and Apple takes them.
    static func isCanonicalUUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                guard Hex.value(of: byte) != nil else { return false }
            }
        }
        return true
    }

    /// A topic string: a bundle id, optionally with a topic-kind suffix.
    public static func isTopic(_ text: String) -> Bool {
        Identifiers.isBundleID(Topic(text).bundleID)
    }
}

/// The JSON body of an error response and of a GOAWAY frame (table 8-5).
public struct HTTP2ErrorBody: Sendable, Hashable, Codable {
    public var reason: String
    /// For 410: milliseconds since 1970 at which the token stopped being valid.
    public var timestamp: Int64?

    public init(reason: Reason, timestamp: Date? = nil) {
        self.reason = reason.rawValue
        self.timestamp = timestamp.map { Int64(($0.timeIntervalSince1970 * 1000).rounded(.down)) }
    }

    public var json: [UInt8] {
        var text = #"{"reason":""# + reason + #"""#
        if let timestamp { text += #","timestamp":\#(timestamp)"# }
        return Array((text + "}").utf8)
    }

    public static func decode(_ bytes: some Collection<UInt8>) -> HTTP2ErrorBody? {
        try? JSONDecoder().decode(HTTP2ErrorBody.self, from: Data(bytes))
    }
}
