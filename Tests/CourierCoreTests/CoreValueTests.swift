import CourierCore
import Foundation
import Testing

@Suite struct CoreValueTests {
    /// A notification made in an environment has the ids `identify(in:)`
    /// gives; its labels read and write as fields, and its JSON keeps them
    /// beside the others.
    @Test func aNotificationMadeInAnEnvironmentAndItsJSON() throws {
        for environment in [Environment.sandbox, .production] {
            let made = PushNotification(
                id: UUID(), token: [1, 2], topic: "com.example.a", payload: Array("{}".utf8), expiration: nil, priority: .immediate,
                collapseID: "c", pushType: "alert", in: environment)
            var identified = PushNotification(
                id: made.id, token: [1, 2], topic: "com.example.a", payload: Array("{}".utf8), expiration: nil, priority: .immediate,
                collapseID: "c", pushType: "alert", deliveryID: made.deliveryID)
            identified.hasUniqueID = environment == .sandbox
            #expect(made == identified)
            #expect((made.uniqueID != nil) == (environment == .sandbox))
        }
        var notification = PushNotification(
            id: UUID(), token: [3], topic: "com.example.b", payload: [], expiration: Date(timeIntervalSince1970: 5), priority: .conservePower)
        #expect(notification.collapseID == nil && notification.pushType == nil)
        notification.collapseID = "group"
        notification.pushType = "background"
        #expect(notification.collapseID == "group" && notification.pushType == "background")
        let json = try JSONEncoder().encode(notification)
        let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
        #expect(object["collapseID"] as? String == "group" && object["pushType"] as? String == "background")
        #expect(object["labels"] == nil)
        #expect(try JSONDecoder().decode(PushNotification.self, from: json) == notification)
        notification.collapseID = nil
        let withoutLabel = try #require(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(notification)) as? [String: Any])
        #expect(withoutLabel["collapseID"] == nil)
    }

    @Test func hexRoundTrip() {
        let bytes: [UInt8] = [0x00, 0x7f, 0x80, 0xff, 0x12, 0xab]
        #expect(Hex.encode(bytes) == "007f80ff12ab")
        #expect(Hex.decode("007F80ff12AB") == bytes)
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("zz") == nil)
        #expect(Hex.decode("") == [])
        #expect(Hex.decode("xx00ff".dropFirst(2)) == [0, 255])
        #expect(Hex.decode("0g") == nil)
        #expect(Hex.decode("g0") == nil)
    }

    @Test func topicsSplitIntoBundleAndKind() {
        #expect(Topic("com.example.app") == Topic(bundleID: "com.example.app", kind: .app))
        #expect(Topic("com.example.app.voip") == Topic(bundleID: "com.example.app", kind: .voip))
        #expect(Topic("com.example.app.complication") == Topic(bundleID: "com.example.app", kind: .complication))
        #expect(Topic("com.example.app.voip-ptt") == Topic(bundleID: "com.example.app", kind: .pushtotalk))
        #expect(Topic("com.example.app.push-type.liveactivity") == Topic(bundleID: "com.example.app", kind: .liveactivity))
        #expect(Topic("com.example.app.push-type.widgets") == Topic(bundleID: "com.example.app", kind: .widgets))
        #expect(Topic("com.example.app.push-type.controls") == Topic(bundleID: "com.example.app", kind: .controls))
        #expect(Topic("com.example.app.pushkit.fileprovider") == Topic(bundleID: "com.example.app", kind: .fileprovider))
        #expect(Topic("com.example.app.location-query") == Topic(bundleID: "com.example.app", kind: .location))
        // A suffix alone is a bundle id, not a kind of nothing.
        #expect(Topic(".voip") == Topic(bundleID: ".voip", kind: .app))
        #expect(
            Topic.all(of: "com.a.b").map(\.description) == [
                "com.a.b", "com.a.b.voip", "com.a.b.complication", "com.a.b.pushkit.fileprovider", "com.a.b.location-query",
                "com.a.b.push-type.liveactivity", "com.a.b.voip-ptt", "com.a.b.push-type.widgets", "com.a.b.push-type.controls",
            ])
        // Every kind's string splits back into it.
        for topic in Topic.all(of: "com.a.b") { #expect(Topic(topic.description) == topic) }
    }

    @Test func pushTypeRules() {
        for type in PushType.allCases {
            #expect(PushTypeRules.refusal(pushType: type, kind: type.topicKind, priority: nil) == nil)
            #expect(type.topicKind.pushTypes.contains(type))
        }
        #expect(PushTypeRules.refusal(pushType: .voip, kind: .app, priority: nil) == .invalidPushType)
        #expect(PushTypeRules.refusal(pushType: .background, kind: .app, priority: .immediate) == .badPriority)
        #expect(PushTypeRules.refusal(pushType: .background, kind: .app, priority: .conservePower) == nil)
        #expect(PushTypeRules.refusal(pushType: nil, kind: .app, priority: .lowest) == nil)
        #expect(PushTypeRules.refusal(pushType: nil, kind: .pushtotalk, priority: .conservePower) == .badPriority)
        #expect(PushTypeRules.refusal(pushType: .liveactivity, kind: .liveactivity, priority: .lowest) == .badPriority)
    }

    @Test func identifierRules() {
        #expect(Identifiers.isTenCharacterID("ABCDE12345"))
        #expect(!Identifiers.isTenCharacterID("abcde12345"))
        #expect(!Identifiers.isTenCharacterID("ABCDE1234"))
        #expect(Identifiers.isBundleID("com.example.demo"))
        #expect(Identifiers.isBundleID("com.example-co.App2"))
        #expect(!Identifiers.isBundleID("nodots"))
        #expect(!Identifiers.isBundleID("com..example"))
        #expect(!Identifiers.isBundleID("com.exa mple"))
        #expect(!Identifiers.isBundleID("com.example."))
        #expect(!Identifiers.isBundleID(".com.example"))
        #expect(!Identifiers.isBundleID("."))
        #expect(!Identifiers.isBundleID(""))
        #expect(!Identifiers.isBundleID("com.exämple"))
        #expect(!Identifiers.isBundleID("com.example_app"))
        #expect(Identifiers.isBundleID("a.b"))
        #expect(Identifiers.isBundleID("a." + String(repeating: "b", count: 153)))
        #expect(!Identifiers.isBundleID("a." + String(repeating: "b", count: 154)))
    }

    @Test func manualClockMovesOnlyWhenTold() {
        let clock = ManualWallClock(Date(timeIntervalSince1970: 100))
        #expect(clock.now() == Date(timeIntervalSince1970: 100))
        clock.advance(by: 3600)
        #expect(clock.now() == Date(timeIntervalSince1970: 3700))
        clock.set(Date(timeIntervalSince1970: 5))
        #expect(clock.now() == Date(timeIntervalSince1970: 5))
    }
}

