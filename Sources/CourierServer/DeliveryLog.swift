import CourierCore
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The delivery log's writer: events are appended in order under a lock
/// (cheap on the hot path) and written to the store in batches by a
/// background service. `flush()` returns once everything appended before
/// it is written.
final class DeliveryLogWriter: Service, Sendable {
    private let store: any Store
    private let logger: Logger
    private let buffer = Mutex<[DeliveryEvent]>([])
    private let gate = SerialGate()
    private let wake: AsyncStream<Void>.Continuation
    private let wakeups: AsyncStream<Void>

    init(store: any Store, logger: Logger) {
        self.store = store
        self.logger = logger
        (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func append(_ events: [DeliveryEvent]) {
        guard !events.isEmpty else { return }
        buffer.withLock { $0.append(contentsOf: events) }
        wake.yield()
    }

    func flush() async {
        try? await gate.run {
            let events = self.buffer.withLock { buffer -> [DeliveryEvent] in
                defer { buffer.removeAll(keepingCapacity: true) }
                return buffer
            }
            guard !events.isEmpty else { return }
            do {
                try await self.store.appendDeliveryEvents(events)
            } catch {
                self.logger.error("delivery log write failed", metadata: ["courier.events": "\(events.count)", "courier.error": "\(error)"])
            }
        }
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            for await _ in wakeups {
                await flush()
            }
        } onGracefulShutdown: {
            self.wake.finish()
        }
        await flush()
    }
}
