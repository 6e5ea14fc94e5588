import CourierCore
import CourierDevice
import Foundation
import Logging
import Synchronization

/// What the devices of a restart run saw, counted from their clients'
/// connection changes (`DeviceClient.Options.onChange`, told once per
/// change, not per retry).
final class StormCounts: Sendable {
    private struct State {
        var connected = 0
        var lost = 0
        /// Devices that could not connect at least once since the loss (told once per device and spell).
        var unreachable = 0
        var firstLoss: ContinuousClock.Instant?
        var lastReconnect: ContinuousClock.Instant?
    }
    private let state = Mutex(State())

    func record(_ change: ConnectionChange) {
        let now = ContinuousClock.now
        state.withLock { state in
            switch change {
            case .connected(_, let again):
                state.connected += 1
                if again { state.lastReconnect = now }
            case .lost:
                state.connected -= 1
                state.lost += 1
                if state.firstLoss == nil { state.firstLoss = now }
            case .unreachable: state.unreachable += 1
            case .refused: break
            }
        }
    }

    var connected: Int { state.withLock { $0.connected } }
    var lost: Int { state.withLock { $0.lost } }
    var unreachable: Int { state.withLock { $0.unreachable } }
    /// From the first loss to the last reconnection.
    var stormSeconds: Double? {
        state.withLock { state in
            guard let first = state.firstLoss, let last = state.lastReconnect else { return nil }
            return (last - first) / .seconds(1)
        }
    }
}

/// `--mode restart`: `--devices` clients of the device library (its
/// back-off and jitter, as shipped) connect, `--connect-wave` at a time;
/// then the run waits for the server to go away and come back (the
/// script restarts it) and reports how long it took until every device
/// was connected again. Benchmarks/limits/restart.sh.
func restartStorm(_ arguments: Arguments, directories: [String], logger: Logger) async throws {
    let counts = StormCounts()
    var clients: [DeviceClient] = []
    var runners: [Task<Void, Never>] = []
    let start = ContinuousClock.now
    for directory in directories {
        let client = try DeviceClient(
            credentials: try DeviceCredentials.load(from: directory), environment: .production,
            options: .init(host: arguments.host, port: arguments.devicePort, serverName: "localhost", onChange: { counts.record($0) }),
            logger: logger)
        clients.append(client)
        runners.append(Task { await client.run() })
        if arguments.connectWave > 0, clients.count % arguments.connectWave == 0 {
            for client in clients.suffix(arguments.connectWave) { try await client.waitUntilConnected() }
        }
    }
    for client in clients { try await client.waitUntilConnected() }
    // Written at once (print is buffered when the output is a file): the script waits for this line.
    FileHandle.standardOutput.write(
        Data("connected \(clients.count) devices in \(String(format: "%.1f", (ContinuousClock.now - start) / .seconds(1))) s; restart the server now\n".utf8))

    // Every device loses its connection, then every one is connected again.
    let limit = ContinuousClock.now + .seconds(600)
    while counts.lost < clients.count, ContinuousClock.now < limit { try await Task.sleep(for: .milliseconds(10)) }
    while counts.connected < clients.count, ContinuousClock.now < limit { try await Task.sleep(for: .milliseconds(10)) }
    let seconds = counts.stormSeconds.map { String(format: "%.2f", $0) } ?? "-"
    print(
        "restart: \(counts.lost) devices lost their connection; \(counts.connected) connected again, the last \(seconds) s after the first loss; "
            + "\(counts.unreachable) times a device could not connect (once per device and spell of failures)")
    for client in clients { await client.stop() }
    for runner in runners { await runner.value }
}
