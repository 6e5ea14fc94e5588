import CourierWire
import Foundation
import NIOCore
import NIOTestUtils
import Testing

func decodeFrames(_ input: ByteBuffer, maxFrameLength: Int = DeviceFrameDecoder.defaultMaxFrameLength) throws -> [DeviceFrame] {
    let processor = NIOSingleStepByteToMessageProcessor(DeviceFrameDecoder(maxFrameLength: maxFrameLength))
    var out: [DeviceFrame] = []
    try processor.process(buffer: input) { out.append($0) }
    return out
}

func rawFrame(_ command: UInt8, _ body: (inout ByteBuffer) -> Void) -> ByteBuffer {
    var buffer = ByteBuffer()
    buffer.writeItemFrame(command: command, body)
    return buffer
}

/// Decodes one frame and reads it as a message.
func message(_ input: ByteBuffer) throws -> DeviceMessage {
    let frames = try decodeFrames(input)
    guard frames.count == 1 else { throw DeviceProtocolError(.malformedFrame, "expected one frame, got \(frames.count)") }
    return try DeviceMessage(frame: frames[0])
}

func code(of body: () throws -> Any) -> DeviceProtocolCode? {
    do {
        _ = try body()
        return nil
    } catch let error as DeviceProtocolError {
        return error.code
    } catch {
        return .internal
    }
}

let sampleToken = Array(repeating: UInt8(0x5A), count: 32)
let sampleID = UUID(uuidString: "123E4567-E89B-12D3-A456-426655440000")!
let sampleDeliveryID = UUID(uuidString: "9B2F0C4E-7A51-4D36-8E0B-5C1D2A3F4E60")!

