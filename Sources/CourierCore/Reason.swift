/// A failure reason of the HTTP/2 provider API (the seeds' table 8-6), with
/// its HTTP status. Reasons a newer server may send and this code does not
/// know are kept as `.unknown`.
public struct Reason: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Known: String, Sendable, Hashable, CaseIterable {
        case badCollapseId = "BadCollapseId"
        case badDeviceToken = "BadDeviceToken"
        case badExpirationDate = "BadExpirationDate"
        case badMessageId = "BadMessageId"
        case badPriority = "BadPriority"
        case badTopic = "BadTopic"
        case deviceTokenNotForTopic = "DeviceTokenNotForTopic"
        case duplicateHeaders = "DuplicateHeaders"
        case invalidPushType = "InvalidPushType"
        case idleTimeout = "IdleTimeout"
        case missingDeviceToken = "MissingDeviceToken"
        case missingTopic = "MissingTopic"
        case payloadEmpty = "PayloadEmpty"
        case topicDisallowed = "TopicDisallowed"
        case badCertificate = "BadCertificate"
        case badCertificateEnvironment = "BadCertificateEnvironment"
        case expiredProviderToken = "ExpiredProviderToken"
        case forbidden = "Forbidden"
        case invalidProviderToken = "InvalidProviderToken"
        case missingProviderToken = "MissingProviderToken"
        case unrelatedKeyIdInToken = "UnrelatedKeyIdInToken"
        case badEnvironmentKeyIdInToken = "BadEnvironmentKeyIdInToken"
        /// Never sent by Courier: the spelling live APNs has been seen to
        /// send for `BadEnvironmentKeyIdInToken`, known so that a client
        /// reads either.
        case badEnvironmentKeyInToken = "BadEnvironmentKeyInToken"
        case featureNotEnabled = "FeatureNotEnabled"
        case missingChannelId = "MissingChannelId"
        case badChannelId = "BadChannelId"
        case channelNotRegistered = "ChannelNotRegistered"
        case badRequestParams = "BadRequestParams"
        case badRequestPayload = "BadRequestPayload"
        case missingPushType = "MissingPushType"
        case cannotCreateChannelConfig = "CannotCreateChannelConfig"
        case topicMismatch = "TopicMismatch"
        case badPath = "BadPath"
        case methodNotAllowed = "MethodNotAllowed"
        case unregistered = "Unregistered"
        case expiredToken = "ExpiredToken"
        case payloadTooLarge = "PayloadTooLarge"
        case tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"
        case tooManyRequests = "TooManyRequests"
        case internalServerError = "InternalServerError"
        case serviceUnavailable = "ServiceUnavailable"
        case shutdown = "Shutdown"

        /// The HTTP status that carries this reason.
        public var httpStatus: Int {
            switch self {
            case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
                .deviceTokenNotForTopic, .duplicateHeaders, .invalidPushType, .idleTimeout, .missingDeviceToken, .missingTopic,
                .payloadEmpty, .topicDisallowed, .featureNotEnabled, .missingChannelId, .badChannelId, .channelNotRegistered, .badRequestParams,
                .badRequestPayload, .missingPushType, .cannotCreateChannelConfig:
                400
            case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
                .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken,
                .topicMismatch:
                403
            case .badPath: 404
            case .methodNotAllowed: 405
            case .unregistered, .expiredToken: 410
            case .payloadTooLarge: 413
            case .tooManyProviderTokenUpdates, .tooManyRequests: 429
            case .internalServerError: 500
            case .serviceUnavailable, .shutdown: 503
            }
        }
    }

    private enum Storage: Sendable, Hashable {
        case known(Known)
        case unknown(String)
    }

    private let storage: Storage

    public init(_ known: Known) { storage = .known(known) }

    /// The reason for a reason string as it appears on the wire.
    public init(rawValue: String) {
        storage = Known(rawValue: rawValue).map(Storage.known) ?? .unknown(rawValue)
    }

    public static func unknown(_ raw: String) -> Reason { Reason(rawValue: raw) }

    public var known: Known? {
        if case .known(let known) = storage { return known }
        return nil
    }

    public var rawValue: String {
        switch storage {
        case .known(let known): known.rawValue
        case .unknown(let raw): raw
        }
    }

    /// The HTTP status; an unknown reason is reported as 400.
    public var httpStatus: Int { known?.httpStatus ?? 400 }

    public var description: String { rawValue }
}

