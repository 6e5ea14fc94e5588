import Foundation

/// A notification payload: the `aps` dictionary of the seeds' tables 9-1
/// and 9-2, and the app's own keys beside it.
public struct APSPayload: Sendable, Hashable {
    /// The alert dictionary (table 9-2).
    public struct Alert: Sendable, Hashable {
        public var title: String?
        public var body: String?
        public var titleLocKey: String?
        public var titleLocArgs: [String]?
        public var actionLocKey: String?
        public var locKey: String?
        public var locArgs: [String]?
        public var launchImage: String?

        public init(
            title: String? = nil, body: String? = nil, titleLocKey: String? = nil, titleLocArgs: [String]? = nil, actionLocKey: String? = nil,
            locKey: String? = nil, locArgs: [String]? = nil, launchImage: String? = nil
        ) {
            self.title = title
            self.body = body
            self.titleLocKey = titleLocKey
            self.titleLocArgs = titleLocArgs
            self.actionLocKey = actionLocKey
            self.locKey = locKey
            self.locArgs = locArgs
            self.launchImage = launchImage
        }

        /// The dictionary, with table 9-2's key names; absent keys left out.
        var dictionary: [String: Any] {
            let keys: [(String, Any?)] = [
                ("title", title), ("body", body), ("title-loc-key", titleLocKey), ("title-loc-args", titleLocArgs),
                ("action-loc-key", actionLocKey), ("loc-key", locKey), ("loc-args", locArgs), ("launch-image", launchImage),
            ]
            return Dictionary(uniqueKeysWithValues: keys.compactMap { key, value in value.map { (key, $0) } })
        }
    }

    /// `alert`: a string (the message) or a dictionary.
    public enum AlertValue: Sendable, Hashable {
        case text(String)
        case dictionary(Alert)
    }

    public var alert: AlertValue?
    public var badge: Int?
    public var sound: String?
    /// `content-available: 1`: a silent (background) notification.
    public var contentAvailable: Bool
    public var category: String?
    public var threadID: String?
    /// Keys outside `aps`, for the app; values must be JSON values.
    public var custom: [String: any Sendable]

    public init(
        alert: AlertValue? = nil, badge: Int? = nil, sound: String? = nil, contentAvailable: Bool = false, category: String? = nil,
        threadID: String? = nil, custom: [String: any Sendable] = [:]
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.contentAvailable = contentAvailable
        self.category = category
        self.threadID = threadID
        self.custom = custom
    }

    /// A plain alert with `text` as its message.
    public static func alert(_ text: String) -> APSPayload { APSPayload(alert: .text(text)) }

    /// A silent notification (only `content-available`).
    public static var background: APSPayload { APSPayload(contentAvailable: true) }

    /// The JSON bytes to send as the request body.
    public func json() throws -> [UInt8] {
        var aps: [String: Any] = [:]
        switch alert {
        case .text(let text): aps["alert"] = text
        case .dictionary(let alert): aps["alert"] = alert.dictionary
        case nil: break
        }
        if let badge { aps["badge"] = badge }
        if let sound { aps["sound"] = sound }
        if contentAvailable { aps["content-available"] = 1 }
        if let category { aps["category"] = category }
        if let threadID { aps["thread-id"] = threadID }
        var object: [String: Any] = [:]
        for (key, value) in custom { object[key] = value }
        object["aps"] = aps
        guard JSONSerialization.isValidJSONObject(object) else { throw APSPayloadError.notJSON }
        return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    public static func == (lhs: APSPayload, rhs: APSPayload) -> Bool {
        (try? lhs.json()) == (try? rhs.json())
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(try? json()) }
}

public enum APSPayloadError: Error, Sendable, Hashable {
    /// A custom value is not a JSON value.
    case notJSON
}
