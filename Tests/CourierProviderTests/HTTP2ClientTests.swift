import CourierCore
import CourierPKI
import CourierProvider
import Foundation
import Logging
import Testing

@Suite struct HTTP2ClientTests {
    /// The renewal age is kept between 20 and 60 minutes.
    @Test func theRenewalAgeIsBetween20And60Minutes() {
        #expect(HTTP2ProviderClient.Options(host: "h", port: 1).tokenRenewal == 40 * 60)
        #expect(HTTP2ProviderClient.Options(host: "h", port: 1, tokenRenewal: 5 * 60).tokenRenewal == 20 * 60)
        #expect(HTTP2ProviderClient.Options(host: "h", port: 1, tokenRenewal: 5 * 3600).tokenRenewal == 60 * 60)
    }

    @Test func tokensRenewOnTheInjectedClock() async throws {
        let clock = ManualWallClock(Date(timeIntervalSince1970: 1_800_000_000))
        let key = AuthKey.generate()
        let client = try HTTP2ProviderClient(
            options: .init(host: "localhost", port: 1, tokenRenewal: 30 * 60), credentials: .token(key, teamID: "TEAM123456"), clock: clock,
            logger: Logger(label: "test"))
        let first = try #require(await client.currentToken())
        let parsed = try ProviderToken(compact: first)
        #expect(parsed.keyID == key.keyID)
        #expect(parsed.teamID == "TEAM123456")
        #expect(parsed.issuedAt == clock.now())
        #expect(parsed.isSigned(by: key.privateKey.publicKey))
        clock.advance(by: 30 * 60 - 1)
        #expect(await client.currentToken() == first)
        clock.advance(by: 1)
        let second = try #require(await client.currentToken())
        #expect(second != first)
        #expect(try ProviderToken(compact: second).issuedAt == clock.now())
    }

    @Test func payloadBuilderWritesTheApsKeysOfTables9_1And9_2() throws {
        let payload = APSPayload(
            alert: .dictionary(.init(title: "T", body: "B", titleLocKey: "TK", titleLocArgs: ["a"], actionLocKey: "V", locKey: "LK", locArgs: ["b"], launchImage: "i.png")),
            badge: 3, sound: "default", category: "c", threadID: "t", custom: ["id": 7])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(payload.json())) as? [String: Any])
        #expect(object["id"] as? Int == 7)
        let aps = try #require(object["aps"] as? [String: Any])
        #expect(aps["badge"] as? Int == 3)
        #expect(aps["sound"] as? String == "default")
        #expect(aps["category"] as? String == "c")
        #expect(aps["thread-id"] as? String == "t")
        #expect(aps["content-available"] == nil)
        let alert = try #require(aps["alert"] as? [String: Any])
        #expect(alert["title-loc-key"] as? String == "TK")
        #expect(alert["title-loc-args"] as? [String] == ["a"])
        #expect(alert["action-loc-key"] as? String == "V")
        #expect(alert["loc-key"] as? String == "LK")
        #expect(alert["loc-args"] as? [String] == ["b"])
        #expect(alert["launch-image"] as? String == "i.png")
        #expect(String(decoding: try APSPayload.alert("hi").json(), as: UTF8.self) == #"{"aps":{"alert":"hi"}}"#)
        #expect(String(decoding: try APSPayload.background.json(), as: UTF8.self) == #"{"aps":{"content-available":1}}"#)
        #expect(throws: APSPayloadError.notJSON) { try APSPayload(custom: ["bad": Date()]).json() }
    }
}
