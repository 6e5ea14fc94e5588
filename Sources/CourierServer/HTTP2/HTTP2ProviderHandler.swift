import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

/// Waits for the TLS handshake, then decides the connection's trust (a
/// client certificate, or tokens) and sets up HTTP/2: a token connection
/// starts with one concurrent stream until a valid token is seen.
final class HTTP2ConnectionSetup: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    let gateway: HTTP2Gateway
    let peer: PeerIdentityBox
    let work: ConnectionWork
    let release: ConnectionRelease

    init(gateway: HTTP2Gateway, peer: PeerIdentityBox, work: ConnectionWork, release: ConnectionRelease) {
        self.gateway = gateway
        self.peer = peer
        self.work = work
        self.release = release
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case .handshakeCompleted = event as? TLSUserEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        let trust: ProviderTrust
        if let record = peer.record {
            if let (identity, info) = try? ProviderIdentity.certificate(record), !identity.topics.isEmpty {
                // The default topic: the only one, when the certificate has one (seeds, table 8-2).
                trust = .certificate(record, identity, defaultTopic: info.topics.count == 1 ? info.topics.first?.description : nil)
            } else {
                trust = .unusableCertificate(record)
            }
        } else {
            trust = .token(TokenTrust(environment: gateway.environment))
        }
        let options = gateway.configuration.http2
        let handle = HTTP2ConnectionHandle(channel: context.channel, trust: trust, now: gateway.clock.now())
        let settings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: trust.isCertificate ? options.maxConcurrentStreams : 1),
            HTTP2Setting(parameter: .maxHeaderListSize, value: HPACKDecoder.defaultMaxHeaderListSize),
        ]
        do {
            let operations = context.pipeline.syncOperations
            try operations.addHandler(HTTP2ProviderHandler(gateway: gateway, connection: handle, work: work, release: release), position: .after(self))
            var http2 = NIOHTTP2Handler.ConnectionConfiguration()
            http2.initialSettings = settings
            // Every stream the server resets in a window is remembered, so
            // that DATA the client sent before it read the reset (held by
            // flow control, say) is dropped, not taken for DATA on a long
            // closed stream: NIO's 32 made that a connection error
            // (GOAWAY STREAM_CLOSED) once a connection had more resets
            // outstanding than that, before the server's own limit.
            http2.maximumRecentlyResetStreams = HTTP2ProviderHandler.serverResetLimit + 1
            try operations.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: http2), position: .after(self))
            operations.removeHandler(context: context, promise: nil)
        } catch {
            context.close(promise: nil)
            return
        }
        gateway.register(handle)
        if let record = peer.record {
            gateway.policy.certificates.register(serial: record.serial, channel: context.channel) { handle.goAway(.badCertificate) }
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// One connection's streams: collects each request's headers and body,
/// answers the header rows at once and the rest through the gateway, and
/// writes the answers. Runs on the connection's event loop; it speaks to
/// the HTTP/2 state machine in frames (no child channel per stream).
final class HTTP2ProviderHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct OpenStream {
        var headers: HPACKHeaders
        var body: ByteBuffer?
        /// What it holds, counted in `unfinishedBytes`.
        var bytes: Int
    }

    let gateway: HTTP2Gateway
    let connection: HTTP2ConnectionHandle
    /// Where requests that wait are answered.
    let work: ConnectionWork
    /// Told of the connection's first valid provider token.
    let release: ConnectionRelease
    /// The requests the current read completed (`decideReceived`).
    private var received: [HTTP2Request] = []
    private let deciding = HTTP2DecisionQueue()
    /// Durable pushes whose commit has finished, answered on the loop
    /// together: one hop per commit, not one per push.
    private let committedAnswers = HTTP2CommittedAnswers()
    /// Answers written since the last flush (`scheduleFlush`).
    private var unflushed = 0
    private let eventLoop: any EventLoop
    /// The largest body kept; beyond it a request is `PayloadTooLarge`.
    private let bodyLimit: Int
    /// Bytes held by requests not received whole, and the most allowed.
    private var unfinishedBytes = 0
    private let unfinishedLimit: Int
    private var streams: [HTTP2StreamID: OpenStream] = [:]
    /// What the connection's life allows now (`HTTP2ConnectionStateMachine`).
    private var machine = HTTP2ConnectionStateMachine()
    private var flushScheduled = false
    private var context: ChannelHandlerContext?

    init(gateway: HTTP2Gateway, connection: HTTP2ConnectionHandle, work: ConnectionWork, release: ConnectionRelease) {
        self.gateway = gateway
        self.connection = connection
        self.work = work
        self.release = release
        eventLoop = connection.channel.eventLoop
        let limits = gateway.configuration.limits.payload
        bodyLimit = max(limits.http2, limits.http2VoIP, limits.broadcast)
        unfinishedLimit = gateway.configuration.connections.maxUnfinishedRequestBytes
    }

    /// Forgets a stream's request and what it held.
    @discardableResult
    private func remove(_ streamID: HTTP2StreamID) -> OpenStream? {
        guard let stream = streams.removeValue(forKey: streamID) else { return nil }
        unfinishedBytes -= stream.bytes
        return stream
    }

    /// Counts `count` more bytes held by the unfinished request `stream`;
    /// when that would go over the limit the stream is reset
    /// (ENHANCE_YOUR_CALM) and forgotten instead, and false returned.
    private func hold(_ count: Int, in stream: inout OpenStream, _ streamID: HTTP2StreamID, context: ChannelHandlerContext) -> Bool {
        guard unfinishedBytes + count <= unfinishedLimit else {
            remove(streamID)
            gateway.policy.peerLog.log(
                .info, "reset a stream: the connection holds too much unfinished", metadata: ["courier.bytes": "\(unfinishedBytes)"], to: gateway.logger)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.enhanceYourCalm))), promise: nil)
            scheduleFlush(context: context)
            countServerReset(context: context)
            return false
        }
        unfinishedBytes += count
        stream.bytes += count
        return true
    }

    /// Streams this side reset, in the current window: counted as the
    /// peer's own resets are by NIO's rapid-reset limit (200 per 30 s), so
    /// a peer that makes the server reset its streams — and write a log
    /// line for each — gets GOAWAY (ENHANCE_YOUR_CALM) as one that resets
    /// them itself does. Half NIO's count: a client on NIO's defaults
    /// takes 200 resets from the server as an attack of the server's and
    /// closes the connection itself, before it would read the GOAWAY.
    private var serverResets = (count: 0, since: NIODeadline.distantPast)
    private var closingForResets = false
    static let serverResetLimit = 100
    static let serverResetWindow = TimeAmount.seconds(30)

    private func countServerReset(context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        if now - serverResets.since >= Self.serverResetWindow { serverResets = (0, now) }
        serverResets.count += 1
        guard serverResets.count > Self.serverResetLimit, !closingForResets else { return }
        closingForResets = true
        gateway.policy.peerLog.log(
            .info, "closing a connection that made the server reset too many of its streams", metadata: ["courier.resets": "\(serverResets.count)"],
            to: gateway.logger)
        sendGoAway(nil, errorCode: .enhanceYourCalm, context: context)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            if streams[frame.streamID] == nil {
                // Trailers on a known stream add nothing; a new stream starts a request.
                var stream = OpenStream(headers: headers.headers, bytes: 0)
                machine.requestBegan(on: frame.streamID)
                connection.touch(gateway.clock.now())
                if !headers.endStream {
                    let size = headers.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
                    guard hold(size, in: &stream, frame.streamID, context: context) else { return }
                }
                streams[frame.streamID] = stream
            }
            if headers.endStream { requestReceived(frame.streamID, context: context) }
        case .data(let data):
            guard var stream = streams[frame.streamID], case .byteBuffer(var bytes) = data.data else { return }
            let kept = stream.body?.readableBytes ?? 0
            if kept + bytes.readableBytes > bodyLimit {
                remove(frame.streamID)
                if gateway.managesChannels || HTTP2ChannelRequestHead.isBroadcast(stream.headers) {
                    // A broadcast API request: refused for its size once its trust and route are known, under its apns-request-id.
                    stream.body = nil
                    decideChannelRequest(stream, on: frame.streamID, management: gateway.managesChannels, oversized: true, context: context)
                    return
                }
                // Too large whatever the topic: answer now and stop the upload.
                var answer = HTTP2Answer.failure(.payloadTooLarge, apnsID: Self.apnsID(in: stream.headers))
                answer.endsUpload = true
                // Recorded with the part of the body that came (the inbox cuts it).
                if let entry = gateway.entry(stream.headers, body: stream.body ?? bytes, answer: answer, connection: connection) { gateway.inbox.record(entry) }
                write(answer, on: frame.streamID, context: context)
                return
            }
            if data.endStream {
                if stream.body == nil {
                    stream.body = bytes
                } else {
                    stream.body!.writeBuffer(&bytes)
                }
                streams[frame.streamID] = stream
                requestReceived(frame.streamID, context: context)
                return
            }
            // Kept for a later frame: in a buffer of its own, not a slice
            // that would pin (and make the TLS handler copy) its read buffer.
            guard hold(bytes.readableBytes, in: &stream, frame.streamID, context: context) else { return }
            if stream.body == nil {
                var own = context.channel.allocator.buffer(capacity: bytes.readableBytes)
                own.writeBuffer(&bytes)
                stream.body = own
            } else {
                stream.body!.writeBuffer(&bytes)
            }
            streams[frame.streamID] = stream
        case .rstStream:
            remove(frame.streamID)
        default:
            // SETTINGS, PING and WINDOW_UPDATE are the HTTP/2 handler's; PRIORITY is ignored.
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent {
            replenish(window, context: context)
        } else if let request = event as? HTTP2GoAwayRequest {
            if let reason = machine.goAwayRequested(request.reason) { sendGoAway(reason, context: context) }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream error costs the stream (the HTTP/2 handler reset it); anything else the connection.
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            remove(streamError.streamID)
            return
        }
        gateway.logger.debug("HTTP/2 connection failed", metadata: ["courier.error": "\(error)"])
        context.close(promise: nil)
    }

    /// The connection window is ours to manage (no child channels): once
    /// the peer may send less than half of the default window, give back
    /// what was read — counted by the HTTP/2 handler, so DATA of streams
    /// already answered counts too.
    private func replenish(_ event: NIOHTTP2WindowUpdatedEvent, context: ChannelHandlerContext) {
        guard event.streamID == .rootStream, let window = event.inboundWindowSize, window <= Self.connectionWindow / 2 else { return }
        let frame = HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - window))
        context.write(wrapOutboundOut(frame), promise: nil)
        scheduleFlush(context: context)
    }

    private static let connectionWindow = 65_535

    private static func apnsID(in headers: HPACKHeaders) -> String {
        headers.first(name: "apns-id") ?? UUID.notificationID().lowercasedString
    }

    /// A broadcast API request's `apns-request-id`, or a new one.
    private static func requestID(in headers: HPACKHeaders) -> String {
        headers.first(name: HTTP2Answer.requestIDHeader) ?? UUID.notificationID().lowercasedString
    }

    /// A stream's request is whole (its headers, and its body when it has one): decided.
    private func requestReceived(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = remove(streamID) else { return }
        let empty = context.channel.allocator.buffer(capacity: 0)
        if case .refuse(let reason) = machine.requestComplete() {
            var answer = HTTP2Answer.failure(reason, apnsID: Self.apnsID(in: stream.headers))
            if gateway.managesChannels || HTTP2ChannelRequestHead.isBroadcast(stream.headers) {
                answer = .failure(reason, requestID: Self.requestID(in: stream.headers))
            }
            if let entry = gateway.entry(stream.headers, body: stream.body ?? empty, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
            return
        }
        if gateway.managesChannels {
            decideChannelRequest(stream, on: streamID, management: true, context: context)
            return
        }
        let head: HTTP2RequestHead
        switch HTTP2RequestHead.parse(stream.headers) {
        // Only a refused path or method can be a broadcast's: the other /3/device requests pay nothing for the route.
        case .failure(.badPath) where HTTP2ChannelRequestHead.isBroadcast(stream.headers),
            .failure(.methodNotAllowed) where HTTP2ChannelRequestHead.isBroadcast(stream.headers):
            decideChannelRequest(stream, on: streamID, management: false, context: context)
            return
        case .failure(let reason):
            let answer = HTTP2Answer.failure(reason, apnsID: Self.apnsID(in: stream.headers))
            if let entry = gateway.entry(stream.headers, body: stream.body ?? empty, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
            return
        case .success(let parsed): head = parsed
        }
        machine.dispatched()
        received.append(HTTP2Request(streamID: streamID, head: head, headers: stream.headers, body: stream.body ?? empty))
    }

    /// A request of the broadcast API: answered through the listener's
    /// work (it needs the store), or refused now when its method or path is wrong.
    /// `oversized`: its body went over the limit (and was not kept).
    private func decideChannelRequest(
        _ stream: OpenStream, on streamID: HTTP2StreamID, management: Bool, oversized: Bool = false, context: ChannelHandlerContext
    ) {
        let body = stream.body ?? context.channel.allocator.buffer(capacity: 0)
        switch HTTP2ChannelRequestHead.parse(stream.headers, management: management) {
        case .failure(let reason):
            var answer = HTTP2Answer.failure(reason, requestID: Self.requestID(in: stream.headers))
            answer.endsUpload = oversized
            if let entry = gateway.entry(stream.headers, body: body, answer: answer, connection: connection) { gateway.inbox.record(entry) }
            write(answer, on: streamID, context: context)
        case .success(let head):
            machine.dispatched()
            let (gateway, connection, headers) = (self.gateway, self.connection, stream.headers)
            respond(to: .waits { await gateway.answer(head, headers: headers, body: body, oversized: oversized, connection: connection) }, on: streamID)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        decideReceived(context: context)
        context.fireChannelReadComplete()
    }

    /// Decides the requests one read completed. A request alone in flight
    /// is decided here, on the event loop. A busy connection's go to its
    /// `HTTP2DecisionQueue`, decided in order by one task of the listener's
    /// work while there are any, answered in one hop back to the loop per
    /// batch: its requests are decided on another core than the one its
    /// TLS and HTTP/2 framing take, at a task per busy spell, not per
    /// request.
    private func decideReceived(context: ChannelHandlerContext) {
        guard !received.isEmpty else { return }
        if received.count == 1, machine.inFlight == 1 {
            let request = received.removeLast()
            respond(to: gateway.decide(request.head, headers: request.headers, body: request.body, connection: connection), on: request.streamID)
            return
        }
        let start = deciding.add(received)
        received.removeAll(keepingCapacity: true)
        guard start else { return }
        let (gateway, connection, deciding) = (self.gateway, self.connection, self.deciding)
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        work.start {
            while let requests = deciding.next() {
                let decided = requests.map { ($0.streamID, gateway.decide($0.head, headers: $0.headers, body: $0.body, connection: connection)) }
                handler.eventLoop.execute {
                    for (streamID, decision) in decided { handler.value.respond(to: decision, on: streamID) }
                }
            }
        }
    }

    /// Answers a decided request, on the event loop: now, after its
    /// commit, or after what it waits for (in the listener's work).
    private func respond(to decision: HTTP2Gateway.Decision, on streamID: HTTP2StreamID) {
        switch decision {
        case .answered(let answer):
            send(answer, on: streamID)
        case .committing(let durable, let answer):
            let handler = NIOLoopBound(self, eventLoop: eventLoop)
            let answers = committedAnswers
            durable.whenResolved { result in
                let committed = if case .success = result { true } else { false }
                // A commit resolves its pushes one after another on its own
                // thread: the first of them to find nothing waiting hops.
                guard answers.add(answer(committed), on: streamID) else { return }
                handler.eventLoop.execute {
                    for (streamID, answer) in answers.take() { handler.value.send(answer, on: streamID) }
                }
            }
        case .waits(let answer):
            let handler = NIOLoopBound(self, eventLoop: eventLoop)
            work.start {
                let decided = await answer()
                handler.eventLoop.execute { handler.value.send(decided, on: streamID) }
            }
        }
    }

    /// Sends a request's answer: recorded in the inbox, counted by the
    /// connection's state machine, written.
    private func send(_ answer: HTTP2Answer, on streamID: HTTP2StreamID) {
        if let entry = answer.entry { gateway.inbox.record(entry) }
        let action = machine.answered(firstValidToken: answer.liftStreamLimit)
        guard let context else { return }
        if action.liftStreamLimit {
            // The first valid token: the connection authenticated.
            release.authenticated()
            let settings = [HTTP2Setting(parameter: .maxConcurrentStreams, value: gateway.configuration.http2.maxConcurrentStreams)]
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings)))), promise: nil)
        }
        write(answer, on: streamID, context: context)
        if let reason = action.goAway { sendGoAway(reason, context: context) }
    }

    /// Writes an answer; one that `endsUpload` is followed by a reset of
    /// its stream once it is out (sent sooner, the reset would drop the
    /// answer's DATA still queued).
    private func write(_ answer: HTTP2Answer, on streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard answer.endsUpload else {
            write(answer, on: streamID, context: context, promise: nil)
            return
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        write(answer, on: streamID, context: context, promise: written)
        let reset = HTTP2Frame(streamID: streamID, payload: .rstStream(.noError))
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in
            guard let context = bound.value.context else { return }
            context.writeAndFlush(bound.value.wrapOutboundOut(reset), promise: nil)
        }
    }

    private func write(_ answer: HTTP2Answer, on streamID: HTTP2StreamID, context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        // The apns-id differs on every answer: kept out of the HPACK table.
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: answer.status == 200 ? "200" : String(answer.status))
        headers.add(name: answer.idHeader, value: answer.apnsID, indexing: .nonIndexable)
        if let channelID = answer.channelID { headers.add(name: "apns-channel-id", value: channelID, indexing: .nonIndexable) }
        if let uniqueID = answer.uniqueID { headers.add(name: "apns-unique-id", value: uniqueID.lowercasedString, indexing: .nonIndexable) }
        if let body = answer.body {
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(body.count))
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers)))), promise: nil)
            let buffer = context.channel.allocator.buffer(bytes: body)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true)))), promise: promise)
        } else {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: true)))), promise: promise)
        }
        scheduleFlush(context: context)
    }

    /// One flush for the answers finished in the same turn of the loop,
    /// and one every `flushEvery` of them: a batch of a busy connection's
    /// answers goes out in parts, so that the provider sends its next
    /// requests while the rest are written, not after.
    private static let flushEvery = 32

    private func scheduleFlush(context: ChannelHandlerContext) {
        unflushed += 1
        if unflushed >= Self.flushEvery {
            unflushed = 0
            context.flush()
        }
        guard !flushScheduled else { return }
        flushScheduled = true
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            handler.value.flushScheduled = false
            handler.value.unflushed = 0
            handler.value.context?.flush()
        }
    }

    /// GOAWAY, then the close: with an APNs `reason` in its data (NO_ERROR),
    /// or with the HTTP/2 `errorCode` alone.
    private func sendGoAway(_ reason: Reason?, errorCode: HTTP2ErrorCode = .noError, context: ChannelHandlerContext) {
        let data = reason.map { context.channel.allocator.buffer(bytes: HTTP2ErrorBody(reason: $0).json) }
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: machine.lastStream, errorCode: errorCode, opaqueData: data))
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in channel.close(promise: nil) }
    }
}


