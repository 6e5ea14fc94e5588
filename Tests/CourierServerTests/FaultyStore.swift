import CourierCore
import Foundation
import Synchronization
import Testing

/// A store that passes everything to a real one, except the failures a
/// test switches on: a store that fails while holding notifications (500
/// InternalServerError, binary status 1), one that cannot read
/// registrations (503 ServiceUnavailable), a team that is gone (403
/// Forbidden), and gates that hold commits, delivery-log writes or app
/// lookups (a request kept in flight).
final class FaultyStore: Store {
    struct Injected: Error {}

    private struct State {
        var failStorePending = false
        var logWrites: [Int] = []
        var pendingBatches: [Int] = []
        var failRegistrationReads = false
        var failKeyReads = false
        var failChannels = false
        var missingTeams: Set<String> = []
    }

    let base: any Store
    private let state = Mutex(State())

    init(_ base: any Store) {
        self.base = base
    }

    func failStorePending(_ on: Bool) { state.withLock { $0.failStorePending = on } }
    func failRegistrationReads(_ on: Bool) { state.withLock { $0.failRegistrationReads = on } }
    func failKeyReads(_ on: Bool) { state.withLock { $0.failKeyReads = on } }
    func failChannels(_ on: Bool) { state.withLock { $0.failChannels = on } }
    func hideTeam(_ id: String) { _ = state.withLock { $0.missingTeams.insert(id) } }

    /// The sizes of the batches of notifications to hold, in order.
    var pendingBatches: [Int] { state.withLock { $0.pendingBatches } }

    /// Holds commits of notifications to store while closed.
    let commitGate = Gate()

    func team(id: String) async throws -> Team? {
        if state.withLock({ $0.missingTeams.contains(id) }) { return nil }
        return try await base.team(id: id)
    }

    func registration(deviceID: UInt64, bundleID: String, environment: Environment) async throws -> AppRegistration? {
        if state.withLock({ $0.failRegistrationReads }) { throw Injected() }
        return try await base.registration(deviceID: deviceID, bundleID: bundleID, environment: environment)
    }

    func storePending(_ notifications: [PendingNotification]) async throws -> [PendingNotification?] {
        if state.withLock({ $0.failStorePending }) { throw Injected() }
        state.withLock { $0.pendingBatches.append(notifications.count) }
        await commitGate.pass()
        return try await base.storePending(notifications)
    }

    func schemaVersion() async throws -> Int { try await base.schemaVersion() }
    func createTeam(_ team: Team) async throws { try await base.createTeam(team) }
    func teams() async throws -> [Team] { try await base.teams() }
    func createApp(_ app: App) async throws { try await base.createApp(app) }
    func app(bundleID: String) async throws -> App? {
        await appGate.pass()
        return try await base.app(bundleID: bundleID)
    }

