import CourierCore
import CourierWire
import Foundation
import NIOCore
import NIOTestUtils
import Testing

/// Runs the decoder over `input`, whole or drip-fed one byte at a time.
func decodeAll(_ input: ByteBuffer, limits: BinaryDecoderLimits = BinaryDecoderLimits(), drip: Bool = false) throws -> [BinaryProviderInbound] {
    let processor = NIOSingleStepByteToMessageProcessor(BinaryProviderDecoder(limits: limits))
    var out: [BinaryProviderInbound] = []
    if drip {
        var remaining = input
        while let byte = remaining.readSlice(length: 1) {
            try processor.process(buffer: byte) { out.append($0) }
        }
    } else {
        try processor.process(buffer: input) { out.append($0) }
    }
    return out
}

let token32 = (0..<32).map { UInt8($0) }
let payload = Array(#"{"aps":{"alert":"Hello, Courier"}}"#.utf8)

func command2(_ body: (inout ByteBuffer) -> Void) -> ByteBuffer {
    var buffer = ByteBuffer()
    buffer.writeItemFrame(command: 2, body)
    return buffer
}

func frame(_ command: UInt8, _ token: [UInt8], _ payload: [UInt8], id: UInt32, expiry: UInt32?, priority: UInt8?) -> BinaryNotificationFrame {
    BinaryNotificationFrame(
        command: command, token: ByteBuffer(bytes: token), payload: ByteBuffer(bytes: payload), identifier: id, expiry: expiry, priority: priority)
}

/// A frame over the longest valid one, its identifier after the payload:
/// found by reading past it.
let longFrame = command2 { f in
    f.writeFrameItem(id: 1, token32)
    f.writeFrameItem(id: 2, Array(repeating: UInt8(ascii: "x"), count: 3_000))
    f.writeFrameItem(id: 3, integer: UInt32(31))
}

/// A frame length no five items can fill.
let beyondItems: ByteBuffer = {
    var b = ByteBuffer()
    b.writeInteger(UInt8(2))
    b.writeInteger(UInt32(327_691))
    return b
}()

@Suite struct BinaryProviderDecoderTests {
    @Test func verifierAcceptsAllThreeCommandsDripFedAndBatched() throws {
        var one = ByteBuffer()
        one.writeBinaryNotification(token: token32, payload: payload, identifier: 7, expiry: 1_800_000_000, priority: 10)
        var two = ByteBuffer()
        two.writeBinaryNotification(token: token32, payload: payload, identifier: nil, expiry: nil, priority: nil)
        var three = ByteBuffer()
        three.writeEnhancedNotification(token: token32, payload: payload, identifier: 99, expiry: 0)
        var four = ByteBuffer()
        four.writeSimpleNotification(token: token32, payload: payload)
        try ByteToMessageDecoderVerifier.verifyDecoder(
            inputOutputPairs: [
                (one, [.notification(frame(2, token32, payload, id: 7, expiry: 1_800_000_000, priority: 10))]),
                (two, [.notification(frame(2, token32, payload, id: 0, expiry: nil, priority: nil))]),
                (three, [.notification(frame(1, token32, payload, id: 99, expiry: 0, priority: nil))]),
                (four, [.notification(frame(0, token32, payload, id: 0, expiry: nil, priority: nil))]),
            ],
            decoderFactory: { BinaryProviderDecoder() })
    }

    @Test func itemsInAnyOrder() throws {
        let input = command2 { f in
            f.writeFrameItem(id: 5, integer: UInt8(5))
            f.writeFrameItem(id: 2, payload)
            f.writeFrameItem(id: 4, integer: UInt32(1234))
            f.writeFrameItem(id: 3, integer: UInt32(42))
            f.writeFrameItem(id: 1, token32)
        }
        #expect(try decodeAll(input) == [.notification(frame(2, token32, payload, id: 42, expiry: 1234, priority: 5))])
    }

    @Test func manyNotificationsInOneSegmentStayInOrder() throws {
        var input = ByteBuffer()
        for id in 0..<1000 as Range<UInt32> {
            input.writeBinaryNotification(token: token32, payload: payload, identifier: id, expiry: 0, priority: 10)
        }
        let out = try decodeAll(input)
        #expect(out.count == 1000)
        let ids = out.compactMap { inbound -> UInt32? in
            if case .notification(let n) = inbound { return n.identifier }
            return nil
        }
        #expect(ids == Array(0..<1000))
    }

    @Test func payloadIsASliceOfTheReceivedBytes() throws {
        var input = ByteBuffer()
        input.writeBinaryNotification(token: token32, payload: payload, identifier: 1, expiry: nil, priority: nil)
        guard case .notification(let n) = try decodeAll(input).first else {
            Issue.record("no notification")
            return
        }
        #expect(Array(n.payload.readableBytesView) == payload)
        #expect(Array(n.token.readableBytesView) == token32)
    }

    /// Every row of docs/protocol.md "Command-2 framing" with a status.
    static let command2Rows: [(row: String, input: ByteBuffer, status: UInt8?, id: UInt32)] = [
        ("items in any order, each at most once", command2 { f in
            f.writeFrameItem(id: 3, integer: UInt32(5)); f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 1, token32)
        }, nil, 5),
        ("item 3, 4, 5 absent", command2 { f in f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, payload) }, nil, 0),
        ("unknown item id (0, 6–255)", command2 { f in
            f.writeFrameItem(id: 3, integer: UInt32(11)); f.writeFrameItem(id: 6, [1]); f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, payload)
        }, 128, 11),
        ("an item appears twice", command2 { f in
            f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 3, integer: UInt32(12))
        }, 128, 12),
        ("item 3 (identifier) not 4 bytes", command2 { f in
            f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 3, [0, 1])
        }, 128, 0),
        ("item 4 (expiration) not 4 bytes", command2 { f in
            f.writeFrameItem(id: 3, integer: UInt32(14)); f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 4, [1, 2, 3])
        }, 128, 14),
        ("item 5 (priority) not 1 byte", command2 { f in
            f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 5, [10, 0]); f.writeFrameItem(id: 3, integer: UInt32(15))
        }, 128, 15),
        ("item 5 value not 5 or 10", command2 { f in
            f.writeFrameItem(id: 3, integer: UInt32(16)); f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 5, [7])
        }, 128, 16),
        ("an item header or value runs past the frame end", {
            var b = ByteBuffer()
            b.writeInteger(UInt8(2)); b.writeInteger(UInt32(3 + 32 + 2))
            b.writeFrameItem(id: 1, token32)
            b.writeBytes([2, 0])  // an item header cut short by the frame end
            return b
        }(), 128, 0),
        ("frame length over the longest valid frame (5 × 3 + 255 + payload limit + 9 = 2,327 with defaults)", longFrame, 7, 31),
        ("frame length over what five items can hold (5 × (3 + 65,535) = 327,690)", beyondItems, 128, 0),
        ("no item 1, or item 1 empty", command2 { f in f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 3, integer: UInt32(21)) }, 2, 21),
        ("item 1 not the token length", command2 { f in
            f.writeFrameItem(id: 1, Array(token32.prefix(31))); f.writeFrameItem(id: 2, payload); f.writeFrameItem(id: 3, integer: UInt32(22))
        }, 5, 22),
        ("no item 2, or item 2 empty", command2 { f in f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, []); f.writeFrameItem(id: 3, integer: UInt32(23)) }, 4, 23),
        ("item 2 longer than the command-2 limit", command2 { f in
            f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, Array(repeating: UInt8(ascii: "x"), count: 2049)); f.writeFrameItem(id: 3, integer: UInt32(24))
        }, 7, 24),
    ]

    @Test func everyCommand2RowOfTheDocumentHasACase() {
        let documented = documentRows(under: "### Command-2 framing")
        #expect(documented.map { $0[0] } == Self.command2Rows.map(\.row))
        for (documentRow, testRow) in zip(documented, Self.command2Rows) {
            let expected = testRow.status.map { String($0) } ?? "accepted"
            #expect(documentRow[1].hasPrefix(expected), "\(testRow.row)")
        }
    }

    @Test(arguments: 0..<command2Rows.count)
    func command2Row(_ index: Int) throws {
        let row = Self.command2Rows[index]
        for drip in [false, true] {
            var input = row.input
            // Whatever follows a bad notification is never delivered.
            input.writeBinaryNotification(token: token32, payload: payload, identifier: 999, expiry: nil, priority: 10)
            let out = try decodeAll(input, drip: drip)
            if let status = row.status {
                guard case .failure(let failure) = out.first else {
                    Issue.record("\(row.row): expected status \(status), got \(out)")
                    continue
                }
                #expect(out.count == 1, "\(row.row): nothing after the failure")
                #expect(failure.status.rawValue == status, "\(row.row)")
                #expect(failure.identifier == row.id, "\(row.row)")
                #expect(failure.answers)
            } else {
                #expect(out.count == 2, "\(row.row)")
                guard case .notification(let n) = out.first else {
                    Issue.record("\(row.row): expected a notification, got \(out)")
                    continue
                }
                #expect(n.identifier == row.id)
            }
        }
    }

    @Test func anOversizedFrameIsRefusedFromItsHeaderAlone() throws {
        var header = ByteBuffer()
        header.writeInteger(UInt8(2))
        header.writeInteger(UInt32.max)
        let out = try decodeAll(header)
        #expect(out == [.failure(BinaryFrameFailure(status: .protocolError, identifier: 0, answers: true, detail: ""))])
    }

    /// A long frame is answered as soon as its problem and identifier are
    /// known: the rest of an oversized payload need not arrive.
    @Test func aLongFrameIsAnsweredBeforeItsPayloadArrives() throws {
        var input = ByteBuffer()
        input.writeInteger(UInt8(2))
        let frameLength = 3 + 4 + 3 + 32 + 3 + 60_000
        input.writeInteger(UInt32(frameLength))
        input.writeFrameItem(id: 3, integer: UInt32(41))
        input.writeFrameItem(id: 1, token32)
        input.writeMultipleIntegers(UInt8(2), UInt16(60_000))
        input.writeBytes(Array(repeating: UInt8(ascii: "x"), count: 100))
        let out = try decodeAll(input)
        #expect(out == [.failure(BinaryFrameFailure(status: .invalidPayloadSize, identifier: 41, answers: true, detail: ""))])
    }

    /// In a long frame the first problem in item order is answered: a token
    /// of the wrong length before an oversized payload is status 5.
    @Test func aLongFramesFirstProblemIsAnswered() throws {
        let input = command2 { f in
            f.writeFrameItem(id: 1, Array(token32.prefix(31))); f.writeFrameItem(id: 2, Array(repeating: UInt8(ascii: "x"), count: 2_500))
            f.writeFrameItem(id: 3, integer: UInt32(42))
        }
        for drip in [false, true] {
            let out = try decodeAll(input, drip: drip)
            #expect(out == [.failure(BinaryFrameFailure(status: .invalidTokenSize, identifier: 42, answers: true, detail: ""))])
        }
    }

    /// A long frame's items are judged as a valid-length frame's are: a
    /// bad priority value is 128, an empty token 2, and an item cut by the
    /// frame's end does not hide a problem met before it.
    @Test(arguments: [
        ("priority 7", UInt8(128), UInt32(42)),
        ("empty token", 2, 42),
        ("stray bytes after the payload", 7, 0),
    ])
    func aLongFramesItemsAreJudgedAsUsual(_ row: String, _ status: UInt8, _ identifier: UInt32) throws {
        let big = Array(repeating: UInt8(ascii: "x"), count: 3_000)
        let input: ByteBuffer
        switch row {
        case "priority 7":
            input = command2 { f in
                f.writeFrameItem(id: 5, [7]); f.writeFrameItem(id: 1, token32); f.writeFrameItem(id: 2, big); f.writeFrameItem(id: 3, integer: UInt32(42))
            }
        case "empty token":
            input = command2 { f in f.writeFrameItem(id: 1, []); f.writeFrameItem(id: 2, big); f.writeFrameItem(id: 3, integer: UInt32(42)) }
        default:
            var b = ByteBuffer()
            b.writeInteger(UInt8(2))
            b.writeInteger(UInt32(3 + 32 + 3 + 3_000 + 2))
            b.writeFrameItem(id: 1, token32)
            b.writeFrameItem(id: 2, big)
            b.writeBytes([9, 9])
            input = b
        }
        for drip in [false, true] {
            let out = try decodeAll(input, drip: drip)
            #expect(out == [.failure(BinaryFrameFailure(status: BinaryStatus(rawValue: status), identifier: identifier, answers: true, detail: ""))], "\(row)")
        }
    }

    @Test func anIncompleteFrameWaitsForMoreBytes() throws {
        var input = ByteBuffer()
        input.writeBinaryNotification(token: token32, payload: payload, identifier: 3, expiry: nil, priority: nil)
        let cut = input.getSlice(at: 0, length: input.readableBytes - 1)!
        #expect(try decodeAll(cut).isEmpty)
    }

    @Test func anUnknownCommandIsAProtocolErrorWithIdentifierZero() throws {
        var input = ByteBuffer(bytes: [9, 1, 2, 3])
        input.writeBinaryNotification(token: token32, payload: payload, identifier: 3, expiry: nil, priority: nil)
        let out = try decodeAll(input)
        #expect(out.count == 1)
        guard case .failure(let failure) = out.first else {
            Issue.record("expected a failure")
            return
        }
        #expect(failure.status == .protocolError)
        #expect(failure.identifier == 0)
        #expect(failure.answers)
    }

    /// docs/protocol.md "Commands 0 and 1".
    @Test(arguments: [
        ("token length 0", 0, 10, UInt8(2)),
        ("token length not the configured length", 31, 10, 5),
        ("payload length 0", 32, 0, 4),
        ("payload length over 256", 32, 257, 7),
    ])
    func legacyCommandRows(row: String, tokenLength: Int, payloadLength: Int, status: UInt8) throws {
        let documented = documentRows(under: "### Commands 0 and 1")
        let line = try #require(documented.first { $0[0] == row }, "row '\(row)' is in docs/protocol.md")
        #expect(line[1] == String(status))
        #expect(line[2] == "close")
        let token = Array(repeating: UInt8(1), count: tokenLength)
        let body = Array(repeating: UInt8(ascii: "x"), count: payloadLength)
        for command in [UInt8(1), 0] {
            var input = ByteBuffer()
            if command == 1 {
                input.writeEnhancedNotification(token: token, payload: body, identifier: 77, expiry: 0)
            } else {
                input.writeSimpleNotification(token: token, payload: body)
            }
            input.writeEnhancedNotification(token: token32, payload: payload, identifier: 78, expiry: 0)
            for drip in [false, true] {
                let out = try decodeAll(input, drip: drip)
                #expect(out.count == 1)
                guard case .failure(let failure) = out.first else {
            Issue.record("expected a failure")
            return
        }
                #expect(failure.status.rawValue == status)
                #expect(failure.answers == (command == 1), "command 0 closes without an answer")
                #expect(failure.identifier == (command == 1 ? 77 : 0))
            }
        }
        #expect(documented.count == 4)
    }

    @Test func tokenLengthIsConfigurable() throws {
        let token64 = Array(repeating: UInt8(9), count: 64)
        var input = ByteBuffer()
        input.writeBinaryNotification(token: token64, payload: payload, identifier: 1, expiry: nil, priority: nil)
        let out = try decodeAll(input, limits: BinaryDecoderLimits(tokenLength: 64))
        #expect(out == [.notification(frame(2, token64, payload, id: 1, expiry: nil, priority: nil))])
    }

    @Test func errorResponseRoundTrip() throws {
        var buffer = ByteBuffer()
        BinaryErrorResponse(status: .invalidToken, identifier: 0xDEAD_BEEF).write(to: &buffer)
        #expect(Array(buffer.readableBytesView) == [8, 8, 0xDE, 0xAD, 0xBE, 0xEF])
        try ByteToMessageDecoderVerifier.verifyDecoder(
            inputOutputPairs: [(buffer, [BinaryErrorResponse(status: .invalidToken, identifier: 0xDEAD_BEEF)])],
            decoderFactory: { BinaryErrorResponseDecoder() })
        var wrong = ByteBuffer(bytes: [7, 8, 0, 0, 0, 1])
        #expect(throws: WireError.unexpectedCommand(7)) { try BinaryErrorResponse.read(from: &wrong) }
    }
}

/// Rows of the table that follows `heading` in docs/protocol.md.
func documentRows(under heading: String, in file: String = "docs/protocol.md") -> [[String]] {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let text = (try? String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)) ?? ""
    var inSection = false
    var rows: [[String]] = []
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
        if line.hasPrefix("#") {
            if inSection { break }
            inSection = line.hasPrefix(heading)
            continue
        }
        guard inSection, line.hasPrefix("|"), !line.contains("---") else { continue }
        rows.append(line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast().map { $0.trimmingCharacters(in: .whitespaces) })
    }
    return Array(rows.dropFirst())
}
