import CourierCore
import Foundation

/// What the interfaces and the admin API ask of the dispatcher besides
/// notifications (`admit`) and devices (`Dispatcher+Devices`): nothing
/// outside Delivery reaches the dispatcher's parts (its registrations,
/// sessions, channels, log, cluster); the application, which builds them,
/// hands a part to whoever needs it as its own (the channel port's
/// `Broadcasts`, everyone's `ServerMetrics`). `ArchitectureTests` holds
/// the rule.
extension Dispatcher {
    /// Devices connected to this node.
    var devicesOnline: Int { sessions.online }

    /// This node's connected devices, longest connected first, at most `limit`.
    func connectedDevices(limit: Int) -> [DeviceSession] { sessions.sessions(limit: limit) }

    /// Delivery-log events not written yet.
    var deliveryLogBacklog: Int { log.backlog }

    /// This node's id among several sharing a PostgreSQL store; nil alone.
    var node: String? { cluster?.node }

    /// A Live Activity token for a device's app (the app registered first
    /// if it is not); nil for an app that does not exist.
    func issueLiveActivityToken(
        deviceID: UInt64, generation: UInt32, bundleID: String, environment: Environment, pushToStart: Bool
    ) async throws -> (token: [UInt8], activity: UInt32)? {
        try await registrations.issueLiveActivityToken(
            deviceID: deviceID, generation: generation, bundleID: bundleID, environment: environment, pushToStart: pushToStart)
    }

    /// A device's subscription to one of its app's channels, and the
    /// channel's stored broadcast to send after the answer.
    func subscribe(
        _ session: DeviceSession, bundleID: String, channelID: String, lastDeliveryID: UUID?
    ) async throws -> (Broadcasts.Outcome, Broadcasts.Replay?) {
        try await broadcasts.subscribe(session, bundleID: bundleID, channelID: channelID, lastDeliveryID: lastDeliveryID)
    }

    func unsubscribe(_ session: DeviceSession, bundleID: String, channelID: String) -> Broadcasts.Outcome {
        broadcasts.unsubscribe(session, bundleID: bundleID, channelID: channelID)
    }

    /// Reads every app's virtual tokens from the store (at start).
    func loadVirtualDevices() async throws {
        try await virtuals.load()
    }
}
