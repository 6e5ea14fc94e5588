import Benchmark
import CourierCore
import CourierPKI
import CourierSQLite
import CourierWire
import Crypto
import Foundation
import NIOCore

/// A command-2 frame of exactly 150 bytes: token (32), payload (89),
/// identifier, expiry and priority.
func command2Frame() -> ByteBuffer {
    let payload = Array(#"{"aps":{"alert":"Your order has shipped","badge":1,"sound":"default"},"order":"A-123456"}"#.utf8)
    precondition(payload.count == 89, "payload is \(payload.count) bytes")
    var buffer = ByteBuffer()
    buffer.writeBinaryNotification(
        token: (0..<32).map { UInt8($0) }, payload: payload, identifier: 1, expiry: 1_900_000_000, priority: 10)
    precondition(buffer.readableBytes == 150)
    return buffer
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .throughput],
        warmupIterations: 1,
        scalingFactor: .mega,
        maxDuration: .seconds(5),
        maxIterations: 10
    )

    // One million 150-byte frames decoded from a buffer that holds 1,000 of
    // them back to back (as a TLS read hands them over), each frame through
    // the same decoder a connection uses.
    Benchmark("Decode command-2 frame (150 bytes)") { benchmark in
        var batch = ByteBuffer()
        let frame = command2Frame()
        for _ in 0..<1_000 { batch.writeImmutableBuffer(frame) }
        var decoder = BinaryProviderDecoder()
        var decoded = 0
        benchmark.startMeasurement()
        for _ in 0..<(benchmark.scaledIterations.count / 1_000) {
            var input = batch
            while let message = try decoder.decode(buffer: &input) {
                if case .notification(let notification) = message { decoded &+= notification.payload.readableBytes }
            }
        }
        benchmark.stopMeasurement()
        blackHole(decoded)
    }

    // One million delivery-log events packed as the log writer packs them:
    // batches of 1,000, the kinds a delivered notification gets and one
    // with a detail, all of one app.
    Benchmark("Pack delivery-log events (batches of 1,000)") { benchmark in
        let at = Date(timeIntervalSince1970: 1_900_000_000)
        let kinds: [DeliveryEvent.Kind] = [.accepted, .delivered, .acknowledged, .expired]
        let events = (0..<1_000).map { n in
            DeliveryEvent(
                notificationID: UUID(), bundleID: "com.example.app", kind: kinds[n % kinds.count], at: at, detail: n % kinds.count == 3 ? "device offline and expiration 0" : nil)
        }
        var packed = 0
        benchmark.startMeasurement()
        for _ in 0..<(benchmark.scaledIterations.count / 1_000) {
            packed &+= DeliveryLogBatch(events).events.count
        }
        benchmark.stopMeasurement()
        blackHole(packed)
    }

    // One million payloads checked against the payload rules (the 89-byte
    // payload of the frame benchmark, read from a buffer as a gateway does).
    Benchmark("Check payload (89 bytes)") { benchmark in
        let payload = ByteBuffer(bytes: #"{"aps":{"alert":"Your order has shipped","badge":1,"sound":"default"},"order":"A-123456"}"#.utf8)
        var silent = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            if case .success(let summary) = PayloadRules.check(payload.readableBytesView, priority: 10, channel: .binaryCommand2, limits: PayloadLimits()),
                summary.isSilent
            {
                silent &+= 1
            }
        }
        benchmark.stopMeasurement()
        blackHole(silent)
    }

    // One million device tokens opened and authenticated.
    Benchmark("Open device token (32 bytes)") { benchmark in
        let codec = try DeviceTokenCodec(secret: SymmetricKey(size: .bits256), environment: .production)
        let token = codec.issue(DeviceTokenContents(deviceID: 0x0123_4567_89AB_CDEF, generation: 1, bundleID: "com.example.demo"))
        var accepted = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            if case .success(let contents) = codec.open(token) { accepted &+= Int(contents.generation) }
        }
        benchmark.stopMeasurement()
        blackHole(accepted)
    }
}
