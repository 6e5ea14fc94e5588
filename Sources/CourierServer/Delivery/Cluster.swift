import CourierCore
import Foundation
import Logging
import NIOSSL
import ServiceLifecycle
import Synchronization

/// This node's part among several sharing one PostgreSQL store
/// (docs/operations.md): where the other nodes' devices are, and the
/// messages that keep the nodes in step, through the store
/// (`NodeCoordination`); pushes for another node's devices go to it
/// directly when it can be reached (`NodeLinks`).
///
/// - Presence: a device that connects here is recorded in the store with
///   a new generation and announced (`online`); its departure removes the
///   record if it is still that generation's and is announced (`offline`).
///   Every node keeps the others' presence in memory, so a push looks up
///   its device without asking the store.
/// - Hand-over: a push accepted here for a device connected to another
///   node (one that may be stored once it is held durably too) is handed
///   to that node directly, on a stream kept open to it (`NodeLinks`, to
///   the other node's `NodeListener`), when the node records an address;
///   otherwise, or when it cannot be reached, it is written to the store's
///   hand-over queue for that node, by group commit, and that node is told
///   once per batch (`handover`); it takes what is queued for it (and at
///   every beat, in case a message was lost) and sends each to its device.
///   Nothing is replaced on the way.
/// - A push held for a device that is offline everywhere, whose device
///   then connects to another node before this node heard of it: when the
///   `online` arrives, that node is told to send what is held (`drain`,
///   `recentlyHeld`).
/// - Registrations and resets are announced, so that every node's cache
///   of registrations forgets what changed (an uninstall seen as 410 on
///   every node).
/// - The admin inbox: while another node is alive (announced `joined`, or
///   seen at a beat), what this node records goes to the others a batch at
///   a time (`InboxExchange`), starting with what it kept from before: on
///   the links, in their frames (each new link starts with everything this
///   node keeps); and, while a node alive records no address (its direct
///   hand-over off), also written to the store and announced (`inbox`),
///   for that node to read. A clear is announced with its time
///   (`inbox-clear`).
final class Cluster: Sendable {
    /// Seconds a push held for an offline device is remembered, in case its
    /// device turns out to have connected to another node meanwhile.
    static let recentWindow: TimeInterval = 60
    static let broadcastChannel = "courier"

    let node: String
    let coordination: any NodeCoordination
    /// The admin API's fault rules, shared by the nodes.
    let faults: FaultInjector
    /// The admin API's inbox, shared by the nodes.
    let inbox: NotificationInbox
    /// What goes between this node's inbox and the others'.
    let inboxExchange: InboxExchange
    let heartbeatInterval: TimeInterval
    let nodeTimeout: TimeInterval
    let clock: any WallClock
    let metrics: ServerMetrics?
    let logger: Logger

    private struct Presence {
        var node: String
        var generation: Int64
        var since: Date
    }

    private struct State {
        /// Devices connected to any node, as announced.
        var presence: [DeviceKey: Presence] = [:]
        /// Each session connected here, with its generation.
        var local: [ObjectIdentifier: (session: DeviceSession, generation: Int64)] = [:]
        /// Devices something was held for while they were offline everywhere, and when.
        var recentlyHeld: [DeviceKey: Date] = [:]
        /// Where this node takes hand-overs directly (`host:port`), once its port is bound.
        var peerAddress: String?
    }

    private let state = Mutex(State())

    /// What this node sends the others, and the store work that comes
    /// before some of it, done one after the other in the order asked
    /// (`send`) by the cluster's service (`runOutbox`): a registration's
    /// change and a reset, say, reach the others in the order they were
    /// made, and no task runs that no service owns.
    enum Errand: Sendable {
        case publish(ClusterMessage, channel: String)
        /// A device's connection here ended: its presence removed, if still
        /// that generation's, and announced (`offline`).
        case removePresence(DeviceKey, generation: Int64)
        /// A broadcast kept in the store for the others, and announced.
        case relay(StoredBroadcast)
        /// A fault rule's hit counted in the store, and its counts announced.
        case countHit(ruleID: String)
        /// Inbox entries a link to another node could not give: written to the store, and announced.
        case storeInbox([SharedInboxEntry])
    }

    private let outbox: AsyncStream<Errand>
    private let outboxInput: AsyncStream<Errand>.Continuation

    /// Writes what is not handed over directly to the store's hand-over
    /// queue, a batch at a time, and tells each node of its batch once (a
    /// service of the application's group).
    let handOvers: GroupCommit<HandedOver, Void>
    /// The links to the other nodes (a service too); nil: hand-overs go through the store only.
    let links: NodeLinks?

