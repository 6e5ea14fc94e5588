import CourierCore
import Foundation
import NIOHPACK

/// What a request of Apple's broadcast API asks for.
public enum ChannelOperation: String, Sendable, Hashable {
    /// `POST /1/apps/{bundleId}/channels` (channel management port).
    case create
    /// `GET /1/apps/{bundleId}/channels` with `apns-channel-id`.
    case read
    /// `DELETE /1/apps/{bundleId}/channels` with `apns-channel-id`.
    case delete
    /// `GET /1/apps/{bundleId}/all-channels`.
    case list
    /// `POST /4/broadcasts/apps/{bundleId}` (the push port).
    case broadcast
}

/// A request of the broadcast API as its headers give it (docs/protocol.md,
/// "Broadcast channels"): channel management on its own port, broadcasts
/// on the push port beside `/3/device`. `parse` answers method and path;
/// `fields` the header values.
public struct HTTP2ChannelRequestHead: Sendable, Hashable {
    public var operation: ChannelOperation
    /// The path's bundle id, as sent.
    public var bundleID: String
    /// `apns-request-id` as sent; echoed on the answer whatever it holds.
    public var requestID: String?
    public var channelID: String?
    public var pushType: String?
    public var priority: String?
    public var expiration: String?
    public var authorization: String?

    static let broadcastPrefix = "/4/broadcasts/apps/"
    static let managementPrefix = "/1/apps/"

    init(operation: ChannelOperation, bundleID: String) {
        self.operation = operation
        self.bundleID = bundleID
    }

    /// True when `headers` ask for a broadcast (the push port's other
    /// requests are `/3/device`'s).
    public static func isBroadcast(_ headers: HPACKHeaders) -> Bool {
        headers.first(name: ":path")?.hasPrefix(broadcastPrefix) ?? false
    }

