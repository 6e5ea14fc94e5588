/// The two APNs environments. Each has its own listeners and its own
/// device-token key, so a token of one is not valid in the other.
public enum Environment: String, Sendable, Hashable, Codable, CaseIterable {
    case production
    case sandbox

    /// A one-byte tag mixed into environment-bound cryptography.
    public var tag: UInt8 {
        switch self {
        case .production: 0x50  // "P"
        case .sandbox: 0x53  // "S"
        }
    }
}
