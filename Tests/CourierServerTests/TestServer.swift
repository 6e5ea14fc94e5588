import CourierCore
import CourierDevice
import CourierServer
import CourierWire
import CourierTestSupport
import Foundation
import Logging
import ServiceLifecycle
import Testing

/// A real Courier (all listeners on port 0, real TLS) with an injected
/// clock, and real devices that talk to it.
final class TestServer: Sendable {
    let application: CourierApplication
    let group: ServiceGroup
    let task: Task<Void, any Error>
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
        let group = self.group
        task = Task { try await group.run() }
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

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
        removeTemporaryDirectory(directory)
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
