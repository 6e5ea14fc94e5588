/// Where a pending notification is held: one per (device, app, environment).
public struct PendingSlot: Hashable, Comparable, Sendable {
    public var deviceID: UInt64
    public var bundleID: String
    public var environment: Environment

    public init(deviceID: UInt64, bundleID: String, environment: Environment) {
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.environment = environment
    }

    public init(_ pending: PendingNotification) {
        self.init(deviceID: pending.deviceID, bundleID: pending.bundleID, environment: pending.environment)
    }

    public init(_ reference: PendingReference) {
        self.init(deviceID: reference.deviceID, bundleID: reference.bundleID, environment: reference.environment)
    }

    public static func < (lhs: PendingSlot, rhs: PendingSlot) -> Bool {
        (lhs.deviceID, lhs.bundleID, lhs.environment.rawValue) < (rhs.deviceID, rhs.bundleID, rhs.environment.rawValue)
    }
}

/// A batch of notifications to hold, as both stores write it
/// (`Store.storePending`).
extension Array where Element == PendingNotification {
    /// Only the last of each slot: the ones before it are replaced in the
    /// same transaction, so only it is written.
    public var lastOfEachSlot: [PendingNotification] {
        var last: [PendingSlot: Int] = [:]
        for (index, pending) in enumerated() { last[PendingSlot(pending)] = index }
        return indices.filter { last[PendingSlot(self[$0])] == $0 }.map { self[$0] }
    }

    /// What each notification of the batch replaced, in order: the one the
    /// store held for its slot (`held`), then the batch's earlier ones in turn.
    public func replacements(of held: [PendingSlot: PendingNotification]) -> [PendingNotification?] {
        var held = held
        return map { pending in
            let slot = PendingSlot(pending)
            defer { held[slot] = pending }
            return held[slot]
        }
    }
}

extension Array {
    /// The array in consecutive slices of at most `size` elements: a batch
    /// split into statements.
    public func slices(of size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
