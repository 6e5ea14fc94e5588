import CourierCore
import CourierWire
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// An answer as the server sent it.
public struct HTTP2RawResponse: Sendable, Hashable {
    public var status: Int
    public var headers: [String: String]
    public var body: [UInt8]

    public var apnsID: String? { headers["apns-id"] }
    /// The sandbox's `apns-unique-id`.
    public var uniqueID: String? { headers["apns-unique-id"] }
}

/// A GOAWAY the server sent, with its `{"reason": …}` data.
public struct HTTP2GoAway: Sendable, Hashable {
    public var errorCode: Int
    public var lastStreamID: Int
    public var reason: Reason?
}

/// Errors of the HTTP/2 provider client.
public enum HTTP2ClientError: Error, Sendable, Hashable, CustomStringConvertible {
    case handshakeFailed(String)
    /// The server closed the connection before the handshake, with no TLS
    /// alert: over one of its connection limits (docs/security.md).
    case refusedBeforeHandshake(String)
    /// The server's certificate did not verify against the CA given (or the system's).
    case untrustedServer(String)
    /// The connection ended before the answer came (a GOAWAY's reason when it said one).
    case connectionClosed(Reason?)
    /// The server reset the stream (for instance more streams than it allows).
    case streamReset(Int)

    public var description: String {
        switch self {
        case .handshakeFailed(let endpoint): "the TLS handshake with \(endpoint) failed: the server refused the certificate, or the CA does not match"
        case .refusedBeforeHandshake(let endpoint):
            "the server at \(endpoint) closed the connection before its TLS handshake: it refused it (over a connection limit)"
        case .untrustedServer(let endpoint): "the server at \(endpoint) has a certificate that is not trusted"
        case .connectionClosed(let reason?): "the server closed the connection (\(reason))"
        case .connectionClosed(nil): "the server closed the connection"
        case .streamReset(let code): "the server reset the stream (HTTP/2 error \(code))"
        }
    }
}

/// What the connection's root stream told: SETTINGS values and GOAWAY.
final class HTTP2ConnectionEvents: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame

    private struct State {
        var maxConcurrentStreams: [Int] = []
        var goAway: HTTP2GoAway?
        var pingAcks = 0
        var closed = false
        var waiters: [CheckedContinuation<HTTP2GoAway?, Never>] = []
    }

    private let state = Mutex(State())

    var maxConcurrentStreams: [Int] { state.withLock { $0.maxConcurrentStreams } }
    var goAway: HTTP2GoAway? { state.withLock { $0.goAway } }
    var pingAcks: Int { state.withLock { $0.pingAcks } }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            let values = settings.filter { $0.parameter == .maxConcurrentStreams }.map(\.value)
            state.withLock { $0.maxConcurrentStreams += values }
        case .goAway(let lastStreamID, let errorCode, let opaqueData):
            let reason = opaqueData.flatMap { HTTP2ErrorBody.decode($0.readableBytesView) }.map { Reason(rawValue: $0.reason) }
            let goAway = HTTP2GoAway(errorCode: Int(errorCode.networkCode), lastStreamID: Int(Int32(lastStreamID)), reason: reason)
            state.withLock { if $0.goAway == nil { $0.goAway = goAway } }
        case .ping(_, ack: true):
            state.withLock { $0.pingAcks += 1 }
        default:
            break
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        let (waiters, goAway) = state.withLock { state in
            state.closed = true
            defer { state.waiters = [] }
            return (state.waiters, state.goAway)
        }
        for waiter in waiters { waiter.resume(returning: goAway) }
        context.fireChannelInactive()
    }

    /// Waits until the connection closes; its GOAWAY, if one came.
    func closed() async -> HTTP2GoAway? {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> HTTP2GoAway?? in
                if state.closed { return .some(state.goAway) }
                state.waiters.append(continuation)
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
    }
}

/// One HTTP/2 connection to a provider API: TLS with ALPN `h2`, a stream
/// per request. The client library pools these; tests use one directly
/// to send any headers they like and to see SETTINGS and GOAWAY.
public final class HTTP2Connection: Sendable {
    let channel: any Channel
    let multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>
    let events: HTTP2ConnectionEvents