@Suite struct DeviceProtocolTests {
    static let everyMessage: [DeviceMessage] = [
        .connect(version: 1, tokens: [sampleToken, Array(repeating: 1, count: 32)], keepAlive: 60, generation: 3),
        .connect(version: 1, tokens: [], keepAlive: nil, generation: nil),
        .connectAck(status: .ok, serverTime: 1_750_000_000_000, keepAlive: 300, maxFrameLength: 16_384, refusedTokens: [sampleToken], tokenLength: 32),
        .connectAck(status: .certificateRefused, serverTime: 1, keepAlive: 0, maxFrameLength: 0, refusedTokens: [], tokenLength: nil),
        .filter(enabledTopicHashes: [Array(repeating: 7, count: 20), Array(repeating: 8, count: 20)]),
        .notification(
            DeviceNotification(
                token: sampleToken, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), id: sampleID, deliveryID: sampleDeliveryID, expiration: 1_800_000_000, priority: 10,
                topic: "com.example.demo", collapseID: "news", pushType: "alert")),
        .notification(DeviceNotification(token: sampleToken, payload: [0x7B, 0x7D], id: sampleID, deliveryID: sampleID, expiration: nil, priority: 5, topic: "com.example.demo")),
        .ack(deliveryID: sampleDeliveryID, status: 0),
        .ack(deliveryID: sampleDeliveryID, status: DeviceAckStatus.unreadable),
        .keepAlive,
        .keepAliveAck,
        .noStorage,
        .appTokenRequest(bundleID: "com.example.demo", requestID: 41),
        .appTokenResponse(requestID: 41, bundleID: "com.example.demo", token: sampleToken, status: .ok),
        .appTokenResponse(requestID: 42, bundleID: nil, token: nil, status: .unknownApp),
        .unregister(bundleID: "com.example.demo", requestID: 43),
        .unregisterAck(requestID: 43, status: .ok),
        .appTokenRequest(bundleID: "com.example.demo", requestID: 44, kind: .liveActivityPushToStart),
        .appTokenRequest(bundleID: "com.example.demo", requestID: 45, kind: .liveActivityUpdate),
        .appTokenResponse(requestID: 45, bundleID: "com.example.demo", token: sampleToken, status: .ok, activity: 9),
        .unregister(bundleID: "com.example.demo", requestID: 46, activity: 9),
        .subscribe(bundleID: "com.example.demo", requestID: 47, channelID: "dHN0LXNyY2gtY2hubA==", lastDeliveryID: sampleDeliveryID),
        .subscribe(bundleID: "com.example.demo", requestID: 48, channelID: "dHN0LXNyY2gtY2hubA=="),
        .channelAck(requestID: 48, status: .unknownChannel),
        .unsubscribe(bundleID: "com.example.demo", requestID: 49, channelID: "dHN0LXNyY2gtY2hubA=="),
        .notification(
            DeviceNotification(
                token: sampleToken, payload: [0x7B, 0x7D], id: sampleID, deliveryID: sampleDeliveryID, expiration: 0, priority: 10,
                topic: "com.example.demo.push-type.liveactivity", pushType: "liveactivity", channelID: "dHN0LXNyY2gtY2hubA==")),
        .error(code: .badItemValue, message: "priority 7"),
    ]

    @Test(arguments: everyMessage)
    func messageRoundTrip(_ original: DeviceMessage) throws {
        var buffer = ByteBuffer()
        original.frame.write(to: &buffer)
        #expect(buffer.readableBytes == original.frame.encodedLength)
        #expect(try message(buffer) == original)
    }

    /// The bytes of two frames, spelled out from docs/device-protocol.md.
    @Test func framesAreWrittenAsDocumented() {
        let id = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
        let idBytes: [UInt8] = Array(1...16)
        var ack = ByteBuffer()
        DeviceMessage.ack(deliveryID: id, status: 0).write(to: &ack)
        #expect(Array(ack.readableBytesView) == [0x0B, 0, 0, 0, 23, 0x01, 0, 1, 0, 0x03, 0, 16] + idBytes)

        let token = [UInt8](repeating: 0xAB, count: 32)
        let notification = DeviceNotification(
            token: token, payload: Array(#"{"a":1}"#.utf8), id: id, deliveryID: UUID(uuid: (17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32)),
            expiration: 0x0102_0304, priority: 10, topic: "t.x", collapseID: "c",
            pushType: "alert")
        var frame = ByteBuffer()
        DeviceMessage.notification(notification).write(to: &frame)
        var items: [UInt8] = [0x01, 0, 32] + token
        items += [0x02, 0, 7] + Array(#"{"a":1}"#.utf8)
        items += [0x03, 0, 16] + idBytes
        items += [0x04, 0, 4, 1, 2, 3, 4]
        items += [0x05, 0, 1, 10]
        items += [0x06, 0, 3] + Array("t.x".utf8)
        items += [0x07, 0, 1] + Array("c".utf8)
        items += [0x08, 0, 5] + Array("alert".utf8)
        items += [0x09, 0, 16] + Array(17...32)
        #expect(Array(frame.readableBytesView) == [0x0A, 0, 0, 0, UInt8(items.count)] + items)
    }

    @Test func verifierDripFeedsAndBatchesFrames() throws {
        let pairs: [(ByteBuffer, [DeviceFrame])] = Self.everyMessage.map { message in
            var buffer = ByteBuffer()
            message.frame.write(to: &buffer)
            return (buffer, [message.frame])
        }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs, decoderFactory: { DeviceFrameDecoder() })
    }

    @Test func everyDocumentedCommandHasARoundTrip() {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = (try? String(contentsOf: root.appendingPathComponent("docs/device-protocol.md"), encoding: .utf8)) ?? ""
        var documented = Set<UInt8>()
        for line in text.split(separator: "\n") where line.hasPrefix("### 0x") {
            for word in line.split(separator: " ") where word.hasPrefix("0x") {
                if let value = UInt8(word.dropFirst(2), radix: 16) { documented.insert(value) }
            }
        }
        let covered = Set(Self.everyMessage.map(\.frame.command))
        #expect(documented.count == 16)
        #expect(documented == covered)
    }

    @Test func everyDocumentedCodeHasItsName() {
        let rows = documentRows(under: "## Error and status codes", in: "docs/device-protocol.md")
        #expect(rows.count == 14)
        for row in rows {
            guard let value = UInt8(row[0]) else {
                Issue.record("bad row \(row)")
                continue
            }
            #expect(DeviceProtocolCode(rawValue: value).name == row[1])
        }
    }

    // MARK: Framing rules (docs/device-protocol.md, "Framing")

    @Test func framingRowsAreAllCovered() {
        let rows = documentRows(under: "## Framing", in: "docs/device-protocol.md")
        #expect(rows.map { $0[0] } == [
            "`length` greater than the receiver's maximum frame length (default 16,384 bytes, `limits.deviceMaxFrameLength`)",
            "fewer bytes than the header or `length` announce",
            "an item header or value runs past the end of the frame",
            "an item id the command does not define",
            "an item that is not repeatable appears twice",
            "a required item is missing",
            "an item value of the wrong size or an invalid value (bad UTF-8, zero-length where a value is required)",
            "a command byte this page does not define, or a server-to-device command sent by a device",
            "a device command other than Connect before Connect was accepted, or Connect twice",
        ])
    }

    @Test func frameOverTheMaximumIsRefusedFromItsHeader() {
        var header = ByteBuffer()
        header.writeInteger(DeviceCommand.keepAlive)
        header.writeInteger(UInt32(16_385))
        #expect(code { try decodeFrames(header) } == .frameTooLarge)
        var small = ByteBuffer()
        small.writeInteger(DeviceCommand.keepAlive)
        small.writeInteger(UInt32(2_000))
        #expect(code { try decodeFrames(small, maxFrameLength: 1_024) } == .frameTooLarge)
    }

    @Test func incompleteFramesWait() throws {
        var buffer = ByteBuffer()
        DeviceMessage.appTokenRequest(bundleID: "com.example.demo", requestID: 1).frame.write(to: &buffer)
        for cut in 0..<buffer.readableBytes {
            #expect(try decodeFrames(buffer.getSlice(at: 0, length: cut)!).isEmpty)
        }
    }

    @Test func itemPastTheFrameEnd() {
        var buffer = ByteBuffer()
        buffer.writeInteger(DeviceCommand.appTokenRequest)
        buffer.writeInteger(UInt32(5))
        buffer.writeMultipleIntegers(UInt8(1), UInt16(10))  // announces 10 bytes, the frame has 2
        buffer.writeBytes([0x41, 0x42])
        #expect(code { try decodeFrames(buffer) } == .malformedFrame)
    }

    @Test func unknownItemsAreIgnored() throws {
        let input = rawFrame(DeviceCommand.appTokenRequest) { f in
            f.writeFrameItem(id: 0x01, Array("com.example.demo".utf8))
            f.writeFrameItem(id: 0x77, [1, 2, 3])
            f.writeFrameItem(id: 0x02, integer: UInt32(5))
        }
        #expect(try message(input) == .appTokenRequest(bundleID: "com.example.demo", requestID: 5))
    }

    @Test func repeatedSingleItem() {
        let input = rawFrame(DeviceCommand.appTokenRequest) { f in
            f.writeFrameItem(id: 0x01, Array("com.example.demo".utf8))
            f.writeFrameItem(id: 0x01, Array("com.example.other".utf8))
            f.writeFrameItem(id: 0x02, integer: UInt32(5))
        }
        #expect(code { try message(input) } == .malformedFrame)
    }

    @Test func missingRequiredItem() {
        let input = rawFrame(DeviceCommand.appTokenRequest) { f in f.writeFrameItem(id: 0x02, integer: UInt32(5)) }
        #expect(code { try message(input) } == .missingItem)
        let connect = rawFrame(DeviceCommand.connect) { _ in }
        #expect(code { try message(connect) } == .missingItem)
        let okWithoutToken = rawFrame(DeviceCommand.appTokenResponse) { f in
            f.writeFrameItem(id: 0x02, integer: UInt32(5))
            f.writeFrameItem(id: 0x04, integer: UInt8(0))
        }
        #expect(code { try message(okWithoutToken) } == .missingItem)
    }

    @Test func badItemValues() {
        let shortToken = rawFrame(DeviceCommand.connect) { f in
            f.writeFrameItem(id: 0x01, integer: UInt8(1))
            f.writeFrameItem(id: 0x02, Array(repeating: 1, count: 31))
        }
        #expect(code { try message(shortToken) } == .badItemValue)
        let wideVersion = rawFrame(DeviceCommand.connect) { f in f.writeFrameItem(id: 0x01, integer: UInt16(1)) }
        #expect(code { try message(wideVersion) } == .badItemValue)
        let badUTF8 = rawFrame(DeviceCommand.unregister) { f in
            f.writeFrameItem(id: 0x01, [0xC3, 0x28])
            f.writeFrameItem(id: 0x02, integer: UInt32(1))
        }
        #expect(code { try message(badUTF8) } == .badItemValue)
        let emptyBundle = rawFrame(DeviceCommand.unregister) { f in
            f.writeFrameItem(id: 0x01, [])
            f.writeFrameItem(id: 0x02, integer: UInt32(1))
        }
        #expect(code { try message(emptyBundle) } == .badItemValue)
        let unknownKind = rawFrame(DeviceCommand.appTokenRequest) { f in
            f.writeFrameItem(id: 0x01, Array("com.example.demo".utf8))
            f.writeFrameItem(id: 0x02, integer: UInt32(1))
            f.writeFrameItem(id: 0x05, integer: UInt8(3))
        }
        #expect(code { try message(unknownKind) } == .badItemValue)
        let badPriority = rawFrame(DeviceCommand.notification) { f in
            f.writeFrameItem(id: 0x01, sampleToken)
            f.writeFrameItem(id: 0x02, [0x7B, 0x7D])
            f.writeFrameItem(id: 0x03, Array(repeating: 0, count: 16))
            f.writeFrameItem(id: 0x05, integer: UInt8(7))
            f.writeFrameItem(id: 0x06, Array("com.example.demo".utf8))
        }
        #expect(code { try message(badPriority) } == .badItemValue)
        let shortHash = rawFrame(DeviceCommand.filter) { f in f.writeFrameItem(id: 0x01, Array(repeating: 1, count: 19)) }
        #expect(code { try message(shortHash) } == .badItemValue)
    }

    @Test func unknownCommand() {
        #expect(code { try message(rawFrame(0x42) { _ in }) } == .unknownCommand)
    }

    @Test func connectAckAnnouncesTheTokenLength() throws {
        let long = Array(repeating: UInt8(9), count: 64)
        let frame = DeviceMessage.connectAck(status: .ok, serverTime: 0, keepAlive: 60, maxFrameLength: 16_384, refusedTokens: [long], tokenLength: 64).frame
        // Read by a device that expects 32-byte tokens: the announced length wins.
        #expect(try DeviceMessage(frame: frame, tokenLength: 32)
            == .connectAck(status: .ok, serverTime: 0, keepAlive: 60, maxFrameLength: 16_384, refusedTokens: [long], tokenLength: 64))
    }

    @Test func tokenLengthFollowsTheServer() throws {
        let long = Array(repeating: UInt8(3), count: 64)
        let frame = DeviceMessage.connect(version: 1, tokens: [long], keepAlive: nil, generation: nil).frame
        #expect(try DeviceMessage(frame: frame, tokenLength: 64) == .connect(version: 1, tokens: [long], keepAlive: nil, generation: nil))
        #expect(code { try DeviceMessage(frame: frame, tokenLength: 32) } == .badItemValue)
    }

    /// An Error's message is cut to 1,024 bytes on a character boundary:
    /// what the server writes, the reader takes (found by FuzzDeviceMessage).
    @Test(arguments: [1_023, 1_024, 1_025])
    func aLongErrorMessageIsCutWhereTheReaderTakesIt(_ asciiBefore: Int) throws {
        let long = String(repeating: "a", count: asciiBefore) + "é€😀" + String(repeating: "b", count: 10)
        var buffer = ByteBuffer()
        DeviceMessage.error(code: .internal, message: long).write(to: &buffer)
        let decoded = try message(buffer)
        guard case .error(.internal, let text) = decoded else {
            Issue.record("expected an Error, got \(decoded)")
            return
        }
        #expect(text.utf8.count <= 1_024)
        #expect(long.hasPrefix(text), "a start of the message, cut between characters")
        #expect(text.utf8.count >= 1_021, "no more than one character lost")
    }

    /// What the server checks before it sends a notification is what the
    /// codec refuses: each item at its bounds is read, one byte past is not.
    @Test func aNotificationWithinTheItemBoundsIsReadAndOnePastIsNot() throws {
        let base = DeviceNotification(token: sampleToken, payload: [0x7B, 0x7D], id: sampleID, deliveryID: sampleDeliveryID, expiration: nil, priority: 10, topic: "t")
        var edges: [(DeviceNotification, Bool)] = []
        for (length, readable) in [(64, true), (65, false)] {
            var n = base
            n.collapseID = String(repeating: "c", count: length)
            edges.append((n, readable))
        }
        for (length, readable) in [(255, true), (256, false)] {
            var pushType = base
            pushType.pushType = String(repeating: "p", count: length)
            edges.append((pushType, readable))
            var topic = base
            topic.topic = String(repeating: "t", count: length)
            edges.append((topic, readable))
        }
        for (empty, readable) in [("", false)] {
            var n = base
            n.collapseID = empty
            edges.append((n, readable))
        }
        for (notification, readable) in edges {
            #expect((notification.problem(tokenLength: 32) == nil) == readable, "\(notification)")
            var buffer = ByteBuffer()
            DeviceMessage.notification(notification).write(to: &buffer)
            let frame = try #require(try decodeFrames(buffer).first)
            if readable {
                #expect(try DeviceMessage(frame: frame) == .notification(notification))
            } else {
                #expect(code { try DeviceMessage(frame: frame) } == .badItemValue)
                // The device can still name it, to refuse it.
                #expect(frame.deliveryIDOfUnreadableNotification == sampleDeliveryID)
            }
        }
        #expect(base.problem(tokenLength: 16) != nil, "a token of another length")
        // A frame without (or with a bad) delivery id cannot be refused by it.
        let withoutID = DeviceFrame(command: DeviceCommand.notification, items: [DeviceFrame.Item(id: 0x01, value: ByteBuffer(bytes: sampleToken))])
        #expect(withoutID.deliveryIDOfUnreadableNotification == nil)
        let shortID = DeviceFrame(command: DeviceCommand.notification, items: [DeviceFrame.Item(id: 0x09, value: ByteBuffer(bytes: [1, 2, 3]))])
        #expect(shortID.deliveryIDOfUnreadableNotification == nil)
        let notANotification = DeviceFrame(command: DeviceCommand.ack, items: [DeviceFrame.Item(id: 0x09, value: ByteBuffer(bytes: Array(1...16)))])
        #expect(notANotification.deliveryIDOfUnreadableNotification == nil)
    }
}

@Suite struct FeedbackTupleTests {
    @Test func tuplesRoundTrip() throws {
        let tuples = [
            FeedbackTuple(timestamp: 1_750_000_000, token: sampleToken),
            FeedbackTuple(timestamp: 1, token: Array(repeating: 0xFF, count: 64)),
        ]
        let pairs: [(ByteBuffer, [FeedbackTuple])] = tuples.map { tuple in
            var buffer = ByteBuffer()
            tuple.write(to: &buffer)
            return (buffer, [tuple])
        }
        var first = ByteBuffer()
        tuples[0].write(to: &first)
        #expect(Array(first.readableBytesView.prefix(6)) == [0x68, 0x4E, 0xE1, 0x80, 0x00, 0x20])
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs, decoderFactory: { FeedbackTupleDecoder() })
    }

    @Test func anOversizedTokenLengthIsAnError() {
        var buffer = ByteBuffer()
        buffer.writeMultipleIntegers(UInt32(5), UInt16(300))
        let processor = NIOSingleStepByteToMessageProcessor(FeedbackTupleDecoder(maxTokenLength: 255))
        #expect(throws: WireError.frameTooLarge(300)) { try processor.process(buffer: buffer) { _ in } }
    }
}
