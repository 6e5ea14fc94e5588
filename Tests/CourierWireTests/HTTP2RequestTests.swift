import CourierCore
import CourierWire
import Foundation
import NIOHPACK
import Testing

/// The header rows of docs/protocol.md §2, without a socket.
@Suite struct HTTP2RequestTests {
    let token = String(repeating: "ab", count: 32)

    func headers(_ extra: [(String, String)] = [], method: String = "POST", path: String? = nil) -> HPACKHeaders {
        HPACKHeaders([(":method", method), (":scheme", "https"), (":path", path ?? "/3/device/" + token), (":authority", "x")] + extra)
    }

    func reason(_ headers: HPACKHeaders) -> String? {
        switch HTTP2RequestHead.parse(headers) {
        case .failure(let reason): return reason.rawValue
        case .success(let head):
            if case .failure(let reason) = head.fields(tokenLength: 32, newID: UUID()) { return reason.rawValue }
            return nil
        }
    }

    @Test func theHeaderRows() {
        #expect(reason(headers()) == nil)
        #expect(reason(headers(method: "GET")) == "MethodNotAllowed")
        #expect(reason(headers(path: "/3/device/")) == "MissingDeviceToken")
        #expect(reason(headers(path: "/3/device")) == "MissingDeviceToken")
        #expect(reason(headers(path: "/4/device/" + token)) == "BadPath")
        #expect(reason(headers(path: "/3/device/" + token + "/x")) == "BadPath")
        #expect(reason(headers(path: "/3/device/" + token + "?q=1")) == nil)
        #expect(reason(headers(path: "/3/device/xyz")) == "BadDeviceToken")
        #expect(reason(headers([("apns-topic", "a.b"), ("apns-topic", "a.b")])) == "DuplicateHeaders")
        #expect(reason(headers([("x-other", "1"), ("x-other", "2")])) == nil)
        #expect(reason(headers([("apns-id", "123e4567-e89b-12d3-a456-426655440000")])) == nil)
        #expect(reason(headers([("apns-id", "123E4567-E89B-12D3-A456-426655440000")])) == nil)
        #expect(reason(headers([("apns-id", "123e4567e89b12d3a456426655440000")])) == "BadMessageId")
        #expect(reason(headers([("apns-expiration", "0")])) == nil)
        #expect(reason(headers([("apns-expiration", "+5")])) == "BadExpirationDate")
        #expect(reason(headers([("apns-expiration", "")])) == "BadExpirationDate")
        #expect(reason(headers([("apns-priority", "5")])) == nil)
        #expect(reason(headers([("apns-priority", "1")])) == nil)
        #expect(reason(headers([("apns-priority", "2")])) == "BadPriority")
        #expect(reason(headers([("apns-collapse-id", String(repeating: "é", count: 33))])) == "BadCollapseId")
        #expect(reason(headers([("apns-collapse-id", "")])) == nil)
        for pushType in PushType.allCases {
            #expect(reason(headers([("apns-push-type", pushType.rawValue)])) == nil)
        }
        #expect(reason(headers([("apns-push-type", "")])) == "InvalidPushType")
        #expect(reason(headers([("apns-push-type", "VoIP")])) == "InvalidPushType")
        #expect(reason(headers([("apns-push-type", String(repeating: "x", count: 256))])) == "InvalidPushType")
    }

    /// The token is what follows the prefix's bytes: a combining mark
    /// right after `/3/device/` (which joins its slash into one Character)
    /// is part of the token, so not hex (found by FuzzHTTP2Request).
    @Test func aCombiningMarkAfterThePrefixIsPartOfTheToken() {
        #expect(reason(headers(path: "/3/device/\u{301}" + token)) == "BadDeviceToken")
        #expect(reason(headers(path: "/3/device/" + token)) == nil)
    }

    @Test func anEmptyCollapseIDIsNone() throws {
        let head = try HTTP2RequestHead.parse(headers([("apns-collapse-id", "")])).get()
        #expect(try head.fields(tokenLength: 32, newID: UUID()).get().collapseID == nil)
    }

    @Test func fieldsCarryTheValues() throws {
        let id = UUID()
        let head = try HTTP2RequestHead.parse(headers([("apns-expiration", "1700000000"), ("apns-priority", "5"), ("apns-collapse-id", "c"), ("apns-push-type", "background")])).get()
        let fields = try head.fields(tokenLength: 32, newID: id).get()
        #expect(fields.id == id)
        #expect(fields.token == Hex.decode(token))
        #expect(fields.expiration == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(fields.priority == 5)
        #expect(fields.collapseID == "c")
        #expect(fields.pushType == "background")
    }

    @Test func errorBodies() {
        #expect(String(decoding: HTTP2ErrorBody(reason: .badTopic).json, as: UTF8.self) == #"{"reason":"BadTopic"}"#)
        let body = HTTP2ErrorBody(reason: .unregistered, timestamp: Date(timeIntervalSince1970: 1_700_000_000.1234))
        #expect(String(decoding: body.json, as: UTF8.self) == #"{"reason":"Unregistered","timestamp":1700000000123}"#)
        #expect(HTTP2ErrorBody.decode(body.json) == body)
    }
}