    init(
        node: String, coordination: any NodeCoordination, faults: FaultInjector, inbox: NotificationInbox, heartbeatInterval: TimeInterval,
        nodeTimeout: TimeInterval, clock: any WallClock, linkTLS: TLSConfiguration? = nil, metrics: ServerMetrics? = nil, logger: Logger
    ) {
        self.node = node
        self.coordination = coordination
        self.faults = faults
        self.inbox = inbox
        let inboxExchange = InboxExchange(node: node, inbox: inbox)
        self.inboxExchange = inboxExchange
        self.heartbeatInterval = heartbeatInterval
        self.nodeTimeout = nodeTimeout
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        (outbox, outboxInput) = AsyncStream.makeStream(of: Errand.self)
        handOvers = GroupCommit { [coordination, metrics, logger] batch in
            metrics?.handedOver(direct: 0, store: batch.count)
            do {
                try await coordination.handOver(batch)
            } catch {
                logger.error("store failed handing notifications over to other nodes", metadata: ["courier.error": "\(error)"])
                throw error
            }
            for target in Set(batch.map(\.node)) {
                do {
                    try await coordination.publish(ClusterMessage.handOver.text, to: Cluster.channel(of: target))
                } catch {
                    logger.error("store failed telling a node of its hand-overs", metadata: ["courier.error": "\(error)"])
                }
            }
            return batch.map { _ in () }
        }
        // What cannot go directly goes through the queue, or (inbox entries) the store's shared inbox.
        links = linkTLS.map { [handOvers, outboxInput] tls in
            NodeLinks(
                tls: tls, metrics: metrics, logger: logger, backlog: { inboxExchange.ownKept() },
                inboxFallback: { outboxInput.yield(.storeInbox($0)) }
            ) { stranded in
                for item in stranded { _ = handOvers.enqueue(item) }
            }
        }
    }

    static func channel(of node: String) -> String { "courier_node_" + node }

    /// This node's port for direct hand-overs is bound: its address is
    /// recorded at the next beat.
    func listening(at address: String) {
        state.withLock { $0.peerAddress = address }
    }

    /// A node id for a node not given one: "node-" and eight random hex digits.
    static func makeNodeID() -> String { "node-" + String(format: "%08x", UInt32.random(in: .min ... .max)) }
    var channels: [String] { [Self.broadcastChannel, Self.channel(of: node)] }

    // MARK: Presence

    /// The other node the device is connected to, if any.
    func remoteNode(of key: DeviceKey) -> String? {
        state.withLock { state in
            guard let presence = state.presence[key], presence.node != node else { return nil }
            return presence.node
        }
    }

    /// The devices connected to the other nodes: their keys, nodes and
    /// when they connected (the admin API's device list).
    func remoteDevices() -> [(key: DeviceKey, node: String, since: Date)] {
        state.withLock { state in
            state.presence.compactMap { key, presence in presence.node == node ? nil : (key, presence.node, presence.since) }
        }
    }

    /// A device connected here: recorded and announced, before what is
    /// held for it is read (a node that held something meanwhile hears of
    /// it and asks again).
    func connected(_ session: DeviceSession) async {
        do {
            let since = session.connectedAt
            let generation = try await coordination.recordPresence(
                deviceID: session.deviceID, environment: session.environment, node: node, at: since)
            state.withLock { state in
                state.local[ObjectIdentifier(session)] = (session, generation)
                if generation > 0 { state.presence[session.key] = Presence(node: node, generation: generation, since: since) }
            }
            guard generation > 0 else { return }
            await publish(.online(from: node, environment: session.environment, deviceID: session.deviceID, generation: generation, since: since))
        } catch {
            logger.error("store failed recording a device's presence", metadata: ["courier.error": "\(error)"])
        }
    }

    /// A device's connection here ended.
    func disconnected(_ session: DeviceSession) {
        guard let generation = state.withLock({ $0.local.removeValue(forKey: ObjectIdentifier(session))?.generation }) else { return }
        send(.removePresence(session.key, generation: generation))
    }

    // MARK: Hand-over

    /// A push for a device connected to `node`, handed over to it:
    /// directly when it can be, else through the store's queue.
    func handOver(_ pending: PendingNotification, to node: String) {
        if let links, links.handOver(pending, to: node) { return }
        _ = handOvers.enqueue(HandedOver(node: node, pending: pending))
    }

