import ServiceLifecycle
import Synchronization

/// A result that arrives later: callbacks registered before it arrives run
/// when it does, and any number of tasks may await it.
///
/// Not NIO's `EventLoopFuture`: a group commit resolves a batch's results
/// in the batch's order, and each result's callbacks must run then, on the
/// resolving thread, in that order — a binary connection counts its
/// accepted identifiers by the order its commits finish
/// (`BinaryAcceptance`). An `EventLoopFuture` runs its callbacks on
/// the event loop it was made on, later; one connection's commits made on
/// different loops (one admitted on the connection's loop, the next
/// decided in a task) would run their callbacks out of order.
final class Pending<Value: Sendable>: Sendable {
    typealias Callback = @Sendable (Result<Value, any Error>) -> Void

    private enum State {
        case waiting([Callback])
        case done(Result<Value, any Error>)
    }

    private let state = Mutex(State.waiting([]))

    init() {}

    func resolve(_ result: Result<Value, any Error>) {
        let callbacks = state.withLock { state -> [Callback] in
            guard case .waiting(let callbacks) = state else { return [] }
            state = .done(result)
            return callbacks
        }
        for callback in callbacks { callback(result) }
    }

    /// Runs `body` with the result once it is known: at once (on this
    /// thread) when it is, otherwise on the thread that resolves it.
    func whenResolved(_ body: @escaping Callback) {
        let done = state.withLock { state -> Result<Value, any Error>? in
            switch state {
            case .waiting(var callbacks):
                callbacks.append(body)
                state = .waiting(callbacks)
                return nil
            case .done(let result):
                return result
            }
        }
        if let done { body(done) }
    }

    var value: Value {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                whenResolved { continuation.resume(with: $0) }
            }
        }
    }
}

/// Group commit: items are queued in the order they are handed in; the
/// writer, woken by the first item of an empty queue, writes everything
/// queued so far in one batch, again and again until the queue is empty.
/// Under load many items share one transaction; alone, an item is written
/// at once.
///
/// The writer is a service of the application's `ServiceGroup`, placed so
/// that it stops after every interface that hands items in and before the
/// store: at graceful shutdown it writes what is queued and ends; an item
/// handed in after that fails at once (`GroupCommitEnded`).
final class GroupCommit<Item: Sendable, Result: Sendable>: Service, Sendable {
    private struct State {
        /// Queued items, and the result to come of each (same order): two
        /// arrays, so that a batch's items go to `write` as they are, not
        /// copied out of pairs.
        var items: [Item] = []
        var pending: [Pending<Result>] = []
        /// The writer was woken for what is queued, and has not yet found
        /// the queue empty.
        var woken = false
        var ended = false
    }

    private let state = Mutex(State())
    private let write: @Sendable ([Item]) async throws -> [Result]
    /// Told how long each batch took to write.
    private let observe: @Sendable (Duration) -> Void
    private let wake: AsyncStream<Void>.Continuation
    private let wakeups: AsyncStream<Void>
    /// `drain`, as made where the writer is created: there `Item` and
    /// `Result` are known, so the compiler specializes it. `run`, called
    /// through `Service` by the service group, is generic code, and a
    /// drain called from it would look up generic type metadata at run
    /// time for every item.
    private let drainQueued: @Sendable (GroupCommit) async -> Void

    /// `write` must return one result for each item, in order.
    init(observe: @escaping @Sendable (Duration) -> Void = { _ in }, write: @escaping @Sendable ([Item]) async throws -> [Result]) {
        self.write = write
        self.observe = observe
        (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        drainQueued = { await $0.drain() }
    }

    /// Queues an item now (its place in the order is fixed by this call)
    /// and returns the result to come.
    func enqueue(_ item: Item) -> Pending<Result> {
        let pending = Pending<Result>()
        let (wakeWriter, ended) = state.withLock { state -> (Bool, Bool) in
            if state.ended { return (false, true) }
            state.items.append(item)
            state.pending.append(pending)
            if state.woken { return (false, false) }
            state.woken = true
            return (true, false)
        }
        if ended {
            pending.resolve(.failure(GroupCommitEnded()))
        } else if wakeWriter {
            wake.yield()
        }
        return pending
    }

    /// Items handed in and not yet taken by the writer.
    var queued: Int { state.withLock { $0.items.count } }

    func submit(_ item: Item) async throws -> Result {
        try await enqueue(item).value
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            for await _ in wakeups { await drainQueued(self) }
        } onGracefulShutdown: {
            self.wake.finish()
        }
        // What was queued until now is written; nothing is taken after.
        state.withLock { $0.ended = true }
        await drainQueued(self)
    }

    private func drain() async {
        while true {
            let (items, waiting) = state.withLock { state -> ([Item], [Pending<Result>]) in
                defer {
                    state.items.removeAll(keepingCapacity: true)
                    state.pending.removeAll(keepingCapacity: true)
                }
                if state.items.isEmpty { state.woken = false }
                return (state.items, state.pending)
            }
            if items.isEmpty { return }
            do {
                let started = ContinuousClock.now
                let results = try await write(items)
                observe(ContinuousClock.now - started)
                for (pending, result) in zip(waiting, results) { pending.resolve(.success(result)) }
            } catch {
                for pending in waiting { pending.resolve(.failure(error)) }
            }
        }
    }
}

/// An item handed to a group commit whose writer has ended (the server is
/// shutting down).
struct GroupCommitEnded: Error, CustomStringConvertible {
    var description: String { "the store's writer has stopped: the server is shutting down" }
}
