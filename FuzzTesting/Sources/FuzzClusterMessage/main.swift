// Fuzzes `ClusterMessage(text:)`, the reader of the messages nodes send
// each other through the store (docs/operations.md).
//
// Oracles:
// - a text that reads as a message writes back to a text that reads as the
//   same message, and that text writes back the same (writing is canonical);
// - every text field read is non-empty; a message names its sender when it
//   is not `handover` or `drain`;
// - the input also describes a message (its first byte picks the case, the
//   rest its fields), which written reads back equal.

import CourierCore
import Foundation
import FuzzSupport

func check(_ bytes: UnsafeRawBufferPointer) {
    let text = String(decoding: bytes, as: UTF8.self)
    if let message = ClusterMessage(text: text) {
        let written = message.text
        guard let again = ClusterMessage(text: written) else { violation("\(message) writes \(written), which does not read") }
        require(again == message, "\(written) reads as \(again), not \(message)")
        require(again.text == written, "writing is not canonical: \(written) / \(again.text)")
        switch message {
        case .handOver, .drain: require(message.sender == nil, "a sender for \(message)")
        default: require(message.sender.map { !$0.isEmpty } == true, "no sender for \(message)")
        }
    }
    var random = InputRandom(seedingFrom: bytes)
    let made = describedMessage(&random)
    guard let read = ClusterMessage(text: made.text) else { violation("\(made) writes \(made.text), which does not read") }
    require(read == made, "\(made.text) reads as \(read), not \(made)")
}

/// A message the input describes: any text field (spaces, `%`, any
/// character), any number within its kind's range.
func describedMessage(_ random: inout InputRandom) -> ClusterMessage {
    func text() -> String {
        let alphabet = Array("ab -%z9.é")
        let count = 1 + Int(random.next() % 12)
        return String((0..<count).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
    }
    func environment() -> Environment { random.next() % 2 == 0 ? .production : .sandbox }
    func signed() -> Int64 { Int64(bitPattern: random.next()) }
    func time() -> Date { Date(storeMillis: Int(random.next() % 253_402_300_800_000)) }
    let token = (0..<Int(random.next() % 40)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    switch random.next() % 15 {
    case 0: return .handOver
    case 1: return .drain(environment: environment(), deviceID: random.next())
    case 2: return .online(from: text(), environment: environment(), deviceID: random.next(), generation: signed(), since: time())
    case 3: return .offline(from: text(), environment: environment(), deviceID: random.next(), generation: signed())
    case 4: return .registrationChanged(from: text(), environment: environment(), deviceID: random.next(), bundleID: text())
    case 5: return .deviceReset(from: text(), deviceID: random.next())
    case 6: return .virtualTokensChanged(from: text(), environment: environment(), bundleID: text(), token: token.isEmpty ? nil : token)
    case 7: return .channelDeleted(from: text(), environment: environment(), id: text())
    case 8: return .gone(node: text())
    case 9: return .faultsChanged(from: text())
    case 10: return .inboxShared(from: text())
    case 11: return .joined(node: text())
    case 12: return .inboxCleared(from: text(), upTo: time())
    case 13: return .faultCount(from: text(), id: text(), remaining: random.next() % 2 == 0 ? nil : Int(signed()), hits: Int(signed()))
    default: return .broadcastRelayed(from: text(), number: signed())
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzClusterMessage(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
