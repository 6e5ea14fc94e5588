import CourierCore
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// Broadcast channels: subscribed and unsubscribed, and subscribed again
/// on each new connection.
extension DeviceClient {
    /// Subscribes the app to a broadcast channel of it, as a Live Activity
    /// started with `.channel(id)` does: every broadcast on the channel
    /// reaches this device (`DeviceNotification.channelID` names it), and
    /// a channel that keeps its most recent broadcast sends it now. The
    /// subscription is made again on every reconnection, until
    /// `unsubscribe`.
    public func subscribe(_ bundleID: String, to channelID: String) async throws {
        let last = lastBroadcasts[channelID]
        let answer = try await request { .subscribe(bundleID: bundleID, requestID: $0, channelID: channelID, lastDeliveryID: last) }
        guard case .channelAck(_, let status) = answer, status == .ok else {
            if case .channelAck(_, .unknownApp) = answer { throw DeviceClientError.unknownApp(bundleID) }
            if case .channelAck(_, .tooManySubscriptions) = answer { throw DeviceClientError.tooManySubscriptions }
            throw DeviceClientError.unknownChannel(channelID)
        }
        subscriptions[channelID] = bundleID
    }

    /// Ends the subscription: broadcasts on the channel no longer reach this device.
    public func unsubscribe(_ bundleID: String, from channelID: String) async throws {
        subscriptions[channelID] = nil
        lastBroadcasts[channelID] = nil
        let answer = try await request { .unsubscribe(bundleID: bundleID, requestID: $0, channelID: channelID) }
        guard case .channelAck(_, .ok) = answer else { throw DeviceClientError.unknownChannel(channelID) }
    }

    /// The channels subscribed to now (channel id → app).
    public var subscribedChannels: [String: String] { subscriptions }

    /// Sends the subscriptions again on a new connection; their answers
    /// come to `handle`.
    func subscribeAgain(_ outbound: NIOAsyncChannelOutboundWriter<DeviceMessage>) async throws {
        resubscribing = [:]
        var messages: [DeviceMessage] = []
        for (channelID, bundleID) in subscriptions.sorted(by: { $0.key < $1.key }) {
            let requestID = nextRequestID
            nextRequestID &+= 1
            resubscribing[requestID] = channelID
            messages.append(.subscribe(bundleID: bundleID, requestID: requestID, channelID: channelID, lastDeliveryID: lastBroadcasts[channelID]))
        }
        guard !messages.isEmpty else { return }
        try await outbound.write(contentsOf: messages)
    }

    /// The token held for an app (after `register`).
    public func token(for bundleID: String) -> [UInt8]? {
        credentials.token(for: bundleID, in: environment)
    }
}
