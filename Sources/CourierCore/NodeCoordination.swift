import Foundation

/// Where a device is connected, when several nodes share one store: the
/// node, and the connection's generation (a number the store gives each
/// connection, higher for later ones) so that an older connection's
/// departure never erases a newer one's presence.
public struct DevicePresenceRecord: Sendable, Hashable {
    public var deviceID: UInt64
    public var environment: Environment
    public var node: String
    public var generation: Int64
    /// When the connection was made.
    public var since: Date

    public init(deviceID: UInt64, environment: Environment, node: String, generation: Int64, since: Date) {
        self.deviceID = deviceID
        self.environment = environment
        self.node = node
        self.generation = generation
        self.since = since
    }
}

/// A message one node published to others through the store.
public struct NodeMessage: Sendable, Hashable {
    public var channel: String
    public var payload: String

    public init(channel: String, payload: String) {
        self.channel = channel
        self.payload = payload
    }
}

/// A notification one node accepted for a device connected to another
/// (`node`), handed over through the store.
public struct HandedOver: Sendable, Hashable {
    public var node: String
    public var pending: PendingNotification

    public init(node: String, pending: PendingNotification) {
        self.node = node
        self.pending = pending
    }
}

/// A rule every node applies (the admin API's fault rules, with several
/// nodes): its definition as the server encodes it, and the counts the
/// nodes share.
public struct SharedRule: Sendable, Hashable {
    public var id: String
    public var body: String
    /// Notifications it may still act on; nil: no count limit.
    public var remaining: Int?
    public var hits: Int

    public init(id: String, body: String, remaining: Int?, hits: Int) {
        self.id = id
        self.body = body
        self.remaining = remaining
        self.hits = hits
    }
}

/// An entry of one node's admin inbox, for the others' (several nodes):
/// its sequence on that node, and its bytes in the server's encoding of
/// version `format`.
public struct SharedInboxEntry: Sendable, Hashable {
    public var node: String
    public var sequence: Int64
    public var format: Int
    public var bytes: [UInt8]

    public init(node: String, sequence: Int64, format: Int, bytes: [UInt8]) {
        self.node = node
        self.sequence = sequence
        self.format = format
        self.bytes = bytes
    }
}

/// What several nodes sharing one store coordinate through it: each
/// node's heartbeat (with the address it takes direct hand-overs on),
/// each device's presence, short messages, and the hand-over queue, by
/// which a push reaches a node that cannot be reached directly. PostgreSQL's
/// store provides it (`LISTEN`/`NOTIFY`); the SQLite store, which serves
/// one node, does not.
public protocol NodeCoordination: Sendable {
    /// Records that `node` is alive now, by the store's clock (the nodes'
    /// clocks may differ); true when its record was not there (its first
    /// beat, or the others took it for dead and removed its presence).
    /// `peerAddress`: where it takes hand-overs directly (`host:port`), if
    /// it does.
    func heartbeat(node: String, peerAddress: String?) async throws -> Bool
    /// Where each live node that takes hand-overs directly does, by node.
    func peerAddresses() async throws -> [String: String]
    /// Removes the nodes that have not beaten for `timeout` seconds (by the
    /// store's clock), with the presence they held and what was handed
    /// over to them; returns their ids.
    func removeNodes(silentFor timeout: Double) async throws -> [String]
    /// The nodes alive (not removed), this one included.
    func liveNodes() async throws -> [String]
    /// Removes `node` and the presence it holds (a graceful shutdown).
    func removeNode(_ node: String) async throws
    /// Records that the device is connected to `node` from `date`, and
    /// returns the connection's generation; 0 when a later connection of
    /// the device (to another node) was recorded first and stays.
    func recordPresence(deviceID: UInt64, environment: Environment, node: String, at date: Date) async throws -> Int64
    /// Removes the device's presence if it is still the connection of
    /// `generation`; false when a newer one replaced it.
    func removePresence(deviceID: UInt64, environment: Environment, generation: Int64) async throws -> Bool
    /// Every presence held by a node alive now.
    func presences() async throws -> [DevicePresenceRecord]
    /// Keeps notifications for the nodes their devices are connected to,
    /// without waiting for the disk (one that may be stored is held durably
    /// besides).
    func handOver(_ notifications: [HandedOver]) async throws
    /// Takes what was handed over to `node`, oldest first.
    func takeHandedOver(node: String) async throws -> [PendingNotification]
    /// A number for a new shared rule's id, never given before.
    func nextRuleNumber() async throws -> Int
    func addRule(_ rule: SharedRule) async throws
    /// False when there was no such rule.
    func removeRule(id: String) async throws -> Bool
    func rules() async throws -> [SharedRule]
    /// Counts one notification the rule acted on (one less remaining; at 0
    /// the rule is removed) and returns it as it is now; nil when it is gone.
    func countRuleHit(id: String) async throws -> SharedRule?
    /// Keeps a broadcast for the other nodes to send to their subscribers;
    /// returns its number.
    func relay(_ broadcast: StoredBroadcast) async throws -> Int64
    /// The relayed broadcast of that number; nil once it was cleared.
    func relayed(_ number: Int64) async throws -> StoredBroadcast?
    /// Clears the relayed broadcasts kept since before `date`.
    func clearRelayed(before date: Date) async throws
    /// Keeps entries of a node's inbox for the other nodes, without
    /// waiting for the disk.
    func shareInbox(_ entries: [SharedInboxEntry]) async throws
    /// The entries kept by nodes other than `node`, each node's after the
    /// sequence `cursors` gives for it (all of a node it does not name), in
    /// each node's order, at most `limit`.
    func sharedInbox(except node: String, after cursors: [String: Int64], limit: Int) async throws -> [SharedInboxEntry]
    /// The highest sequence kept for `node`; 0 when none is.
    func lastSharedInboxSequence(node: String) async throws -> Int64
    /// Removes `node`'s entries up to `sequence`, and every node's kept
    /// longer than `seconds` (by the store's clock).
    func pruneSharedInbox(node: String, through sequence: Int64, olderThan seconds: Double) async throws
    /// Removes every node's entries.
    func clearSharedInbox() async throws
    /// Sends `payload` to whoever listens on `channel`.
    func publish(_ payload: String, to channel: String) async throws
    /// The messages published on `channels` from now on, until the task
    /// that reads them is cancelled; a lost connection to the store is
    /// made again (messages published meanwhile are lost, as `NOTIFY`'s
    /// are). `listening` is called each time the subscription is in place.
    func messages(on channels: [String], listening: @escaping @Sendable () -> Void) -> AsyncStream<NodeMessage>
}
