import Foundation
import NIOCore

/// The CPUs this process may run on, as its affinity mask says (set by
/// `taskset`, `numactl`, a container's cpuset or systemd's `CPUAffinity=`).
public enum ProcessorAffinity {
    /// How many CPUs the process may run on; nil where the mask cannot be
    /// read (it is read from Linux's `/proc/self/status`).
    public static var count: Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        return count(status: status)
    }

    /// The CPUs of the `Cpus_allowed:` line of a `/proc/<pid>/status`
    /// text: a hexadecimal mask in comma-separated groups.
    public static func count(status: String) -> Int? {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed:") }) else { return nil }
        var count = 0
        for character in line.dropFirst("Cpus_allowed:".count) where character != "," && !character.isWhitespace {
            guard let digit = character.hexDigitValue else { return nil }
            count += digit.nonzeroBitCount
        }
        return count > 0 ? count : nil
    }

    /// Sizes NIO's shared event loops and blocking pool to the CPUs the
    /// process may run on, when that is fewer than NIO would take: NIO
    /// counts the machine's cores and cgroup limits, not the affinity, so a
    /// server pinned to one core ran two event loops (and two SQLite
    /// threads) on it, switching between them. NIO's own environment
    /// variables (`NIO_SINGLETON_GROUP_LOOP_COUNT`,
    /// `NIO_SINGLETON_BLOCKING_POOL_THREAD_COUNT`) still decide when set.
    ///
    /// Call it first thing, before anything uses NIO's shared groups.
    public static func fitSharedThreads() {
        guard let cpus = count, cpus < System.coreCount else { return }
        let environment = ProcessInfo.processInfo.environment
        if environment["NIO_SINGLETON_GROUP_LOOP_COUNT"] == nil {
            NIOSingletons.groupLoopCountSuggestion = cpus
        }
        if environment["NIO_SINGLETON_BLOCKING_POOL_THREAD_COUNT"] == nil {
            NIOSingletons.blockingPoolThreadCountSuggestion = cpus
        }
    }
}
