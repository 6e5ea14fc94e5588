import CourierCore
import Foundation
import NIOHPACK

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

    init(tokenHex: Substring) {
        self.tokenHex = tokenHex
    }

    static let devicePrefix = "/3/device/"

    /// Reads the headers of one request. Names are lowercase, as HTTP/2
    /// requires; headers other than table 8-2's are ignored.
    public static func parse(_ headers: HPACKHeaders) -> Result<HTTP2RequestHead, Reason> {
        var method: String?
        var path: String?
        var head = HTTP2RequestHead(tokenHex: "")
        var duplicated = false
        /// Sets a header that may appear only once (DuplicateHeaders).
        func once(_ field: inout String?, _ value: String) {
            if field != nil { duplicated = true }
            field = value
        }
        for (name, value, _) in headers {
            // By length first: one comparison of strings per header at most.
            switch name.utf8.count {
            case 5 where name == ":path": path = value
            case 7 where name == ":method": method = value
            case 7 where name == "apns-id": once(&head.apnsID, value)
            case 10 where name == "apns-topic": once(&head.topic, value)
            case 13 where name == "authorization": once(&head.authorization, value)
            case 13 where name == "apns-priority": once(&head.priority, value)
            case 14 where name == "apns-push-type": once(&head.pushType, value)
            case 15 where name == "apns-expiration": once(&head.expiration, value)
            case 16 where name == "apns-collapse-id": once(&head.collapseID, value)
            default: continue
            }
        }
        guard method == "POST" else { return .failure(.methodNotAllowed) }
        guard let path else { return .failure(.badPath) }
        // A query string is not part of the path.
        let route = path.utf8.firstIndex(of: UInt8(ascii: "?")).map { path[..<$0] } ?? path[...]
        let prefix = devicePrefix.utf8
        if route.utf8.count <= prefix.count, route.utf8.elementsEqual(prefix.prefix(route.utf8.count)), route.utf8.count >= prefix.count - 1 {
            return .failure(.missingDeviceToken)
        }
        guard route.utf8.starts(with: prefix) else { return .failure(.badPath) }
        // The prefix's bytes, not Characters: a combining mark after the
        // prefix's last slash would join it into one Character.
        let token = Substring(route.utf8.dropFirst(prefix.count))
        guard !token.utf8.contains(UInt8(ascii: "/")) else { return .failure(.badPath) }
        guard !duplicated else { return .failure(.duplicateHeaders) }
        head.tokenHex = token
        return .success(head)
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
            guard let date = Self.expirationDate(expiration) else { return .failure(.badExpirationDate) }
            expirationDate = date
        }
        var priorityValue: UInt8?
        if let priority {
            guard priority == "1" || priority == "5" || priority == "10" else { return .failure(.badPriority) }
            priorityValue = UInt8(priority)
        }
        if let collapseID, collapseID.utf8.count > 64 { return .failure(.badCollapseId) }
        if let pushType, PushType(rawValue: pushType) == nil { return .failure(.invalidPushType) }
        guard tokenHex.utf8.count == tokenLength * 2, let token = Hex.decode(tokenHex) else { return .failure(.badDeviceToken) }
        // An empty collapse id collapses nothing: the same as none.
        let collapse = collapseID?.isEmpty == true ? nil : collapseID
        return .success(Fields(id: id, token: token, expiration: expirationDate, priority: priorityValue, collapseID: collapse, pushType: pushType))
    }

    /// An `apns-expiration` value: seconds since 1970, digits only; nil
    /// for anything else (`BadExpirationDate`).
    static func expirationDate(_ text: String) -> Date? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let seconds = UInt32(text) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// 8-4-4-4-12 hex digits. Upper-case digits are accepted: clients
    /// written in Swift send `UUID().uuidString`, and Apple takes them.
    static func isCanonicalUUID(_ text: String) -> Bool {
        guard text.utf8.count == 36 else { return false }
        for (index, byte) in text.utf8.enumerated() {
            switch index {
            case 8, 13, 18, 23: guard byte == UInt8(ascii: "-") else { return false }
            default: guard Hex.value(of: byte) != nil else { return false }
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
