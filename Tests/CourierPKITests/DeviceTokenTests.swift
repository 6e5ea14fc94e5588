import CourierCore
import CourierPKI
import Crypto
import Testing

@Suite struct DeviceTokenTests {
    let secret = SymmetricKey(data: Array(repeating: UInt8(0x42), count: 32))
    var production: DeviceTokenCodec { try! DeviceTokenCodec(secret: secret, environment: .production) }
    var sandbox: DeviceTokenCodec { try! DeviceTokenCodec(secret: secret, environment: .sandbox) }
    let contents = DeviceTokenContents(deviceID: 0x0123_4567_89AB_CDEF, generation: 1, bundleID: "com.example.demo")

    @Test func issuedTokensAre32BytesAndOpen() throws {
        let token = production.issue(contents)
        #expect(token.count == 32)
        #expect(production.open(token) == .success(contents))
        #expect(try production.open(token).get().belongs(to: "com.example.demo"))
        #expect(!(try production.open(token).get().belongs(to: "com.example.other")))
    }

    /// Live Activity tokens carry their activity; a device token none.
    @Test func liveActivityTokensCarryTheirActivity() throws {
        #expect(!contents.isLiveActivity)
        var pushToStart = contents
        pushToStart.activity = DeviceTokenContents.pushToStart
        var update = contents
        update.activity = 7
        let tokens = [production.issue(contents), production.issue(pushToStart), production.issue(update)]
        #expect(Set(tokens).count == 3)
        #expect(try production.open(tokens[1]).get() == pushToStart)
        #expect(try production.open(tokens[2]).get().activity == 7)
        #expect(try production.open(tokens[2]).get().isLiveActivity)
        #expect(try production.open(tokens[0]).get().activity == 0)
    }

    @Test func sameInputsGiveTheSameToken() {
        #expect(production.issue(contents) == production.issue(contents))
        let again = try! DeviceTokenCodec(secret: secret, environment: .production)
        #expect(again.issue(contents) == production.issue(contents))
    }

    @Test func aNewGenerationGivesANewToken() {
        var next = contents
        next.generation = 2
        #expect(production.issue(next) != production.issue(contents))
        #expect(production.open(production.issue(next)) == .success(next))
    }

    @Test func everyFlippedBitIsRejected() {
        let token = production.issue(contents)
        for bit in 0..<(token.count * 8) {
            var altered = token
            altered[bit / 8] ^= 1 << UInt8(bit % 8)
            #expect(production.open(altered) == .failure(.notAuthentic), "bit \(bit)")
        }
    }

    @Test func environmentsDoNotAcceptEachOthersTokens() {
        let productionToken = production.issue(contents)
        let sandboxToken = sandbox.issue(contents)
        #expect(productionToken != sandboxToken)
        #expect(sandbox.open(productionToken) == .failure(.notAuthentic))
        #expect(production.open(sandboxToken) == .failure(.notAuthentic))
        #expect(sandbox.open(sandboxToken) == .success(contents))
    }

    @Test func anotherKeyCannotOpenOrForge() throws {
        let other = try DeviceTokenCodec(secret: SymmetricKey(size: .bits256), environment: .production)
        #expect(other.open(production.issue(contents)) == .failure(.notAuthentic))
        #expect(production.open(other.issue(contents)) == .failure(.notAuthentic))
    }

    @Test func wrongLengthIsRejected() {
        #expect(production.open(Array(repeating: 0, count: 31)) == .failure(.badLength(31)))
        #expect(production.open(Array(repeating: 0, count: 64)) == .failure(.badLength(64)))
    }

