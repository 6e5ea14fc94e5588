import CourierCore
import CourierWire
import Foundation

/// The answer to one request.
struct HTTP2Answer: Sendable {
    var status: Int
    /// The request's id: its `apns-id`, or a broadcast API request's
    /// `apns-request-id` (`idHeader`).
    var apnsID: String
    var body: [UInt8]?
    /// The header that carries `apnsID`.
    var idHeader = HTTP2Answer.apnsIDHeader
    /// `apns-channel-id`: a channel management answer's channel.
    var channelID: String?
    /// The connection's first valid provider token: lift the one-stream limit.
    var liftStreamLimit = false
    /// Why it was refused.
    var reason: Reason?
    /// `apns-unique-id`: a sandbox notification's, once it was made (and
    /// logged), whatever the answer.
    var uniqueID: UUID?
    /// The request's inbox entry, recorded on the connection's event loop
    /// (one thread per connection takes the inbox's lock, not every task's).
    var entry: InboxRecord?
    /// The request's body is still coming and was refused for its size:
    /// once the answer is out, the stream is reset so the upload stops.
    var endsUpload = false

    static let apnsIDHeader = "apns-id"
    static let requestIDHeader = "apns-request-id"

    static func failure(_ reason: Reason, apnsID: String, timestamp: Date? = nil) -> HTTP2Answer {
        HTTP2Answer(status: reason.httpStatus, apnsID: apnsID, body: HTTP2ErrorBody(reason: reason, timestamp: timestamp).json, reason: reason)
    }

    /// A broadcast API request's refusal, under its `apns-request-id`.
    static func failure(_ reason: Reason, requestID: String) -> HTTP2Answer {
        var answer = failure(reason, apnsID: requestID)
        answer.idHeader = requestIDHeader
        return answer
    }
}
