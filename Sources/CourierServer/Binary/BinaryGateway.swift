import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

/// The legacy binary provider API of one environment (seeds 000–002,
/// docs/protocol.md §1): TLS with the provider's certificate, commands 0, 1 and 2
/// processed strictly in order, the error-response packet for the first
/// bad notification, status 10 on graceful shutdown.
///
/// A connection's notifications are admitted on its event loop, by a
/// `BinaryConnectionHandler`, as they are decoded; only one the dispatcher
/// cannot decide at once (the store must be asked, or the delivery log has
/// no room) waits in a task, and the connection reads nothing more until it
/// is decided.
final class BinaryGateway: ListenerInterface {
    let basics: PortBasics
    let dispatcher: Dispatcher
    /// Counts every frame's outcome.
    let metrics: ServerMetrics
    /// Every notification frame, with its outcome.
    let inbox: NotificationInbox
    /// The admin API's fault rules.
    let faults: FaultInjector
    /// The open connections, for the admin API.
    let connections = BinaryConnections()
    /// How long to keep reading (and discarding) after an error packet, so
    /// that closing is not a TCP reset that destroys the packet.
    let linger: TimeAmount = .milliseconds(250)
    private let decoderLimits: BinaryDecoderLimits
    /// A connection idle for `connections.binaryIdle` is closed.
    private let silence: SilenceSweeps<SilenceTimeout>

    init(
        environment: Environment, configuration: CourierConfiguration, tls: ServerTLS, provisioner: Provisioner, dispatcher: Dispatcher,
        metrics: ServerMetrics, inbox: NotificationInbox, faults: FaultInjector, policy: ConnectionPolicy, logger: Logger
    ) throws {
        self.inbox = inbox
        self.faults = faults
        // TLS 1.2 at most, as Apple's gateway spoke: TLS 1.3 session tickets
        // arrive after the handshake, and old clients take them for an error response.
        basics = PortBasics(
            .binary, environment, configuration: configuration, policy: policy, authority: tls,
            context: try ServerTLS.context(provisioner: provisioner, maximumVersion: .tlsv12), peers: .providers(checkingEnvironment: true), logger: logger)
        self.dispatcher = dispatcher
        self.metrics = metrics
        silence = SilenceSweeps(timeout: policy.connections.binaryIdle)
        decoderLimits = BinaryDecoderLimits(
            tokenLength: configuration.limits.tokenLength, legacyPayload: configuration.limits.payload.binaryLegacy,
            command2Payload: configuration.limits.payload.binaryCommand2)
    }

    func setUp(_ channel: any Channel, peer: PeerIdentityBox, work: ConnectionWork, release: ConnectionRelease) throws -> Never? {
        try channel.pipeline.syncOperations.addHandlers(
            SilenceTimeout(silence),
            BinaryConnectionHandler(gateway: self, peer: peer, work: work, limits: decoderLimits))
        return nil
    }

    /// Each open connection learns the last notification accepted: status 10.
    func farewell(_ channel: any Channel) {
        channel.pipeline.fireUserInboundEventTriggered(BinaryConnectionHandler.ShuttingDown())
    }

    /// What one read's frames came to, recorded and counted once the read
    /// is handled.
    struct ReadOutcomes {
        var entries = InboxBatch()
        var accepted = 0
    }

    struct Refusal: Error {
        var status: BinaryStatus
    }

    /// The payload rules' summary of a frame's payload, or the status to
    /// answer when it breaks them.
    fileprivate func check(_ frame: BinaryNotificationFrame) -> Result<PayloadSummary, Refusal> {
        let channel: PayloadChannel = frame.command == 2 ? .binaryCommand2 : .binaryLegacy
        return PayloadRules.check(frame.payload.readableBytesView, priority: frame.priority, channel: channel, limits: configuration.limits.payload)
            .mapError { Refusal(status: $0.binaryStatus) }
    }