@Test func uuidsAreWrittenInLowercaseCanonicalForm() {
    for _ in 0..<100 {
        let id = UUID()
        #expect(id.lowercasedString == id.uuidString.lowercased())
    }
}

@Test func notificationIDsAreUniqueVersion4UUIDs() {
    let ids = (0..<10_000).map { _ in UUID.notificationID() }
    #expect(Set(ids).count == ids.count)
    for id in ids.prefix(100) {
        #expect(id.uuid.6 >> 4 == 4, "version 4")
        #expect(id.uuid.8 >> 6 == 0b10, "RFC 4122 variant")
    }
}

/// Generated apns-ids and delivery ids are random: nothing in one tells
/// another (ids that counted up from a base shared their first ten bytes).
@Test func notificationIDsDoNotFollowFromEachOther() {
    let ids = (0..<1_000).map { _ in UUID.notificationID() }
    let prefixes = Set(ids.map { id in withUnsafeBytes(of: id.uuid) { Array($0.prefix(10)) } })
    #expect(prefixes.count == ids.count)
    // Every random bit (all but the six of version and variant) takes both values.
    var ones = [Int](repeating: 0, count: 128)
    for id in ids {
        withUnsafeBytes(of: id.uuid) { raw in
            for bit in 0..<128 where raw[bit / 8] >> (7 - bit % 8) & 1 == 1 { ones[bit] += 1 }
        }
    }
    let fixed: Set<Int> = [48, 49, 50, 51, 64, 65]
    for bit in 0..<128 where !fixed.contains(bit) {
        #expect((350...650).contains(ones[bit]), "bit \(bit) was one \(ones[bit]) times in 1,000")
    }
}

/// Delivery ids are unique (they count; no randomness per id).
@Test func deliveryIDsAreUnique() {
    let ids = (0..<10_000).map { _ in UUID.deliveryID() }
    #expect(Set(ids).count == ids.count)
}
