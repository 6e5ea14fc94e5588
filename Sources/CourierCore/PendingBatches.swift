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
/// (`Store.storePending`): which of them are written and what each
/// replaced. Each notification's slot is hashed once, when the batch is
/// made, and again only to look up what the store held for it.
public struct PendingBatch: Sendable {
    public let notifications: [PendingNotification]
    /// Only the last of each slot: the ones before it are replaced in the
    /// same transaction, so only it is written.
    public let written: [PendingNotification]
    /// For each notification, the batch's one before it in its slot.
    private let earlier: [Int?]

    public init(_ notifications: [PendingNotification]) {
        self.notifications = notifications
        guard notifications.count > 1 else {
            written = notifications
            earlier = notifications.map { _ in nil }
            return
        }
        var last: [PendingSlot: Int] = [:]
        var earlier: [Int?] = []
        var replaced = [Bool](repeating: false, count: notifications.count)
        earlier.reserveCapacity(notifications.count)
        for (index, pending) in notifications.enumerated() {
            let before = last.updateValue(index, forKey: PendingSlot(pending))
            if let before { replaced[before] = true }
            earlier.append(before)
        }
        self.earlier = earlier
        written = notifications.indices.compactMap { replaced[$0] ? nil : notifications[$0] }
    }

    /// What each notification replaced, in order: the one the store held
    /// for its slot (`held`), or else the batch's one before it.
    public func replacements(of held: [PendingSlot: PendingNotification]) -> [PendingNotification?] {
        notifications.indices.map { index in
            if let before = earlier[index] { return notifications[before] }
            return held.isEmpty ? nil : held[PendingSlot(notifications[index])]
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
