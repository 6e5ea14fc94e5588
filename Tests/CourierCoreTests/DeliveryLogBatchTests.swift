import CourierCore
import Foundation
import Testing

@Suite struct DeliveryLogBatchTests {
    private func at(_ millis: Int64) -> Date { Date(timeIntervalSince1970: Double(millis) / 1000) }

    @Test func eventsComeBackAsTheyWent() throws {
        let id = UUID()
        let events = [
            DeliveryEvent(notificationID: id, kind: .accepted, at: at(1_700_000_000_123)),
            DeliveryEvent(notificationID: id, kind: .rejected, at: at(1_700_000_000_124), detail: "BadDeviceToken"),
            DeliveryEvent(notificationID: UUID(), kind: .coalesced, at: at(0), detail: "by é—ü"),
            DeliveryEvent(notificationID: id, kind: .expired, at: at(-5), detail: ""),
        ]
        #expect(try DeliveryLogBatch(events).decoded() == events)
        #expect(try DeliveryLogBatch([DeliveryEvent]()).decoded() == [])
    }

    /// A detail longer than its 16-bit length can say is cut, the events
    /// around it intact; events from a collection that is not an array
    /// pack the same.
    @Test func aLongDetailIsCutAndAnyCollectionPacks() throws {
        let long = String(repeating: "d", count: 70_000)
        let events = [
            DeliveryEvent(notificationID: UUID(), kind: .rejected, at: at(1), detail: long),
            DeliveryEvent(notificationID: UUID(), kind: .accepted, at: at(2)),
        ]
        let decoded = try DeliveryLogBatch(events).decoded()
        #expect(decoded.map(\.detail?.count) == [65_534, nil])
        #expect(decoded[1] == events[1])
        #expect(DeliveryLogBatch(events.lazy.reversed()) == DeliveryLogBatch(events.reversed()))
        #expect(try DeliveryLogBatch(CollectionOfOne(events[1])).decoded() == [events[1]])
    }

    /// Every id of the batch passes its filter; ids not in it rarely do
    /// (about 1 % by design), random ones and ids counted up alike.
    @Test(arguments: [false, true]) func theFilterHasNoFalseNegativesAndFewFalsePositives(counted: Bool) {
        func id(_ n: Int) -> UUID {
            guard counted else { return UUID() }
            return UUID(uuidString: String(format: "00000000-0000-0000-0000-%012x", n))!
        }
        let members = (0..<2000).map(id)
        let batch = DeliveryLogBatch(members.map { DeliveryEvent(notificationID: $0, kind: .accepted, at: at(0)) })
        #expect(members.allSatisfy { DeliveryLogBatch.filter(batch.filter, mayContain: $0) })
        let strangers = (2000..<22000).map(id)
        let falsePositives = strangers.filter { DeliveryLogBatch.filter(batch.filter, mayContain: $0) }.count
        #expect(falsePositives < strangers.count * 3 / 100, "\(falsePositives) false positives in \(strangers.count)")
    }

    /// The filter's bits are the same in every process (they are stored),
    /// and its size is a power of two; a filter of another size, as
    /// batches were written before, still finds its ids.
    @Test func filtersAreStableAndEarlierSizesStillRead() throws {
        let ids = (0..<13).map { UUID(uuidString: String(format: "00000000-0000-0000-0000-%012x", $0))! }
        let batch = DeliveryLogBatch(ids.map { DeliveryEvent(notificationID: $0, kind: .accepted, at: at(0)) })
        #expect(Hex.encode(batch.filter) == "a6500b8050c8142e0413162c00f0022391cb24f0d811241146604188024025d8")
        // 13 events made 192 bits before.
        let earlier = try #require(Hex.decode("86fb6e0c0859203875c213b8d2d02587807105c05020367b"))
        #expect(earlier.count * 8 == 192)
        #expect(ids.allSatisfy { DeliveryLogBatch.filter(earlier, mayContain: $0) })
        #expect(ids.allSatisfy { DeliveryLogBatch.filter(batch.filter, mayContain: $0) })
    }

    @Test func aDamagedBatchIsAnErrorNotACrash() throws {
        let packed = DeliveryLogBatch([DeliveryEvent(notificationID: UUID(), kind: .delivered, at: at(1), detail: "x")])
        for cut in 2..<packed.events.count {
            #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: Array(packed.events.prefix(cut))).decoded() }
        }
        var unknownVersion = packed.events
        unknownVersion[0] = 99
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: unknownVersion).decoded() }
        var unknownKind = packed.events
        unknownKind[1 + 16 + 8 + 1] = UInt8(ascii: "X")
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: unknownKind).decoded() }
        #expect(DeliveryLogBatch.filter([], mayContain: UUID()) == false)
    }
}
