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

@Suite(.timeLimit(.minutes(1))) struct PendingBatchTests {
    private func pending(device: UInt64, app: String, _ n: Int) -> PendingNotification {
        PendingNotification(
            deviceID: device, bundleID: app, environment: .production,
            notification: PushNotification(
                id: UUID(), token: [UInt8(n)], topic: app, payload: Array("{\"n\":\(n)}".utf8),
                expiration: Date(timeIntervalSince1970: 9_999_999_999), priority: .immediate),
            acceptedAt: Date(timeIntervalSince1970: Double(n)))
    }

    /// A batch with several notifications for one (device, app) behaves as
    /// if they were stored one after the other: each replaces the one
    /// before it (the first the one already stored) and the last is held.
    @Test func aBatchIsStoredAsIfOneAfterTheOther() async throws {
        let store = try await SQLiteStore.inMemory(logger: Logger(label: "test"))
        let a0 = pending(device: 1, app: "com.example.a", 0)
        _ = try await store.storePending([a0])
        let (a1, b1, a2, a3) = (pending(device: 1, app: "com.example.a", 1), pending(device: 1, app: "com.example.b", 2),
                                pending(device: 1, app: "com.example.a", 3), pending(device: 1, app: "com.example.a", 4))
        let replaced = try await Dispatcher.storeLatest([a1, b1, a2, a3], in: store)
        #expect(replaced.map { $0?.notification.id } == [a0.notification.id, nil, a1.notification.id, a2.notification.id])
        let held = try await store.pending(deviceID: 1, environment: .production)
        #expect(Set(held.map(\.notification.id)) == [b1.notification.id, a3.notification.id])
        #expect(held.first { $0.bundleID == "com.example.a" }?.notification.payload == a3.notification.payload)
        try await store.close()
    }
}
