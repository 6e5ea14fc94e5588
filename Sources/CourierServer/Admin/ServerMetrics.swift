import CoreMetrics
import CourierCore
import Foundation
import Prometheus
import Synchronization

/// Courier's metrics (docs/admin-api.md, "Metrics"), made through
/// swift-metrics on a Prometheus registry of their own — one per running
/// service, so that servers in one process (the tests) count apart — and
/// scraped at `/metrics` in Prometheus's text format.
///
/// Counters move where things happen: a notification's outcome where the
/// interface answers it, the delivery log's events as they are written,
/// handshake failures as TLS reports them. What is a state — open
/// connections, devices online, the backlog, what is held — is read at
/// each scrape (`ServerMetrics.Snapshot`).
public final class ServerMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory
    /// By interface and environment (`slot`).
    private let received: [CoreMetrics.Counter]
    private let accepted: [CoreMetrics.Counter]
    /// By interface, environment and reason; made as reasons are met.
    private let rejected = LabelledCounters<RejectionKey>(limit: reasonLimit)
    /// The delivery log's events that are counted, by kind (`DeliveryEvent.Kind.code`).
    private let events: [CoreMetrics.Counter?]
    /// By listener ("binary.production", ...): a closed set.
    private let handshakeFailures = LabelledCounters<String>()
    private let deliveryLatency: CoreMetrics.Timer
    private let commitLatency: [StoreWriter: CoreMetrics.Timer]
    /// Pushes handed over to other nodes, directly and through the store.
    private let handedDirectly: CoreMetrics.Counter
    private let handedThroughStore: CoreMetrics.Counter
    private let inboxSharedDirectly: CoreMetrics.Counter
    private let inboxSharedThroughStore: CoreMetrics.Counter

    /// The store's writers whose commits are timed.
    enum StoreWriter: String, CaseIterable {
        /// Notifications held for offline devices.
        case pending
        /// Held notifications the devices acknowledged, removed.
        case acknowledgements
        /// Feedback entries: pushes that met an app removed from its device.
        case feedback
    }

    private struct RejectionKey: Hashable {
        var slot: Int
        var reason: String
    }

    /// Reasons are a closed set (docs/protocol.md); past this many label
    /// sets a reason counts as "other", so that no input can grow the page.
    static let reasonLimit = 256

    /// The delivery log's events that have a counter, and its name.
    static let countedEvents: [DeliveryEvent.Kind: String] = [
        .stored: "courier_notifications_stored_total", .replaced: "courier_notifications_replaced_total",
        .coalesced: "courier_notifications_coalesced_total", .delivered: "courier_notifications_delivered_total",
        .acknowledged: "courier_notifications_acknowledged_total", .expired: "courier_notifications_expired_total",
        .throttled: "courier_notifications_throttled_total", .discarded: "courier_notifications_discarded_total",
        .faultInjected: "courier_faults_injected_total", .deliveredToVirtualDevice: "courier_notifications_delivered_virtual_total",
    ]

    /// From half a millisecond (a device online) to an hour (held for one offline).
    static let deliveryBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .microseconds(2_500), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5), .seconds(30), .seconds(60), .seconds(300),
        .seconds(3_600),
    ]
    static let commitBuckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2_500), .milliseconds(5), .milliseconds(10),
        .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
    ]

    public init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = [
            "courier_delivery_latency_seconds": Self.deliveryBuckets, "courier_store_commit_seconds": Self.commitBuckets,
        ]
        self.factory = factory
        var received: [CoreMetrics.Counter] = []
        var accepted: [CoreMetrics.Counter] = []
        for interface in ProviderInterface.allCases {
            for environment in Environment.allCases {
                let labels = [("interface", interface.rawValue), ("environment", environment.rawValue)]
                received.append(CoreMetrics.Counter(label: "courier_notifications_received_total", dimensions: labels, factory: factory))
                accepted.append(CoreMetrics.Counter(label: "courier_notifications_accepted_total", dimensions: labels, factory: factory))
            }
        }
        self.received = received
        self.accepted = accepted
        var events = [CoreMetrics.Counter?](repeating: nil, count: DeliveryEvent.Kind.allCases.count)
        for (kind, name) in Self.countedEvents { events[Int(kind.code)] = CoreMetrics.Counter(label: name, factory: factory) }
        self.events = events
        deliveryLatency = CoreMetrics.Timer(label: "courier_delivery_latency_seconds", factory: factory)
        var commitLatency: [StoreWriter: CoreMetrics.Timer] = [:]
        for writer in StoreWriter.allCases {
            commitLatency[writer] = CoreMetrics.Timer(label: "courier_store_commit_seconds", dimensions: [("writer", writer.rawValue)], factory: factory)
        }
        self.commitLatency = commitLatency
        handedDirectly = CoreMetrics.Counter(label: "courier_handovers_total", dimensions: [("path", "direct")], factory: factory)
        handedThroughStore = CoreMetrics.Counter(label: "courier_handovers_total", dimensions: [("path", "store")], factory: factory)
        inboxSharedDirectly = CoreMetrics.Counter(label: "courier_inbox_shared_total", dimensions: [("path", "direct")], factory: factory)
        inboxSharedThroughStore = CoreMetrics.Counter(label: "courier_inbox_shared_total", dimensions: [("path", "store")], factory: factory)
    }

    private static func slot(_ interface: ProviderInterface, _ environment: Environment) -> Int {
        (interface == .http2 ? 0 : 1) * 2 + (environment == .production ? 0 : 1)
    }

    // MARK: Counting

    /// A notification an interface answered, with its answer.
    func received(_ interface: ProviderInterface, _ environment: Environment, _ outcome: InboxOutcome) {
        let slot = Self.slot(interface, environment)
        received[slot].increment()
        switch outcome {
        case .accepted:
            accepted[slot].increment()
        case .refused(_, let reason):
            rejectedCounter(slot, interface, environment, reason).increment()
        }
    }

    /// `count` notifications an interface accepted (the binary API counts a read's at once).
    func accepted(_ interface: ProviderInterface, _ environment: Environment, count: Int) {
        let slot = Self.slot(interface, environment)
        received[slot].increment(by: Int64(count))
        accepted[slot].increment(by: Int64(count))
    }

    private func rejectedCounter(_ slot: Int, _ interface: ProviderInterface, _ environment: Environment, _ reason: String) -> CoreMetrics.Counter {
        rejected.counter(RejectionKey(slot: slot, reason: reason), overflow: { RejectionKey(slot: $0.slot, reason: "other") }) { [factory] key in
            CoreMetrics.Counter(
                label: "courier_notifications_rejected_total",
                dimensions: [("interface", interface.rawValue), ("environment", environment.rawValue), ("reason", key.reason)], factory: factory)
        }
    }

    /// Events the delivery log wrote (a batch of up to thousands: counted
    /// in an array, then one increment a kind).
    func logged(_ written: some Sequence<DeliveryEvent>) {
        var counts = [Int64](repeating: 0, count: events.count)
        // By the kind's code (a switch, not a hash, per event).
        for event in written { counts[Int(event.kind.code)] += 1 }
        for (index, count) in counts.enumerated() where count > 0 { events[index]?.increment(by: count) }
    }

    /// A notification reached its device's connection `after` its acceptance.
    func delivered(after: TimeInterval) {
        deliveryLatency.recordNanoseconds(Int64(max(0, after) * 1e9))
    }

    /// Pushes handed over to other nodes: `direct` to the node, `store` through the store's queue.
    func handedOver(direct: Int, store: Int) {
        if direct > 0 { handedDirectly.increment(by: direct) }
        if store > 0 { handedThroughStore.increment(by: store) }
    }

    /// Inbox entries given to other nodes: `direct` on a link (one per node
    /// that acknowledged it), `store` written to the store for the others.
    func inboxShared(direct: Int, store: Int) {
        if direct > 0 { inboxSharedDirectly.increment(by: direct) }
        if store > 0 { inboxSharedThroughStore.increment(by: store) }
    }

    /// One commit of a store writer.
    func committed(_ writer: StoreWriter, in duration: Duration) {
        commitLatency[writer]?.recordNanoseconds(Int64(duration / .nanoseconds(1)))
    }

    /// A TLS handshake failed on `listener` ("binary.production", ...).
    func handshakeFailed(_ interface: String, _ environment: Environment) {
        handshakeFailures.counter(interface + "." + environment.rawValue) { [factory] _ in
            CoreMetrics.Counter(
                label: "courier_tls_handshake_failures_total", dimensions: [("interface", interface), ("environment", environment.rawValue)],
                factory: factory)
        }.increment()
    }

    // MARK: Scraping

    /// What is read at each scrape.
    struct Snapshot {
        /// Open connections by listener, "http2.production" and so on.
        var connections: [String: Int]
        var devicesOnline: Int
        var deliveryLogBacklog: Int
        /// Nil when the store did not answer.
        var notificationsHeld: Int?
        var inboxEntries: Int
    }

    /// The page `/metrics` serves: the state in `snapshot`, then every metric.
    func page(_ snapshot: Snapshot) -> [UInt8] {
        for (listener, open) in snapshot.connections {
            let parts = listener.split(separator: ".", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            gauge("courier_connections_open", [("interface", parts[0]), ("environment", parts[1])]).record(open)
        }
        gauge("courier_devices_online").record(snapshot.devicesOnline)
        gauge("courier_delivery_log_backlog").record(snapshot.deliveryLogBacklog)
        if let held = snapshot.notificationsHeld { gauge("courier_notifications_held").record(held) }
        gauge("courier_inbox_entries").record(snapshot.inboxEntries)
        return registry.emitToBuffer()
    }

    /// The registry keeps one gauge a name and label set: this finds it again.
    private func gauge(_ name: String, _ labels: [(String, String)] = []) -> CoreMetrics.Gauge {
        CoreMetrics.Gauge(label: name, dimensions: labels, factory: factory)
    }
}

/// Counters made the first time their labels (`Key`) are met. Past
/// `limit` label sets a new key counts under `overflow(key)`, so that no
/// input can grow the page without bound.
final class LabelledCounters<Key: Hashable & Sendable>: Sendable {
    private let counters = Mutex<[Key: CoreMetrics.Counter]>([:])
    private let limit: Int

    init(limit: Int = .max) {
        self.limit = limit
    }

    func counter(_ key: Key, overflow: (Key) -> Key = { $0 }, make: (Key) -> CoreMetrics.Counter) -> CoreMetrics.Counter {
        counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let key = counters.count >= limit ? overflow(key) : key
            if let counter = counters[key] { return counter }
            let counter = make(key)
            counters[key] = counter
            return counter
        }
    }
}