    /// Reads a request's method, path and headers: on the channel
    /// management port (`management`) the channel paths, on the push port
    /// the broadcast path. Another path is `BadPath`, another method for a
    /// known path `MethodNotAllowed`.
    public static func parse(_ headers: HPACKHeaders, management: Bool) -> Result<HTTP2ChannelRequestHead, Reason> {
        var method: String?
        var path: String?
        var fields: [String: String] = [:]
        var duplicated = false
        for (name, value, _) in headers {
            switch name {
            case ":method": method = value
            case ":path": path = value
            case "authorization", "apns-request-id", "apns-channel-id", "apns-push-type", "apns-priority", "apns-expiration":
                if fields.updateValue(value, forKey: name) != nil { duplicated = true }
            default: continue
            }
        }
        guard let path else { return .failure(.badPath) }
        // A query string is not part of the path.
        let route = String(path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        guard let (operations, bundleID) = management ? managementRoute(route) : broadcastRoute(route) else { return .failure(.badPath) }
        guard let method, let operation = operations[method] else { return .failure(.methodNotAllowed) }
        guard !duplicated else { return .failure(.duplicateHeaders) }
        var head = HTTP2ChannelRequestHead(operation: operation, bundleID: bundleID)
        head.authorization = fields["authorization"]
        head.requestID = fields["apns-request-id"]
        head.channelID = fields["apns-channel-id"]
        head.pushType = fields["apns-push-type"]
        head.priority = fields["apns-priority"]
        head.expiration = fields["apns-expiration"]
        return .success(head)
    }

    /// `/1/apps/{bundleId}/channels` and `/1/apps/{bundleId}/all-channels`.
    private static func managementRoute(_ route: String) -> ([String: ChannelOperation], String)? {
        guard route.hasPrefix(managementPrefix) else { return nil }
        let parts = route.dropFirst(managementPrefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty else { return nil }
        switch parts[1] {
        case "channels": return (["POST": .create, "GET": .read, "DELETE": .delete], String(parts[0]))
        case "all-channels": return (["GET": .list], String(parts[0]))
        default: return nil
        }
    }

    /// `/4/broadcasts/apps/{bundleId}`.
    private static func broadcastRoute(_ route: String) -> ([String: ChannelOperation], String)? {
        guard route.hasPrefix(broadcastPrefix) else { return nil }
        let bundleID = route.dropFirst(broadcastPrefix.count)
        guard !bundleID.isEmpty, !bundleID.contains("/") else { return nil }
        return (["POST": .broadcast], String(bundleID))
    }

    /// A broadcast's checked header values.
    public struct BroadcastFields: Sendable, Hashable {
        public var channelID: String
        /// Nil: none given (kept as the channel's policy allows).
        public var expiration: Date?
        /// Nil: none given (10, or 5 for a background payload, as on `/3/device`).
        public var priority: Priority?
    }

    /// Live Activities, as the broadcast API names them: Apple writes
    /// `LiveActivity` and `liveactivity`, so the case is not compared.
    static func isLiveActivities(_ pushType: String) -> Bool {
        pushType.lowercased() == PushType.liveactivity.rawValue
    }

    /// Checks `apns-request-id` (a UUID when given: else `BadMessageId`)
    /// and, for a read or a delete, `apns-channel-id`.
    public func checkCommon() -> Reason? {
        if let requestID, !HTTP2RequestHead.isCanonicalUUID(requestID) { return .badMessageId }
        if operation == .read || operation == .delete || operation == .broadcast {
            guard let channelID, !channelID.isEmpty else { return .missingChannelId }
            guard BroadcastChannel.isWellFormedID(channelID) else { return .badChannelId }
        }
        return nil
    }

    /// A broadcast's header values, in the order of docs/protocol.md:
    /// the channel id, `apns-push-type` (required: `liveactivity`, in any
    /// case, as Apple's pages spell it three ways), `apns-priority` (10, 5
    /// or 1) and `apns-expiration`.
    public func broadcastFields() -> Result<BroadcastFields, Reason> {
        if let reason = checkCommon() { return .failure(reason) }
        guard let pushType, !pushType.isEmpty else { return .failure(.missingPushType) }
        guard Self.isLiveActivities(pushType) else { return .failure(.invalidPushType) }
        var priorityValue: Priority?
        if let priority {
            // 10, 5 and 1, as for a device push (Apple's broadcast header table).
            guard priority == "1" || priority == "5" || priority == "10", let value = UInt8(priority).flatMap(Priority.init(rawValue:)) else {
                return .failure(.badPriority)
            }
            priorityValue = value
        }
        var expirationDate: Date?
        if let expiration {
            guard let date = HTTP2RequestHead.expirationDate(expiration) else { return .failure(.badExpirationDate) }
            expirationDate = date
        }
        return .success(BroadcastFields(channelID: channelID ?? "", expiration: expirationDate, priority: priorityValue))
    }
}

/// The JSON of channel management: what creating a channel sends, what
/// reading one answers.
public struct ChannelConfiguration: Sendable, Hashable, Codable {
    public var messageStoragePolicy: Int
    public var pushType: String

    public init(messageStoragePolicy: Int, pushType: String = "LiveActivity") {
        self.messageStoragePolicy = messageStoragePolicy
        self.pushType = pushType
    }

    enum CodingKeys: String, CodingKey {
        case messageStoragePolicy = "message-storage-policy"
        case pushType = "push-type"
    }

    /// Reads a create request's body: empty is `PayloadEmpty`, not a JSON
    /// object `BadRequestPayload`, a missing, empty or null push type
    /// `MissingPushType`, another than Live Activities `InvalidPushType`, a
    /// missing or unknown storage policy, or a key Apple does not define,
    /// `BadRequestParams`.
    public static func read(_ body: [UInt8]) -> Result<MessageStoragePolicy, Reason> {
        guard !body.isEmpty else { return .failure(.payloadEmpty) }
        guard let request = try? JSONDecoder().decode(Request.self, from: Data(body)) else { return .failure(.badRequestPayload) }
        // Empty or null is none, as an empty `apns-push-type` is.
        guard request.hasPushType, request.pushType != "" else { return .failure(.missingPushType) }
        guard let pushType = request.pushType, HTTP2ChannelRequestHead.isLiveActivities(pushType) else { return .failure(.invalidPushType) }
        // A key Apple does not define is a parameter it would refuse.
        guard !request.hasUnknownKey, let policy = request.policy.flatMap(MessageStoragePolicy.init(rawValue:)) else { return .failure(.badRequestParams) }
        return .success(policy)
    }

    /// A create request's body, each value nil when it is missing or of
    /// another type (told apart from a body that is not an object).
    private struct Request: Decodable {
        var policy: Int?
        var hasPushType: Bool
        var pushType: String?
        /// A key other than `message-storage-policy` and `push-type`.
        var hasUnknownKey: Bool

        /// Any key of the object, to find those Apple does not define.
        private struct AnyKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            hasUnknownKey = try decoder.container(keyedBy: AnyKey.self).allKeys.contains { CodingKeys(stringValue: $0.stringValue) == nil }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            policy = try? container.decode(Int.self, forKey: .messageStoragePolicy)
            hasPushType = container.contains(.pushType) && !((try? container.decodeNil(forKey: .pushType)) ?? false)
            pushType = try? container.decode(String.self, forKey: .pushType)
        }
    }

    public var json: [UInt8] { Array((try? JSONEncoder().encode(self)) ?? Data()) }
}

/// The answer to `GET /1/apps/{bundleId}/all-channels`.
public struct ChannelList: Sendable, Hashable, Codable {
    public var channels: [String]

    public init(channels: [String]) {
        self.channels = channels
    }

    public var json: [UInt8] { Array((try? JSONEncoder().encode(self)) ?? Data()) }
}
