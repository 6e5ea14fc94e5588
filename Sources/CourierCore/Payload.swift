import Foundation

/// The interface a payload arrived through; each has its own size limit.
public enum PayloadChannel: Sendable, Hashable, CaseIterable {
    /// Binary commands 0 and 1 (simple and enhanced formats).
    case binaryLegacy
    /// Binary command 2.
    case binaryCommand2
    /// HTTP/2 provider API.
    case http2
    /// HTTP/2 provider API to a `.voip` topic.
    case http2VoIP
    /// A broadcast on a channel (`/4/broadcasts`).
    case broadcast

    public var isBinary: Bool { self == .binaryLegacy || self == .binaryCommand2 }
}

/// Payload size limits in bytes. The defaults are the seeds' numbers.
public struct PayloadLimits: Sendable, Hashable, Codable {
    public var binaryLegacy: Int
    public var binaryCommand2: Int
    public var http2: Int
    public var http2VoIP: Int
    /// Apple's limit for broadcasts: 5 KB, as for VoIP.
    public var broadcast: Int

    public init(binaryLegacy: Int = 256, binaryCommand2: Int = 2048, http2: Int = 4096, http2VoIP: Int = 5120, broadcast: Int = 5120) {
        self.broadcast = broadcast
        self.binaryLegacy = binaryLegacy
        self.binaryCommand2 = binaryCommand2
        self.http2 = http2
        self.http2VoIP = http2VoIP
    }

    public func limit(for channel: PayloadChannel) -> Int {
        switch channel {
        case .binaryLegacy: binaryLegacy
        case .binaryCommand2: binaryCommand2
        case .http2: http2
        case .http2VoIP: http2VoIP
        case .broadcast: broadcast
        }
    }
}

/// Notification priority: 10 (now), 5 (power-conscious, may be bursted)
/// or 1 (the HTTP/2 API only: power first, never wakes the device;
/// scheduled as 5 is, with the device's burst, and handed to the device
/// as 1).
public struct Priority: Sendable, Hashable, Codable, CustomStringConvertible {
    public let rawValue: UInt8

    /// Nil for values other than 1, 5 and 10.
    public init?(rawValue: UInt8) {
        guard rawValue == 1 || rawValue == 5 || rawValue == 10 else { return nil }
        self.rawValue = rawValue
    }

    public static let immediate = Priority(rawValue: 10)!
    public static let conservePower = Priority(rawValue: 5)!
    public static let lowest = Priority(rawValue: 1)!

    public var description: String { String(rawValue) }
}

/// Why a payload is refused.
public enum PayloadError: Error, Sendable, Hashable, CaseIterable {
    /// Zero bytes.
    case empty
    /// More bytes than the channel's limit.
    case tooLarge
    /// Ends in a NUL byte, which the seeds forbid.
    case nullTerminated
    /// Not a JSON object (not JSON at all, or an array, string, number).
    case notJSONObject
    /// Priority 10 on a push whose `aps` dictionary holds only
    /// `content-available`: the seeds call that an error.
    case priorityTenSilent
    /// A priority other than 1, 5 or 10 (5 or 10 on the binary API).
    case unknownPriority

    /// The binary provider API's answer.
    public var binaryStatus: BinaryStatus {
        switch self {
        case .empty: .missingPayload
        case .tooLarge: .invalidPayloadSize
        case .nullTerminated: .invalidPayloadSize
        case .notJSONObject: .missingPayload
        case .priorityTenSilent: .protocolError
        case .unknownPriority: .protocolError
        }
    }

    /// The HTTP/2 provider API's answer.
    public var reason: Reason {
        switch self {
        case .empty: .payloadEmpty
        case .tooLarge: .payloadTooLarge
        case .nullTerminated: .payloadEmpty
        case .notJSONObject: .payloadEmpty
        case .priorityTenSilent: .badPriority
        case .unknownPriority: .badPriority
        }
    }
}

/// What the rules learned about an accepted payload.
public struct PayloadSummary: Sendable, Hashable {
    /// `aps` holds `content-available: 1` and nothing the user would see
    /// (no alert, sound or badge): a background (silent) push.
    public var isSilent: Bool

    public init(isSilent: Bool) {
        self.isSilent = isSilent
    }
}

/// The payload rules shared by every provider interface.
public enum PayloadRules {
    /// True when `payload` is a JSON object as the provider interfaces
    /// read it (RFC 8259, UTF-8): what a command line checks before sending.
    public static func isJSONObject(_ payload: some Collection<UInt8>) -> Bool {
        PayloadScanner.scan(payload) != nil
    }

    /// Checks `payload` as received on `channel` with priority `priority`
    /// (nil when the interface carried none; 10 is assumed).
    ///
    /// Inlinable so that it is specialized for the caller's collection (a
    /// received buffer's view), as `withContiguousBytes` is.
    @inlinable
    public static func check(
        _ payload: some Collection<UInt8>,
        priority rawPriority: UInt8?,
        channel: PayloadChannel,
        limits: PayloadLimits = PayloadLimits()
    ) -> Result<PayloadSummary, PayloadError> {
        // A priority that was not sent is 10, except for a silent push, which
        // is then taken as 5 (docs/protocol.md, "Priorities").
        var explicitPriority: Priority?
        if let rawPriority {
            // Priority 1 came with the HTTP/2 API; the binary API has 5 and 10.
            guard let known = Priority(rawValue: rawPriority), known != .lowest || !channel.isBinary else { return .failure(.unknownPriority) }
            explicitPriority = known
        }
        let limit = limits.limit(for: channel)
        return payload.withContiguousBytes { check(bytes: $0, explicitPriority: explicitPriority, limit: limit) }
    }

    @usableFromInline
    static func check(bytes: UnsafeRawBufferPointer, explicitPriority: Priority?, limit: Int) -> Result<PayloadSummary, PayloadError> {
        guard !bytes.isEmpty else { return .failure(.empty) }
        guard bytes.count <= limit else { return .failure(.tooLarge) }
        guard bytes.last != 0 else { return .failure(.nullTerminated) }
        guard let aps = PayloadScanner.scan(bytes: bytes) else { return .failure(.notJSONObject) }
        // Silent: content-available 1 and nothing the user would see.
        let summary = PayloadSummary(isSilent: aps.contentAvailable && !aps.visible)
        if summary.isSilent, explicitPriority == .immediate, aps.keyCount == 1, aps.hasContentAvailable {
            return .failure(.priorityTenSilent)
        }
        return .success(summary)
    }
}