    /// The notification a frame carries, its payload checked (`check`).
    /// (Made where it is used, in a `let`: through a throwing function or
    /// a `Result` it was copied once more, every field retained and
    /// released again.)
    fileprivate func notification(_ frame: BinaryNotificationFrame, topic: String, summary: PayloadSummary) -> PushNotification {
        let priority = frame.priority.flatMap(Priority.init(rawValue:)) ?? (summary.isSilent ? .conservePower : .immediate)
        let expiration = frame.expiry.map { Date(timeIntervalSince1970: TimeInterval($0)) }
        return PushNotification(
            id: .notificationID(), token: Array(buffer: frame.token), topic: topic, payload: Array(buffer: frame.payload),
            expiration: expiration, priority: priority, isSilent: summary.isSilent, in: environment)
    }

    /// A frame's outcome — its pending commit when admitted, or the status
    /// to answer — or its notification when the dispatcher has to wait for
    /// the store before it can decide.
    fileprivate enum Admission {
        case decided(Result<Pending<Void>?, Refusal>)
        /// Decided in a task: the dispatcher's `admission` that waits, or,
        /// after a fault rule's (`fault`) `delay`, one made then.
        case waits(PushNotification, delay: Duration?, fault: String?, admission: Dispatcher.Admission?)
        /// A fault rule ends the connection: status 10 Shutdown.
        case closes
    }

    /// Decides one frame, without waiting: its payload, the fault rules,
    /// then the dispatcher. The frame's inbox entry, when it is decided
    /// here, goes into `read` (the connection records a read's entries at
    /// once); what waits goes on from the notification
    /// (`decideAfterWaiting`), nothing is decided twice.
    fileprivate func decide(
        _ frame: BinaryNotificationFrame, grant: TopicGrant, sender: BinaryProviderConnection?, source: InboxSource, now: Date, read: inout ReadOutcomes
    ) -> Admission {
        let summary: PayloadSummary
        switch check(frame) {
        case .success(let checked): summary = checked
        case .failure(let refusal):
            received(.refused(status: Int(refusal.status.rawValue), reason: refusal.status.meaning), into: &read) {
                entry(
                    BinaryFrameFields(frame), token: Array(buffer: frame.token), payload: Array(buffer: frame.payload), apnsID: nil, source: source,
                    outcome: $0, now: now)
            }
            return .decided(.failure(refusal))
        }
        let notification = self.notification(frame, topic: grant.topic, summary: summary)
        if faults.isActive, let owned = dispatcher.owned(notification, environment: environment, grant: grant, now: now),
            let rule = faults.take(FaultRequest(owned, interface: .binary, identity: sender?.identity), now: now)
        {
            return fault(rule, frame: frame, notification: notification, owned: owned, source: source, now: now, read: &read)
        }
        switch dispatcher.admit(notification, environment: environment, grant: grant, now: now) {
        case .waits(let decide):
            return .waits(notification, delay: nil, fault: nil, admission: .waits(decide: decide))
        case .decided(let result, let durable):
            // Written from the frame: the same entry as the notification's record, without making one.
            let outcome = Self.outcome(of: result)
            count(outcome, into: &read)
            if inbox.isRecording {
                read.entries.append(frame, id: notification.id, source: source, outcome: outcome, receivedAt: now, environment: environment)
            }
            return .decided(self.outcome((result, durable)))
        }
    }

    /// The rest of `decide` for a notification that waits: a fault rule's
    /// `delay`, then the dispatcher's `admission` (made here after a
    /// delay); its inbox entry recorded and its outcome counted.
    fileprivate func decideAfterWaiting(
        _ notification: PushNotification, grant: TopicGrant, delay: Duration?, fault: String?, admission: Dispatcher.Admission?, fields: BinaryFrameFields,
        source: InboxSource
    ) async -> (result: AcceptResult, durable: Pending<Void>?) {
        if let delay { try? await Task.sleep(for: delay) }
        let deciding = admission ?? dispatcher.admit(notification, environment: environment, grant: grant, now: dispatcher.clock.now())
        let decided = await deciding.decided()
        var late = ReadOutcomes()
        received(Self.outcome(of: decided.result), into: &late) {
            entry(fields, notification, source: source, outcome: $0, now: dispatcher.clock.now(), fault: fault)
        }
        finish(&late)
        return decided
    }

