import Foundation
import Synchronization

/// The number of notifications held in the store, for `/metrics`: counted
/// at most once a second, whoever asks and however often. The endpoint
/// takes no token, so a caller that scrapes in a loop gets the last count
/// rather than a `count(*)` of the store per request; callers that arrive
/// while a count runs wait for it instead of starting their own.
final class HeldCount: Sendable {
    /// How long a count is given out again.
    static let freshFor: TimeInterval = 1

    private struct State {
        var last: (value: Int?, at: Date)?
        var counting = false
        var waiters: [CheckedContinuation<Int?, Never>] = []
    }

    private let state = Mutex(State())
    private let count: @Sendable () async throws -> Int

    init(count: @escaping @Sendable () async throws -> Int) {
        self.count = count
    }

    /// The count, nil if the store could not count.
    func value(now: Date) async -> Int? {
        enum Step {
            case known(Int?)
            case wait
            case count
        }
        let step = state.withLock { state -> Step in
            if let last = state.last, now.timeIntervalSince(last.at) < Self.freshFor, now >= last.at { return .known(last.value) }
            if state.counting { return .wait }
            state.counting = true
            return .count
        }
        switch step {
        case .known(let value):
            return value
        case .wait:
            return await withCheckedContinuation { continuation in
                let done = state.withLock { state -> Int?? in
                    // The count ended between the two locks: its value stands.
                    guard state.counting else { return .some(state.last?.value) }
                    state.waiters.append(continuation)
                    return .none
                }
                if let done { continuation.resume(returning: done) }
            }
        case .count:
            let value = try? await count()
            let waiters = state.withLock { state in
                state.last = (value, now)
                state.counting = false
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: value) }
            return value
        }
    }
}
