import Logging
import NIOCore
import Synchronization

/// The lines a peer can cause — a refused handshake, a reset stream, a
/// protocol error, a connection closed for its silence — written at most
/// once per cause per `connections.refusalLogInterval`; the next line of
/// a cause says how many of it were left out meanwhile
/// (`courier.suppressed`: "N more in the last 10 s"). A peer that
/// reconnects at will, or sends what makes such a line as fast as it can,
/// writes a few lines per interval, not one per attempt (docs/security.md).
final class PeerLog: Sendable {
    private struct Cause {
        var lastLogged: NIODeadline
        var suppressed = 0
    }

    private let interval: TimeAmount
    private let intervalText: String
    private let causes = Mutex<[String: Cause]>([:])

    init(interval: Double) {
        self.interval = .milliseconds(Int64(interval * 1000))
        intervalText = interval == interval.rounded() ? "\(Int(interval)) s" : "\(interval) s"
    }

    /// Writes `message` to `logger` unless a line of the same cause (by
    /// default the message itself) was written less than an interval ago;
    /// then it is only counted.
    func log(
        _ level: Logger.Level, _ message: @autoclosure () -> Logger.Message, cause: String? = nil, metadata: @autoclosure () -> Logger.Metadata = [:],
        to logger: Logger
    ) {
        // Counted at any level, so that the counts say what a peer caused; written where the level lets it.
        let text = message()
        let key = cause ?? text.description
        let now = NIODeadline.now()
        let suppressed = causes.withLock { causes -> Int? in
            if let cause = causes[key], now - cause.lastLogged < interval {
                causes[key]?.suppressed += 1
                return nil
            }
            defer { causes[key] = Cause(lastLogged: now) }
            return causes[key]?.suppressed ?? 0
        }
        guard let suppressed, logger.logLevel <= level else { return }
        var metadata = metadata()
        if suppressed > 0 { metadata["courier.suppressed"] = "\(suppressed) more since the last such line (at most one a \(intervalText))" }
        logger.log(level: level, text, metadata: metadata)
    }

    /// Lines of `cause` left out since its last line (for tests).
    func suppressed(_ cause: String) -> Int { causes.withLock { $0[cause]?.suppressed ?? 0 } }
}
