import CourierCore
import CourierSQLite
@testable import CourierServer
import Foundation
import Logging
import Testing

@Suite(.timeLimit(.minutes(1))) struct DeliveryLogTests {
    /// A store that cannot keep up holds the producers back instead of the
    /// backlog growing: `waitForRoom` returns only once a write has made room.
    @Test func aSlowStoreHoldsProducersBack() async throws {
        let store = FaultyStore(try await SQLiteStore.inMemory(logger: Logger(label: "test")))
        let writer = DeliveryLogWriter(store: store, logger: Logger(label: "test"), highWater: 10)
        let running = Task { try await writer.run() }
        let id = UUID()
        func events(_ count: Int) -> [DeliveryEvent] {
            (0..<count).map { _ in DeliveryEvent(notificationID: id, kind: .accepted, at: Date(timeIntervalSince1970: 1)) }
        }
        store.logGate.close()
        writer.append(events(3))
        // The writer takes the first batch and is held in the store.
        await store.logGate.waitUntilHolding()
        writer.append(events(12))
        let producer = Task { await writer.waitForRoom() }
        while writer.waitingProducers == 0 { await Task.yield() }
        // The producer is parked while the store has written nothing.
        #expect(store.logGate.waiting == 1)
        store.logGate.open()
        await producer.value
        #expect(writer.waitingProducers == 0)
        await writer.flush()
        #expect(try await store.deliveryEvents(notificationID: id).count == 15)
        running.cancel()
    }
}
