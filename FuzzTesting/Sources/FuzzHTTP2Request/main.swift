// Fuzzes the HTTP/2 provider API's request mapping: headers and body to the
// checked fields of a notification, as the HTTP/2 gateway does it after
// trust (HTTP2RequestHead.parse, isTopic, fields, PayloadRules.check).
//
// The input is text: header lines `name: value` (split at the first ": ";
// a line without one is a name with an empty value), then an empty line,
// then the body. Bytes that are not UTF-8 are repaired, as a String would
// hold them.
//
// Oracles: a model of docs/protocol.md §2 written here, byte by byte,
// independently of the code (which reason comes first, what the fields
// hold); plus what the gateway relies on: a success has a 32-byte token
// equal to the path's hex, an apns-id echoed as the UUID, an expiration of
// at most 2^32 - 1 seconds, priority 1, 5 or 10, a collapse id of 1 to 64
// bytes or none, a push type of Apple's list (`PushType`), and a payload
// verdict that agrees with PayloadRules.isJSONObject.

import CourierCore
import CourierWire
import Foundation
import FuzzSupport
import NIOHPACK

let tokenLength = 32
let newID = UUID(uuidString: "00000000-0000-4000-8000-000000000000")!
let once: Set<String> = ["authorization", "apns-id", "apns-expiration", "apns-priority", "apns-topic", "apns-collapse-id", "apns-push-type"]

/// The headers and body the input stands for.
func split(_ bytes: UnsafeRawBufferPointer) -> (headers: [(String, String)], body: [UInt8]) {
    let all = Array(bytes)
    var end = all.count
    var bodyStart = all.count
    if all.count >= 2 {
        for index in 0..<(all.count - 1) where all[index] == 0x0A && all[index + 1] == 0x0A {
            end = index
            bodyStart = index + 2
            break
        }
    }
    var headers: [(String, String)] = []
    for line in all[0..<end].split(separator: 0x0A, omittingEmptySubsequences: true) {
        let text = Array(line)
        var cut: Int?
        if text.count >= 2 {
            for index in 0..<(text.count - 1) where text[index] == UInt8(ascii: ":") && text[index + 1] == UInt8(ascii: " ") {
                cut = index
                break
            }
        }
        if let cut {
            headers.append((String(decoding: text[..<cut], as: UTF8.self), String(decoding: text[(cut + 2)...], as: UTF8.self)))
        } else {
            headers.append((String(decoding: text, as: UTF8.self), ""))
        }
    }
    return (headers, Array(all[bodyStart...]))
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

func isHexDigit(_ byte: UInt8) -> Bool {
    (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
}

/// The model of `parse`: the reason, or the token's hex.
func expectedParse(_ headers: [(String, String)]) -> Result<[UInt8], Reason> {
    var method: [UInt8]?
    var path: [UInt8]?
    var seen: Set<[UInt8]> = []
    var duplicated = false
    for (name, value) in headers {
        let name = bytes(name)
        if name == bytes(":method") { method = bytes(value) }
        if name == bytes(":path") { path = bytes(value) }
        if once.contains(where: { bytes($0) == name }) {
            if !seen.insert(name).inserted { duplicated = true }
        }
    }
    guard method == bytes("POST") else { return .failure(.methodNotAllowed) }
    guard let path else { return .failure(.badPath) }
    let route = Array(path.prefix { $0 != UInt8(ascii: "?") })
    if route == bytes("/3/device") || route == bytes("/3/device/") { return .failure(.missingDeviceToken) }
    guard route.starts(with: bytes("/3/device/")) else { return .failure(.badPath) }
    let token = Array(route.dropFirst(10))
    guard !token.contains(UInt8(ascii: "/")) else { return .failure(.badPath) }
    guard !duplicated else { return .failure(.duplicateHeaders) }
    return .success(token)
}

/// The model of `fields`, given the last value of each header.
func expectedFields(_ headers: [(String, String)], tokenHex: [UInt8]) -> Reason? {
    func last(_ name: String) -> [UInt8]? { headers.last { bytes($0.0) == bytes(name) }.map { bytes($0.1) } }
    if let id = last("apns-id") {
        guard id.count == 36 else { return .badMessageId }
        for (index, byte) in id.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                if byte != UInt8(ascii: "-") { return .badMessageId }
            } else if !isHexDigit(byte) {
                return .badMessageId
            }
        }
    }
    if let expiration = last("apns-expiration") {
        guard !expiration.isEmpty, expiration.allSatisfy({ (0x30...0x39).contains($0) }) else { return .badExpirationDate }
        // At most 4294967295: compare as digits without leading zeros.
        let digits = Array(expiration.drop { $0 == 0x30 })
        let max = bytes("4294967295")
        if digits.count > max.count || (digits.count == max.count && digits.lexicographicallyPrecedes(max) == false && digits != max) {
            return .badExpirationDate
        }
    }
    if let priority = last("apns-priority"), priority != bytes("1"), priority != bytes("5"), priority != bytes("10") { return .badPriority }
    if let collapse = last("apns-collapse-id"), collapse.count > 64 { return .badCollapseId }
    if let pushType = last("apns-push-type"), !PushType.allCases.contains(where: { bytes($0.rawValue) == pushType }) { return .invalidPushType }
    guard tokenHex.count == tokenLength * 2, tokenHex.allSatisfy(isHexDigit) else { return .badDeviceToken }
    return nil
}

