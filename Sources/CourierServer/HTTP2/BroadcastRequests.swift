import CourierCore
import CourierWire
import Foundation
import NIOCore
import NIOHPACK

/// The broadcast API (docs/protocol.md, "Broadcast channels"): channel
/// management on the channel port, broadcasts on the push port. Every
/// request needs the store, so each is answered as the listener's work.
extension HTTP2Gateway {
    /// Answers one request whose method and path were read: trust, the
    /// request id and channel id, the app (the provider's, with Live
    /// Activities), then the operation.
    /// `oversized`: the body went over the size limit and was not kept;
    /// the request is refused for it (`PayloadTooLarge`) once its trust and
    /// route are known, under its `apns-request-id`.
    func answer(
        _ head: HTTP2ChannelRequestHead, headers: HPACKHeaders, body: ByteBuffer, oversized: Bool = false, connection: HTTP2ConnectionHandle
    ) async -> HTTP2Answer {
        let requestID = head.requestID ?? UUID().lowercasedString
        var seen = Seen()
        seen.topic = head.bundleID
        var lift = false
        func done(_ answer: HTTP2Answer) -> HTTP2Answer {
            var answer = answer
            answer.apnsID = requestID
            answer.idHeader = HTTP2Answer.requestIDHeader
            answer.liftStreamLimit = lift
            answer.endsUpload = oversized
            return recorded(answer, headers, body, connection, seen)
        }
        func refused(_ reason: Reason) -> HTTP2Answer { done(.failure(reason, requestID: requestID)) }

        var provider: Provider
        switch await knownProvider(head.authorization, connection: connection, apnsID: requestID) {
        case .failure(let refusal): return done(refusal.answer)
        case .success(let found): provider = found
        }
        seen.identity = provider.identity
        lift = provider.first
        if let reason = head.checkCommon() { return refused(reason) }

        // The app's own topic, which the provider must be allowed (a kind's
        // topic is not an app: TopicDisallowed).
        let bundleID = head.bundleID
        guard HTTP2RequestHead.isTopic(bundleID), Topic(bundleID).kind == .app else { return refused(.topicDisallowed) }
        var grant = TopicGrant(bundleID, for: provider.identity)
        if !grant.allowed, let trust = provider.tokenTrust, let refreshed = await trust.refreshTopics(keys: keys) {
            provider.identity = refreshed
            seen.identity = refreshed
            grant = TopicGrant(bundleID, for: refreshed)
        }
        // Another team's app: TopicMismatch, for a token as for a certificate (Apple's broadcast reason table).
        guard grant.allowed else { return refused(.topicMismatch) }
        if oversized { return refused(.payloadTooLarge) }
        do {
            guard try await broadcasts.isEnabled(bundleID: bundleID) else { return refused(.featureNotEnabled) }
            switch head.operation {
            case .create:
                let policy: MessageStoragePolicy
                switch ChannelConfiguration.read(Array(buffer: body)) {
                case .failure(let reason): return refused(reason)
                case .success(let read): policy = read
                }
                guard let channel = try await broadcasts.create(bundleID: bundleID, environment: environment, policy: policy) else {
                    return refused(.cannotCreateChannelConfig)
                }
                logger.info("channel created", metadata: ["courier.topic": "\(bundleID)", "courier.channel": "\(channel.id)"])
                var answer = HTTP2Answer(status: 201, apnsID: requestID, body: nil)
                answer.channelID = channel.id
                return done(answer)
            case .read:
                guard let channel = try await broadcasts.channel(id: head.channelID ?? "", bundleID: bundleID, environment: environment) else {
                    return refused(.channelNotRegistered)
                }
                var answer = HTTP2Answer(status: 200, apnsID: requestID, body: ChannelConfiguration(messageStoragePolicy: channel.storagePolicy.rawValue).json)
                answer.channelID = channel.id
                return done(answer)
            case .delete:
                guard let channel = try await broadcasts.channel(id: head.channelID ?? "", bundleID: bundleID, environment: environment),
                    try await broadcasts.delete(channel)
                else { return refused(.channelNotRegistered) }
                logger.info("channel deleted", metadata: ["courier.topic": "\(bundleID)", "courier.channel": "\(channel.id)"])
                return done(HTTP2Answer(status: 204, apnsID: requestID, body: nil))
            case .list:
                let channels = try await broadcasts.channels(bundleID: bundleID, environment: environment)
                return done(HTTP2Answer(status: 200, apnsID: requestID, body: ChannelList(channels: channels.map(\.id)).json))
            case .broadcast:
                return done(try await broadcast(head, bundleID: bundleID, body: body, requestID: requestID, seen: &seen))
            }
        } catch {
            logger.error("store failed answering a broadcast API request", metadata: ["courier.error": "\(error)"])
            return refused(.internalServerError)
        }
    }

    /// `POST /4/broadcasts/apps/{bundleId}`: the header values, the channel,
    /// the payload, then the broadcast goes to the channel's subscribers.
    private func broadcast(_ head: HTTP2ChannelRequestHead, bundleID: String, body: ByteBuffer, requestID: String, seen: inout Seen) async throws
        -> HTTP2Answer
    {
        let fields: HTTP2ChannelRequestHead.BroadcastFields
        switch head.broadcastFields() {
        case .failure(let reason): return .failure(reason, requestID: requestID)
        case .success(let checked): fields = checked
        }
        guard let channel = try await broadcasts.channel(id: fields.channelID, bundleID: bundleID, environment: environment) else {
            return .failure(.channelNotRegistered, requestID: requestID)
        }
        // A channel that stores nothing takes only "now or never".
        let never = Date(timeIntervalSince1970: 0)
        if channel.storagePolicy == .noStorage, let expiration = fields.expiration, expiration != never {
            return .failure(.badExpirationDate, requestID: requestID)
        }
        let summary: PayloadSummary
        switch PayloadRules.check(body.readableBytesView, priority: fields.priority?.rawValue, channel: .broadcast, limits: configuration.limits.payload) {
        case .failure(.notJSONObject), .failure(.nullTerminated): return .failure(.badRequestPayload, requestID: requestID)
        case .failure(let error): return .failure(error.reason, requestID: requestID)
        case .success(let result): summary = result
        }
        // One request reaches every subscriber: a channel is rate-limited as a device token is.
        guard broadcasts.admit(channel) else { return .failure(.tooManyRequests, requestID: requestID) }
        // In the sandbox a random delivery id, as every notification there has.
        let notification = PushNotification(
            id: UUID(uuidString: requestID) ?? UUID(), token: [], topic: Topic(bundleID: bundleID, kind: .liveactivity).description,
            payload: Array(buffer: body), expiration: channel.storagePolicy == .noStorage ? never : fields.expiration,
            priority: fields.priority ?? (summary.isSilent ? .conservePower : .immediate), pushType: PushType.liveactivity.rawValue, in: environment)
        seen.payload = notification.payload
        let (sent, exists) = try await broadcasts.send(notification, on: channel)
        guard exists else { return .failure(.channelNotRegistered, requestID: requestID) }
        logger.debug("broadcast sent", metadata: ["courier.channel": "\(channel.id)", "courier.devices": "\(sent)"])
        // In the sandbox, `apns-unique-id` as a device push's 200 carries it.
        seen.uniqueID = notification.uniqueID
        return HTTP2Answer(status: 200, apnsID: requestID, body: nil)
    }
}
