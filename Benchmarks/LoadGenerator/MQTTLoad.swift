// `--mode mqtt`: the same delivery benchmark against an MQTT broker
// (Benchmarks/mqtt/compare.sh runs Debian's mosquitto), for a comparison
// in one sitting: N subscribers over TLS, each on a topic of its own at
// QoS 1 (each message acknowledged, as a Courier device acknowledges), and
// one publisher over TLS sending QoS 1 messages to them in turn, first at a
// fixed rate, then as fast as its connection takes them. The messages are
// the light delivery benchmark's payloads, carrying their send time.
//
// The client side of MQTT 3.1.1 that this needs (CONNECT, SUBSCRIBE,
// PUBLISH and PUBACK), written for the benchmark: no package among the
// project's speaks MQTT.
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// One MQTT control packet: its type, the flags of its first byte, and the rest.
struct MQTTPacket {
    var type: UInt8
    var flags: UInt8
    var body: ByteBuffer

    static let connect: UInt8 = 1, connack: UInt8 = 2, publish: UInt8 = 3, puback: UInt8 = 4, subscribe: UInt8 = 8, suback: UInt8 = 9
}

/// Splits the byte stream into packets (fixed header, variable length).
struct MQTTPacketDecoder: NIOSingleStepByteToMessageDecoder {
    typealias InboundOut = MQTTPacket

    mutating func decode(buffer: inout ByteBuffer) throws -> MQTTPacket? {
        let start = buffer.readerIndex
        guard let first = buffer.readInteger(as: UInt8.self) else { return nil }
        var length = 0
        var shift = 0
        while true {
            guard let byte = buffer.readInteger(as: UInt8.self) else {
                buffer.moveReaderIndex(to: start)
                return nil
            }
            length |= Int(byte & 0x7f) << shift
            if byte & 0x80 == 0 { break }
            shift += 7
            guard shift <= 21 else { throw LightLoadError(description: "an MQTT packet with a bad length") }
        }
        guard let body = buffer.readSlice(length: length) else {
            buffer.moveReaderIndex(to: start)
            return nil
        }
        return MQTTPacket(type: first >> 4, flags: first & 0x0f, body: body)
    }

    mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> MQTTPacket? { try decode(buffer: &buffer) }
}

extension ByteBuffer {
    /// A packet's fixed header: type and flags, then the remaining length.
    mutating func writeMQTTHeader(type: UInt8, flags: UInt8 = 0, length: Int) {
        writeInteger(type << 4 | flags)
        var rest = length
        repeat {
            var byte = UInt8(rest & 0x7f)
            rest >>= 7
            if rest > 0 { byte |= 0x80 }
            writeInteger(byte)
        } while rest > 0
    }

    mutating func writeMQTTString(_ text: String) {
        writeInteger(UInt16(text.utf8.count))
        writeString(text)
    }

    /// CONNECT with a clean session.
    mutating func writeMQTTConnect(clientID: String) {
        writeMQTTHeader(type: MQTTPacket.connect, length: 10 + 2 + clientID.utf8.count)
        writeMQTTString("MQTT")
        writeInteger(UInt8(4))  // 3.1.1
        writeInteger(UInt8(0x02))  // clean session
        writeInteger(UInt16(600))  // keep-alive, seconds
        writeMQTTString(clientID)
    }

    /// PUBLISH at QoS 1.
    mutating func writeMQTTPublish(topic: String, packetID: UInt16, payload: some Collection<UInt8>) {
        writeMQTTHeader(type: MQTTPacket.publish, flags: 0x02, length: 2 + topic.utf8.count + 2 + payload.count)
        writeMQTTString(topic)
        writeInteger(packetID)
        writeBytes(payload)
    }
}

/// One subscriber: connects, subscribes to its topic at QoS 1, and records
/// and acknowledges every message.
final class MQTTSubscriber: ChannelInboundHandler {
    typealias InboundIn = MQTTPacket
    typealias OutboundOut = ByteBuffer

    let topic: String
    let collector: Collector
    let subscribed: EventLoopPromise<Void>
    private var unflushed = false

    init(topic: String, collector: Collector, subscribed: EventLoopPromise<Void>) {
        self.topic = topic
        self.collector = collector
        self.subscribed = subscribed
    }

