/// The values of the `apns-push-type` header that Apple defines today. A
/// request with any other value is refused (`InvalidPushType`): what a
/// provider sends is passed to the device, so it must be one of these.
public enum PushType: String, Sendable, Hashable, CaseIterable {
    case alert
    case background
    case location
    case voip
    case complication
    case fileprovider
    case mdm
    case liveactivity
    case pushtotalk
    case widgets
    case controls
}

extension PushType {
    /// The kind of topic a push of this type is sent to.
    public var topicKind: TopicKind {
        switch self {
        case .alert, .background, .mdm: .app
        case .voip: .voip
        case .complication: .complication
        case .fileprovider: .fileprovider
        case .location: .location
        case .liveactivity: .liveactivity
        case .pushtotalk: .pushtotalk
        case .widgets: .widgets
        case .controls: .controls
        }
    }

    /// Whether Apple takes this priority with this type: background only
    /// 5 ("using priority 10 is an error"), push-to-talk only 10, Live
    /// Activities and location queries 5 or 10, the others 1, 5 or 10.
    public func allows(_ priority: Priority) -> Bool {
        switch self {
        case .background: priority == .conservePower
        case .pushtotalk: priority == .immediate
        case .liveactivity, .location: priority != .lowest
        default: true
        }
    }
}

/// The rules that tie `apns-push-type` to the topic and the priority
/// (docs/protocol.md, "Push types and topics").
public enum PushTypeRules {
    /// The refusal of a push of `pushType` (nil: none given) to a topic of
    /// `kind` with `priority` (nil: none given), or nil. A push type must
    /// be one of the topic kind's (`InvalidPushType`); without one, a topic
    /// other than the app's stands for its kind's one type, whose priority
    /// rule applies (the app topic keeps the rules from before push types:
    /// alert or background as the payload is). A priority the type does
    /// not take is `BadPriority`.
    public static func refusal(pushType: PushType?, kind: TopicKind, priority: Priority?) -> Reason? {
        let type: PushType
        if let pushType {
            guard pushType.topicKind == kind else { return .invalidPushType }
            type = pushType
        } else {
            guard kind != .app, let only = kind.pushTypes.first else { return nil }
            type = only
        }
        if let priority, !type.allows(priority) { return .badPriority }
        return nil
    }
}
