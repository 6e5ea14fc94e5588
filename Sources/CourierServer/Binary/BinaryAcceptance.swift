import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

/// What one binary connection accepted: which notification was accepted
/// last (status 10 names it) and whether the connection has answered.
///
/// A notification counts as accepted once it and every one before it are
/// durable. Commits finish in the order they were queued, so the admitted
/// notifications form segments, each opened by one that waits for its
/// commit and followed by ones with nothing to commit; a commit that
/// finishes closes its segment.
final class BinaryAcceptance: Sendable {
    private struct Segment {
        /// The notification whose commit opens the segment.
        var first: UInt32
        /// The last notification admitted in it.
        var last: UInt32
    }

    private struct State {
        var lastAccepted: UInt32 = 0
        var answered = false
        var commitFailed = false
        /// Segments whose commit is still running, oldest first.
        var segments = CircularBuffer<Segment>()
    }

    private let state = Mutex(State())

    var lastAccepted: UInt32 { state.withLock { $0.lastAccepted } }

    /// True the first time: only one error packet per connection.
    func answer() -> Bool {
        state.withLock { state in
            defer { state.answered = true }
            return !state.answered
        }
    }

    /// Records an admitted notification with nothing to commit.
    func admitted(_ identifier: UInt32) {
        state.withLock { state in
            if state.segments.isEmpty {
                state.lastAccepted = identifier
            } else {
                state.segments[state.segments.index(before: state.segments.endIndex)].last = identifier
            }
        }
    }

    /// Records an admitted notification whose commit is `durable`.
    /// `failed` runs (once, with the identifier of the notification whose
    /// commit failed) if a commit fails.
    func admitted(_ identifier: UInt32, committing durable: Pending<Void>, failed: @escaping @Sendable (UInt32) -> Void) {
        state.withLock { $0.segments.append(Segment(first: identifier, last: identifier)) }
        durable.whenResolved { result in
            let failure = self.state.withLock { state -> UInt32? in
                let segment = state.segments.removeFirst()
                guard !state.commitFailed else { return nil }
                if case .failure = result {
                    state.commitFailed = true
                    return segment.first
                }
                state.lastAccepted = segment.last
                return nil
            }
            if let failure { failed(failure) }
        }
    }
}
