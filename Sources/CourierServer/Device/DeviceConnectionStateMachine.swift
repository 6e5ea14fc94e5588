import CourierWire
import Foundation

/// The protocol rules of one device connection, apart from I/O: which
/// message is allowed when, and what to do with it.
struct DeviceConnectionStateMachine {
    enum State {
        case awaitingConnect
        case connecting
        case connected
        case closed
    }

    enum Action: Equatable {
        case connect(tokens: [[UInt8]], generation: UInt32?)
        case requestToken(bundleID: String, requestID: UInt32)
        case unregister(bundleID: String, requestID: UInt32)
        case acknowledge(UInt8, deliveryID: UUID)
        case filter([[UInt8]])
        case keepAlive
        /// Send an Error frame and close.
        case fail(DeviceProtocolError)
    }

    private(set) var state: State = .awaitingConnect

    mutating func receive(_ message: DeviceMessage) -> Action {
        switch (state, message) {
        case (.closed, _):
            return .fail(DeviceProtocolError(.malformedFrame, "the connection is closing"))
        case (.awaitingConnect, .connect(let version, let tokens, _, let generation)):
            guard version == DeviceMessage.version else {
                state = .closed
                return .fail(DeviceProtocolError(.unsupportedVersion, "version \(version); this server speaks \(DeviceMessage.version)"))
            }
            state = .connecting
            return .connect(tokens: tokens, generation: generation)
        case (.awaitingConnect, _), (.connecting, _):
            state = .closed
            return .fail(DeviceProtocolError(.notConnected, "send Connect first and wait for ConnectAck"))
        case (.connected, .connect):
            state = .closed
            return .fail(DeviceProtocolError(.malformedFrame, "Connect came twice"))
        case (.connected, .appTokenRequest(let bundleID, let requestID)):
            return .requestToken(bundleID: bundleID, requestID: requestID)
        case (.connected, .unregister(let bundleID, let requestID)):
            return .unregister(bundleID: bundleID, requestID: requestID)
        case (.connected, .ack(let deliveryID, let status)):
            return .acknowledge(status, deliveryID: deliveryID)
        case (.connected, .filter(let hashes)):
            return .filter(hashes)
        case (.connected, .keepAlive):
            return .keepAlive
        case (.connected, _):
            state = .closed
            return .fail(DeviceProtocolError(.unknownCommand, "a server-to-device command sent by the device"))
        }
    }

    /// The ConnectAck was sent: the connection is open for everything else.
    mutating func connectAccepted() {
        if state == .connecting { state = .connected }
    }

    mutating func connectRefused() {
        state = .closed
    }
}
