/// Work that a port's connections start on their event loop and that has
/// to wait (a store read, a commit, a fault's delay, a certificate's check
/// during the handshake): it runs as a child task of the port's listener
/// (`PortListener`), which returns only once all of it has ended. A
/// connection that needs no waiting never comes here.
///
/// Handed in while the listener runs; the listener stops taking it only
/// after every connection has ended, and nothing starts work without a
/// connection, so no work is ever turned away.
struct ConnectionWork: Sendable {
    typealias Job = @Sendable () async -> Void

    private let continuation: AsyncStream<Job>.Continuation

    /// The work and the loop that runs it (`run`), which ends once `finish`
    /// was called and every job has ended.
    static func make() -> (ConnectionWork, Runner) {
        let (stream, continuation) = AsyncStream.makeStream(of: Job.self)
        return (ConnectionWork(continuation: continuation), Runner(jobs: stream))
    }

    /// Runs `job` in a child task of the listener.
    func start(_ job: @escaping Job) {
        if case .terminated = continuation.yield(job) {
            // Not reached (see above). Were it, the job still runs: it may
            // hold a promise that must be completed.
            Task { await job() }
        }
    }

    /// Takes no more work (the listener's connections have all ended).
    func finish() {
        continuation.finish()
    }

    struct Runner: Sendable {
        let jobs: AsyncStream<Job>

        func run() async {
            await withDiscardingTaskGroup { group in
                for await job in jobs {
                    group.addTask { await job() }
                }
            }
        }
    }
}