    /// What a fault rule makes of a notification: a refusal (its binary
    /// status; none, as for `Unregistered`, drops it unanswered), a delayed
    /// decision, or the connection's end.
    private func fault(
        _ rule: FaultRule, frame: BinaryNotificationFrame, notification: PushNotification, owned: Dispatcher.Owned, source: InboxSource, now: Date,
        read: inout ReadOutcomes
    ) -> Admission {
        dispatcher.logFault(rule, notification: notification, owned: owned)
        let fields = BinaryFrameFields(frame)
        func record(_ outcome: InboxOutcome) {
            received(outcome, into: &read) {
                entry(
                    fields, token: notification.token, payload: notification.payload, apnsID: notification.id, source: source, outcome: $0, now: now,
                    fault: rule.id)
            }
        }
        switch rule.action {
        case .reject(let reason, _, let binaryStatus):
            let status = binaryStatus ?? reason.binaryStatus
            record(.refused(status: status.map { Int($0.rawValue) }, reason: reason.rawValue))
            guard let status else { return .decided(.success(nil)) }
            return .decided(.failure(Refusal(status: status)))
        case .delay(let milliseconds):
            // Recorded with its outcome once decided.
            return .waits(notification, delay: .milliseconds(milliseconds), fault: rule.id, admission: nil)
        case .close:
            record(.refused(status: Int(BinaryStatus.shutdown.rawValue), reason: BinaryStatus.shutdown.meaning))
            return .closes
        }
    }

    /// Counts a frame's outcome (`ServerMetrics`: a refusal now, an
    /// acceptance with the read's others) and, when the inbox records,
    /// keeps its entry for the read's.
    fileprivate func received(_ outcome: InboxOutcome, into read: inout ReadOutcomes, entry: (InboxOutcome) -> InboxRecord) {
        count(outcome, into: &read)
        if inbox.isRecording { read.entries.append(entry(outcome)) }
    }

    /// Counts a frame's outcome: a refusal now, an acceptance with the read's others.
    private func count(_ outcome: InboxOutcome, into read: inout ReadOutcomes) {
        if outcome.isAccepted {
            read.accepted += 1
        } else {
            metrics.received(.binary, environment, outcome)
        }
    }

    /// A read's outcomes: its inbox entries recorded, its acceptances counted.
    fileprivate func finish(_ read: inout ReadOutcomes) {
        if read.accepted > 0 {
            metrics.accepted(.binary, environment, count: read.accepted)
            read.accepted = 0
        }
        guard !read.entries.isEmpty else { return }
        inbox.record(read.entries)
        read.entries.removeAll()
    }

    /// What the dispatcher's decision is, as the inbox says it.
    fileprivate static func outcome(of result: AcceptResult) -> InboxOutcome {
        switch result {
        case .accepted: .accepted
        case .rejected(let reason, _): .refused(status: reason.binaryStatus.map { Int($0.rawValue) }, reason: reason.rawValue)
        }
    }

    /// The inbox entry of a notification the dispatcher decided.
    fileprivate func entry(
        _ fields: BinaryFrameFields, _ notification: PushNotification, source: InboxSource, outcome: InboxOutcome, now: Date, fault: String? = nil
    ) -> InboxRecord {
        entry(
            fields, token: notification.token, payload: notification.payload, apnsID: notification.id, source: source, outcome: outcome, now: now, fault: fault)
    }

    fileprivate func entry(
        _ fields: BinaryFrameFields, token: [UInt8]?, payload: [UInt8], apnsID: UUID?, source: InboxSource, outcome: InboxOutcome, now: Date,
        fault: String? = nil
    ) -> InboxRecord {
        InboxRecord(
            receivedAt: now, interface: .binary, environment: environment, id: .uuid(apnsID ?? UUID.notificationID()), token: token, topic: source.topic,
            provider: source.provider, teamID: source.teamID, connection: source.connection, received: .binary(fields), payload: payload, outcome: outcome,
            fault: fault)
    }

    /// A frame that could not be decoded (`BinaryFrameFailure`), in the inbox.
    fileprivate func entry(_ failure: BinaryFrameFailure, source: InboxSource, outcome: InboxOutcome, now: Date) -> InboxRecord {
        InboxRecord(
            receivedAt: now, interface: .binary, environment: environment, id: .uuid(UUID.notificationID()), token: nil, topic: source.topic,
            provider: source.provider, teamID: source.teamID, connection: source.connection,
            received: .malformed(identifier: failure.identifier, detail: failure.detail), payload: [], outcome: outcome)
    }

