import CourierCore
import CourierSQLite
@testable import CourierServer
import Foundation
import Logging
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(2))) struct DeliveryLogTests {
    /// A store that cannot keep up holds the producers back instead of the
    /// backlog growing: `waitForRoom` returns only once a write has made room.
    @Test func aSlowStoreHoldsProducersBack() async throws {
        let store = FaultyStore(try await SQLiteStore.inMemory(logger: Logger(label: "test")))
        let writer = DeliveryLogWriter(store: store, logger: Logger(label: "test"), highWater: 10)
        let running = Task { try await writer.run() }
        let id = UUID()
        func events(_ count: Int) -> [DeliveryEvent] {
            (0..<count).map { _ in DeliveryEvent(notificationID: id, bundleID: "com.example.app", kind: .accepted, at: Date(timeIntervalSince1970: 1)) }
        }
        store.logGate.close()
        writer.append(events(3))
        // The writer takes the first batch and is held in the store.
        await store.logGate.waitUntilHolding()
        writer.append(events(12))
        let producer = Task { await writer.waitForRoom() }
        try await yieldUntil { writer.waitingProducers > 0 }
        // The producer is parked while the store has written nothing.
        #expect(store.logGate.waiting == 1)
        store.logGate.open()
        await producer.value
        #expect(writer.waitingProducers == 0)
        await writer.flush()
        #expect(try await store.deliveryEvents(notificationID: id).count == 15)
        running.cancel()
    }

    /// At a low rate the writer lets events gather before it writes them,
    /// in one write; a batch's worth waiting is written without gathering.
    /// The gathering time is the injected sleep, held at a gate: nothing
    /// here waits for real time.
    @Test func eventsGatherForAMomentUnlessABatchIsWaiting() async throws {
        let id = UUID()
        func events(_ count: Int) -> [DeliveryEvent] {
            (0..<count).map { _ in DeliveryEvent(notificationID: id, bundleID: "com.example.app", kind: .accepted, at: Date(timeIntervalSince1970: 1)) }
        }
        /// A writer whose gathering waits at `gathering`, and the times it asked for.
        func writer(_ store: FaultyStore, _ gathering: Gate) -> (DeliveryLogWriter, SleepLog) {
            let asked = SleepLog()
            let writer = DeliveryLogWriter(
                store: store, logger: Logger(label: "test"), gathering: .milliseconds(10),
                sleep: { duration in
                    asked.durations.withLock { $0.append(duration) }
                    await gathering.pass()
                })
            return (writer, asked)
        }

        // A few events: the writer gathers, and writes what came meanwhile with them.
        let store = FaultyStore(try await SQLiteStore.inMemory(logger: Logger(label: "test")))
        let gathering = Gate()
        gathering.close()
        let (slow, asked) = writer(store, gathering)
        let running = Task { try await slow.run() }
        slow.append(events(3))
        await gathering.waitUntilHolding()
        #expect(asked.durations.withLock { $0 } == [.milliseconds(10)])
        slow.append(events(2))
        #expect(store.logWrites.isEmpty)  // nothing written while gathering
        gathering.open()
        try await yieldUntil { !store.logWrites.isEmpty }
        #expect(store.logWrites == [5])  // all five in one write
        running.cancel()

        // A batch's worth at once: written without gathering.
        let busyStore = FaultyStore(try await SQLiteStore.inMemory(logger: Logger(label: "test")))
        let held = Gate()
        held.close()
        let (busy, busyAsked) = writer(busyStore, held)
        let busyRunning = Task { try await busy.run() }
        busy.append(events(DeliveryLogWriter.batch))
        try await yieldUntil { !busyStore.logWrites.isEmpty }
        #expect(busyStore.logWrites == [DeliveryLogWriter.batch])
        #expect(busyAsked.durations.withLock { $0 }.isEmpty)
        #expect(try await busyStore.deliveryEvents(notificationID: id).count == DeliveryLogWriter.batch)
        held.open()
        busyRunning.cancel()
    }
}

/// The sleeps a delivery-log writer asked for.
final class SleepLog: Sendable {
    let durations = Mutex<[Duration]>([])
}

/// Yields until `condition` holds; ends with an error when the test is
/// cancelled (its time limit), instead of spinning on.
func yieldUntil(_ condition: () -> Bool) async throws {
    while !condition() {
        try Task.checkCancellation()
        await Task.yield()
    }
}
