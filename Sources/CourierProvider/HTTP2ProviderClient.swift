import CourierCore
import CourierPKI
import CourierWire
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL

/// How the provider proves who it is to the HTTP/2 API.
public enum HTTP2Credentials: Sendable {
    /// Token trust: JWTs signed with the auth key (`.p8`) for the team.
    case token(AuthKey, teamID: String)
    /// Certificate trust: a provider certificate and its key (PEM files).
    case certificate(certificatePath: String, keyPath: String)
}

/// One notification for the HTTP/2 API (the seeds' table 8-2).
public struct HTTP2Push: Sendable, Hashable {
    public var token: [UInt8]
    public var payload: [UInt8]
    /// Nil: the certificate's only topic (certificate trust).
    public var topic: String?
    /// Nil: the server makes one.
    public var id: UUID?
    /// Nil: not sent; `Date(timeIntervalSince1970: 0)`: deliver now or never.
    public var expiration: Date?
    public var priority: Priority?
    public var collapseID: String?
    public var pushType: String?

    public init(
        token: [UInt8], payload: [UInt8], topic: String? = nil, id: UUID? = nil, expiration: Date? = nil, priority: Priority? = nil,
        collapseID: String? = nil, pushType: String? = nil
    ) {
        self.token = token
        self.payload = payload
        self.topic = topic
        self.id = id
        self.expiration = expiration
        self.priority = priority
        self.collapseID = collapseID
        self.pushType = pushType
    }
}

/// The outcome of one push: 200, or a status with its reason.
public struct HTTP2PushResult: Sendable, Hashable {
    public var status: Int
    public var apnsID: String
    /// Nil when accepted; reasons this library does not know are `.unknown`.
    public var reason: Reason?
    /// For 410 Unregistered: when the token stopped being valid.
    public var timestamp: Date?
    /// `apns-unique-id`, which the sandbox answers: the id of this
    /// notification alone in the delivery log.
    public var uniqueID: UUID?

    public var isAccepted: Bool { status == 200 }
}

/// One broadcast on a channel (Apple's "Sending broadcast push
/// notification requests to APNs").
public struct HTTP2Broadcast: Sendable, Hashable {
    public var bundleID: String
    public var channelID: String
    public var payload: [UInt8]
    /// Nil: the server makes one.
    public var requestID: UUID?
    /// Nil: not sent. A channel that stores nothing takes only 0.
    public var expiration: Date?
    public var priority: Priority?
    /// Sent as given: Live Activities are the only broadcasts.
    public var pushType: String

    public init(
        bundleID: String, channelID: String, payload: [UInt8], requestID: UUID? = nil, expiration: Date? = nil, priority: Priority? = nil,
        pushType: String = "liveactivity"
    ) {
        self.bundleID = bundleID
        self.channelID = channelID
        self.payload = payload
        self.requestID = requestID
        self.expiration = expiration
        self.priority = priority
        self.pushType = pushType
    }
}

/// The answer to a broadcast API request.
public struct HTTP2ChannelResult: Sendable, Hashable {
    public var status: Int
    /// `apns-request-id`: the request's, or the one the server made.
    public var requestID: String
    /// Nil on success; reasons this library does not know are `.unknown`.
    public var reason: Reason?
    /// `apns-channel-id`: a created (or read) channel's.
    public var channelID: String?
    /// A read channel's policy.
    public var storagePolicy: MessageStoragePolicy?
    /// A listing's channel ids.
    public var channels: [String]?

    public init(status: Int, requestID: String, reason: Reason? = nil, channelID: String? = nil) {
        self.status = status
        self.requestID = requestID
        self.reason = reason
        self.channelID = channelID
    }

    public var isSuccess: Bool { (200..<300).contains(status) }
}

