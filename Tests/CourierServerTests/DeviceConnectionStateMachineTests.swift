import CourierCore
import CourierWire
import Foundation
import Testing

@testable import CourierServer

/// The device connection's protocol rules, without a socket: which message
/// is allowed when, and the session the connected state carries.
@Suite struct DeviceConnectionStateMachineTests {
    /// A link that goes nowhere: the machine never uses it.
    final class NoLink: DeviceLink {
        func deliver(_ notification: PushNotification, channelID: String?) -> String? { nil }
        func sentEverythingHeld() {}
        func close() {}
    }

    let session = DeviceSession(environment: .production, deviceID: 7, link: NoLink())
    let connect = DeviceMessage.connect(version: DeviceMessage.version, tokens: [], keepAlive: nil, generation: 3)

    func code(_ action: DeviceConnectionStateMachine.Action) -> DeviceProtocolCode? {
        if case .fail(let error) = action { return error.code }
        return nil
    }

    @Test func beforeConnectAndWhileConnectingEverythingElseIsRefused() {
        var machine = DeviceConnectionStateMachine()
        #expect(code(machine.receive(.keepAlive)) == .notConnected)
        #expect(code(machine.receive(.keepAlive)) == .malformedFrame, "closed after the first refusal")

        var connecting = DeviceConnectionStateMachine()
        guard case .connect(let tokens, let generation) = connecting.receive(connect) else {
            Issue.record("Connect should be taken")
            return
        }
        #expect(tokens.isEmpty && generation == 3)
        #expect(code(connecting.receive(.appTokenRequest(bundleID: "com.example.demo", requestID: 1))) == .notConnected)
        #expect(connecting.end() == nil, "no session was made")
    }

    @Test func anotherVersionIsRefused() {
        var machine = DeviceConnectionStateMachine()
        let other = DeviceMessage.connect(version: DeviceMessage.version &+ 1, tokens: [], keepAlive: nil, generation: nil)
        #expect(code(machine.receive(other)) == .unsupportedVersion)
    }

    @Test func theConnectedStateCarriesTheSessionAndGeneration() {
        var machine = DeviceConnectionStateMachine()
        _ = machine.receive(connect)
        machine.connectAccepted(session, generation: 9)
        guard case .requestToken(let bundleID, let requestID, .device, let given, let generation) = machine.receive(
            .appTokenRequest(bundleID: "com.example.demo", requestID: 4))
        else {
            Issue.record("a token request should be taken once connected")
            return
        }
        #expect(bundleID == "com.example.demo" && requestID == 4 && given === session && generation == 9)
        let id = UUID()
        guard case .acknowledge(1, let deliveryID, let acknowledging) = machine.receive(.ack(deliveryID: id, status: 1)) else {
            Issue.record("an Ack should be taken once connected")
            return
        }
        #expect(deliveryID == id && acknowledging === session)
        guard case .keepAlive = machine.receive(.keepAlive) else {
            Issue.record("a KeepAlive should be taken")
            return
        }
    }

    /// A protocol error after Connect closes the conversation but keeps
    /// the session until the connection ends, so that the dispatcher hears
    /// the device went offline exactly once.
    @Test func aSessionOutlivesAnErrorAndEndsOnce() {
        var machine = DeviceConnectionStateMachine()
        _ = machine.receive(connect)
        machine.connectAccepted(session, generation: 1)
        #expect(code(machine.receive(connect)) == .malformedFrame, "Connect twice")
        #expect(code(machine.receive(.keepAlive)) == .malformedFrame, "nothing more is handled")
        #expect(machine.session === session)
        #expect(machine.end() === session)
        #expect(machine.end() == nil)
    }

    @Test func aRefusedConnectHasNoSession() {
        var machine = DeviceConnectionStateMachine()
        _ = machine.receive(connect)
        machine.connectRefused()
        machine.connectAccepted(session, generation: 1)  // too late: refused stays refused
        #expect(machine.session == nil)
        #expect(code(machine.receive(.keepAlive)) == .malformedFrame)
    }
}
