import Synchronization

/// An app (its bundle id) as a number of this process, so that what
/// carries it on a hot path — every delivery-log event — holds no reference
/// to count: a `String` there, retained and released as events are made,
/// copied to the log and written, cost the binary path 8 %
/// (docs/benchmarks.md). Numbers are given in the order apps are first met
/// (`init`: one lookup, under a lock, where an app first becomes known to
/// a path: a provider's identity, a held notification read back) and
/// never reused; the store keeps bundle ids, never numbers.
///
/// Only apps that exist are numbered (the topics of a provider's identity,
/// notifications held for an app), so the table is as large as the apps
/// a process has seen.
public struct AppNumber: Hashable, Sendable, CustomStringConvertible {
    private let rawValue: UInt32

    public init(_ bundleID: String) {
        rawValue = Self.table.withLock { $0.number(of: bundleID) }
    }

    private init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// No app: what an optional app is stored as where the optional's own
    /// byte would make a value larger (`DeliveryEvent`). Never an app's.
    static var none: AppNumber { AppNumber(rawValue: .max) }

    /// The app's bundle id.
    public var bundleID: String {
        precondition(self != .none, "the bundle id of no app")
        return Self.table.withLock { $0.names[Int(rawValue)] }
    }

    public var description: String { bundleID }

    private struct Table {
        var numbers: [String: UInt32] = [:]
        var names: [String] = []

        mutating func number(of bundleID: String) -> UInt32 {
            if let known = numbers[bundleID] { return known }
            // One short of the last number, which is `none`.
            precondition(names.count < Int(UInt32.max), "more apps than app numbers")
            let number = UInt32(names.count)
            names.append(bundleID)
            numbers[bundleID] = number
            return number
        }
    }

    private static let table = Mutex(Table())
}