    init(channel: any Channel, multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>, events: HTTP2ConnectionEvents) {
        self.channel = channel
        self.multiplexer = multiplexer
        self.events = events
    }

    /// Connects and completes the TLS handshake. `alpn` empty offers no
    /// protocol (a client Apple also accepts). `timeout`: the connection
    /// and its handshake must be done within it, or the attempt fails.
    public static func connect(
        host: String, port: Int, tls: TLSConfiguration, serverName: String? = nil, alpn: [String] = ["h2"],
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, timeout: Duration = .seconds(10)
    ) async throws -> HTTP2Connection {
        let limit = TimeAmount.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
        var tls = tls
        tls.applicationProtocols = alpn
        let context = try NIOSSLContext(configuration: tls)
        let events = HTTP2ConnectionEvents()
        let serverName = serverName ?? (host.first?.isNumber == true ? nil : host)
        let (channel, multiplexer, handshake) = try await ClientBootstrap(group: group)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(limit)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let signal = HandshakeSignal(promise: channel.eventLoop.makePromise())
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: serverName))
                    try channel.pipeline.syncOperations.addHandler(signal)
                    let multiplexer = try channel.pipeline.syncOperations.configureAsyncHTTP2Pipeline(mode: .client) { stream in
                        stream.eventLoop.makeSucceededVoidFuture()
                    }
                    try channel.pipeline.syncOperations.addHandler(events)
                    return (channel, multiplexer, signal.promise.futureResult)
                }
            }
        // A handshake not done in time ends with the connection.
        let deadline = channel.eventLoop.scheduleTask(in: limit) { channel.close(promise: nil) }
        defer { deadline.cancel() }
        do {
            try await handshake.get()
        } catch {
            try? await channel.close()
            if ConnectionFailure(error) == .untrustedServer { throw HTTP2ClientError.untrustedServer("\(host):\(port)") }
            if ConnectionFailure(error) == .closedBeforeHandshake { throw HTTP2ClientError.refusedBeforeHandshake("\(host):\(port)") }
            throw HTTP2ClientError.handshakeFailed("\(host):\(port)")
        }
        return HTTP2Connection(channel: channel, multiplexer: multiplexer, events: events)
    }

    /// True until the server said GOAWAY or the connection closed.
    public var isUsable: Bool { channel.isActive && events.goAway == nil }

    /// Every SETTINGS_MAX_CONCURRENT_STREAMS the server announced, in order.
    public var announcedMaxConcurrentStreams: [Int] { events.maxConcurrentStreams }

    /// Waits until the connection is closed; the server's GOAWAY if it sent one.
    public func closed() async -> HTTP2GoAway? { await events.closed() }

    /// A new stream, and `headers` as HPACK headers; a connection that
    /// cannot open one any more is `connectionClosed`.
    private func openStream(
        _ headers: [(name: String, value: String, indexing: HPACKIndexing)]
    ) async throws -> (NIOAsyncChannel<HTTP2Frame.FramePayload, HTTP2Frame.FramePayload>, HPACKHeaders) {
        let stream: NIOAsyncChannel<HTTP2Frame.FramePayload, HTTP2Frame.FramePayload>
        do {
            stream = try await multiplexer.openStream { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<HTTP2Frame.FramePayload, HTTP2Frame.FramePayload>(wrappingChannelSynchronously: channel)
                }
            }
        } catch {
            throw HTTP2ClientError.connectionClosed(events.goAway?.reason)
        }
        var hpack = HPACKHeaders()
        for header in headers { hpack.add(name: header.name, value: header.value, indexing: header.indexing) }
        return (stream, hpack)
    }

    /// Sends one request with exactly these headers (pseudo-headers
    /// included, in order) and its body; returns the answer.
    public func request(_ headers: [(name: String, value: String, indexing: HPACKIndexing)], body: [UInt8]?) async throws -> HTTP2RawResponse {
        let (stream, hpack) = try await openStream(headers)
        let goAway = { [events] in events.goAway?.reason }
        return try await stream.executeThenClose { inbound, outbound in
            let frameHeaders = hpack
            // A write that fails may still have an answer behind it (the
            // server answers a too-large upload early and resets the stream).
            do {
                try await outbound.write(.headers(.init(headers: frameHeaders, endStream: body == nil)))
                if let body {
                    try await outbound.write(.data(.init(data: .byteBuffer(ByteBuffer(bytes: body)), endStream: true)))
                }
            } catch {}
            var response = HTTP2RawResponse(status: 0, headers: [:], body: [])
            do {
                for try await frame in inbound {
                    switch frame {
                    case .headers(let received):
                        for (name, value, _) in received.headers {
                            if name == ":status" { response.status = Int(value) ?? 0 } else { response.headers[name] = value }
                        }
                        if received.endStream { return response }
                    case .data(let data):
                        if case .byteBuffer(let buffer) = data.data { response.body += buffer.readableBytesView }
                        if data.endStream { return response }
                    case .rstStream(let code):
                        // An answer followed by a reset (the server stopped a large upload) is still the answer.
                        if response.status != 0 { return response }
                        throw HTTP2ClientError.streamReset(Int(code.networkCode))
                    default:
                        continue
                    }
                }
            } catch let error as HTTP2ClientError {
                throw error
            } catch {
                if response.status != 0 { return response }
                throw HTTP2ClientError.connectionClosed(goAway())
            }
            if response.status != 0 { return response }
            throw HTTP2ClientError.connectionClosed(goAway())
        }
    }

    /// Opens a stream, sends `headers` without ending it, and runs `body`
    /// with the stream's frames as they come and a writer of its own (a
    /// request and its answer streamed both ways at once); the stream is
    /// closed when `body` returns or throws.
    public func withStream<T: Sendable>(
        _ headers: [(name: String, value: String, indexing: HPACKIndexing)],
        _ body: @Sendable (NIOAsyncChannelInboundStream<HTTP2Frame.FramePayload>, NIOAsyncChannelOutboundWriter<HTTP2Frame.FramePayload>) async throws -> T
    ) async throws -> T {
        let (stream, frameHeaders) = try await openStream(headers)
        return try await stream.executeThenClose { inbound, outbound in
            try await outbound.write(.headers(.init(headers: frameHeaders, endStream: false)))
            return try await body(inbound, outbound)
        }
    }

    /// Opens a stream and sends `headers` and the start of a body, without
    /// ending the stream (an upload left unfinished, as a slow or hostile
    /// client leaves it): for checking what a server lets a connection
    /// hold. The task returns the error code of the server's RST_STREAM on
    /// the stream, or nil when the stream ends another way.
    public func startUnfinishedRequest(
        _ headers: [(name: String, value: String, indexing: HPACKIndexing)], bodyStart: [UInt8]
    ) async throws -> Task<Int?, Never> {
        let stream = try await multiplexer.openStream { channel in
            channel.eventLoop.makeCompletedFuture {
                try NIOAsyncChannel<HTTP2Frame.FramePayload, HTTP2Frame.FramePayload>(wrappingChannelSynchronously: channel)
            }
        }
        var hpack = HPACKHeaders()
        for header in headers { hpack.add(name: header.name, value: header.value, indexing: header.indexing) }
        let frameHeaders = hpack
        let sent = channel.eventLoop.makePromise(of: Void.self)
        let task = Task<Int?, Never> {
            try? await stream.executeThenClose { inbound, outbound in
                do {
                    try await outbound.write(.headers(.init(headers: frameHeaders, endStream: false)))
                    try await outbound.write(.data(.init(data: .byteBuffer(ByteBuffer(bytes: bodyStart)), endStream: false)))
                    sent.succeed()
                } catch {
                    sent.fail(error)
                    return nil
                }
                for try await frame in inbound {
                    if case .rstStream(let code) = frame { return Int(code.networkCode) }
                }
                return nil
            } ?? nil
        }
        try await sent.futureResult.get()
        return task
    }

    /// Writes a frame as it is (a PING, a PRIORITY frame): for checking
    /// how a server takes frames a client rarely sends.
    public func write(_ frame: HTTP2Frame) async throws {
        try await channel.writeAndFlush(frame)
    }

    /// How many PING acknowledgements the server sent.
    public var pingAcknowledgements: Int { events.pingAcks }

    /// Starts closing the connection, without waiting.
    public func startClosing() {
        channel.close(promise: nil)
    }

    public func close() async {
        try? await channel.close()
    }
}