    /// Holds app lookups (a device's token request) while closed.
    let appGate = Gate()
    func apps(teamID: String) async throws -> [App] { try await base.apps(teamID: teamID) }
    func addAuthKey(_ key: AuthKeyRecord) async throws { try await base.addAuthKey(key) }
    func authKey(id: String) async throws -> AuthKeyRecord? {
        if state.withLock({ $0.failKeyReads }) { throw Injected() }
        return try await base.authKey(id: id)
    }
    func authKeys(teamID: String) async throws -> [AuthKeyRecord] { try await base.authKeys(teamID: teamID) }
    func revokeAuthKey(id: String, at: Date) async throws -> Bool { try await base.revokeAuthKey(id: id, at: at) }
    func addCertificate(_ certificate: CertificateRecord) async throws { try await base.addCertificate(certificate) }
    func certificate(serial: String) async throws -> CertificateRecord? { try await base.certificate(serial: serial) }
    func certificates(kind: CertificateKind?) async throws -> [CertificateRecord] { try await base.certificates(kind: kind) }
    func revokeCertificate(serial: String, at: Date) async throws -> Bool { try await base.revokeCertificate(serial: serial, at: at) }
    func certificatesRevoked(since date: Date) async throws -> [String] { try await base.certificatesRevoked(since: date) }
    func createDevice(_ device: Device) async throws { try await base.createDevice(device) }
    func device(id: UInt64) async throws -> Device? { try await base.device(id: id) }
    func setDeviceGeneration(id: UInt64, generation: UInt32) async throws -> [PendingNotification] {
        try await base.setDeviceGeneration(id: id, generation: generation)
    }
    func markDeviceSeen(id: UInt64, at: Date) async throws { try await base.markDeviceSeen(id: id, at: at) }
    func register(_ registration: AppRegistration) async throws { try await base.register(registration) }
    func registrations(deviceID: UInt64) async throws -> [AppRegistration] { try await base.registrations(deviceID: deviceID) }
    func unregister(deviceID: UInt64, bundleID: String, environment: Environment, at: Date) async throws -> Bool { try await base.unregister(deviceID: deviceID, bundleID: bundleID, environment: environment, at: at) }
    var endedActivitiesKept: Int { base.endedActivitiesKept }
    func endActivity(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32, at: Date) async throws -> Bool {
        try await base.endActivity(deviceID: deviceID, bundleID: bundleID, environment: environment, activity: activity, at: at)
    }
    func createChannel(_ channel: BroadcastChannel, limit: Int) async throws -> Bool {
        if state.withLock({ $0.failChannels }) { throw Injected() }
        return try await base.createChannel(channel, limit: limit)
    }
    func channel(id: String, environment: Environment) async throws -> BroadcastChannel? {
        if state.withLock({ $0.failChannels }) { throw Injected() }
        return try await base.channel(id: id, environment: environment)
    }
    func channels(bundleID: String, environment: Environment) async throws -> [BroadcastChannel] {
        try await base.channels(bundleID: bundleID, environment: environment)
    }
    func deleteChannel(id: String, environment: Environment) async throws -> Bool { try await base.deleteChannel(id: id, environment: environment) }
    func storeBroadcast(_ broadcast: StoredBroadcast) async throws -> Bool { try await base.storeBroadcast(broadcast) }
    func storedBroadcast(channelID: String, environment: Environment) async throws -> StoredBroadcast? {
        try await base.storedBroadcast(channelID: channelID, environment: environment)
    }
    func activityEnd(deviceID: UInt64, bundleID: String, environment: Environment, activity: UInt32) async throws -> Date? {
        try await base.activityEnd(deviceID: deviceID, bundleID: bundleID, environment: environment, activity: activity)
    }
    func pending(deviceID: UInt64, environment: Environment) async throws -> [PendingNotification] { try await base.pending(deviceID: deviceID, environment: environment) }
    func removePending(_ references: [PendingReference]) async throws -> [Bool] { try await base.removePending(references) }
    func removeExpiredPending(before date: Date) async throws -> [PendingNotification] { try await base.removeExpiredPending(before: date) }
    func removePending(acceptedBefore date: Date) async throws -> [PendingNotification] { try await base.removePending(acceptedBefore: date) }
    func addFeedback(_ entries: [FeedbackEntry]) async throws { try await base.addFeedback(entries) }
    func feedback(environment: Environment, topic: String) async throws -> [FeedbackEntry] { try await base.feedback(environment: environment, topic: topic) }
    func removeFeedback(_ entries: [FeedbackEntry]) async throws { try await base.removeFeedback(entries) }
    func pendingCount() async throws -> Int { try await base.pendingCount() }
    func addVirtualTokens(_ tokens: [VirtualToken]) async throws -> [[UInt8]] { try await base.addVirtualTokens(tokens) }
    func virtualToken(environment: Environment, bundleID: String, token: [UInt8]) async throws -> VirtualToken? {
        try await base.virtualToken(environment: environment, bundleID: bundleID, token: token)
    }
    func virtualTokens(environment: Environment?, bundleID: String?, after: [UInt8]?, limit: Int?) async throws -> [VirtualToken] {
        try await base.virtualTokens(environment: environment, bundleID: bundleID, after: after, limit: limit)
    }
    func virtualTokenCount(environment: Environment, bundleID: String) async throws -> Int {
        try await base.virtualTokenCount(environment: environment, bundleID: bundleID)
    }
    func updateVirtualToken(environment: Environment, bundleID: String, token: [UInt8], offline: Bool?, uninstalled: Date??) async throws -> VirtualToken? {
        try await base.updateVirtualToken(environment: environment, bundleID: bundleID, token: token, offline: offline, uninstalled: uninstalled)
    }
    func removeVirtualTokens(environment: Environment, bundleID: String, tokens: [[UInt8]]?) async throws -> Int {
        try await base.removeVirtualTokens(environment: environment, bundleID: bundleID, tokens: tokens)
    }
    func appendDeliveryEvents(_ events: [DeliveryEvent]) async throws {
        await logGate.pass()
        try await base.appendDeliveryEvents(events)
        state.withLock { $0.logWrites.append(events.count) }
    }

    /// The number of events of each delivery-log write, in order.
    var logWrites: [Int] { state.withLock { $0.logWrites } }

    /// Holds delivery-log writes while closed.
    let logGate = Gate()
    func deliveryEvents(notificationID: UUID) async throws -> [DeliveryEvent] { try await base.deliveryEvents(notificationID: notificationID) }
}

/// A gate async code passes only while it is open; a test can wait
/// until something is held at it.
final class Gate: Sendable {
    private struct State {
        var open = true
        var waiting: [CheckedContinuation<Void, Never>] = []
        /// Tests waiting for something to be held.
        var watchers: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    func close() { state.withLock { $0.open = false } }

    func open() {
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for waiter in waiting { waiter.resume() }
    }

    var waiting: Int { state.withLock { $0.waiting.count } }

    func pass() async {
        await withCheckedContinuation { continuation in
            let watchers = state.withLock { state -> [CheckedContinuation<Void, Never>]? in
                guard !state.open else { return nil }
                state.waiting.append(continuation)
                defer { state.watchers = [] }
                return state.watchers
            }
            guard let watchers else { return continuation.resume() }
            for watcher in watchers { watcher.resume() }
        }
    }

    /// Returns once something is held at the gate.
    func waitUntilHolding() async {
        await withCheckedContinuation { continuation in
            let holding = state.withLock { state -> Bool in
                if !state.waiting.isEmpty { return true }
                state.watchers.append(continuation)
                return false
            }
            if holding { continuation.resume() }
        }
    }
}
