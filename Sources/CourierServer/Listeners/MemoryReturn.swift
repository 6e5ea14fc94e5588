import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Gives memory back to the system after a flood of connections: freed
/// memory stays with the allocator (glibc keeps it for the next
/// allocation), so the process would keep a flood's peak for ever. The
/// sweep asks once per tick; once the open connections fell by at least
/// half of `floodSize` from their peak since memory was last given back,
/// and stopped falling (a tick without fewer of them: the connections'
/// memory is freed by then, not only half of it), the allocator's free
/// memory goes back to the system (`malloc_trim`). It does so too once
/// they rose by as many from their low and stopped rising: what the handshakes
/// and Connects of a storm of new connections (devices reconnecting after
/// a restart) freed is not kept beside the connections that stay.
final class MemoryReturn: Sendable {
    static let floodSize = 1_000
    static let followUpTicks = 5

    private struct State {
        var listeners: [ListenerGuard] = []
        /// Open connections at their highest and lowest since memory was last given back.
        var peak = 0
        var low = 0
        /// Open connections at the previous tick.
        var last = 0
        /// Ticks until memory is given back once more after a flood.
        var followUp: Int?
        var returned = 0
    }

    private let state = Mutex(State())
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    func watch(_ listener: ListenerGuard) {
        state.withLock { $0.listeners.append(listener) }
    }

    /// Times memory was given back, for tests and logs.
    var returned: Int { state.withLock { $0.returned } }

    /// Called by the sweep; true when it gave memory back.
    @discardableResult
    func afterFlood() -> Bool {
        let due = state.withLock { state -> Bool in
            let open = state.listeners.reduce(0) { $0 + $1.open }
            defer { state.last = open }
            state.peak = max(state.peak, open)
            state.low = min(state.low, open)
            if let ticks = state.followUp {
                // Some of a flood's memory is freed only after its
                // connections are counted out (their channels' last
                // references go later): given back again a few ticks on.
                state.followUp = ticks > 1 ? ticks - 1 : nil
                return ticks == 1
            }
            let fell = state.peak - open >= Self.floodSize / 2 && open >= state.last
            let rose = open - state.low >= Self.floodSize / 2 && open <= state.last
            guard fell || rose else { return false }
            state.peak = open
            state.low = open
            state.returned += 1
            state.followUp = Self.followUpTicks
            return true
        }
        guard due else { return false }
        let before = Self.residentBytes
        _ = Self.trim?(0)
        let after = Self.residentBytes
        logger.info(
            "gave freed memory back to the system after a flood of connections",
            metadata: ["courier.residentBefore": "\(before ?? 0)", "courier.residentAfter": "\(after ?? 0)"])
        return true
    }

    /// The process's resident memory (bytes), from /proc.
    static var residentBytes: Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kib = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return nil }
        return kib * 1024
    }

    /// Gives the allocator's free memory back to the system now (after a
    /// large read whose rows are gone: `VirtualDevices.load`).
    static func giveBack() {
        _ = trim?(0)
    }

    /// glibc's `malloc_trim`, which its module map does not export (nil
    /// with another C library: nothing to give back then).
    private static let trim: (@convention(c) (Int) -> Int32)? = {
        #if canImport(Glibc)
        guard let symbol = dlsym(nil, "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        #else
        return nil
        #endif
    }()
}
