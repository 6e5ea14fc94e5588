import CourierCore
import CourierWire
import NIOCore
import NIOHPACK
import NIOHTTP2
import Testing

@testable import CourierServer

/// The HTTP/2 connection's life (docs/protocol.md §2), without a socket:
/// requests in flight finish before GOAWAY, late ones are refused with the
/// reason, the stream limit is lifted once.
@Suite struct HTTP2ConnectionStateMachineTests {
    @Test func anIdleConnectionGoesAwayAtOnce() {
        var machine = HTTP2ConnectionStateMachine()
        machine.requestBegan(on: HTTP2StreamID(5))
        #expect(machine.goAwayRequested(.shutdown) == .shutdown)
        #expect(machine.state == .goneAway(.shutdown))
        #expect(machine.lastStream == HTTP2StreamID(5))
    }

    @Test func requestsInFlightFinishBeforeGoAway() {
        var machine = HTTP2ConnectionStateMachine()
        for stream in [1, 3] {
            machine.requestBegan(on: HTTP2StreamID(stream))
            #expect(machine.requestComplete() == .dispatch)
            machine.dispatched()
        }
        #expect(machine.goAwayRequested(.shutdown) == nil, "two requests in flight")
        #expect(machine.state == .closing(.shutdown))
        // A request that arrives now is refused with the reason, never dispatched.
        machine.requestBegan(on: HTTP2StreamID(7))
        #expect(machine.requestComplete() == .refuse(.shutdown))
        #expect(machine.answered(firstValidToken: false) == .init(liftStreamLimit: false, goAway: nil))
        #expect(machine.answered(firstValidToken: false) == .init(liftStreamLimit: false, goAway: .shutdown))
        #expect(machine.inFlight == 0)
        #expect(machine.lastStream == HTTP2StreamID(7))
        // GOAWAY is sent once.
        #expect(machine.goAwayRequested(.shutdown) == nil)
    }

    @Test func theFirstReasonStands() {
        var machine = HTTP2ConnectionStateMachine()
        machine.dispatched()
        #expect(machine.goAwayRequested(.badCertificate) == nil)
        #expect(machine.goAwayRequested(.shutdown) == nil)
        #expect(machine.requestComplete() == .refuse(.badCertificate))
        #expect(machine.answered(firstValidToken: false).goAway == .badCertificate)
    }

    @Test func anIdleConnectionsLateRequestIsToldShutdown() {
        var machine = HTTP2ConnectionStateMachine()
        machine.dispatched()
        _ = machine.goAwayRequested(.idleTimeout)
        #expect(machine.requestComplete() == .refuse(.shutdown))
        #expect(machine.answered(firstValidToken: false).goAway == .idleTimeout)
    }

    @Test func theStreamLimitIsLiftedOnce() {
        var machine = HTTP2ConnectionStateMachine()
        machine.dispatched()
        machine.dispatched()
        #expect(machine.answered(firstValidToken: true).liftStreamLimit)
        #expect(!machine.answered(firstValidToken: true).liftStreamLimit)
    }
}

/// A busy connection's requests wait for one task at a time, which takes
/// them in arrival order until none is left.
@Suite struct HTTP2DecisionQueueTests {
    func request(_ stream: Int) throws -> HTTP2Request {
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":path", value: "/3/device/00")
        let head = try #require(try? HTTP2RequestHead.parse(headers).get())
        return HTTP2Request(streamID: HTTP2StreamID(stream), head: head, headers: headers, body: ByteBuffer())
    }

    @Test func oneTaskTakesEverythingInOrderThenEnds() throws {
        let queue = HTTP2DecisionQueue()
        #expect(queue.add([try request(1), try request(3)]))
        // A task is deciding: later requests join its queue, no second task.
        #expect(!queue.add([try request(5)]))
        #expect(queue.next()?.map(\.streamID) == [1, 3, 5].map { HTTP2StreamID($0) })
        #expect(!queue.add([try request(7)]))
        #expect(queue.next()?.map(\.streamID) == [HTTP2StreamID(7)])
        // Nothing left: the task ends, and the next request starts another.
        #expect(queue.next() == nil)
        #expect(queue.add([try request(9)]))
    }
}
