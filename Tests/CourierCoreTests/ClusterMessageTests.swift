import CourierCore
import Foundation
import Testing

/// The messages between nodes as a type (`ClusterMessage`): every case
/// reads back as written, its text is version 1's (what nodes sent before
/// the type, so that nodes of both run side by side), and what this
/// version cannot read is nil, never a wrong message.
@Suite struct ClusterMessageTests {
    static let since = Date(timeIntervalSince1970: 1_790_000_000.123)
    static let token: [UInt8] = [0x5A, 0x1C, 0x0A, 0xFF]

    /// Each case, with the text nodes sent for it before the type existed.
    static let versionOne: [(ClusterMessage, String)] = [
        (.handOver, "handover"),
        (.drain(environment: .sandbox, deviceID: 18_446_744_073_709_551_615), "drain sandbox 18446744073709551615"),
        (.online(from: "node-a", environment: .production, deviceID: 42, generation: 7, since: since), "online node-a production 42 7 1790000000123"),
        (.offline(from: "node-a", environment: .production, deviceID: 42, generation: 7), "offline node-a production 42 7"),
        (.registrationChanged(from: "node-b", environment: .sandbox, deviceID: 9, bundleID: "com.example.demo"), "registration node-b sandbox 9 com.example.demo"),
        (.deviceReset(from: "node-b", deviceID: 9), "reset node-b 9"),
        (.virtualTokensChanged(from: "node-c", environment: .production, bundleID: "com.example.demo", token: token), "virtual node-c production com.example.demo 5a1c0aff"),
        (.virtualTokensChanged(from: "node-c", environment: .production, bundleID: "com.example.demo", token: nil), "virtual node-c production com.example.demo -"),
        (.channelDeleted(from: "node-a", environment: .sandbox, id: "dHdvIGNoYW5uZWxzIGlk"), "channel-deleted node-a sandbox dHdvIGNoYW5uZWxzIGlk"),
        (.gone(node: "node-d"), "gone node-d"),
        (.faultsChanged(from: "node-a"), "faults node-a"),
        (.inboxShared(from: "node-a"), "inbox node-a"),
        (.joined(node: "node-e"), "joined node-e"),
        (.inboxCleared(from: "node-a", upTo: since), "inbox-clear node-a 1790000000123"),
        (.faultCount(from: "node-a", id: "f3", remaining: 2, hits: 5), "fault-count node-a f3 2 5"),
        (.faultCount(from: "node-a", id: "f3", remaining: nil, hits: 5), "fault-count node-a f3 - 5"),
        (.broadcastRelayed(from: "node-b", number: 1234), "broadcast node-b 1234"),
    ]

    @Test func everyCaseIsWrittenAsVersionOneAndReadBack() {
        for (message, text) in Self.versionOne {
            #expect(message.text == text)
            #expect(ClusterMessage(text: text) == message, "\(text)")
        }
    }

    @Test func theSenderIsTheNodeTheMessageNames() {
        #expect(ClusterMessage.handOver.sender == nil)
        #expect(ClusterMessage.drain(environment: .production, deviceID: 1).sender == nil)
        #expect(ClusterMessage.gone(node: "node-d").sender == "node-d")
        #expect(ClusterMessage.faultCount(from: "node-a", id: "f1", remaining: nil, hits: 0).sender == "node-a")
    }

    /// A space or `%` in a text field is percent-encoded, and read back.
    @Test func textFieldsWithSpacesAreEscaped() {
        let message = ClusterMessage.channelDeleted(from: "node a", environment: .production, id: "100% id")
        #expect(message.text == "channel-deleted node%20a production 100%25%20id")
        #expect(ClusterMessage(text: message.text) == message)
    }

    @Test(arguments: [
        "", " ", "handover ", "handover x", "unknown node-a", "v2 online node-a production 42 7 1", "online node-a production 42 7",
        "online node-a production 42 7 1 extra", "online node-a staging 42 7 1", "online node-a production -42 7 1", "online node-a production 42 x 1",
        "online node-a production 42 7 -1", "online node-a production 42 7 253402300800000", "online node-a  production 42 7 1",
        "drain production", "reset node-b 18446744073709551616", "virtual node-c production com.example.demo 5a1", "virtual node-c production com.example.demo",
        "fault-count node-a f3 two 5", "fault-count node-a f3 - five", "gone", "gone %zz", "gone %", "broadcast node-b 1.5",
        "inbox-clear node-a soon",
    ])
    func whatThisVersionCannotReadIsNil(_ text: String) {
        #expect(ClusterMessage(text: text) == nil, "\(text)")
    }
}
