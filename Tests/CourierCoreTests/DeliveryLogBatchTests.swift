import CourierCore
import Foundation
import Testing

@Suite struct DeliveryLogBatchTests {
    private func at(_ millis: Int64) -> Date { Date(timeIntervalSince1970: Double(millis) / 1000) }
    private let app = "com.example.app"

    /// The log's backlog holds up to `highWater` events: the app an event
    /// carries (a number, no reference to count) fits in bytes it had to
    /// spare.
    @Test func anEventIsSixtyFourBytes() {
        #expect(MemoryLayout<DeliveryEvent>.size == 64)
        #expect(MemoryLayout<AppNumber>.size == 4)
    }

    @Test func eventsComeBackAsTheyWent() throws {
        let id = UUID()
        let events = [
            DeliveryEvent(notificationID: id, bundleID: app, kind: .accepted, at: at(1_700_000_000_123)),
            DeliveryEvent(notificationID: id, bundleID: app, kind: .rejected, at: at(1_700_000_000_124), detail: "BadDeviceToken"),
            DeliveryEvent(notificationID: UUID(), bundleID: "com.example.other", kind: .coalesced, at: at(0), detail: "by é—ü"),
            DeliveryEvent(notificationID: id, bundleID: nil, kind: .expired, at: at(-5), detail: ""),
            DeliveryEvent(notificationID: id, bundleID: app, kind: .delivered, at: at(-4)),
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
            DeliveryEvent(notificationID: UUID(), bundleID: app, kind: .rejected, at: at(1), detail: long),
            DeliveryEvent(notificationID: UUID(), bundleID: app, kind: .accepted, at: at(2)),
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
        let batch = DeliveryLogBatch(members.map { DeliveryEvent(notificationID: $0, bundleID: app, kind: .accepted, at: at(0)) })
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
        let batch = DeliveryLogBatch(ids.map { DeliveryEvent(notificationID: $0, bundleID: app, kind: .accepted, at: at(0)) })
        #expect(Hex.encode(batch.filter) == "a6500b8050c8142e0413162c00f0022391cb24f0d811241146604188024025d8")
        // 13 events made 192 bits before.
        let earlier = try #require(Hex.decode("86fb6e0c0859203875c213b8d2d02587807105c05020367b"))
        #expect(earlier.count * 8 == 192)
        #expect(ids.allSatisfy { DeliveryLogBatch.filter(earlier, mayContain: $0) })
        #expect(ids.allSatisfy { DeliveryLogBatch.filter(batch.filter, mayContain: $0) })
    }

    @Test func aDamagedBatchIsAnErrorNotACrash() throws {
        let packed = DeliveryLogBatch([DeliveryEvent(notificationID: UUID(), bundleID: nil, kind: .delivered, at: at(1), detail: "x")])
        for cut in 2..<packed.events.count {
            #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: Array(packed.events.prefix(cut))).decoded() }
        }
        var unknownVersion = packed.events
        unknownVersion[0] = 99
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: unknownVersion).decoded() }
        // Version, time, one event, one detail ("x"), no app, then the event: its id, its time's difference, its kind.
        let kindOffset = 1 + 8 + 1 + 1 + 1 + 1 + 1 + 16 + 1
        #expect(packed.events[kindOffset] == 4)  // delivered
        var unknownKind = packed.events
        unknownKind[kindOffset] = UInt8(DeliveryEvent.Kind.allCases.count)  // one past the last kind
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: unknownKind).decoded() }
        var unknownDetail = packed.events
        unknownDetail[kindOffset + 1] = 2
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: unknownDetail).decoded() }
        var unknownApp = packed.events
        unknownApp[kindOffset + 2] = 1
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: unknownApp).decoded() }
        var tooManyDetails = packed.events
        tooManyDetails[1 + 8 + 1] = 0x7F
        var tooManyEvents = packed.events
        tooManyEvents[1 + 8] = 2
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: tooManyEvents).decoded() }
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: packed.events + [0]).decoded() }
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: tooManyDetails).decoded() }
        var overlong = packed.events
        overlong.replaceSubrange((kindOffset - 1)...(kindOffset - 1), with: [UInt8](repeating: 0xFF, count: 11))
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: overlong).decoded() }
        var unknownKindVersion1 = version1([DeliveryEvent(notificationID: UUID(), bundleID: nil, kind: .delivered, at: at(1), detail: "x")])
        unknownKindVersion1[1 + 16 + 8 + 1] = UInt8(ascii: "X")
        #expect(throws: StoreError.self) { try DeliveryLogBatch(filter: packed.filter, events: unknownKindVersion1).decoded() }
        #expect(DeliveryLogBatch.filter([], mayContain: UUID()) == false)
    }

    /// Batches as version 1 wrote them, from the format's description:
    /// per event the id, the time in milliseconds (Int64, big-endian), the
    /// kind's length and name, the detail's length (UInt16, 0xFFFF for none)
    /// and bytes.
    private func version1(_ events: [DeliveryEvent]) -> [UInt8] {
        var bytes: [UInt8] = [1]
        func bigEndian<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.bigEndian) { bytes += $0 } }
        for event in events {
            withUnsafeBytes(of: event.notificationID.uuid) { bytes += $0 }
            bigEndian(Int64((event.at.timeIntervalSince1970 * 1000).rounded()))
            bytes.append(UInt8(event.kind.rawValue.utf8.count))
            bytes += event.kind.rawValue.utf8
            if let detail = event.detail {
                bigEndian(UInt16(detail.utf8.count))
                bytes += detail.utf8
            } else {
                bigEndian(UInt16.max)
            }
        }
        return bytes
    }

    /// Batches written before version 2 read as they did.
    @Test func version1BatchesStillRead() throws {
        let events = [
            DeliveryEvent(notificationID: UUID(), bundleID: nil, kind: .accepted, at: at(1_700_000_000_123)),
            DeliveryEvent(notificationID: UUID(), bundleID: nil, kind: .expired, at: at(1_700_000_000_124), detail: "device offline and expiration 0"),
            DeliveryEvent(notificationID: UUID(), bundleID: nil, kind: .discarded, at: at(-5), detail: ""),
        ]
        #expect(try DeliveryLogBatch(filter: [], events: version1(events)).decoded() == events)
    }

    /// Version 2's bytes, as it wrote them (pinned when it was the form
    /// written), still read: its events have no app. Three events, one
    /// detail; two events 3 ms apart sharing one detail, then one 2 ms
    /// earlier than the one before it with none.
    @Test func version2BatchesStillRead() throws {
        let first = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
        let second = UUID(uuid: (17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32))
        var bytes: [UInt8] = [2, 0, 0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 3, 1, 8] + Array("BadTopic".utf8)
        bytes += (1...16).map(UInt8.init) + [0, 8, 1]
        bytes += (17...32).map(UInt8.init) + [6, 8, 1]  // +3 ms: zigzag 6
        bytes += (1...16).map(UInt8.init) + [3, 5, 0]  // -2 ms: zigzag 3
        #expect(
            try DeliveryLogBatch(filter: [], events: bytes).decoded() == [
                DeliveryEvent(notificationID: first, bundleID: nil, kind: .rejected, at: at(0x0102_0304_0506), detail: "BadTopic"),
                DeliveryEvent(notificationID: second, bundleID: nil, kind: .rejected, at: at(0x0102_0304_0509), detail: "BadTopic"),
                DeliveryEvent(notificationID: first, bundleID: nil, kind: .acknowledged, at: at(0x0102_0304_0507)),
            ])
    }

    /// Version 3's bytes, pinned: batches are stored, so the form must not
    /// drift. Version 2's three events, the first two of app "a.b", the
    /// third of "c", then a fourth of no app.
    @Test func version3BytesArePinned() throws {
        let first = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
        let second = UUID(uuid: (17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32))
        let events = [
            DeliveryEvent(notificationID: first, bundleID: "a.b", kind: .rejected, at: at(0x0102_0304_0506), detail: "BadTopic"),
            DeliveryEvent(notificationID: second, bundleID: "a.b", kind: .rejected, at: at(0x0102_0304_0509), detail: "BadTopic"),
            DeliveryEvent(notificationID: first, bundleID: "c", kind: .acknowledged, at: at(0x0102_0304_0507)),
            DeliveryEvent(notificationID: second, bundleID: nil, kind: .accepted, at: at(0x0102_0304_0507)),
        ]
        let batch = DeliveryLogBatch(events)
        var expected: [UInt8] = [3, 0, 0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 4, 1, 8] + Array("BadTopic".utf8)
        expected += [2, 3] + Array("a.b".utf8) + [1] + Array("c".utf8)
        expected += (1...16).map(UInt8.init) + [0, 8, 1, 1]
        expected += (17...32).map(UInt8.init) + [6, 8, 1, 1]  // +3 ms: zigzag 6
        expected += (1...16).map(UInt8.init) + [3, 5, 0, 2]  // -2 ms: zigzag 3
        expected += (17...32).map(UInt8.init) + [0, 0, 0, 0]
        #expect(batch.events == expected)
        #expect(try batch.decoded() == events)
    }

    /// Many events with a few details and one app take about 20 bytes each; distinct
    /// details (a replacement's "by <id>"), times far apart and out of
    /// order, and a long detail all come back.
    @Test func version3IsSmallAndKeepsEverything() throws {
        let now: Int64 = 1_790_000_000_000
        let reasons = ["device offline and expiration 0", "BadDeviceToken", "Unregistered"]
        var common: [DeliveryEvent] = []
        for index in 0..<1_000 {
            let kind: DeliveryEvent.Kind = index % 2 == 0 ? .accepted : .expired
            let detail: String? = index % 2 == 0 ? nil : reasons[index % 3]
            common.append(DeliveryEvent(notificationID: UUID(), bundleID: app, kind: kind, at: at(now + Int64(index / 10)), detail: detail))
        }
        let small = DeliveryLogBatch(common)
        let limit: Int = 1 + 8 + 2 + 64 + 2 + app.utf8.count + 1_000 * 20
        #expect(small.events.count < limit)
        #expect(try small.decoded() == common)

        var varied: [DeliveryEvent] = []
        let kinds = DeliveryEvent.Kind.allCases
        for index in 0..<300 {
            let millis: Int64 = index % 7 == 0 ? -Int64(index) * 86_400_000 : now - Int64(index % 5)
            let detail: String = index % 3 == 0 ? "by \(UUID())" : reasons[index % 2]
            varied.append(DeliveryEvent(notificationID: UUID(), bundleID: app, kind: kinds[index % kinds.count], at: at(millis), detail: detail))
        }
        varied.append(DeliveryEvent(notificationID: UUID(), bundleID: app, kind: .rejected, at: at(.max / 2), detail: String(repeating: "é", count: 40_000)))
        let decoded = try DeliveryLogBatch(varied).decoded()
        #expect(decoded.dropLast() == varied.dropLast())
        #expect(decoded.last?.detail?.utf8.count == 65_534 || decoded.last?.detail?.utf8.count == 65_533)
        #expect(decoded.last?.at == varied.last?.at)
    }
}