    fileprivate func outcome(_ decided: (result: AcceptResult, durable: Pending<Void>?)) -> Result<Pending<Void>?, Refusal> {
        switch decided.result {
        case .accepted: return .success(decided.durable)
        case .rejected(let reason, _):
            // The binary API reports nothing for some refusals (Unregistered).
            guard let status = reason.binaryStatus else { return .success(nil) }
            return .failure(Refusal(status: status))
        }
    }
}

/// A binary frame's fields besides token and payload, as the inbox shows
/// them in place of HTTP/2's headers.
struct BinaryFrameFields: Sendable {
    var command: UInt8
    var identifier: UInt32
    var expiry: UInt32?
    var priority: UInt8?

    init(command: UInt8, identifier: UInt32, expiry: UInt32?, priority: UInt8?) {
        self.command = command
        self.identifier = identifier
        self.expiry = expiry
        self.priority = priority
    }

    init(_ frame: BinaryNotificationFrame) {
        self.init(command: frame.command, identifier: frame.identifier, expiry: frame.expiry, priority: frame.priority)
    }

    var headers: [(name: String, value: String)] {
        var headers = [("command", String(command))]
        if command != 0 { headers.append(("identifier", String(identifier))) }
        if let expiry { headers.append(("expiry", String(expiry))) }
        if let priority { headers.append(("priority", String(priority))) }
        return headers
    }
}

