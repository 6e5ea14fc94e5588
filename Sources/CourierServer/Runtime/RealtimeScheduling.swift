#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOPosix

/// Runs event-loop threads under Linux's round-robin real-time policy
/// (`SCHED_RR`): a thread at any real-time priority runs before every
/// ordinary thread, whatever that thread's nice value, so a neighbour's
/// burst cannot hold the notifications of a busy event loop back.
///
/// Only the event loops are raised: the store's threads stay ordinary and
/// run whenever the event loops wait. An event loop that cannot keep up
/// still leaves them the core, because a delivery log that falls behind
/// stops the provider connections' reads (back-pressure) and the loop then
/// waits; Linux also keeps 5 % of each second for ordinary threads
/// (`kernel.sched_rt_runtime_us`).
public enum RealtimeScheduling {
    /// The priorities `SCHED_RR` takes on Linux.
    public static let priorities = 1...99

    /// Why a thread could not be given real-time priority.
    public struct Refused: Error, CustomStringConvertible {
        public var priority: Int
        public var errno: Int32

        public var description: String {
            let cause = errno == EPERM ? "not permitted (it needs CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least \(priority))" : String(cString: strerror(errno))
            return "cannot run the event loops at real-time priority \(priority): \(cause)"
        }
    }

    /// Puts every event loop of `group` under `SCHED_RR` at `priority`.
    /// Returns once all are; throws `Refused` if one could not be (those
    /// before it keep the priority).
    public static func apply(priority: Int, to group: any EventLoopGroup) throws {
        for loop in group.makeIterator() {
            try loop.submit { try raiseCurrentThread(to: priority) }.wait()
        }
    }

    /// `apply` to SwiftNIO's shared event loops, which every listener uses.
    public static func applyToSharedEventLoops(priority: Int) throws {
        try apply(priority: priority, to: MultiThreadedEventLoopGroup.singleton)
    }

    /// The calling thread's scheduling policy and priority.
    public static func currentThread() -> (policy: Int32, priority: Int32) {
        var policy: Int32 = 0
        var parameters = sched_param()
        _ = pthread_getschedparam(pthread_self(), &policy, &parameters)
        return (policy, parameters.sched_priority)
    }

    /// True when `currentThread()`'s policy is the one `apply` sets.
    public static func isRoundRobin(_ policy: Int32) -> Bool {
        policy == Int32(SCHED_RR)
    }

    private static func raiseCurrentThread(to priority: Int) throws {
        var parameters = sched_param()
        parameters.sched_priority = Int32(priority)
        let result = pthread_setschedparam(pthread_self(), Int32(SCHED_RR), &parameters)
        guard result == 0 else { throw Refused(priority: priority, errno: result) }
    }
}