    func channelActive(context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: 64)
        buffer.writeMQTTConnect(clientID: topic)
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var packet = unwrapInboundIn(data)
        switch packet.type {
        case MQTTPacket.connack:
            guard packet.body.getInteger(at: packet.body.readerIndex + 1, as: UInt8.self) == 0 else {
                return fail(context, "the broker refused the connection")
            }
            var buffer = context.channel.allocator.buffer(capacity: 64)
            buffer.writeMQTTHeader(type: MQTTPacket.subscribe, flags: 0x02, length: 2 + 2 + topic.utf8.count + 1)
            buffer.writeInteger(UInt16(1))
            buffer.writeMQTTString(topic)
            buffer.writeInteger(UInt8(1))  // QoS 1
            context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        case MQTTPacket.suback:
            guard packet.body.getInteger(at: packet.body.readerIndex + 2, as: UInt8.self) == 1 else {
                return fail(context, "the broker did not grant QoS 1")
            }
            subscribed.succeed(())
        case MQTTPacket.publish:
            guard let length = packet.body.readInteger(as: UInt16.self), packet.body.readableBytes >= Int(length) else { return }
            packet.body.moveReaderIndex(forwardBy: Int(length))
            let qos = (packet.flags >> 1) & 0x03
            let packetID = qos > 0 ? packet.body.readInteger(as: UInt16.self) : nil
            collector.record(Array(packet.body.readableBytesView))
            if let packetID {
                var buffer = context.channel.allocator.buffer(capacity: 4)
                buffer.writeMQTTHeader(type: MQTTPacket.puback, length: 2)
                buffer.writeInteger(packetID)
                context.write(wrapOutboundOut(buffer), promise: nil)
                unflushed = true
            }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if unflushed {
            unflushed = false
            context.flush()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        subscribed.fail(ChannelError.ioOnClosedChannel)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        subscribed.fail(error)
        context.close(promise: nil)
    }

    private func fail(_ context: ChannelHandlerContext, _ why: String) {
        subscribed.fail(LightLoadError(description: why))
        context.close(promise: nil)
    }
}

/// The publisher's connection: CONNECT, then only the broker's PUBACKs come back.
final class MQTTPublisherHandler: ChannelInboundHandler {
    typealias InboundIn = MQTTPacket
    typealias OutboundOut = ByteBuffer
    let connected: EventLoopPromise<Void>

    init(connected: EventLoopPromise<Void>) { self.connected = connected }

    func channelActive(context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: 64)
        buffer.writeMQTTConnect(clientID: "courier-load-publisher")
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let packet = unwrapInboundIn(data)
        if packet.type == MQTTPacket.connack { connected.succeed(()) }
    }

    func channelInactive(context: ChannelHandlerContext) { connected.fail(ChannelError.ioOnClosedChannel) }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        connected.fail(error)
        context.close(promise: nil)
    }
}

/// Writes QoS 1 messages carrying their send time to the subscribers' topics in turn.
struct MQTTPublisher: StampedSender {
    let channel: any Channel
    let topics: [String]
    var sent = 0

    mutating func batch(_ count: Int) -> ByteBuffer {
        var buffer = channel.allocator.buffer(capacity: count * 80)
        for _ in 0..<count {
            let payload = #"{"aps":{"alert":"load"},"t":\#(nanoseconds())}"#.utf8
            buffer.writeMQTTPublish(topic: topics[sent % topics.count], packetID: UInt16(sent % 65535 + 1), payload: payload)
            sent += 1
        }
        return buffer
    }
}

func mqttDelivery(_ arguments: Arguments) async throws {
    guard let caPath = arguments.mqttCA else { throw LightLoadError(description: "--mode mqtt needs --mqtt-ca, the broker's CA (PEM)") }
    var tls = TLSConfiguration.makeClientConfiguration()
    tls.trustRoots = .file(caPath)
    let context = try NIOSSLContext(configuration: tls)
    let collector = Collector(latencyFile: arguments.latencyFile)
    let group = MultiThreadedEventLoopGroup.singleton
    let before = arguments.serverPID.flatMap(residentKiB)

    let connectStart = Date()
    let topics = (0..<arguments.devices).map { "d/\($0)" }
    let subscribers = try await inWaves(topics.count, wave: arguments.connectWave) { index in
        let channel = try await ClientBootstrap(group: group)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: arguments.host, port: arguments.mqttPort) { channel in
                channel.eventLoop.makeCompletedFuture { () -> (any Channel, EventLoopFuture<Void>) in
                    let subscriber = MQTTSubscriber(topic: topics[index], collector: collector, subscribed: channel.eventLoop.makePromise())
                    try channel.pipeline.syncOperations.addHandlers([
                        try NIOSSLClientHandler(context: context, serverHostname: "localhost"),
                        ByteToMessageHandler(MQTTPacketDecoder()),
                        subscriber,
                    ])
                    return (channel, subscriber.subscribed.futureResult)
                }
            }
        try await channel.1.get()
        return channel.0
    }
    print("connected and subscribed \(subscribers.count) MQTT subscribers in \(String(format: "%.1f", Date().timeIntervalSince(connectStart))) s")
    printServerMemory(arguments.serverPID, before: before, connections: subscribers.count)

    let (channel, connected) = try await ClientBootstrap(group: group)
        .channelOption(.tcpOption(.tcp_nodelay), value: 1)
        .connect(host: arguments.host, port: arguments.mqttPort) { channel in
            channel.eventLoop.makeCompletedFuture { () -> (any Channel, EventLoopFuture<Void>) in
                let handler = MQTTPublisherHandler(connected: channel.eventLoop.makePromise())
                try channel.pipeline.syncOperations.addHandlers([
                    try NIOSSLClientHandler(context: context, serverHostname: "localhost"), ByteToMessageHandler(MQTTPacketDecoder()), handler,
                ])
                return (channel, handler.connected.futureResult)
            }
        }
    try await connected.get()
    var publisher = MQTTPublisher(channel: channel, topics: topics)
    let cpu = arguments.serverPID.map { CPUMeter(server: $0) }

    try await fixedRateAndSaturation(&publisher, arguments: arguments, collector: collector, cpu: cpu, saturation: "saturation")
    try? await channel.close()
    for subscriber in subscribers { subscriber.close(promise: nil) }
}
