import CourierCore
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The delivery log's writer: events are appended in order under a lock
/// (cheap on the hot path) and written to the store in batches by a
/// background service. `flush()` returns once everything appended before
/// it is written. When the store falls behind, `waitForRoom()` holds the
/// producers (the provider interfaces stop reading) instead of letting the
/// backlog grow: back-pressure, not buffering.
///
/// Woken by an append, the writer first lets events gather for a moment
/// (`gathering`) unless a batch's worth already waits: at a low rate a
/// write per notification cost more CPU than the notification itself.
final class DeliveryLogWriter: Service, Sendable {
    private struct Backlog {
        var events: [DeliveryEvent] = []
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Events waiting to be written above which producers wait.
    let highWater: Int
    /// How long the writer lets events gather before it writes them.
    let gathering: Duration
    /// Events that are written at once, without gathering more.
    static let batch = 1_000
    private let store: any DeliveryLogStore
    private let logger: Logger
    /// Counts the events written.
    let metrics: ServerMetrics
    private let buffer = Mutex(Backlog())
    private let gate = SerialGate()
    private let wake: AsyncStream<Void>.Continuation
    private let wakeups: AsyncStream<Void>
    /// Waits out the gathering time; returns early when cancelled.
    private let sleep: @Sendable (Duration) async -> Void

    init(
        store: any DeliveryLogStore, logger: Logger, metrics: ServerMetrics = ServerMetrics(), highWater: Int = 50_000, gathering: Duration = .milliseconds(10),
        sleep: @escaping @Sendable (Duration) async -> Void = { try? await Task.sleep(for: $0) }
    ) {
        self.highWater = highWater
        self.gathering = gathering
        self.sleep = sleep
        self.store = store
        self.logger = logger
        self.metrics = metrics
        (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func append(_ events: some Collection<DeliveryEvent>) {
        guard !events.isEmpty else { return }
        let wasEmpty = buffer.withLock { backlog in
            defer { backlog.events.append(contentsOf: events) }
            return backlog.events.isEmpty
        }
        // Only the first event of a backlog wakes the writer: it takes
        // everything appended until it writes, and a flush empties the
        // backlog, so the next append wakes it again.
        if wasEmpty { wake.yield() }
    }

    /// One event, without an array for it.
    func append(_ event: DeliveryEvent) {
        append(CollectionOfOne(event))
    }

    /// Events appended and not yet written.
    var backlog: Int { buffer.withLock { $0.events.count } }

    /// Producers waiting for room.
    var waitingProducers: Int { buffer.withLock { $0.waiters.count } }

    /// The backlog is under `highWater`.
    var hasRoom: Bool { buffer.withLock { $0.events.count < highWater } }

    /// Returns at once while the backlog is under `highWater`; otherwise
    /// once a write has brought it down.
    func waitForRoom() async {
        guard !hasRoom else { return }
        await withCheckedContinuation { continuation in
            let room = buffer.withLock { backlog -> Bool in
                if backlog.events.count < highWater { return true }
                backlog.waiters.append(continuation)
                return false
            }
            if room { continuation.resume() }
        }
    }

    func flush() async {
        try? await gate.run {
            // The waiters go once this batch is written, if what came meanwhile leaves room.
            let events = self.buffer.withLock { backlog -> [DeliveryEvent] in
                defer { backlog.events.removeAll(keepingCapacity: true) }
                return backlog.events
            }
            guard !events.isEmpty else { return }
            // An event with an alias (a sandbox notification's unique id)
            // is written under it too, as an event of its own.
            let written = events.contains(where: { $0.alias != nil }) ? events + events.compactMap(\.underAlias) : events
            do {
                try await self.store.appendDeliveryEvents(written)
                // Counted once written: events a failed write dropped are not.
                self.metrics.logged(events)
            } catch {
                self.logger.error("delivery log write failed", metadata: ["courier.events": "\(events.count)", "courier.error": "\(error)"])
            }
            let waiters = self.buffer.withLock { backlog -> [CheckedContinuation<Void, Never>] in
                guard backlog.events.count < self.highWater else { return [] }
                defer { backlog.waiters = [] }
                return backlog.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            for await _ in wakeups {
                if buffer.withLock({ $0.events.count < Self.batch }) {
                    // Cancelled, it writes at once.
                    await sleep(gathering)
                }
                await flush()
            }
        } onGracefulShutdown: {
            self.wake.finish()
        }
        await flush()
    }
}