    /// A push that may be stored, for a device not connected here, was
    /// committed: handed over to the node the device is connected to now;
    /// when it is connected nowhere, that is remembered for a while.
    func held(_ pending: PendingNotification) {
        let key = DeviceKey(environment: pending.environment, deviceID: pending.deviceID)
        if let remote = remoteNode(of: key) {
            handOver(pending, to: remote)
            return
        }
        let now = clock.now()
        state.withLock { state in
            state.recentlyHeld[key] = now
            if state.recentlyHeld.count > 10_000 {
                state.recentlyHeld = state.recentlyHeld.filter { now.timeIntervalSince($0.value) < Self.recentWindow }
            }
        }
    }

    /// Tells `remote` to send the device what is held for it.
    func drain(_ key: DeviceKey, on remote: String) {
        send(.publish(.drain(environment: key.environment, deviceID: key.deviceID), channel: Self.channel(of: remote)))
    }

    // MARK: Registrations

    func registrationChanged(deviceID: UInt64, bundleID: String, environment: Environment) {
        send(.publish(.registrationChanged(from: node, environment: environment, deviceID: deviceID, bundleID: bundleID), channel: Self.broadcastChannel))
    }

    /// An app's virtual tokens changed: one (`token`), or any number (nil).
    func virtualTokensChanged(_ app: VirtualDevices.AppKey, token: [UInt8]?) {
        send(.publish(.virtualTokensChanged(from: node, environment: app.environment, bundleID: app.bundleID, token: token), channel: Self.broadcastChannel))
    }

    func deviceReset(_ deviceID: UInt64) {
        send(.publish(.deviceReset(from: node, deviceID: deviceID), channel: Self.broadcastChannel))
    }

    // MARK: Messages

    /// What a message asks of the dispatcher, once the cluster's own state took it in.
    enum Action: Equatable {
        case drain(DeviceKey)
        /// Take what other nodes handed over to this one.
        case takeHandedOver
        /// Read the shared fault rules again.
        case reloadFaults
        case forgetRegistration(RegistrationKey)
        case forgetDevice(UInt64)
        /// A broadcast another node accepted, for the subscribers here.
        case sendBroadcast(StoredBroadcast)
        case forgetChannel(String, Environment)
        /// Read the inbox entries other nodes shared.
        case readInbox
        /// Read an app's virtual tokens again: one, or (nil) all.
        case reloadVirtualTokens(VirtualDevices.AppKey, token: [UInt8]?)
    }

    /// Takes in a message of another node (or this one's own, echoed);
    /// what the dispatcher is to do about it. One this version cannot read
    /// is ignored (`ClusterMessage`).
    func apply(_ message: NodeMessage) async -> [Action] {
        guard let decoded = ClusterMessage(text: message.payload) else {
            logger.debug("a message from another node this version cannot read", metadata: ["courier.message": "\(message.payload.prefix(200))"])
            return []
        }
        // A relayed broadcast is read from the store.
        guard case .broadcastRelayed(let from, let number) = decoded else { return applyAtOnce(decoded) }
        guard from != node else { return [] }
        do {
            guard let broadcast = try await coordination.relayed(number) else { return [] }
            return [.sendBroadcast(broadcast)]
        } catch {
            logger.error("store failed reading a relayed broadcast", metadata: ["courier.error": "\(error)"])
            return []
        }
    }