    @Test func nothingAboutTheDeviceIsReadable() {
        let token = production.issue(contents)
        let idBytes = (0..<8).map { UInt8(truncatingIfNeeded: contents.deviceID >> (56 - 8 * UInt64($0))) }
        // The device id does not appear, not even four bytes of it in a row.
        for start in 0...(idBytes.count - 4) {
            let window = Array(idBytes[start..<(start + 4)])
            #expect(!token.windows(4).contains(window))
        }
        #expect(!token.windows(4).contains(Array("com.".utf8)))
        // Neighbouring devices and apps give unrelated tokens: about half the bits differ.
        let neighbour = production.issue(DeviceTokenContents(deviceID: contents.deviceID + 1, generation: 1, bundleID: "com.example.demo"))
        let otherApp = production.issue(DeviceTokenContents(deviceID: contents.deviceID, generation: 1, bundleID: "com.example.demp"))
        for other in [neighbour, otherApp] {
            let differing = zip(token, other).map { ($0 ^ $1).nonzeroBitCount }.reduce(0, +)
            #expect((80...176).contains(differing), "\(differing) of 256 bits differ")
        }
        // Random tokens of the right length do not open.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<1000 {
            let random = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(production.open(random) == .failure(.notAuthentic))
        }
    }

    @Test(arguments: [34, 64, 100, 254])
    func configurableLengths(_ length: Int) throws {
        let codec = try DeviceTokenCodec(secret: secret, environment: .sandbox, length: length)
        let token = codec.issue(contents)
        #expect(token.count == length)
        #expect(codec.open(token) == .success(contents))
        var altered = token
        altered[length - 1] ^= 0x80
        #expect(codec.open(altered) == .failure(.notAuthentic))
        altered = token
        altered[0] ^= 0x01
        #expect(codec.open(altered) == .failure(.notAuthentic))
    }

    /// Tokens issued by earlier versions keep opening: the bytes for fixed
    /// inputs, in both environments and at three lengths (one AES block
    /// per Feistel half, and the longer halves' CBC-MAC and counter mode).
    @Test(arguments: [
        (Environment.production, 32, ["c018e0d6db2578f67b12a72c230da7e4b563bb631722d58288ca9553ced8e4cd", "4be54214e0774d09cfeb913896e3c3898cb576cd520c21f0c7ff34fee04c27d9"]),
        (Environment.sandbox, 32, ["0c0e643f4e5c45ae0456de97798d1c1f1673e4e2f217a35d83db4e3897e57f5b", "7d0767830e0dc4a4720159513e4954d4b24e6c30b32b1d88634fcba085aa0cdf"]),
        (Environment.production, 34, [
            "083748ec8c6b171a6f1235dfe449ce5cb3f0e53138cd0013a1c5e154c4136e5118ef",
            "bb0cee83108a8cbc2ae37cbe4323c5163dfc30def213af517ca8456ffca9d7ce93bf",
        ]),
        (Environment.sandbox, 100, [
            "0977efd0be126fd47f86d63cb6836a126a0ac05ee6091a05198d31b9e547d5bcb8590ed2a7e6f870c6227cd7ab07ba82833c2af7b6a38efb796f68b62bc9abfd81e38fa0919b64f3e6494792c2061d21c362f63fc04cf6be37878898276e942cc32d70c7",
            "e5c3b7c7834424c4b8d8160bbe2b054af13619be5b4af98bab73513f3da30549468bbf1bb91696855ee4c8b2bf5e5d22d4ad29d1a2882cf4d7dc973ec36d6e198b7c1a1708cf3c3ace99e40608425618d2533efda97fcdad7db812e6e440bb3401d75af4",
        ]),
    ])
    func tokensAreTheSameAsBefore(_ environment: Environment, _ length: Int, _ expected: [String]) throws {
        let codec = try DeviceTokenCodec(secret: secret, environment: environment, length: length)
        var update = contents
        update.activity = 7
        let tokens = [codec.issue(contents), codec.issue(update)]
        #expect(tokens.map { Hex.encode($0) } == expected)
        #expect(try tokens.map { try codec.open($0).get() } == [contents, update])
    }

    @Test(arguments: [30, 33, 256])
    func invalidLengthsAreRefused(_ length: Int) {
        #expect(throws: PKIError.self) { try DeviceTokenCodec(secret: secret, environment: .sandbox, length: length) }
    }
}

extension Array {
    func windows(_ size: Int) -> [[Element]] {
        guard count >= size else { return [] }
        return (0...(count - size)).map { Array(self[$0..<($0 + size)]) }
    }
}
