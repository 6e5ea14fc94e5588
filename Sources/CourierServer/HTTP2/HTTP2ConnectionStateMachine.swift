import CourierCore
import NIOHTTP2

/// The life of one HTTP/2 provider connection (docs/protocol.md §2), without
/// I/O, in the manner of swift-nio-http2's connection management state
/// machine: the connection's handler (`HTTP2ProviderHandler`) tells it what
/// happened and does what it answers. A connection asked to end (shutdown,
/// idle, a revoked key or certificate, no credentials in time) answers new
/// requests with the reason, lets those in flight finish, then says GOAWAY
/// with the reason and closes. A token connection starts with one stream
/// and gets `http2.maxConcurrentStreams` once a valid token is seen.
struct HTTP2ConnectionStateMachine {
    enum State: Equatable {
        case open
        /// Asked to end: requests in flight finish, new ones are refused.
        case closing(Reason)
        /// GOAWAY sent: the connection closes once it is written.
        case goneAway(Reason)
    }

    private(set) var state = State.open
    /// Requests handed to the gateway and not answered yet.
    private(set) var inFlight = 0
    /// The highest stream a request began on (GOAWAY's last stream).
    private(set) var lastStream = HTTP2StreamID.rootStream
    private var streamLimitLifted = false

    /// A request began on `stream`.
    mutating func requestBegan(on stream: HTTP2StreamID) {
        lastStream = max(lastStream, stream)
    }

    enum RequestAction: Equatable {
        /// Hand it to the gateway.
        case dispatch
        /// Answer with this reason at once: the connection is ending.
        case refuse(Reason)
    }

    /// A request was received whole.
    func requestComplete() -> RequestAction {
        switch state {
        case .open:
            return .dispatch
        case .closing(let reason), .goneAway(let reason):
            // An idle connection's late request is told the server is shutting it down.
            return .refuse(reason == .idleTimeout ? .shutdown : reason)
        }
    }

    /// A request went to the gateway: in flight until `answered`.
    mutating func dispatched() {
        inFlight += 1
    }

    struct AnswerAction: Equatable {
        /// Send SETTINGS with the full stream limit (the first valid token).
        var liftStreamLimit: Bool
        /// Then GOAWAY with this reason: the last request in flight of a
        /// connection that is ending was answered.
        var goAway: Reason?
    }

    /// The gateway answered a dispatched request; `validToken` is true
    /// when the answer found the connection's first valid provider token.
    mutating func answered(firstValidToken validToken: Bool) -> AnswerAction {
        inFlight -= 1
        let lift = validToken && !streamLimitLifted
        if lift { streamLimitLifted = true }
        return AnswerAction(liftStreamLimit: lift, goAway: goAwayIfIdle())
    }

    /// The connection is asked to end with `reason` (the first reason
    /// stands). Returns the GOAWAY to send now, when nothing is in flight.
    mutating func goAwayRequested(_ reason: Reason) -> Reason? {
        if case .open = state { state = .closing(reason) }
        return goAwayIfIdle()
    }

    private mutating func goAwayIfIdle() -> Reason? {
        guard case .closing(let reason) = state, inFlight == 0 else { return nil }
        state = .goneAway(reason)
        return reason
    }
}
