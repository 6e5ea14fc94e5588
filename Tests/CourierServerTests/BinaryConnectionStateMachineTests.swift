import CourierCore
import Foundation
import Testing

@testable import CourierServer

/// The binary connection's protocol rules (docs/protocol.md §1), without a
/// socket: strictly in order, a waiting notification holds back frames and
/// reads, the first bad one ends the counting and is answered after the
/// commits before it, status 10 on shutdown.
@Suite struct BinaryConnectionStateMachineTests {
    let grant = TopicGrant("com.example.demo", for: ProviderIdentity(name: "test", teamID: nil, topics: ["com.example.demo"]))

    func admitting() -> BinaryConnectionStateMachine {
        var machine = BinaryConnectionStateMachine()
        #expect(machine.handshakeCompleted(grant) == .admit)
        return machine
    }

    @Test func framesWaitForTheHandshake() {
        var machine = BinaryConnectionStateMachine()
        #expect(machine.admitting == nil)
        #expect(!machine.isOver)
        #expect(machine.handshakeCompleted(grant) == .admit)
        #expect(machine.admitting === grant)
    }

    @Test func aCertificateWithoutATopicIsClosedAtTheHandshake() {
        var machine = BinaryConnectionStateMachine()
        #expect(machine.handshakeCompleted(nil) == .close)
        #expect(machine.isOver)
        #expect(machine.admitting == nil)
    }

    @Test func aWaitingNotificationHoldsBackFramesAndReads() {
        var machine = admitting()
        #expect(machine.readRequested() == .read)
        machine.waitForDispatcher()
        #expect(machine.admitting == nil, "the frames after it wait undecoded")
        #expect(!machine.isOver)
        #expect(machine.readRequested() == .hold)
        #expect(machine.dispatcherDecided() == .settle(read: true))
        #expect(machine.admitting === grant)
        // The held read was handed back once: the next wait starts afresh.
        machine.waitForDispatcher()
        #expect(machine.dispatcherDecided() == .settle(read: false))
    }

    @Test func aDecisionAfterTheConnectionEndedIsDropped() {
        var machine = admitting()
        machine.waitForDispatcher()
        machine.closed()
        #expect(machine.dispatcherDecided() == .drop)
        #expect(machine.isOver)
    }

    @Test func aRefusalWithNothingCommittingIsAnsweredAtOnce() {
        var machine = admitting()
        guard case .answerNow = machine.refused() else {
            Issue.record("expected an answer now")
            return
        }
        #expect(machine.isOver)
        #expect(machine.admitting == nil, "nothing after the first bad notification counts")
    }

    @Test func aRefusalWaitsForTheLastCommitBeforeIt() {
        var machine = admitting()
        let first = Pending<Void>()
        let last = Pending<Void>()
        machine.admitted(committing: first)
        machine.admitted(committing: last)
        guard case .answerAfter(let awaited) = machine.refused() else {
            Issue.record("expected the answer to wait for the last commit")
            return
        }
        #expect(awaited === last)
    }

    @Test func aFailedCommitEndsTheCounting() {
        var machine = admitting()
        machine.commitFailed()
        #expect(machine.isOver)
        #expect(machine.readRequested() == .read, "reads go on: what comes is discarded until the close")
    }

    @Test func shutdownClosesAHandshakeAndAnswersStatus10Otherwise() {
        var handshaking = BinaryConnectionStateMachine()
        #expect(handshaking.shuttingDown() == .close)
        #expect(handshaking.handshakeCompleted(grant) == .close, "a handshake that ends after the shutdown is closed")

        var open = admitting()
        #expect(open.shuttingDown() == .answerShutdown)
        #expect(open.isOver)

        // After a refusal (its answer still waiting for a commit) shutdown
        // still answers: whichever comes first is the one error response.
        var refused = admitting()
        refused.admitted(committing: Pending<Void>())
        _ = refused.refused()
        #expect(refused.shuttingDown() == .answerShutdown)
    }
}
