import CourierCore
import CourierProvider
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import ServiceLifecycle
import Synchronization

/// This node's links to the other nodes, for handing pushes over directly
/// (docs/operations.md): to each node one HTTP/2 connection, with mutual
/// TLS on the cluster authority's certificates, and on it one
/// `POST /v1/handover` kept open, a stream each way (`HandOverFrames`),
/// made when the node's address is first read (`update`), and again at
/// the next push or inbox batch after it ended. A push goes out at once
/// in a frame, with whatever came for that node meanwhile, while fewer
/// than `framesInFlight` frames wait for their acknowledgement (else with
/// the next frame, once one is acknowledged); the other node
/// takes the frames in order and acknowledges each once its pushes went
/// to their devices. A node that cannot be reached, or does not
/// acknowledge a frame within `limit`, is left alone for `pause`: what it
/// had not acknowledged, and what comes for it meanwhile, goes through the
/// store's queue (`fallBack`). The frames carry this node's admin inbox
/// entries too (`share`), a link's first ones everything the inbox keeps
/// (`backlog`: the other node takes each entry once, `InboxExchange`); a
/// link that fails or stops gives the entries the other node has not
/// acknowledged to `inboxFallback` (the store's shared inbox), and the
/// next starts with the backlog again; entries past `inboxLimit` on a
/// link that takes them slower than they come go there too (oldest
/// first: whatever team's they are, none is dropped). A service of the
/// application's group: each link is a child task of its task group.
final class NodeLinks: Service, Sendable {
    /// A node's address, its pushes waiting for a frame, its frames
    /// waiting for their acknowledgement, and whether its link runs.
    private struct Link {
        var address: String
        var pausedUntil: ContinuousClock.Instant?
        var queue: [PendingNotification] = []
        /// Inbox entries waiting for a frame.
        var inbox: [SharedInboxEntry] = []
        /// The next connection starts with the backlog.
        var backlogDue = true
        var unacknowledged: [(sequence: UInt64, batch: [PendingNotification], entries: [SharedInboxEntry], sent: ContinuousClock.Instant)] = []
        /// The running link's wake-up; nil when no link runs.
        var wake: AsyncStream<Void>.Continuation?
        /// What its writer waits for, if it waits: a push (woken by the
        /// next one, once, not once a push), or an acknowledgement (woken
        /// by the next one; pushes meanwhile only queue).
        var writerWaits: WriterWait?

        /// This link's, among those the node had: a link's tasks change only their own.
        let id: UInt64

        init(address: String, id: UInt64) {
            self.address = address
            self.id = id
        }

        /// What the other node has not taken: its frames not acknowledged, then its queue.
        var untaken: [PendingNotification] { unacknowledged.flatMap(\.batch) + queue }
        /// The inbox entries it has not taken.
        var untakenEntries: [SharedInboxEntry] { unacknowledged.flatMap(\.entries) + inbox }

        /// Nothing waits for a frame.
        var isIdle: Bool { queue.isEmpty && inbox.isEmpty }

        /// Wakes the running link's writer if it waits for something to
        /// send; else starts the link: its wake-up, for a new task.
        mutating func wakeOrStart() -> AsyncStream<Void>? {
            if let wake {
                if writerWaits == .push {
                    writerWaits = nil
                    wake.yield()
                }
                return nil
            }
            let (stream, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            wake.yield()
            self.wake = wake
            return stream
        }
    }

    private enum WriterWait {
        case push
        case acknowledgement
    }

    private struct State {
        var links: [String: Link] = [:]
        var ended = false
        var nextID: UInt64 = 0

        mutating func newLink(_ address: String) -> Link {
            nextID += 1
            return Link(address: address, id: nextID)
        }

        /// `body` on the node's link in place (a copy taken out of the
        /// dictionary and put back would copy its queue at each change);
        /// nil when there is none.
        mutating func withLink<T>(_ node: String, id: UInt64? = nil, _ body: (inout Link) -> T) -> T? {
            // Only the id is read first: a copy of the link held during `body` would make every change copy its queue.
            guard let current = links[node]?.id, id.map({ $0 == current }) ?? true else { return nil }
            return body(&links[node]!)
        }

        /// The node's link, if it is still the one of that id.
        func link(_ node: String, id: UInt64) -> Link? {
            links[node].flatMap { $0.id == id ? $0 : nil }
        }
    }

