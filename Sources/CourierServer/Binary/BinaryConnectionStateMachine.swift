/// The protocol state of one binary provider connection
/// (docs/protocol.md §1), without I/O: the connection's handler
/// (`BinaryConnectionHandler`) tells it what happened and does what it
/// answers. Notifications are handled strictly in order; one that waits
/// for the dispatcher holds back every frame after it, and the reads; the
/// first bad notification (or status 10) ends the connection's counting,
/// its answer waiting for the commits of everything admitted before it.
struct BinaryConnectionStateMachine {
    enum State {
        /// The TLS handshake has not finished.
        case handshaking
        /// Frames are decoded and admitted, with the certificate's right to
        /// its topic.
        case admitting(TopicGrant)
        /// A notification waits for the dispatcher: the frames after it
        /// wait undecoded, and nothing more is read.
        case waiting(TopicGrant)
        /// A bad notification or status 10 was seen, or the channel ended:
        /// nothing after it counts.
        case over
    }

    private(set) var state = State.handshaking
    /// The channel asked for a read while a notification waited.
    private var readHeld = false
    /// The commit of the last admitted notification that has one. Commits
    /// finish in order, so once it is done all are: an error response,
    /// which tells the provider everything before it was taken, waits for it.
    private var lastDurable: Pending<Void>?

    /// The certificate's grant while frames may be handled now; nil while
    /// they wait or count no more.
    var admitting: TopicGrant? {
        if case .admitting(let grant) = state { grant } else { nil }
    }

    /// Whether frames are admitted now (`admitting`, without the grant).
    var isAdmitting: Bool {
        if case .admitting = state { true } else { false }
    }

    var isOver: Bool {
        if case .over = state { true } else { false }
    }

    enum HandshakeAction: Equatable {
        /// Register the certificate's connection and admit its frames.
        case admit
        /// A certificate with no usable topic: close.
        case close
    }

    /// The handshake finished; `grant` is the certificate's right to its
    /// topic, nil when it has none.
    mutating func handshakeCompleted(_ grant: TopicGrant?) -> HandshakeAction {
        guard case .handshaking = state else { return .close }
        guard let grant else {
            state = .over
            return .close
        }
        state = .admitting(grant)
        return .admit
    }

    enum ReadAction: Equatable {
        case read
        /// Not now: a notification waits; `dispatcherDecided` reads on.
        case hold
    }

    /// The channel wants to read.
    mutating func readRequested() -> ReadAction {
        guard case .waiting = state else { return .read }
        readHeld = true
        return .hold
    }

    /// A notification has to wait for the dispatcher.
    mutating func waitForDispatcher() {
        guard case .admitting(let grant) = state else { return }
        state = .waiting(grant)
    }

    enum DecisionAction: Equatable {
        /// Settle the notification, then handle the frames that waited and
        /// (`read`) the read that was held.
        case settle(read: Bool)
        /// The connection ended meanwhile: drop the decision.
        case drop
    }

    /// The dispatcher decided the notification that waited.
    mutating func dispatcherDecided() -> DecisionAction {
        guard case .waiting(let grant) = state else { return .drop }
        state = .admitting(grant)
        defer { readHeld = false }
        return .settle(read: readHeld)
    }

    /// A notification was admitted with its commit (`durable`).
    mutating func admitted(committing durable: Pending<Void>) {
        lastDurable = durable
    }

    enum RefusalAction {
        /// Answer (or close) now: nothing admitted waits for its commit.
        case answerNow
        /// Answer once this commit (the last one) is done.
        case answerAfter(Pending<Void>)
    }

    /// The first bad notification: nothing after it counts.
    mutating func refused() -> RefusalAction {
        state = .over
        guard let lastDurable else { return .answerNow }
        return .answerAfter(lastDurable)
    }

    /// A commit failed: status 1 is answered, nothing after counts.
    mutating func commitFailed() {
        state = .over
    }

    enum ShutdownAction: Equatable {
        /// Still in its handshake: close.
        case close
        /// Answer status 10 with the last accepted identifier, unless an
        /// error response was already sent.
        case answerShutdown
    }

    /// Graceful shutdown, or the certificate was revoked.
    mutating func shuttingDown() -> ShutdownAction {
        defer { state = .over }
        if case .handshaking = state { return .close }
        return .answerShutdown
    }

    /// The channel ended (or failed): whatever comes later counts no more.
    mutating func closed() {
        state = .over
    }
}
