import CourierWire
import Foundation

/// The protocol rules of one device connection, apart from I/O: which
/// message is allowed when, and what to do with it.
struct DeviceConnectionStateMachine {
    enum State {
        case awaitingConnect
        case connecting
        /// The ConnectAck went out: the device's session, and the
        /// generation its registrations are made in.
        case connected(DeviceSession, generation: UInt32)
        /// Nothing more is handled. The session, if the connection got
        /// one, until the dispatcher is told it is gone (`end`).
        case closed(DeviceSession?)
    }

    enum Action {
        case connect(tokens: [[UInt8]], generation: UInt32?)
        case requestToken(bundleID: String, requestID: UInt32, kind: AppTokenKind, session: DeviceSession, generation: UInt32)
        /// `activity`: a Live Activity ended, not the app removed.
        case unregister(bundleID: String, requestID: UInt32, activity: UInt32?, session: DeviceSession)
        case acknowledge(UInt8, deliveryID: UUID, session: DeviceSession)
        case filter([[UInt8]], session: DeviceSession)
        case subscribe(bundleID: String, requestID: UInt32, channelID: String, lastDeliveryID: UUID?, session: DeviceSession)
        case unsubscribe(bundleID: String, requestID: UInt32, channelID: String, session: DeviceSession)
        case keepAlive
        /// Send an Error frame and close.
        case fail(DeviceProtocolError)
    }

    private(set) var state: State = .awaitingConnect

    /// The session of a connection that got one and has not ended.
    var session: DeviceSession? {
        switch state {
        case .connected(let session, _): session
        case .closed(let session): session
        case .awaitingConnect, .connecting: nil
        }
    }

    mutating func receive(_ message: DeviceMessage) -> Action {
        switch (state, message) {
        case (.closed, _):
            return .fail(DeviceProtocolError(.malformedFrame, "the connection is closing"))
        case (.awaitingConnect, .connect(let version, let tokens, _, let generation)):
            guard version == DeviceMessage.version else {
                state = .closed(nil)
                return .fail(DeviceProtocolError(.unsupportedVersion, "version \(version); this server speaks \(DeviceMessage.version)"))
            }
            state = .connecting
            return .connect(tokens: tokens, generation: generation)
        case (.awaitingConnect, _), (.connecting, _):
            state = .closed(nil)
            return .fail(DeviceProtocolError(.notConnected, "send Connect first and wait for ConnectAck"))
        case (.connected(let session, _), .connect):
            state = .closed(session)
            return .fail(DeviceProtocolError(.malformedFrame, "Connect came twice"))
        case (.connected(let session, let generation), .appTokenRequest(let bundleID, let requestID, let kind)):
            return .requestToken(bundleID: bundleID, requestID: requestID, kind: kind, session: session, generation: generation)
        case (.connected(let session, _), .unregister(let bundleID, let requestID, let activity)):
            return .unregister(bundleID: bundleID, requestID: requestID, activity: activity, session: session)
        case (.connected(let session, _), .ack(let deliveryID, let status)):
            return .acknowledge(status, deliveryID: deliveryID, session: session)
        case (.connected(let session, _), .filter(let hashes)):
            return .filter(hashes, session: session)
        case (.connected(let session, _), .subscribe(let bundleID, let requestID, let channelID, let lastDeliveryID)):
            return .subscribe(bundleID: bundleID, requestID: requestID, channelID: channelID, lastDeliveryID: lastDeliveryID, session: session)
        case (.connected(let session, _), .unsubscribe(let bundleID, let requestID, let channelID)):
            return .unsubscribe(bundleID: bundleID, requestID: requestID, channelID: channelID, session: session)
        case (.connected, .keepAlive):
            return .keepAlive
        case (.connected(let session, _), _):
            state = .closed(session)
            return .fail(DeviceProtocolError(.unknownCommand, "a server-to-device command sent by the device"))
        }
    }

    /// The ConnectAck was sent: the connection is open for everything else.
    mutating func connectAccepted(_ session: DeviceSession, generation: UInt32) {
        if case .connecting = state { state = .connected(session, generation: generation) }
    }

    mutating func connectRefused() {
        state = .closed(nil)
    }

    /// The connection is gone: its session, once, for the dispatcher.
    mutating func end() -> DeviceSession? {
        defer { state = .closed(nil) }
        return session
    }
}
