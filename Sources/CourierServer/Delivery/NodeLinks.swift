import CourierCore
import CourierProvider
import Foundation
import Logging
import NIOHPACK
import NIOSSL
import Synchronization

/// This node's connections to the other nodes, for handing pushes over
/// directly (docs/operations.md): one HTTP/2 connection a node, with
/// mutual TLS on the cluster authority's certificates, made when the
/// first push for that node comes and kept. A batch goes as one
/// `POST /v1/handover`; the other node answers once it has sent each push
/// to its device (or kept it as the database's queue would). A node that
/// cannot be reached within `limit` is left alone for `pause`: its pushes
/// go through the database's queue meanwhile, without waiting.
final class NodeLinks: Sendable {
    /// A node's address and its connection, and when a failure lets it be tried again.
    private struct Link {
        var address: String
        var connection: HTTP2Connection?
        var pausedUntil: ContinuousClock.Instant?
    }

    private let tls: TLSConfiguration
    private let limit: Duration
    private let pause: Duration
    private let logger: Logger
    private let links = Mutex([String: Link]())
    /// Notifications in one request at most.
    static let batchLimit = 2000

    init(tls: TLSConfiguration, limit: Duration = .seconds(1), pause: Duration = .seconds(2), logger: Logger) {
        self.tls = tls
        self.limit = limit
        self.pause = pause
        self.logger = logger
    }

    /// The other nodes' addresses as the store has them now: a node gone,
    /// or at another address, loses its connection.
    func update(_ addresses: [String: String]) {
        let closing = links.withLock { links -> [HTTP2Connection] in
            var closing: [HTTP2Connection] = []
            for (node, link) in links where addresses[node] != link.address {
                if let connection = link.connection { closing.append(connection) }
                links[node] = nil
            }
            for (node, address) in addresses where links[node] == nil { links[node] = Link(address: address) }
            return closing
        }
        for connection in closing { connection.startClosing() }
    }

    /// Whether `node` took the batch; false when it has no address, is
    /// paused after a failure, or failed now (then paused).
    func send(_ batch: [PendingNotification], to node: String) async -> Bool {
        let now = ContinuousClock.now
        let known = links.withLock { links -> (address: String, connection: HTTP2Connection?)? in
            guard let link = links[node], link.pausedUntil.map({ now >= $0 }) ?? true else { return nil }
            return (link.address, link.connection.flatMap { $0.isUsable ? $0 : nil })
        }
        guard let known else { return false }
        do {
            let connection: HTTP2Connection
            if let open = known.connection {
                connection = open
            } else {
                connection = try await connect(known.address)
                let kept = links.withLock { links -> Bool in
                    guard links[node]?.address == known.address else { return false }
                    links[node]?.connection = connection
                    return true
                }
                if !kept {
                    await connection.close()
                    return false
                }
            }
            for start in stride(from: 0, to: batch.count, by: Self.batchLimit) {
                let part = Array(batch[start..<min(batch.count, start + Self.batchLimit)])
                try await post(part, on: connection)
            }
            return true
        } catch {
            logger.warning(
                "a node could not be reached directly; its hand-overs go through the store for a while",
                metadata: ["courier.node": "\(node)", "courier.error": "\(error)"])
            let closing = links.withLock { links -> HTTP2Connection? in
                guard links[node]?.address == known.address else { return nil }
                links[node]?.pausedUntil = ContinuousClock.now + pause
                defer { links[node]?.connection = nil }
                return links[node]?.connection
            }
            if let closing { await closing.close() }
            return false
        }
    }

    /// Closes every connection (the node stops).
    func close() async {
        let all = links.withLock { links in
            defer { links = [:] }
            return links.values.compactMap(\.connection)
        }
        for connection in all { await connection.close() }
    }

    private func connect(_ address: String) async throws -> HTTP2Connection {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
            throw NodeLinkError("'\(address)' is not host:port")
        }
        let host = String(address[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return try await HTTP2Connection.connect(host: host, port: port, tls: tls, serverName: nil, timeout: limit)
    }

    /// One request, answered 204 within `limit`; the connection is closed when it is not.
    private func post(_ batch: [PendingNotification], on connection: HTTP2Connection) async throws {
        let body = HandOverBatch.encode(batch)
        let headers: [(name: String, value: String, indexing: HPACKIndexing)] = [
            (":method", "POST", .indexable), (":scheme", "https", .indexable), (":path", NodeListener.handOverPath, .indexable),
            (":authority", "courier-node", .indexable), ("content-type", "application/octet-stream", .indexable),
        ]
        let limit = self.limit
        let status = try await withThrowingTaskGroup(of: Int.self) { group in
            group.addTask { try await connection.request(headers, body: body).status }
            group.addTask {
                try await Task.sleep(for: limit)
                throw NodeLinkError("no answer within \(limit)")
            }
            do {
                let first = try await group.next()!
                group.cancelAll()
                return first
            } catch {
                // The request ends with its connection.
                await connection.close()
                throw error
            }
        }
        guard status == 204 else { throw NodeLinkError("answered \(status)") }
    }
}

struct NodeLinkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