/// One binary connection's notifications, decoded from the bytes TLS
/// hands over and admitted in order on the connection's event loop, each
/// frame as it is decoded (no message per frame through the pipeline). The
/// dispatcher decides most at once; when it has to wait (the store is
/// asked about a token, or the delivery log has no room), the decision
/// runs in a task, the bytes after that frame wait here undecoded, and the
/// channel reads no more until it is decided — TCP holds back a provider
/// that writes faster than the server admits.
final class BinaryConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Graceful shutdown, or the certificate was revoked: answer status 10
    /// with the last accepted identifier, then close.
    struct ShuttingDown: Sendable {}

    private let gateway: BinaryGateway
    private let peer: PeerIdentityBox
    /// The last identifier accepted, as the commits finish.
    private let state = BinaryAcceptance()
    /// What the protocol allows now (`BinaryConnectionStateMachine`).
    private var machine = BinaryConnectionStateMachine()
    private var decoder: BinaryProviderDecoder
    /// What is received and not decoded yet: the start of a frame that the
    /// next read completes, or what arrived while a notification waits.
    private var received = ReceivedBytes()
    /// A frame begun must end in time.
    private var deadline: UnfinishedFrameDeadline
    /// Frames handled since the last read.
    private var handled = 0
    /// The certificate's provider and the peer's address, for the inbox;
    /// in the gateway's list of connections (`BinaryConnections`).
    private var sender: BinaryProviderConnection?
    /// The provider, topic and address the inbox records for the frames
    /// of `grant` (the connection's, from its handshake), made once.
    private var inboxSource: (grant: TopicGrant, source: InboxSource)?
    /// This read's inbox entries and acceptances, recorded and counted
    /// together (`recordEntries`).
    private var outcomes = BinaryGateway.ReadOutcomes()
    /// Where a notification that waits for the dispatcher is decided.
    private let work: ConnectionWork

    init(gateway: BinaryGateway, peer: PeerIdentityBox, work: ConnectionWork, limits: BinaryDecoderLimits) {
        self.gateway = gateway
        self.peer = peer
        self.work = work
        decoder = BinaryProviderDecoder(limits: limits)
        deadline = UnfinishedFrameDeadline(timeout: gateway.policy.connections.unfinishedFrame)
    }

    /// Starts, restarts or stops the unfinished-frame deadline after a
    /// read: bytes waiting while a notification waits for the dispatcher
    /// are whole frames held back by the server, not the peer's doing.
    private func checkUnfinishedFrame(context: ChannelHandlerContext) {
        // A long frame passing through the decoder counts as unfinished too: its bytes are not kept, its time is.
        let unfinished = machine.isAdmitting && (!received.isEmpty || decoder.isInsideLongFrame)
        deadline.update(unfinished: unfinished, progressed: handled > 0, channel: context.channel)
        sender?.count(handled)
        handled = 0
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            var grant: TopicGrant?
            var provider: ProviderIdentity?
            if let record = peer.record, let (identity, info) = try? ProviderIdentity.certificate(record),
                let topic = info.bundleID ?? info.topics.first?.description
            {
                grant = TopicGrant(topic, for: identity)
                provider = identity
            }
            switch machine.handshakeCompleted(grant) {
            case .admit:
                guard let record = peer.record else { break }
                let channel = context.channel
                if let provider { sender = gateway.connections.register(channel, identity: provider, now: gateway.dispatcher.clock.now()) }
                gateway.policy.certificates.register(serial: record.serial, channel: channel) {
                    channel.pipeline.fireUserInboundEventTriggered(ShuttingDown())
                }
            case .close:
                context.close(promise: nil)
            }
        } else if event is ShuttingDown {
            switch machine.shuttingDown() {
            case .close: context.close(promise: nil)
            case .answerShutdown: if state.answer() { write(.shutdown, state.lastAccepted, context: context) }
            }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // After the first bad notification (or status 10) everything is discarded.
        guard !machine.isOver else { return }
        // One time for the frames of one read: they arrived together.
        let now = gateway.dispatcher.clock.now()
        received.receive(unwrapInboundIn(data)) { handleFrames(in: &$0, now: now, context: context) }
        recordEntries()
        if machine.isOver { received.discard() }
        checkUnfinishedFrame(context: context)
    }

    func read(context: ChannelHandlerContext) {
        switch machine.readRequested() {
        case .read: context.read()
        case .hold: break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        // Can come in the middle of a read (a refusal closes at once): what
        // is received stays where it is, never to be read.
        machine.closed()
        deadline.cancel()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        gateway.logger.debug("binary connection ended", metadata: ["courier.error": "\(error)"])
        machine.closed()
        context.close(promise: nil)
    }

    /// What the inbox records of who sent `grant`'s frames.
    private func source(for grant: TopicGrant) -> InboxSource {
        if let made = inboxSource, made.grant === grant { return made.source }
        let source = InboxSource(topic: grant.topic, provider: sender?.identity.name, teamID: sender?.identity.teamID, connection: sender?.address)
        inboxSource = (grant, source)
        return source
    }

    private func handle(_ message: BinaryProviderInbound, grant: TopicGrant, source: InboxSource, now: Date, context: ChannelHandlerContext) {
        switch message {
        case .failure(let failure):
            gateway.policy.peerLog.log(
                .info, "malformed notification", metadata: ["courier.status": "\(failure.status)", "courier.detail": "\(failure.detail)"], to: gateway.logger)
            gateway.received(.refused(status: failure.answers ? Int(failure.status.rawValue) : nil, reason: failure.status.meaning), into: &outcomes) {
                gateway.entry(failure, source: source, outcome: $0, now: now)
            }
            refuse(failure.answers ? failure.status : nil, failure.identifier, context: context)
        case .notification(let frame):
            switch gateway.decide(frame, grant: grant, sender: sender, source: source, now: now, read: &outcomes) {
            case .decided(let outcome):
                settle(outcome, command: frame.command, identifier: frame.identifier, context: context)
            case .closes:
                context.pipeline.fireUserInboundEventTriggered(ShuttingDown())
            case .waits(let notification, let delay, let fault, let admission):
                machine.waitForDispatcher()
                // The frames before it are in the inbox before it.
                recordEntries()
                // Not the frame: its bytes are the TLS handler's, which it reuses.
                let (command, identifier, fields) = (frame.command, frame.identifier, BinaryFrameFields(frame))
                let (gateway, loop) = (self.gateway, context.eventLoop)
                let bound = NIOLoopBound((self, context), eventLoop: loop)
                work.start {
                    let decided = await gateway.decideAfterWaiting(
                        notification, grant: grant, delay: delay, fault: fault, admission: admission, fields: fields, source: source)
                    loop.execute {
                        let (handler, context) = bound.value
                        switch handler.machine.dispatcherDecided() {
                        case .settle(let read):
                            handler.settle(gateway.outcome(decided), command: command, identifier: identifier, context: context)
                            handler.resume(context: context, read: read)
                        case .drop:
                            break
                        }
                    }
                }
            }
        }
    }

    /// Records this read's inbox entries, in the order of their frames,
    /// and counts its acceptances.
    private func recordEntries() {
        gateway.finish(&outcomes)
    }

    /// Handles the frames that waited, until one waits again; then reads
    /// on, if a read was held.
    private func resume(context: ChannelHandlerContext, read: Bool) {
        let now = gateway.dispatcher.clock.now()
        received.readCarried { handleFrames(in: &$0, now: now, context: context) }
        recordEntries()
        if machine.isOver { received.discard() }
        checkUnfinishedFrame(context: context)
        if read {
            switch machine.readRequested() {
            case .read: context.read()
            case .hold: break
            }
        }
    }

    /// Decodes and handles the frames at the front of `bytes` until a
    /// notification waits for the dispatcher (what follows it waits too)
    /// or only an unfinished frame is left.
    private func handleFrames(in bytes: inout ByteBuffer, now: Date, context: ChannelHandlerContext) {
        // The connection's grant (its handshake's, the same while it admits) and its inbox source, once for the read.
        guard let grant = machine.admitting else { return }
        let source = source(for: grant)
        while machine.isAdmitting, let message = decoder.next(from: &bytes) {
            handled += 1
            handle(message, grant: grant, source: source, now: now, context: context)
        }
    }

    private func settle(_ outcome: Result<Pending<Void>?, BinaryGateway.Refusal>, command: UInt8, identifier: UInt32, context: ChannelHandlerContext) {
        switch outcome {
        case .success(nil):
            state.admitted(identifier)
        case .success(let durable?):
            let loop = context.eventLoop
            let bound = NIOLoopBound((self, context), eventLoop: loop)
            state.admitted(identifier, committing: durable) { identifier in
                // A commit failed: status 1, as soon as it is known.
                loop.execute {
                    let (handler, context) = bound.value
                    handler.machine.commitFailed()
                    handler.answer(.processingError, identifier, context: context)
                }
            }
            machine.admitted(committing: durable)
        case .failure(let refusal):
            gateway.policy.peerLog.log(
                .info, "refused notification", metadata: ["courier.status": "\(refusal.status)", "courier.identifier": "\(identifier)"], to: gateway.logger)
            // Command 0 has no error response.
            refuse(command != 0 ? refusal.status : nil, identifier, context: context)
        }
    }

    /// The first bad notification: answered with `status` (nil: closed
    /// without an answer) once everything admitted before it is durable.
    private func refuse(_ status: BinaryStatus?, _ identifier: UInt32, context: ChannelHandlerContext) {
        guard case .answerAfter(let lastDurable) = machine.refused() else {
            answer(status, identifier, context: context)
            return
        }
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        lastDurable.whenResolved { _ in
            loop.execute {
                let (handler, context) = bound.value
                handler.answer(status, identifier, context: context)
            }
        }
    }

    /// Writes the error packet (if there is one and none was sent yet),
    /// then reads and discards for a moment and closes; closes at once
    /// otherwise.
    private func answer(_ status: BinaryStatus?, _ identifier: UInt32, context: ChannelHandlerContext) {
        if let status, state.answer() {
            write(status, identifier, context: context)
        } else {
            context.close(promise: nil)
        }
    }

    private func write(_ status: BinaryStatus, _ identifier: UInt32, context: ChannelHandlerContext) {
        var packet = context.channel.allocator.buffer(capacity: BinaryErrorResponse.length)
        BinaryErrorResponse(status: status, identifier: identifier).write(to: &packet)
        context.writeAndFlush(wrapOutboundOut(packet), promise: nil)
        let channel = context.channel
        channel.eventLoop.scheduleTask(in: gateway.linger) { channel.close(promise: nil) }
    }
}

@available(*, unavailable)
extension BinaryConnectionHandler: Sendable {}