/// A client of the HTTP/2 provider API (Courier's or Apple's): a small pool
/// of connections, a JWT made once and renewed while it is between 20 and
/// 60 minutes old (or a client certificate), `send` returning the apns-id
/// and the outcome.
public actor HTTP2ProviderClient {
    public struct Options: Sendable {
        public var host: String
        public var port: Int
        /// The CA to trust (Courier's `ca.pem`); nil: the system's roots.
        public var caPath: String?
        public var serverName: String?
        /// Connections in the pool; requests go round-robin.
        public var connections: Int
        /// A token older than this is replaced (Apple: between 20 and 60 minutes).
        public var tokenRenewal: TimeInterval

        public init(host: String, port: Int, caPath: String? = nil, serverName: String? = nil, connections: Int = 2, tokenRenewal: TimeInterval = 40 * 60) {
            self.host = host
            self.port = port
            self.caPath = caPath
            self.serverName = serverName
            self.connections = max(1, connections)
            self.tokenRenewal = min(max(tokenRenewal, 20 * 60), 60 * 60)
        }
    }

    let options: Options
    let credentials: HTTP2Credentials
    let clock: any WallClock
    let logger: Logger
    private let tls: TLSConfiguration
    private var pool: [Int: HTTP2Connection] = [:]
    private var connecting: [Int: Task<HTTP2Connection, any Error>] = [:]
    private var next = 0
    private var token: (compact: String, issuedAt: Date)?

    public init(options: Options, credentials: HTTP2Credentials, clock: any WallClock = SystemWallClock(), logger: Logger) throws {
        self.options = options
        self.credentials = credentials
        self.clock = clock
        self.logger = logger
        // A certificate and key with certificate trust; none with token trust.
        var certificate: (path: String, key: String)?
        if case .certificate(let certificatePath, let keyPath) = credentials { certificate = (certificatePath, keyPath) }
        var tls = try ProviderTLS(certificatePath: certificate?.path, keyPath: certificate?.key, caPath: options.caPath).configuration()
        tls.minimumTLSVersion = .tlsv12
        self.tls = tls
    }

    /// Sends one notification. A connection that was closed (GOAWAY) is
    /// replaced and the request sent once more on the new one.
    public func send(_ push: HTTP2Push) async throws -> HTTP2PushResult {
        Self.result(try await perform(requestHeaders(push), body: push.payload), fallbackID: push.id)
    }

    /// Sends a request on a pooled connection; one closed meanwhile
    /// (GOAWAY) is replaced and the request sent once more.
    private func perform(_ headers: [(name: String, value: String, indexing: HPACKIndexing)], body: [UInt8]?) async throws -> HTTP2RawResponse {
        var attempt = 0
        while true {
            attempt += 1
            let connection = try await connection()
            do {
                return try await connection.request(headers, body: body)
            } catch HTTP2ClientError.connectionClosed(let reason) where attempt < 3 {
                logger.debug("connection closed, sending again", metadata: ["courier.reason": "\(reason?.rawValue ?? "none")"])
                forget(connection)
            }
        }
    }

    // MARK: Broadcasts

    /// Sends a broadcast on a channel (`POST /4/broadcasts/apps/{bundleId}`,
    /// this client's push port).
    public func broadcast(_ broadcast: HTTP2Broadcast) async throws -> HTTP2ChannelResult {
        var headers = channelHeaders("POST", "/4/broadcasts/apps/" + broadcast.bundleID, requestID: broadcast.requestID, channelID: broadcast.channelID)
        headers.append(("apns-push-type", broadcast.pushType, .indexable))
        if let expiration = broadcast.expiration { headers.append(("apns-expiration", String(Int64(expiration.timeIntervalSince1970)), .nonIndexable)) }
        if let priority = broadcast.priority { headers.append(("apns-priority", String(priority.rawValue), .indexable)) }
        headers.append(("content-length", String(broadcast.payload.count), .indexable))
        return Self.channelResult(try await perform(headers, body: broadcast.payload), requestID: broadcast.requestID)
    }

    /// Creates a channel of the app (`POST /1/apps/{bundleId}/channels`;
    /// a client of the channel management port): the answer carries its id.
    public func createChannel(bundleID: String, policy: MessageStoragePolicy, requestID: UUID? = nil) async throws -> HTTP2ChannelResult {
        let body = ChannelConfiguration(messageStoragePolicy: policy.rawValue).json
        var headers = channelHeaders("POST", "/1/apps/\(bundleID)/channels", requestID: requestID, channelID: nil)
        headers.append(("content-length", String(body.count), .indexable))
        return Self.channelResult(try await perform(headers, body: body), requestID: requestID)
    }

    /// Reads a channel's configuration (`GET /1/apps/{bundleId}/channels`).
    public func channel(bundleID: String, id: String, requestID: UUID? = nil) async throws -> HTTP2ChannelResult {
        Self.channelResult(
            try await perform(channelHeaders("GET", "/1/apps/\(bundleID)/channels", requestID: requestID, channelID: id), body: nil), requestID: requestID)
    }

    /// Deletes a channel (`DELETE /1/apps/{bundleId}/channels`).
    public func deleteChannel(bundleID: String, id: String, requestID: UUID? = nil) async throws -> HTTP2ChannelResult {
        Self.channelResult(
            try await perform(channelHeaders("DELETE", "/1/apps/\(bundleID)/channels", requestID: requestID, channelID: id), body: nil),
            requestID: requestID)
    }

    /// Lists the app's channels (`GET /1/apps/{bundleId}/all-channels`).
    public func channels(bundleID: String, requestID: UUID? = nil) async throws -> HTTP2ChannelResult {
        Self.channelResult(
            try await perform(channelHeaders("GET", "/1/apps/\(bundleID)/all-channels", requestID: requestID, channelID: nil), body: nil),
            requestID: requestID)
    }

    private func channelHeaders(_ method: String, _ path: String, requestID: UUID?, channelID: String?)
        -> [(name: String, value: String, indexing: HPACKIndexing)]
    {
        var headers: [(name: String, value: String, indexing: HPACKIndexing)] = [
            (":method", method, .indexable), (":scheme", "https", .indexable), (":path", path, .nonIndexable),
            (":authority", options.serverName ?? options.host, .indexable),
        ]
        if let compact = currentToken() { headers.append(("authorization", "bearer " + compact, .nonIndexable)) }
        if let requestID { headers.append(("apns-request-id", requestID.lowercasedString, .nonIndexable)) }
        if let channelID { headers.append(("apns-channel-id", channelID, .nonIndexable)) }
        return headers
    }

    static func channelResult(_ response: HTTP2RawResponse, requestID: UUID?) -> HTTP2ChannelResult {
        var result = HTTP2ChannelResult(
            status: response.status, requestID: response.headers["apns-request-id"] ?? requestID?.lowercasedString ?? "",
            channelID: response.headers["apns-channel-id"])
        guard (200..<300).contains(response.status) else {
            result.reason = HTTP2ErrorBody.decode(response.body).map { Reason(rawValue: $0.reason) }
            return result
        }
        if let configuration = try? JSONDecoder().decode(ChannelConfiguration.self, from: Data(response.body)) {
            result.storagePolicy = MessageStoragePolicy(rawValue: configuration.messageStoragePolicy)
        }
        result.channels = (try? JSONDecoder().decode(ChannelList.self, from: Data(response.body)))?.channels
        return result
    }

    /// The JWT this client sends now (made or renewed as needed); nil with
    /// certificate trust.
    public func currentToken() -> String? {
        guard case .token(let key, let teamID) = credentials else { return nil }
        let now = clock.now()
        if let token, now.timeIntervalSince(token.issuedAt) < options.tokenRenewal { return token.compact }
        let compact = ProviderToken.make(key: key, teamID: teamID, issuedAt: now)
        token = (compact, now)
        return compact
    }

    public func close() async {
        for task in connecting.values { task.cancel() }
        for connection in pool.values { await connection.close() }
        pool = [:]
    }

    private func requestHeaders(_ push: HTTP2Push) -> [(name: String, value: String, indexing: HPACKIndexing)] {
        // Encoded as the seeds ask: the path and the token not indexed.
        var headers: [(name: String, value: String, indexing: HPACKIndexing)] = [
            (":method", "POST", .indexable), (":scheme", "https", .indexable), (":path", "/3/device/" + Hex.encode(push.token), .nonIndexable),
            (":authority", options.serverName ?? options.host, .indexable),
        ]
        if let compact = currentToken() { headers.append(("authorization", "bearer " + compact, .nonIndexable)) }
        if let id = push.id { headers.append(("apns-id", id.lowercasedString, .nonIndexable)) }
        if let expiration = push.expiration { headers.append(("apns-expiration", String(Int64(expiration.timeIntervalSince1970)), .nonIndexable)) }
        if let priority = push.priority { headers.append(("apns-priority", String(priority.rawValue), .indexable)) }
        if let topic = push.topic { headers.append(("apns-topic", topic, .indexable)) }
        if let collapseID = push.collapseID { headers.append(("apns-collapse-id", collapseID, .nonIndexable)) }
        if let pushType = push.pushType { headers.append(("apns-push-type", pushType, .indexable)) }
        headers.append(("content-length", String(push.payload.count), .indexable))
        return headers
    }

    static func result(_ response: HTTP2RawResponse, fallbackID: UUID?) -> HTTP2PushResult {
        let apnsID = response.apnsID ?? fallbackID?.lowercasedString ?? ""
        let uniqueID = response.uniqueID.flatMap(UUID.init(uuidString:))
        guard response.status != 200 else { return HTTP2PushResult(status: 200, apnsID: apnsID, uniqueID: uniqueID) }
        let body = HTTP2ErrorBody.decode(response.body)
        return HTTP2PushResult(
            status: response.status, apnsID: apnsID, reason: body.map { Reason(rawValue: $0.reason) },
            timestamp: body?.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) }, uniqueID: uniqueID)
    }

    private func connection() async throws -> HTTP2Connection {
        let slot = next
        next = (next + 1) % options.connections
        if let open = pool[slot], open.isUsable { return open }
        if let pending = connecting[slot] { return try await pending.value }
        let (options, tls) = (self.options, self.tls)
        let task = Task {
            try await HTTP2Connection.connect(host: options.host, port: options.port, tls: tls, serverName: options.serverName)
        }
        connecting[slot] = task
        defer { connecting[slot] = nil }
        let connection = try await task.value
        pool[slot] = connection
        return connection
    }

    private func forget(_ connection: HTTP2Connection) {
        for (slot, open) in pool where open === connection { pool[slot] = nil }
    }
}