extension Reason {
    public static let badCollapseId = Reason(.badCollapseId)
    public static let badDeviceToken = Reason(.badDeviceToken)
    public static let badExpirationDate = Reason(.badExpirationDate)
    public static let badMessageId = Reason(.badMessageId)
    public static let badPriority = Reason(.badPriority)
    public static let badTopic = Reason(.badTopic)
    public static let deviceTokenNotForTopic = Reason(.deviceTokenNotForTopic)
    public static let duplicateHeaders = Reason(.duplicateHeaders)
    public static let invalidPushType = Reason(.invalidPushType)
    public static let idleTimeout = Reason(.idleTimeout)
    public static let missingDeviceToken = Reason(.missingDeviceToken)
    public static let missingTopic = Reason(.missingTopic)
    public static let payloadEmpty = Reason(.payloadEmpty)
    public static let topicDisallowed = Reason(.topicDisallowed)
    public static let badCertificate = Reason(.badCertificate)
    public static let badCertificateEnvironment = Reason(.badCertificateEnvironment)
    public static let expiredProviderToken = Reason(.expiredProviderToken)
    public static let forbidden = Reason(.forbidden)
    public static let invalidProviderToken = Reason(.invalidProviderToken)
    public static let missingProviderToken = Reason(.missingProviderToken)
    public static let unrelatedKeyIdInToken = Reason(.unrelatedKeyIdInToken)
    public static let badEnvironmentKeyIdInToken = Reason(.badEnvironmentKeyIdInToken)
    public static let badEnvironmentKeyInToken = Reason(.badEnvironmentKeyInToken)
    public static let featureNotEnabled = Reason(.featureNotEnabled)
    public static let missingChannelId = Reason(.missingChannelId)
    public static let badChannelId = Reason(.badChannelId)
    public static let channelNotRegistered = Reason(.channelNotRegistered)
    public static let badRequestParams = Reason(.badRequestParams)
    public static let badRequestPayload = Reason(.badRequestPayload)
    public static let missingPushType = Reason(.missingPushType)
    public static let cannotCreateChannelConfig = Reason(.cannotCreateChannelConfig)
    public static let topicMismatch = Reason(.topicMismatch)
    public static let badPath = Reason(.badPath)
    public static let methodNotAllowed = Reason(.methodNotAllowed)
    public static let unregistered = Reason(.unregistered)
    public static let expiredToken = Reason(.expiredToken)
    public static let payloadTooLarge = Reason(.payloadTooLarge)
    public static let tooManyProviderTokenUpdates = Reason(.tooManyProviderTokenUpdates)
    public static let tooManyRequests = Reason(.tooManyRequests)
    public static let internalServerError = Reason(.internalServerError)
    public static let serviceUnavailable = Reason(.serviceUnavailable)
    public static let shutdown = Reason(.shutdown)
}

/// A status code of the binary provider API's error-response packet
/// (command 8), the seeds' table A-4.
public struct BinaryStatus: Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt8

    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let noErrors = BinaryStatus(rawValue: 0)
    public static let processingError = BinaryStatus(rawValue: 1)
    public static let missingDeviceToken = BinaryStatus(rawValue: 2)
    public static let missingTopic = BinaryStatus(rawValue: 3)
    public static let missingPayload = BinaryStatus(rawValue: 4)
    public static let invalidTokenSize = BinaryStatus(rawValue: 5)
    public static let invalidTopicSize = BinaryStatus(rawValue: 6)
    public static let invalidPayloadSize = BinaryStatus(rawValue: 7)
    public static let invalidToken = BinaryStatus(rawValue: 8)
    public static let shutdown = BinaryStatus(rawValue: 10)
    public static let protocolError = BinaryStatus(rawValue: 128)
    public static let unknown = BinaryStatus(rawValue: 255)

    /// The seeds' description of the status; codes the table does not list
    /// are described as such.
    public var meaning: String {
        switch rawValue {
        case 0: "No errors encountered"
        case 1: "Processing error"
        case 2: "Missing device token"
        case 3: "Missing topic"
        case 4: "Missing payload"
        case 5: "Invalid token size"
        case 6: "Invalid topic size"
        case 7: "Invalid payload size"
        case 8: "Invalid token"
        case 10: "Shutdown"
        case 128: "Protocol error (APNs could not parse the notification)"
        case 255: "None (unknown)"
        default: "Unassigned status \(rawValue)"
        }
    }

    public var description: String { "\(rawValue) (\(meaning))" }
}
