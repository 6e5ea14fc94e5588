import CourierCore
import CourierPKI
import Foundation
import X509

extension ProviderIdentity {
    /// The identity a provider certificate gives: its topics, its team, and
    /// its bundle id (UID) as the default topic.
    static func certificate(_ record: CertificateRecord) throws -> (identity: ProviderIdentity, info: ProviderCertificateInfo) {
        let info = try ProviderCertificateInfo(certificate: Certificate(pemEncoded: record.pem))
        let identity = ProviderIdentity(name: "certificate \(record.serial)", teamID: info.teamID, topics: Set(info.topics.map(\.description)))
        return (identity, info)
    }
}

extension Reason {
    /// The binary API's status for a dispatcher rejection (docs/protocol.md).
    /// Nil: the binary API reports nothing (the notification counts as sent).
    var binaryStatus: BinaryStatus? {
        switch known {
        case .badDeviceToken, .deviceTokenNotForTopic, .topicDisallowed: .invalidToken
        case .unregistered: nil
        case .internalServerError, .serviceUnavailable: .processingError
        case .shutdown: .shutdown
        case .payloadEmpty: .missingPayload
        case .payloadTooLarge: .invalidPayloadSize
        case .badPriority: .protocolError
        default: .unknown  // TooManyRequests among them: the binary API has no status for it
        }
    }
}
