import NIOCore

/// The frames one device connection may send beside its Acks — KeepAlive,
/// token requests, Subscribe, Filter, Unregister — as a bucket of
/// `capacity` that refills at `perSecond`: room for what a device needs
/// at once (its apps' tokens and its channels' subscriptions when it
/// connects, at most 1,000 subscriptions) and for a keepalive every few
/// seconds, not for a flood. A device that sends more gets the Error
/// `tooManyFrames` and is closed (docs/device-protocol.md), so one device
/// cannot take the event loop's time from the others' delivery.
struct DeviceFrameBudget {
    static let capacity = 2_000
    static let perSecond = 20

    private var available = Double(Self.capacity)
    private var refilled: NIODeadline?

    /// Takes one frame from the budget at `now`; false when it is spent.
    mutating func take(at now: NIODeadline) -> Bool {
        if let refilled {
            let seconds = Double((now - refilled).nanoseconds) / 1e9
            available = min(Double(Self.capacity), available + seconds * Double(Self.perSecond))
        }
        refilled = now
        guard available >= 1 else { return false }
        available -= 1
        return true
    }
}
