import CourierCore
import CourierDevice
import CourierServer
import CourierWire
import CourierTestSupport
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle
import Synchronization
import Testing

/// Runs `body` against a real Courier (`TestServer`) that runs in a child
/// task of this call and is always shut down before it returns: when
/// `body` returns, throws (a failed `#require`) or is cancelled. Its data
/// directory is removed then.
func withTestServer<Result: Sendable>(
    qos: QoSConfiguration = QoSConfiguration(), tokenLength: Int = 32, configure: (inout CourierConfiguration) -> Void = { _ in },
    wrapStore: (@Sendable (any Store) -> any Store)? = nil, _ body: (TestServer) async throws -> Result
) async throws -> Result {
    let server = try await TestServer(qos: qos, tokenLength: tokenLength, configure: configure, wrapStore: wrapStore)
    defer { removeTemporaryDirectory(server.directory) }
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await server.run() }
        let result: Result
        do {
            result = try await body(server)
        } catch {
            await server.group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
        await server.group.triggerGracefulShutdown()
        try await tasks.waitForAll()
        return result
    }
}

/// `withTestServer` with a store whose faults the test injects.
func withFaultyStoreServer<Result: Sendable>(_ body: (TestServer, FaultyStore) async throws -> Result) async throws -> Result {
    let faults = Mutex<FaultyStore?>(nil)
    return try await withTestServer(wrapStore: { base in
        let store = FaultyStore(base)
        faults.withLock { $0 = store }
        return store
    }) { server in
        try await body(server, try #require(faults.withLock { $0 }))
    }
}

/// A real Courier (all listeners on port 0, real TLS) with an injected
/// clock, and real devices that talk to it; see `withTestServer`.
final class TestServer: Sendable {
    let application: CourierApplication
    let group: ServiceGroup
    /// Finished once the service group stopped.
    private let stopped: AsyncStream<Void>
    private let stoppedContinuation: AsyncStream<Void>.Continuation
    let clock: ManualWallClock
    /// The data directory, made for this server and removed when it stops.
    let directory: String
    let logger: Logger

    static let demoTopics: Set<String> = ["com.example.demo", "com.example.demo.voip", "com.example.demo.complication"]
    static let demoProvider = ProviderIdentity(name: "test provider", teamID: "DEMOTEAM01", topics: demoTopics)

    init(
        qos: QoSConfiguration = QoSConfiguration(), tokenLength: Int = 32,
        configure: (inout CourierConfiguration) -> Void = { _ in }, wrapStore: (@Sendable (any Store) -> any Store)? = nil
    ) async throws {
        let directory = try temporaryDirectory()
        self.directory = directory
        var configuration = testConfiguration(directory)
        configuration.qos = qos
        configuration.limits.tokenLength = tokenLength
        configure(&configuration)
        clock = ManualWallClock(Date())
        var logger = Logger(label: "courier-test")
        logger.logLevel = ProcessInfo.processInfo.environment["COURIER_TEST_LOG"] == nil ? .warning : .debug
        self.logger = logger
        application = try await CourierApplication.build(
            configuration: configuration, clock: clock, timers: false, wrapStore: wrapStore, logger: logger)
        group = application.serviceGroup(logger: logger, signals: false)
        (stopped, stoppedContinuation) = AsyncStream.makeStream()
    }

    /// Runs the services until they stop (`withTestServer`'s child task).
    fileprivate func run() async throws {
        defer { stoppedContinuation.finish() }
        try await group.run()
    }

    var dispatcher: Dispatcher { application.dispatcher }

    func devicePort(_ environment: Environment = .production) async throws -> Int {
        try await application.ports.port(.device, environment)
    }

    /// A new device identity and a connected client for it.
    func device(_ environment: Environment = .production, directory: String? = nil) async throws -> TestDevice {
        let path = directory ?? self.directory + "/device-\(UUID().uuidString)"
        if directory == nil { _ = try await application.provisioner.issueDeviceIdentity(directory: path) }
        let credentials = try DeviceCredentials.load(from: path)
        let port = try await devicePort(environment)
        let client = try DeviceClient(
            credentials: credentials, environment: environment,
            options: .init(host: "127.0.0.1", port: port, initialBackoff: 0.02, maximumBackoff: 0.2, serverName: "localhost"), logger: logger)
        let runTask = Task { await client.run() }
        try await client.waitUntilConnected()
        return TestDevice(client: client, runTask: runTask, directory: path)
    }

    func push(
        _ token: [UInt8], payload: String = #"{"aps":{"alert":"hi"}}"#, topic: String = "com.example.demo", environment: Environment = .production,
        expiration: Date? = nil, priority: Priority = .immediate, collapseID: String? = nil, id: UUID = UUID(), silent: Bool = false,
        from identity: ProviderIdentity = TestServer.demoProvider
    ) async -> (UUID, AcceptResult) {
        let notification = PushNotification(
            id: id, token: token, topic: topic, payload: Array(payload.utf8), expiration: expiration, priority: priority, collapseID: collapseID,
            pushType: "alert", isSilent: silent)
        return (id, await dispatcher.accept(notification, environment: environment, grant: TopicGrant(topic, for: identity)))
    }

    func events(_ id: UUID) async throws -> [DeliveryEvent.Kind] {
        await dispatcher.flushLog()
        return try await application.provisioner.store.deliveryEvents(notificationID: id).map(\.kind)
    }

    /// Stops a device and waits until the server has seen it go.
    func disconnect(_ device: TestDevice) async {
        await device.stop()
        await dispatcher.waitUntilOffline(deviceID: await device.client.deviceID, environment: device.client.environment)
    }

    /// Graceful shutdown now, as SIGTERM: returns once every service
    /// stopped (call it at most once; `withTestServer` shuts down anyway).
    func shutDown() async {
        await group.triggerGracefulShutdown()
        for await _ in stopped {}
    }
}

/// What a test device's app received, in order.
actor Inbox {
    private var items: [DeviceNotification] = []
    private var waiter: (id: UUID, continuation: CheckedContinuation<DeviceNotification?, Never>)?

    func put(_ notification: DeviceNotification) {
        if let waiter {
            self.waiter = nil
            waiter.continuation.resume(returning: notification)
        } else {
            items.append(notification)
        }
    }

    func next(limit: Double) async -> DeviceNotification? {
        if !items.isEmpty { return items.removeFirst() }
        let id = UUID()
        return await withCheckedContinuation { continuation in
            waiter = (id, continuation)
            Task {
                try? await Task.sleep(for: .seconds(limit))
                self.expire(id)
            }
        }
    }

    private func expire(_ id: UUID) {
        guard let waiter, waiter.id == id else { return }
        self.waiter = nil
        waiter.continuation.resume(returning: nil)
    }
}

struct TestDevice: Sendable {
    let client: DeviceClient
    let runTask: Task<Void, Never>
    let directory: String
    let inbox: Inbox
    let reader: Task<Void, Never>

    init(client: DeviceClient, runTask: Task<Void, Never>, directory: String) {
        self.client = client
        self.runTask = runTask
        self.directory = directory
        let inbox = Inbox()
        self.inbox = inbox
        reader = Task {
            for await notification in client.notifications { await inbox.put(notification) }
        }
    }

    /// The next notification the app gets; nil if none comes within
    /// `limit` seconds (a safety net: tests prove an absence by a later
    /// notification arriving first, never by waiting).
    func next(limit: Double = 20) async -> DeviceNotification? {
        await inbox.next(limit: limit)
    }

    /// The next notification, acknowledged as handled.
    func nextAcknowledged() async throws -> DeviceNotification? {
        guard let notification = await next() else { return nil }
        try await client.acknowledge(notification)
        return notification
    }

    func stop() async {
        await client.stop()
        await runTask.value
        await reader.value
    }
}

@Suite struct TestServerTests {
    struct Failed: Error {}

    /// A test whose `#require` fails inside `withTestServer` leaves no
    /// server running: its listeners are closed and its data removed.
    @Test func aServerIsShutDownWhenTheTestThrows() async throws {
        let seen = Mutex<(port: Int, directory: String)?>(nil)
        await #expect(throws: Failed.self) {
            try await withTestServer { server in
                let port = try await server.application.ports.port(.http2, .production)
                seen.withLock { $0 = (port, server.directory) }
                throw Failed()
            }
        }
        let (port, directory) = try #require(seen.withLock { $0 })
        await #expect(throws: (any Error).self) {
            try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get().close()
        }
        #expect(!FileManager.default.fileExists(atPath: directory))
    }
}