    private let tls: TLSConfiguration
    private let limit: Duration
    private let pause: Duration
    private let metrics: ServerMetrics?
    private let logger: Logger
    private let state = Mutex(State())
    /// A link to run: its node, its id, its wake-up.
    private typealias Start = (node: String, id: UInt64, wake: AsyncStream<Void>)
    private let starts: AsyncStream<Start>
    private let startInput: AsyncStream<Start>.Continuation
    /// Where what cannot go directly goes: the store's queue (`Cluster.handOvers`).
    private let fallback: @Sendable ([HandedOver]) -> Void
    /// Every inbox entry this node keeps (`InboxExchange.ownKept`).
    private let backlog: @Sendable () -> [SharedInboxEntry]
    /// Where inbox entries a link could not give go.
    private let inboxFallback: @Sendable ([SharedInboxEntry]) -> Void

    /// Notifications, and inbox entries, in one frame at most.
    static let batchLimit = 2000
    /// Inbox entries' bytes in one frame at most: with `batchLimit` pushes
    /// of the largest payload, a frame stays under `HandOverFrames.maxLength`.
    static let entryBytesLimit = 16 << 20
    /// Inbox entries waiting for one link at most: past it the oldest go
    /// through the store (the other node reads slower than this one records).
    static let inboxLimit = 100_000
    /// Frames sent and not yet acknowledged at most, on one link.
    static let framesInFlight = 2

    init(
        tls: TLSConfiguration, limit: Duration = .seconds(3), pause: Duration = .seconds(2), metrics: ServerMetrics? = nil, logger: Logger,
        backlog: @escaping @Sendable () -> [SharedInboxEntry] = { [] }, inboxFallback: @escaping @Sendable ([SharedInboxEntry]) -> Void = { _ in },
        fallback: @escaping @Sendable ([HandedOver]) -> Void
    ) {
        self.tls = tls
        self.fallback = fallback
        self.backlog = backlog
        self.inboxFallback = inboxFallback
        self.limit = limit
        self.pause = pause
        self.metrics = metrics
        self.logger = logger
        (starts, startInput) = AsyncStream.makeStream()
    }

    /// The other nodes' addresses as the store has them now: a node gone,
    /// or at another address, loses its link (what it had not taken goes
    /// through the store); a new one's link starts, with the backlog.
    func update(_ addresses: [String: String]) {
        let (stranded, started) = state.withLock { state -> ([HandedOver], [Start]) in
            var stranded: [HandedOver] = []
            for (node, link) in state.links where addresses[node] != link.address {
                link.wake?.finish()
                stranded += link.untaken.map { HandedOver(node: node, pending: $0) }
                state.links[node] = nil
            }
            var started: [Start] = []
            for (node, address) in addresses where state.links[node] == nil {
                var link = state.newLink(address)
                if !state.ended, let wake = link.wakeOrStart() { started.append((node, link.id, wake)) }
                state.links[node] = link
            }
            return (stranded, started)
        }
        for start in started { startInput.yield(start) }
        fall(stranded)
    }

    /// Gives inbox entries to every other node: in each link's next frame.
    /// False when a node was skipped, left alone after a failure (or the
    /// service ended): the caller writes them to the store (that node's
    /// next link starts with the backlog).
    @discardableResult
    func share(_ entries: [SharedInboxEntry]) -> Bool {
        guard !entries.isEmpty else { return true }
        let now = ContinuousClock.now
        let (started, overflow, everyNode) = state.withLock { state -> ([Start], [SharedInboxEntry], Bool) in
            guard !state.ended else { return ([], [], false) }
            var started: [Start] = []
            var overflow: [SharedInboxEntry] = []
            var everyNode = true
            for node in state.links.keys {
                state.withLink(node) { link in
                    guard link.pausedUntil.map({ now >= $0 }) ?? true else {
                        everyNode = false
                        return
                    }
                    link.inbox += entries
                    if link.inbox.count > Self.inboxLimit {
                        overflow += link.inbox.prefix(link.inbox.count - Self.inboxLimit)
                        link.inbox.removeFirst(link.inbox.count - Self.inboxLimit)
                    }
                    if let wake = link.wakeOrStart() { started.append((node, link.id, wake)) }
                }
            }
            return (started, overflow, everyNode)
        }
        for start in started { startInput.yield(start) }
        if !overflow.isEmpty {
            logger.warning(
                "a node took inbox entries slower than this one recorded them; the oldest go through the store",
                metadata: ["courier.count": "\(overflow.count)"])
            inboxFallback(overflow)
        }
        return everyNode
    }