/// A request whose headers parsed, on its way to its decision.
struct HTTP2Request: Sendable {
    var streamID: HTTP2StreamID
    var head: HTTP2RequestHead
    var headers: HPACKHeaders
    var body: ByteBuffer
}

/// A busy connection's requests waiting for their decision, in arrival
/// order, and whether a task is deciding them (`HTTP2ProviderHandler`).
final class HTTP2DecisionQueue: Sendable {
    private struct State {
        var requests: [HTTP2Request] = []
        var deciding = false
    }

    private let state = Mutex(State())

    /// Queues requests; true when no task is deciding (the caller starts one).
    func add(_ requests: [HTTP2Request]) -> Bool {
        state.withLock { state in
            state.requests += requests
            guard !state.deciding else { return false }
            state.deciding = true
            return true
        }
    }

    /// Everything queued, in order; nil once nothing is (the task ends).
    func next() -> [HTTP2Request]? {
        state.withLock { state in
            guard !state.requests.isEmpty else {
                state.deciding = false
                return nil
            }
            defer { state.requests = [] }
            return state.requests
        }
    }
}

/// Answers of a connection's durable pushes, from their commits' thread to
/// the connection's event loop.
final class HTTP2CommittedAnswers: Sendable {
    private let answers = Mutex<[(HTTP2StreamID, HTTP2Answer)]>([])

    /// Adds an answer; true when none was waiting (the caller hops to the
    /// loop to `take` them).
    func add(_ answer: HTTP2Answer, on streamID: HTTP2StreamID) -> Bool {
        answers.withLock { answers in
            answers.append((streamID, answer))
            return answers.count == 1
        }
    }

    /// Everything added, in order.
    func take() -> [(HTTP2StreamID, HTTP2Answer)] {
        answers.withLock { answers in
            defer { answers = [] }
            return answers
        }
    }
}