func check(_ input: UnsafeRawBufferPointer) {
    let (pairs, body) = split(input)
    let headers = HPACKHeaders(pairs)
    let parsed = HTTP2RequestHead.parse(headers)
    let expected = expectedParse(pairs)
    let head: HTTP2RequestHead
    switch (parsed, expected) {
    case (.failure(let reason), .failure(let model)):
        require(reason == model, "parse answers \(reason), the model \(model), for \(pairs)")
        return
    case (.success(let got), .success(let token)):
        require(bytes(String(got.tokenHex)) == token, "parse reads token \(got.tokenHex), the model \(hex(token))")
        head = got
    default:
        violation("parse answers \(parsed), the model \(expected), for \(pairs)")
    }
    func last(_ name: String) -> String? { pairs.last { bytes($0.0) == bytes(name) }?.1 }
    require(head.apnsID == last("apns-id") && head.topic == last("apns-topic") && head.priority == last("apns-priority")
        && head.expiration == last("apns-expiration") && head.collapseID == last("apns-collapse-id")
        && head.pushType == last("apns-push-type") && head.authorization == last("authorization"), "parse mixed up the headers: \(head)")

    if let topic = head.topic {
        let isTopic = HTTP2RequestHead.isTopic(topic)
        if isTopic { require(!topic.isEmpty && topic.utf8.count <= 155 + ".complication".utf8.count, "topic \(topic)") }
    }

    let fields = head.fields(tokenLength: tokenLength, newID: newID)
    let model = expectedFields(pairs, tokenHex: bytes(String(head.tokenHex)))
    switch fields {
    case .failure(let reason):
        require(reason == model, "fields answers \(reason), the model \(String(describing: model)), for \(pairs)")
        return
    case .success(let checked):
        require(model == nil, "fields accepts what the model refuses (\(model!)) for \(pairs)")
        require(checked.token.count == tokenLength, "a token of \(checked.token.count) bytes")
        require(hex(checked.token) == String(head.tokenHex).lowercased(), "token \(hex(checked.token)) from \(head.tokenHex)")
        if let apnsID = head.apnsID {
            require(checked.id.uuidString.lowercased() == apnsID.lowercased(), "id \(checked.id) from \(apnsID)")
        } else {
            require(checked.id == newID, "id \(checked.id) without an apns-id")
        }
        if let expiration = head.expiration {
            require(checked.expiration == Date(timeIntervalSince1970: TimeInterval(UInt32(expiration)!)), "expiration \(String(describing: checked.expiration)) from \(expiration)")
        } else {
            require(checked.expiration == nil, "an expiration without the header")
        }
        require(checked.priority == head.priority.map { UInt8($0)! }, "priority \(String(describing: checked.priority))")
        // An empty collapse id is none.
        let collapseID = head.collapseID?.isEmpty == true ? nil : head.collapseID
        require(checked.collapseID == collapseID && checked.pushType == head.pushType, "collapse id or push type changed")
        require(checked.pushType.map { PushType(rawValue: $0) != nil } ?? true, "push type \(checked.pushType!) passed")

        // The payload, on the channel the topic picks, with the priority the gateway derives.
        let channel: PayloadChannel = head.topic.map { Topic($0).kind == .voip } == true ? .http2VoIP : .http2
        let verdict = PayloadRules.check(body, priority: checked.priority, channel: channel)
        switch verdict {
        case .success(let summary):
            require(PayloadRules.isJSONObject(body), "a payload that is not a JSON object passed: \(hex(body))")
            require(body.count <= PayloadLimits().limit(for: channel), "a payload of \(body.count) bytes passed on \(channel)")
            let priority = checked.priority.flatMap(Priority.init(rawValue:)) ?? (summary.isSilent ? .conservePower : .immediate)
            require(priority.rawValue == 1 || priority.rawValue == 5 || priority.rawValue == 10, "priority \(priority)")
        case .failure(let error):
            switch error {
            case .empty: require(body.isEmpty, "empty for \(body.count) bytes")
            case .tooLarge: require(body.count > PayloadLimits().limit(for: channel), "tooLarge for \(body.count) bytes")
            case .nullTerminated: require(body.last == 0, "nullTerminated without a final NUL")
            case .notJSONObject: require(!PayloadRules.isJSONObject(body), "notJSONObject for a JSON object")
            case .priorityTenSilent: require(checked.priority == 10, "priorityTenSilent without priority 10")
            case .unknownPriority: violation("unknownPriority after fields checked the priority")
            }
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTP2Request(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