    /// A message taken in.
    private func applyAtOnce(_ message: ClusterMessage) -> [Action] {
        // Another node's, or (nil) one that does not say whose.
        let fromAnother = message.sender.map { $0 != node } ?? true
        switch message {
        case .handOver:
            return [.takeHandedOver]
        case .drain(let environment, let deviceID):
            return [.drain(DeviceKey(environment: environment, deviceID: deviceID))]
        case .online(let from, let environment, let deviceID, let generation, let since):
            let key = DeviceKey(environment: environment, deviceID: deviceID)
            let wasHeld = state.withLock { state -> Bool in
                if let known = state.presence[key], known.generation > generation { return false }
                state.presence[key] = Presence(node: from, generation: generation, since: since)
                guard let held = state.recentlyHeld.removeValue(forKey: key) else { return false }
                return clock.now().timeIntervalSince(held) < Self.recentWindow
            }
            if wasHeld, from != node { drain(key, on: from) }
        case .offline(_, let environment, let deviceID, let generation):
            let key = DeviceKey(environment: environment, deviceID: deviceID)
            state.withLock { state in
                if state.presence[key]?.generation == generation { state.presence[key] = nil }
            }
        case .registrationChanged(_, let environment, let deviceID, let bundleID):
            guard fromAnother else { break }
            return [.forgetRegistration(RegistrationKey(deviceID: deviceID, bundleID: bundleID, environment: environment))]
        case .deviceReset(_, let deviceID):
            guard fromAnother else { break }
            return [.forgetDevice(deviceID)]
        case .virtualTokensChanged(_, let environment, let bundleID, let token):
            guard fromAnother else { break }
            return [.reloadVirtualTokens(VirtualDevices.AppKey(environment: environment, bundleID: bundleID), token: token)]
        case .channelDeleted(_, let environment, let id):
            guard fromAnother else { break }
            return [.forgetChannel(id, environment)]
        case .gone(let dead):
            forget(nodes: [dead])
            // What was taken of its inbox stays remembered: a node taken for dead may come back, its entries with it.
            // This node, taken for dead by another: recorded again at its next beat.
        case .faultsChanged:
            return [.reloadFaults]
        case .inboxShared:
            guard fromAnother else { break }
            return [.readInbox]
        case .joined:
            guard fromAnother else { break }
            // Until its address is read (next beat), the node that joined reads the store: what this node keeps
            // goes there (with the sharing's first batch, when sharing begins now).
            let throughStoreNow = inboxExchange.setThroughStore(true)
            if !inbox.startSharing(), throughStoreNow { send(.storeInbox(inboxExchange.ownKept())) }
        case .inboxCleared(_, let upTo):
            guard fromAnother else { break }
            inbox.clear(upTo: upTo)
        case .faultCount(_, let id, let remaining, let hits):
            faults.update(id: id, remaining: remaining, hits: hits)
        case .broadcastRelayed:
            break
        }
        return []
    }

    /// Reads every live node's presence again (at start, and after the
    /// subscription was made again: messages may have been lost).
    func reload() async throws {
        let records = try await coordination.presences()
        state.withLock { state in
            state.presence = [:]
            for record in records {
                state.presence[DeviceKey(environment: record.environment, deviceID: record.deviceID)] = Presence(
                    node: record.node, generation: record.generation, since: record.since)
            }
        }
    }

    // MARK: Broadcasts

    /// A broadcast accepted here: kept in the store for a minute and
    /// announced, so that every other node sends it to its subscribers.
    func relay(_ broadcast: StoredBroadcast) {
        send(.relay(broadcast))
    }

    func channelDeleted(_ id: String, environment: Environment) {
        send(.publish(.channelDeleted(from: node, environment: environment, id: id), channel: Self.broadcastChannel))
    }

    private func forget(nodes: [String]) {
        let gone = Set(nodes)
        state.withLock { state in state.presence = state.presence.filter { !gone.contains($0.value.node) } }
    }

    // MARK: Heartbeat

    /// Records this node alive; removes nodes silent for `nodeTimeout`
    /// (their devices' presence with them) and announces them gone. When
    /// the others had taken this node for dead (a database outage, a
    /// stalled beat, a network cut), its devices' presence is recorded
    /// again, and those devices are returned: what the others held for
    /// them meanwhile, as for devices offline, is theirs to take
    /// (`Dispatcher.drain`).
    @discardableResult
    func beat() async -> [DeviceSession] {
        let now = clock.now()
        var recorded: [DeviceSession] = []
        do {
            let peerAddress = state.withLock { $0.peerAddress }
            if try await coordination.heartbeat(node: node, peerAddress: peerAddress) {
                logger.warning("this node had been taken for dead; its devices' presence is recorded again")
                recorded = await recordAgain()
            }
            try await refreshPeers()
            try await coordination.clearRelayed(before: now.addingTimeInterval(-Self.recentWindow))
            // The store keeps what the inbox keeps (each team's newest `capacity`), none older than `maxAge`.
            try await coordination.pruneSharedInbox(node: node, through: inboxExchange.keptFrom - 1, olderThan: inbox.maxAge)
            let gone = try await coordination.removeNodes(silentFor: nodeTimeout)
            if !gone.isEmpty {
                logger.warning("nodes stopped beating; their devices' presence removed", metadata: ["courier.nodes": "\(gone)"])
                forget(nodes: gone)
                for dead in gone { await publish(.gone(node: dead)) }
            }
        } catch {
            logger.error("store failed recording the node's heartbeat", metadata: ["courier.error": "\(error)"])
        }
        return recorded
    }