    /// Hands a push to `node` directly: in the link's next frame. False
    /// when it cannot go directly now (no address, left alone after a
    /// failure, the service ended): the caller uses the store.
    func handOver(_ pending: PendingNotification, to node: String) -> Bool {
        let now = ContinuousClock.now
        let (taken, start) = state.withLock { state -> (Bool, Start?) in
            guard !state.ended else { return (false, nil) }
            return state.withLink(node) { link -> (Bool, Start?) in
                guard link.pausedUntil.map({ now >= $0 }) ?? true else { return (false, nil) }
                link.queue.append(pending)
                return (true, link.wakeOrStart().map { (node, link.id, $0) })
            } ?? (false, nil)
        }
        if let start { startInput.yield(start) }
        return taken
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await (node, id, wake) in starts {
                    group.addTask { await self.link(node, id: id, wake: wake) }
                }
            }
        } onGracefulShutdown: {
            // Each link sends what it has and ends; what is not acknowledged goes through the store.
            let wakes = self.state.withLock { state in
                state.ended = true
                return state.links.values.compactMap(\.wake)
            }
            for wake in wakes { wake.finish() }
            self.startInput.finish()
        }
        fall(
            state.withLock { state in
                state.ended = true
                defer { state.links = [:] }
                return state.links.flatMap { node, link in link.untaken.map { HandedOver(node: node, pending: $0) } }
            })
    }

    private func fall(_ stranded: [HandedOver]) {
        guard !stranded.isEmpty else { return }
        fallback(stranded)
    }

    // MARK: A link

    /// Runs the link to `node` until it fails, is closed by the other
    /// node, or the node's address changes; then what it had not taken
    /// goes through the store (and, when something was waiting, the node
    /// is left alone for `pause`).
    private func link(_ node: String, id: UInt64, wake: AsyncStream<Void>) async {
        let address = state.withLock { $0.link(node, id: id)?.address }
        var failure: (any Error)?
        var reached = false
        if let address {
            do {
                let connection = try await connect(address)
                reached = true
                // A new link: the other node is given everything this node's inbox keeps first.
                if state.withLock({ $0.link(node, id: id)?.backlogDue == true }) {
                    let kept = backlog()
                    state.withLock { state in
                        state.withLink(node, id: id) { link in
                            guard link.backlogDue else { return }
                            link.backlogDue = false
                            link.inbox = kept + link.inbox
                        }
                    }
                }
                do {
                    try await exchange(with: node, id: id, on: connection, wake: wake)
                } catch {
                    failure = error
                }
                connection.startClosing()
            } catch {
                failure = error
            }
        }
        let (stranded, strandedEntries, ended) = state.withLock { state -> ([PendingNotification], [SharedInboxEntry], Bool) in
            let ended = state.ended
            var strandedEntries: [SharedInboxEntry] = []
            let stranded = state.withLink(node, id: id) { link -> [PendingNotification] in
                let stranded = link.untaken
                link.unacknowledged = []
                link.queue = []
                // The entries it has not taken go through the store.
                strandedEntries = link.untakenEntries
                link.inbox = []
                link.backlogDue = true
                link.wake?.finish()
                link.wake = nil
                link.writerWaits = nil
                // Not reached, or something not taken: left alone for a while (not tried again at each push or inbox batch).
                if !ended, !stranded.isEmpty || (failure != nil && !reached) { link.pausedUntil = ContinuousClock.now + pause }
                return stranded
            } ?? []
            return (stranded, strandedEntries, ended)
        }
        if !strandedEntries.isEmpty { inboxFallback(strandedEntries) }
        if !stranded.isEmpty, !ended {
            logger.warning(
                "a node could not be reached directly; its hand-overs go through the store for a while",
                metadata: ["courier.node": "\(node)", "courier.error": "\(failure.map { "\($0)" } ?? "the link ended")"])
        }
        fall(stranded.map { HandedOver(node: node, pending: $0) })
    }

    /// The stream's two ways and its watch, until one of them ends.
    private func exchange(with node: String, id: UInt64, on connection: HTTP2Connection, wake: AsyncStream<Void>) async throws {
        let headers: [(name: String, value: String, indexing: HPACKIndexing)] = [
            (":method", "POST", .indexable), (":scheme", "https", .indexable), (":path", NodeListener.handOverPath, .indexable),
            (":authority", "courier-node", .indexable), ("content-type", "application/octet-stream", .indexable),
        ]
        try await connection.withStream(headers) { inbound, outbound in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await self.write(to: node, id: id, outbound, wake: wake) }
                group.addTask { try await self.readAcknowledgements(of: node, id: id, inbound) }
                group.addTask { try await self.watch(node, id: id) }
                do {
                    try await group.next()
                } catch {
                    // The other ways end with the connection.
                    connection.startClosing()
                    throw error
                }
                connection.startClosing()
                group.cancelAll()
            }
        }
    }

    /// Sends what is queued, a frame at a time, each time the link is woken;
    /// when the wake-up is finished (the service stops), waits for the
    /// frames sent to be acknowledged (the watch gives up on them after
    /// `limit`), so that what the other node took does not go through the
    /// store as well, and ends.
    private func write(
        to node: String, id: UInt64, _ outbound: NIOAsyncChannelOutboundWriter<HTTP2Frame.FramePayload>, wake: AsyncStream<Void>
    ) async throws {
        var sequence: UInt64 = 0
        for await _ in wake {
            while true {
                let frame = state.withLock { state -> (batch: [PendingNotification], inbox: [SharedInboxEntry])? in
                    state.withLink(node, id: id) { link -> (batch: [PendingNotification], inbox: [SharedInboxEntry])? in
                        // Nothing to send, or enough frames waiting for their acknowledgement: what comes
                        // meanwhile goes in one frame once one is acknowledged (a few large frames under load,
                        // not many small ones).
                        guard !link.isIdle, link.unacknowledged.count < Self.framesInFlight else {
                            link.writerWaits = link.isIdle ? .push : .acknowledgement
                            return nil
                        }
                        let batch = Array(link.queue.prefix(Self.batchLimit))
                        link.queue.removeFirst(batch.count)
                        // Entries up to `batchLimit`, and `entryBytesLimit` of them (at least one).
                        var (count, bytes) = (0, 0)
                        for entry in link.inbox.prefix(Self.batchLimit) {
                            bytes += entry.bytes.count + entry.node.utf8.count + 16
                            if count > 0, bytes > Self.entryBytesLimit { break }
                            count += 1
                        }
                        let inbox = Array(link.inbox.prefix(count))
                        link.inbox.removeFirst(count)
                        link.unacknowledged.append((sequence + 1, batch, inbox, ContinuousClock.now))
                        return (batch, inbox)
                    } ?? nil
                }
                guard let frame else { break }
                sequence += 1
                try await outbound.write(.data(.init(data: .byteBuffer(HandOverFrames.frame(sequence, frame.batch, inbox: frame.inbox)))))
            }
        }
        // Only at a stop, or when the node's address changed (its link gone: nothing to wait for).
        while state.withLock({ $0.link(node, id: id)?.unacknowledged.isEmpty == false }) { try await Task.sleep(for: .milliseconds(5)) }
    }

    /// Takes the other node's acknowledgements: each frame acknowledged is done.
    private func readAcknowledgements(of node: String, id: UInt64, _ inbound: NIOAsyncChannelInboundStream<HTTP2Frame.FramePayload>) async throws {
        var pending = ByteBuffer()
        for try await frame in inbound {
            switch frame {
            case .headers(let headers):
                if let status = headers.headers.first(name: ":status"), status != "200" { throw NodeLinkError("answered \(status)") }
                if headers.endStream { throw NodeLinkError("the other node ended the stream") }
            case .data(let data):
                if case .byteBuffer(var bytes) = data.data { pending.writeBuffer(&bytes) }
                var (done, entries) = (0, 0)
                while let sequence = pending.readInteger(as: UInt64.self) {
                    let (pushes, shared) = state.withLock { state -> (Int, Int) in
                        state.withLink(node, id: id) { link -> (Int, Int) in
                            var count = (0, 0)
                            while let first = link.unacknowledged.first, first.sequence <= sequence {
                                count.0 += first.batch.count
                                count.1 += first.entries.count
                                link.unacknowledged.removeFirst()
                            }
                            if link.writerWaits == .acknowledgement {
                                link.writerWaits = nil
                                link.wake?.yield()
                            }
                            return count
                        } ?? (0, 0)
                    }
                    done += pushes
                    entries += shared
                }
                pending.discardReadBytes()
                if done > 0 { metrics?.handedOver(direct: done, store: 0) }
                if entries > 0 { metrics?.inboxShared(direct: entries, store: 0) }
                if data.endStream { throw NodeLinkError("the other node ended the stream") }
            case .rstStream(let code):
                throw NodeLinkError("the other node reset the stream (\(code))")
            default:
                continue
            }
        }
        throw NodeLinkError("the connection ended")
    }

    /// Fails the link when its oldest frame waits longer than `limit`.
    private func watch(_ node: String, id: UInt64) async throws {
        while true {
            try await Task.sleep(for: limit / 4)
            let oldest = state.withLock { $0.link(node, id: id)?.unacknowledged.first?.sent }
            if let oldest, ContinuousClock.now - oldest > limit { throw NodeLinkError("no acknowledgement within \(limit)") }
        }
    }

    private func connect(_ address: String) async throws -> HTTP2Connection {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
            throw NodeLinkError("'\(address)' is not host:port")
        }
        let host = String(address[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return try await HTTP2Connection.connect(host: host, port: port, tls: tls, serverName: nil, timeout: limit)
    }
}

struct NodeLinkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
