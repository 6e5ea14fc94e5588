import Foundation
import NIOCore
import Synchronization

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

/// Device certificates whose connection was closed for `tooManyFrames`,
/// each until its cooldown ends: a device that reconnects meanwhile is
/// answered its Connect with the Error `tooManyFrames` (when it may come
/// back) and closed, and its address is counted a failed authentication,
/// as a failed handshake is (`connections.maxFailedAuthenticationsPerAddress`:
/// past it, its reconnections are refused before their TLS handshake). So
/// a flooding device gets one budget of frames per cooldown, not one per
/// connection it can open.
final class DeviceFrameCooldowns: Sendable {
    /// Seconds a certificate closed for `tooManyFrames` is refused.
    static let seconds: TimeInterval = 60
    /// Certificates remembered at most (the table is pruned, then emptied, at this bound).
    static let bound = 10_000

    private let until = Mutex<[CertificateConnections.Key: Date]>([:])

    /// The certificate's connection was closed for too many frames at `now`.
    func start(_ certificate: CertificateConnections.Key, now: Date) {
        until.withLock { until in
            if until.count >= Self.bound {
                until = until.filter { $0.value > now }
                if until.count >= Self.bound { until.removeAll(keepingCapacity: true) }
            }
            until[certificate] = now.addingTimeInterval(Self.seconds)
        }
    }

    /// Seconds left of the certificate's cooldown at `now`; nil when none runs.
    func remaining(_ certificate: CertificateConnections.Key, now: Date) -> TimeInterval? {
        until.withLock { until in
            guard let end = until[certificate] else { return nil }
            guard end > now else {
                until[certificate] = nil
                return nil
            }
            return end.timeIntervalSince(now)
        }
    }
}