    /// At start: what this node held before (a crash under the same id) is
    /// removed, and it is recorded alive.
    func start() async throws {
        try await coordination.removeNode(node)
        _ = try await coordination.heartbeat(node: node, peerAddress: nil)
        // Above what a former run of this node shared, and above what it
        // could have (it cannot have recorded one entry a nanosecond).
        let last = try await coordination.lastSharedInboxSequence(node: node)
        inboxExchange.start(base: max(last, Int64(clock.now().timeIntervalSince1970 * 1e9)))
        try await refreshPeers()
        // The others start sharing their inboxes with this node.
        await publish(.joined(node: node))
    }

    /// The other nodes alive and their addresses, as the store has them:
    /// the links follow; the inbox is given to the others while there are
    /// any (alone, this node keeps it to itself until a node joins), and
    /// through the store too while one of them is not linked to.
    private func refreshPeers() async throws {
        let alive = try await coordination.liveNodes().filter { $0 != node }
        var unlinked = !alive.isEmpty
        if let links {
            let addresses = try await coordination.peerAddresses().filter { $0.key != node }
            unlinked = alive.contains { addresses[$0] == nil }
            links.update(addresses)
        }
        let throughStoreNow = inboxExchange.setThroughStore(unlinked)
        if alive.isEmpty {
            inbox.stopSharing()
        } else if !inbox.startSharing(), throughStoreNow {
            // What this node keeps went on the links alone: the store gets it (sharing's first batch has it otherwise).
            send(.storeInbox(inboxExchange.ownKept()))
        }
    }

    /// Records every device connected here again, each with a new
    /// generation; returns them.
    private func recordAgain() async -> [DeviceSession] {
        let sessions = state.withLock { state in state.local.values.map(\.session) }
        for session in sessions { await connected(session) }
        return sessions
    }

    /// At a graceful stop: this node and its devices' presence removed, and
    /// announced (its devices move to other nodes). A store that does not
    /// answer within `limit` is left to the other nodes' timeout: the
    /// leaving is cancelled (the store's statements end with their task,
    /// `PostgresStore.abandonable`) and awaited, in one task group.
    func stop(within limit: Duration = .seconds(Cluster.stopLimit)) async {
        // The outbox ended with the service's tasks: what it still held, the
        // departures of this node's devices, the node's removal covers.
        outboxInput.finish()
        let left = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await self.leave()
                return true
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        if !left { logger.warning("the store did not answer at shutdown; the other nodes remove this one after their timeout") }
    }

    /// What `stop` does within its limit.
    private func leave() async {
        // What the inbox recorded last goes to the others first.
        await shareInbox()
        do {
            try await coordination.removeNode(node)
            await publish(.gone(node: node))
        } catch {
            guard !Task.isCancelled else { return }
            logger.error("store failed removing the node", metadata: ["courier.error": "\(error)"])
        }
    }

    static let stopLimit: TimeInterval = 5

    // MARK: Outbox

    /// Asks for an errand, done after those asked before it.
    func send(_ errand: Errand) {
        outboxInput.yield(errand)
    }

    /// Does the errands in the order they were asked, until the calling
    /// task (the cluster's service's) is cancelled, or the outbox finished (`stop`).
    func runOutbox() async {
        for await errand in outbox { await perform(errand) }
    }

    private func perform(_ errand: Errand) async {
        switch errand {
        case .publish(let message, let channel):
            await publish(message, to: channel)
        case .removePresence(let key, let generation):
            do {
                guard try await coordination.removePresence(deviceID: key.deviceID, environment: key.environment, generation: generation) else { return }
                await publish(.offline(from: node, environment: key.environment, deviceID: key.deviceID, generation: generation))
            } catch {
                logger.error("store failed removing a device's presence", metadata: ["courier.error": "\(error)"])
            }
        case .relay(let broadcast):
            do {
                let number = try await coordination.relay(broadcast)
                await publish(.broadcastRelayed(from: node, number: number))
            } catch {
                logger.error("store failed relaying a broadcast to the other nodes", metadata: ["courier.error": "\(error)"])
            }
        case .storeInbox(let entries):
            await storeInbox(entries)
        case .countHit(let id):
            do {
                guard let shared = try await coordination.countRuleHit(id: id) else { return }
                await publish(.faultCount(from: node, id: shared.id, remaining: shared.remaining, hits: shared.hits))
            } catch {
                logger.error("store failed counting a fault rule's hit", metadata: ["courier.error": "\(error)"])
            }
        }
    }

    func publish(_ message: ClusterMessage, to channel: String = Cluster.broadcastChannel) async {
        do {
            try await coordination.publish(message.text, to: channel)
        } catch {
            logger.error("store failed sending a message to the other nodes", metadata: ["courier.error": "\(error)"])
        }
    }
}
