import Foundation
import Synchronization

/// Wall-clock time as Courier sees it. Injected everywhere a rule depends
/// on time (expiry, token age, budgets) so that tests never sleep.
public protocol WallClock: Sendable {
    func now() -> Date
}

/// The real clock.
public struct SystemWallClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that moves only when told to; for tests and simulations.
public final class ManualWallClock: WallClock {
    private let current: Mutex<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_750_000_000)) {
        self.current = Mutex(start)
    }

    public func now() -> Date { current.withLock { $0 } }

    public func advance(by seconds: TimeInterval) {
        current.withLock { $0 = $0.addingTimeInterval(seconds) }
    }

    public func set(_ date: Date) {
        current.withLock { $0 = date }
    }
}
