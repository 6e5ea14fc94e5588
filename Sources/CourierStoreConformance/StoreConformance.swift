import CourierCore
import Foundation
import Synchronization

/// Collects the mismatches one conformance case finds.
public final class ConformanceReport: Sendable {
    private let failures = Mutex<[String]>([])

    public init() {}

    public var all: [String] { failures.withLock { $0 } }

    /// Records `message` unless `condition` holds.
    public func check(_ condition: Bool, _ message: @autoclosure () -> String, line: Int = #line) {
        if !condition {
            let text = "line \(line): \(message())"
            failures.withLock { $0.append(text) }
        }
    }

    public func equal<T: Equatable>(_ actual: T, _ expected: T, _ what: String, line: Int = #line) {
        check(actual == expected, "\(what): got \(actual), expected \(expected)", line: line)
    }
}

/// One behaviour every `Store` must have.
public struct StoreConformanceCase: Sendable, CustomStringConvertible {
    public let name: String
    let body: @Sendable (any Store, ConformanceReport) async throws -> Void

    public var description: String { name }

    /// Runs the case on `store` and returns what did not conform (empty
    /// when all did). A thrown error is a failure too.
    public func run(on store: any Store) async -> [String] {
        let report = ConformanceReport()
        do {
            try await body(store, report)
        } catch {
            report.check(false, "threw \(error)")
        }
        return report.all
    }
}

/// The shared test suite of the `Store` protocol. Each store's tests run
/// every case against a new, empty store.
public enum StoreConformance {
    static let t0 = Date(timeIntervalSince1970: 1_750_000_000)

    static func at(_ seconds: Double) -> Date { t0.addingTimeInterval(seconds) }

    static func team(_ id: String = "TEAM000001") -> Team { Team(id: id, name: "Team \(id)", createdAt: t0) }

    static func notification(_ token: [UInt8], topic: String, expiresIn: Double?, collapse: String? = nil) -> PushNotification {
        PushNotification(
            id: UUID(), token: token, topic: topic, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8),
            expiration: expiresIn.map(at), priority: .immediate, collapseID: collapse, pushType: "alert")
    }

    public static let cases: [StoreConformanceCase] = [
        StoreConformanceCase(name: "migrations leave a positive schema version") { store, report in
            report.check(try await store.schemaVersion() >= 1, "schema version should be at least 1")
        },
        StoreConformanceCase(name: "teams and apps round-trip") { store, report in
            try await store.createTeam(team())
            try await store.createTeam(team("TEAM000002"))
            let app = App(bundleID: "com.example.one", teamID: "TEAM000001", topicKinds: [.app, .voip], createdAt: at(1))
            try await store.createApp(app)
            try await store.createApp(App(bundleID: "com.example.two", teamID: "TEAM000001", createdAt: at(2)))
            report.equal(try await store.team(id: "TEAM000001"), team(), "team")
            report.equal(try await store.team(id: "NOSUCHTEAM"), nil, "missing team")
            report.equal(try await store.teams().map(\.id), ["TEAM000001", "TEAM000002"], "teams")
            report.equal(try await store.app(bundleID: "com.example.one"), app, "app")
            report.equal(try await store.app(bundleID: "com.example.one")?.topics.map(\.description),
                ["com.example.one", "com.example.one.voip"], "topics")
            report.equal(try await store.apps(teamID: "TEAM000001").map(\.bundleID), ["com.example.one", "com.example.two"], "apps")
            report.equal(try await store.apps(teamID: "TEAM000002"), [], "other team's apps")
        },
        StoreConformanceCase(name: "duplicates and dangling references are refused") { store, report in
            try await store.createTeam(team())
            do {
                try await store.createTeam(team())
                report.check(false, "a second team with the same id was accepted")
            } catch let error as StoreError {
                report.equal(error.code, .duplicate, "error code")
            }
            do {
                try await store.createApp(App(bundleID: "com.example.x", teamID: "NOSUCHTEAM", createdAt: t0))
                report.check(false, "an app of a missing team was accepted")
            } catch let error as StoreError {
                report.equal(error.code, .notFound, "error code")
            }
            try await store.createApp(App(bundleID: "com.example.x", teamID: "TEAM000001", createdAt: t0))
            do {
                try await store.createApp(App(bundleID: "com.example.x", teamID: "TEAM000001", createdAt: t0))
                report.check(false, "a second app with the same bundle id was accepted")
            } catch let error as StoreError {
                report.equal(error.code, .duplicate, "error code")
            }
        },
        StoreConformanceCase(name: "auth keys are kept and revoked once") { store, report in
            try await store.createTeam(team())
            let key = AuthKeyRecord(keyID: "KEY0000001", teamID: "TEAM000001", publicKey: Array(repeating: 4, count: 65), createdAt: at(5))
            try await store.addAuthKey(key)
            report.equal(try await store.authKey(id: "KEY0000001"), key, "key")
            report.equal(try await store.authKeys(teamID: "TEAM000001"), [key], "team keys")
            report.equal(try await store.revokeAuthKey(id: "KEY0000001", at: at(10)), true, "first revoke")
            report.equal(try await store.revokeAuthKey(id: "KEY0000001", at: at(20)), false, "second revoke")
            report.equal(try await store.revokeAuthKey(id: "NOSUCHKEY1", at: at(20)), false, "revoke of missing key")
            report.equal(try await store.authKey(id: "KEY0000001")?.revokedAt, at(10), "revocation time")
            report.equal(key.environments, Set(Environment.allCases), "a key's default scope: both environments")
            let scoped = AuthKeyRecord(
                keyID: "KEY0000002", teamID: "TEAM000001", publicKey: Array(repeating: 4, count: 65), createdAt: at(6), environments: [.sandbox],
                bundleIDs: ["com.example.one", "com.example.two"])
            try await store.addAuthKey(scoped)
            report.equal(try await store.authKey(id: "KEY0000002"), scoped, "a scoped key")
        },
        StoreConformanceCase(name: "certificates are kept, listed by kind and revoked") { store, report in
            let provider = CertificateRecord(
                serial: "0a1b", kind: .provider, subject: "CN=Apple Push Services: com.example.one", teamID: "TEAM000001",
                bundleID: "com.example.one", environments: [.production, .sandbox], notAfter: at(86_400), createdAt: at(1),
                pem: "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n")
            let device = CertificateRecord(
                serial: "0c2d", kind: .device, subject: "CN=device", deviceID: UInt64.max - 1, notAfter: at(86_400),
                createdAt: at(2), pem: "pem")
            try await store.addCertificate(provider)
            try await store.addCertificate(device)
            report.equal(try await store.certificate(serial: "0a1b"), provider, "provider certificate")
            report.equal(try await store.certificate(serial: "0C2D"), device, "serial lookup ignores case")
            report.equal(try await store.certificates(kind: .device), [device], "device certificates")
            report.equal(try await store.certificates(kind: nil).map(\.serial), ["0a1b", "0c2d"], "all certificates")
            report.equal(try await store.revokeCertificate(serial: "0a1b", at: at(3)), true, "revoke")
            report.equal(try await store.revokeCertificate(serial: "0a1b", at: at(4)), false, "revoke twice")
            report.equal(try await store.certificate(serial: "0a1b")?.revokedAt, at(3), "revocation time")
            report.equal(try await store.certificatesRevoked(since: at(3)), ["0a1b"], "revoked since the time it was")
            report.equal(try await store.certificatesRevoked(since: at(3.001)), [], "nothing revoked since after it")
            report.equal(try await store.revokeCertificate(serial: "0c2d", at: at(5)), true, "revoke another")
            report.equal(try await store.certificatesRevoked(since: at(0)), ["0a1b", "0c2d"], "revoked since, oldest first")
        },
        StoreConformanceCase(name: "devices keep generation and last seen") { store, report in
            let device = Device(id: 0xFEDC_BA98_7654_3210, certificateSerial: "01", generation: 1, createdAt: at(0))
            try await store.createDevice(device)
            report.equal(try await store.device(id: device.id), device, "device")
            let other = Device(id: 0x0123, certificateSerial: "02", createdAt: at(0))
            try await store.createDevice(other)
            for (deviceID, environment) in [(device.id, Environment.production), (device.id, .sandbox), (other.id, .production)] {
                try await store.register(
                    AppRegistration(deviceID: deviceID, bundleID: "com.example.one", environment: environment, token: [1, 2, 3], registeredAt: at(1)))
            }
            let token = Array(repeating: UInt8(1), count: 32)
            let held = [(device.id, Environment.production), (device.id, .sandbox), (other.id, .production)].map { deviceID, environment in
                PendingNotification(
                    deviceID: deviceID, bundleID: "com.example.one", environment: environment,
                    notification: notification(token, topic: "com.example.one", expiresIn: 3600), acceptedAt: at(2))
            }
            _ = try await store.storePending(held)
            report.equal(
                try await store.setDeviceGeneration(id: device.id, generation: 2).map(\.notification.id).sorted { $0.uuidString < $1.uuidString },
                held.prefix(2).map(\.notification.id).sorted { $0.uuidString < $1.uuidString }, "a new generation returns what was held for the device")
            report.equal(try await store.pending(deviceID: device.id, environment: .production), [], "nothing held for the device after")
            report.equal(try await store.pending(deviceID: device.id, environment: .sandbox), [], "nor in the other environment")
            report.equal(try await store.pending(deviceID: other.id, environment: .production), [held[2]], "another device's held notification stays")
            try await store.markDeviceSeen(id: device.id, at: at(30))
            let updated = try await store.device(id: device.id)
            report.equal(updated?.generation, 2, "generation")
            report.equal(updated?.lastSeen, at(30), "last seen")
            report.equal(try await store.registrations(deviceID: device.id), [], "a new generation ends the device's registrations")
            report.equal(try await store.registrations(deviceID: other.id).count, 1, "another device's registrations stay")
            do {
                try await store.setDeviceGeneration(id: 42, generation: 3)
                report.check(false, "changing a missing device's generation succeeded")
            } catch let error as StoreError {
                report.equal(error.code, .notFound, "error code")
            }
        },
        StoreConformanceCase(name: "Live Activities end once, per device, app, environment and activity") { store, report in
            try await store.createDevice(Device(id: 7, certificateSerial: "07", createdAt: at(0)))
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 3), nil, "not ended")
            report.equal(try await store.endActivity(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 3, at: at(5)), true, "end")
            report.equal(try await store.endActivity(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 3, at: at(9)), false, "end again")
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 3), at(5), "the first end kept")
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .production, activity: 3), nil, "other environment")
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 4), nil, "other activity")
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.two", environment: .sandbox, activity: 3), nil, "other app")
            report.equal(
                try await store.endActivity(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: UInt32.max - 1, at: at(6)), true,
                "a large activity number")
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: UInt32.max - 1), at(6), "read back")
            // The most recent ends are kept: the oldest go.
            for activity in 100..<UInt32(100 + store.endedActivitiesKept) {
                _ = try await store.endActivity(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: activity, at: at(10 + Double(activity)))
            }
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 3), nil, "the oldest end dropped")
            report.equal(
                try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 100 + UInt32(store.endedActivitiesKept) - 1),
                at(Double(10 + 100 + store.endedActivitiesKept - 1)), "the newest kept")
            // A reset ends them all, with the device's tokens.
            try await store.setDeviceGeneration(id: 7, generation: 2)
            report.equal(try await store.activityEnd(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, activity: 150), nil, "gone with a reset")
        },
        StoreConformanceCase(name: "broadcast channels: limit per app and environment, stored broadcast, delete") { store, report in
            func channel(_ id: String, _ bundleID: String = "com.example.one", _ environment: Environment = .sandbox, policy: MessageStoragePolicy = .mostRecent)
                -> BroadcastChannel
            {
                BroadcastChannel(id: id, bundleID: bundleID, environment: environment, storagePolicy: policy, createdAt: at(Double(id.utf8.count)))
            }
            report.equal(try await store.createChannel(channel("a"), limit: 2), true, "first channel")
            report.equal(try await store.createChannel(channel("bb", policy: .noStorage), limit: 2), true, "second channel")
            report.equal(try await store.createChannel(channel("ccc"), limit: 2), false, "third channel over the limit of 2")
            report.equal(try await store.createChannel(channel("ccc", "com.example.two"), limit: 2), true, "another app has its own limit")
            report.equal(try await store.createChannel(channel("ccc", "com.example.one", .production), limit: 2), true, "another environment has its own limit")
            do {
                _ = try await store.createChannel(channel("a"), limit: 10)
                report.check(false, "a channel id used twice was added")
            } catch let error as StoreError {
                report.equal(error.code, .duplicate, "error code")
            }
            report.equal(try await store.channels(bundleID: "com.example.one", environment: .sandbox).map(\.id), ["a", "bb"], "the app's channels")
            report.equal(try await store.channel(id: "bb", environment: .sandbox), channel("bb", policy: .noStorage), "read back")
            report.equal(try await store.channel(id: "a", environment: .production), nil, "not in the other environment")
            var notification = notification([], topic: "com.example.one.push-type.liveactivity", expiresIn: 100)
            notification.pushType = "liveactivity"
            let stored = StoredBroadcast(channelID: "a", environment: .sandbox, notification: notification, storedAt: at(3))
            report.equal(try await store.storeBroadcast(stored), true, "store a broadcast")
            report.equal(try await store.storedBroadcast(channelID: "a", environment: .sandbox), stored, "stored broadcast read back")
            var newer = stored
            newer.notification.payload = Array(#"{"aps":{"event":"update"}}"#.utf8)
            newer.notification.deliveryID = UUID()
            report.equal(try await store.storeBroadcast(newer), true, "store a newer one")
            report.equal(try await store.storedBroadcast(channelID: "a", environment: .sandbox), newer, "the newer replaced it")
            report.equal(try await store.storedBroadcast(channelID: "a", environment: .production), nil, "other environment")
            report.equal(try await store.deleteChannel(id: "a", environment: .sandbox), true, "delete")
            report.equal(try await store.deleteChannel(id: "a", environment: .sandbox), false, "delete twice")
            report.equal(try await store.storedBroadcast(channelID: "a", environment: .sandbox), nil, "its broadcast went with it")
            report.equal(try await store.storeBroadcast(stored), false, "no broadcast stored for a deleted channel")
            report.equal(try await store.createChannel(channel("dddd"), limit: 2), true, "room again after a delete")
        },
        StoreConformanceCase(name: "registrations: register, unregister, register again") { store, report in
            try await store.createDevice(Device(id: 7, certificateSerial: "07", createdAt: at(0)))
            let token = Array(repeating: UInt8(0xAB), count: 32)
            let registration = AppRegistration(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, token: token, registeredAt: at(1))
            try await store.register(registration)
            report.equal(try await store.registration(deviceID: 7, bundleID: "com.example.one", environment: .sandbox), registration, "registration")
            report.equal(try await store.registration(deviceID: 7, bundleID: "com.example.one", environment: .production), nil, "other environment")
            report.equal(try await store.unregister(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, at: at(50)), true, "unregister")
            report.equal(try await store.unregister(deviceID: 7, bundleID: "com.example.one", environment: .sandbox, at: at(60)), false, "unregister twice")
            let removed = try await store.registration(deviceID: 7, bundleID: "com.example.one", environment: .sandbox)
            report.equal(removed?.active, false, "active after unregister")
            report.equal(removed?.unregisteredAt, at(50), "unregistration time")
            report.equal(removed?.token, token, "token kept after unregister")
            var again = registration
            again.registeredAt = at(70)
            try await store.register(again)
            let back = try await store.registration(deviceID: 7, bundleID: "com.example.one", environment: .sandbox)
            report.equal(back?.active, true, "active after registering again")
            report.equal(back?.unregisteredAt, nil, "unregistration time cleared")
            report.equal(try await store.registrations(deviceID: 7).count, 1, "one registration")
            do {
                try await store.register(AppRegistration(deviceID: 8, bundleID: "com.example.one", environment: .sandbox, token: token, registeredAt: at(1)))
                report.check(false, "registration for a missing device was accepted")
            } catch let error as StoreError {
                report.equal(error.code, .notFound, "error code")
            }
        },
        StoreConformanceCase(name: "pending: one per device and app, newest wins") { store, report in
            let token = Array(repeating: UInt8(1), count: 32)
            let first = PendingNotification(
                deviceID: 1, bundleID: "com.example.one", environment: .production,
                notification: notification(token, topic: "com.example.one", expiresIn: 3600, collapse: "c1"), acceptedAt: at(1))
            let other = PendingNotification(
                deviceID: 1, bundleID: "com.example.two", environment: .production,
                notification: notification(token, topic: "com.example.two", expiresIn: nil), acceptedAt: at(2))
            report.equal(try await store.storePending([first, other]), [nil, nil], "nothing replaced at first")
            let second = PendingNotification(
                deviceID: 1, bundleID: "com.example.one", environment: .production,
                notification: notification(token, topic: "com.example.one.voip", expiresIn: 7200), acceptedAt: at(3))
            report.equal(try await store.storePending([second]), [first], "replaced")
            var third = second
            third.notification.id = UUID()
            var fourth = third
            fourth.notification.id = UUID()
            report.equal(try await store.storePending([third, other, fourth]), [second, other, third], "replaced within one batch")
            report.equal(try await store.storePending([second]), [fourth], "replaced again")
            let held = try await store.pending(deviceID: 1, environment: .production)
            report.equal(held, [other, second], "held, oldest accepted first")
            report.equal(try await store.pendingCount(), 2, "held, counted")
            report.equal(try await store.pending(deviceID: 1, environment: .sandbox), [], "other environment")
            let replacedOne = PendingReference(first)
            let heldOne = PendingReference(second)
            // The same apns-id, another notification: named by its delivery id, the held one is not it.
            var sameAPNsID = second
            sameAPNsID.notification.deliveryID = UUID()
            report.equal(
                try await store.removePending([replacedOne, PendingReference(sameAPNsID)]), [false, false],
                "removing: replaced, and one with the held one's apns-id but another delivery id")
            report.equal(try await store.removePending([heldOne, heldOne]), [true, false], "removing: held, held again")
            report.equal(try await store.pending(deviceID: 1, environment: .production), [other], "left")
        },
        StoreConformanceCase(name: "pending: batches longer than one statement store and remove as one") { store, report in
            // More rows than either store writes in one statement, twice over.
            let devices = UInt64(1)...UInt64(519)
            func pending(_ device: UInt64, _ n: Int) -> PendingNotification {
                PendingNotification(
                    deviceID: device, bundleID: "com.example.a", environment: .production,
                    notification: PushNotification(
                        id: UUID(), token: [UInt8(truncatingIfNeeded: device)], topic: "com.example.a", payload: Array(#"{"n":\#(n)}"#.utf8),
                        expiration: at(86_400), priority: .immediate),
                    acceptedAt: at(Double(n)))
            }
            let old = Dictionary(uniqueKeysWithValues: devices.filter { $0.isMultiple(of: 2) }.map { ($0, pending($0, 1)) })
            report.equal(try await store.storePending(devices.compactMap { old[$0] }), Array(repeating: nil, count: old.count), "nothing replaced at first")
            let first = Dictionary(uniqueKeysWithValues: devices.map { ($0, pending($0, 2)) })
            let second = Dictionary(uniqueKeysWithValues: devices.filter { $0.isMultiple(of: 3) }.map { ($0, pending($0, 3)) })
            let replaced = try await store.storePending(devices.map { first[$0]! } + devices.compactMap { second[$0] })
            let expected = devices.map { old[$0] } + devices.filter { second[$0] != nil }.map { first[$0] }
            // Ids compared first, so that a failure prints something readable.
            report.equal(replaced.map { $0?.notification.id }, expected.map { $0?.notification.id }, "replaced ids")
            report.check(replaced == expected, "replaced notifications differ from the ones stored")
            for device in devices {
                report.equal(try await store.pending(deviceID: device, environment: .production), [second[device] ?? first[device]!], "held for \(device)")
            }
            // Every held one, then once more, then the replaced first ones of the devices that got a second.
            let held = devices.map { PendingReference(second[$0] ?? first[$0]!) }
            let stale = devices.filter { second[$0] != nil }.map { PendingReference(first[$0]!) }
            report.equal(
                try await store.removePending(held + held + stale), held.map { _ in true } + held.map { _ in false } + stale.map { _ in false },
                "removed")
            report.equal(try await store.pendingCount(), 0, "nothing held after")
        },
        StoreConformanceCase(name: "pending: expiry and retention sweeps") { store, report in
            let token = Array(repeating: UInt8(2), count: 32)
            let soon = PendingNotification(
                deviceID: 2, bundleID: "com.example.a", environment: .sandbox,
                notification: notification(token, topic: "com.example.a", expiresIn: 10), acceptedAt: at(0))
            let late = PendingNotification(
                deviceID: 2, bundleID: "com.example.b", environment: .sandbox,
                notification: notification(token, topic: "com.example.b", expiresIn: 1000), acceptedAt: at(5))
            let never = PendingNotification(
                deviceID: 3, bundleID: "com.example.a", environment: .sandbox,
                notification: notification(token, topic: "com.example.a", expiresIn: nil), acceptedAt: at(100))
            _ = try await store.storePending([soon, late, never])
            report.equal(try await store.removeExpiredPending(before: at(11)), [soon], "expired")
            report.equal(try await store.removeExpiredPending(before: at(11)), [], "expired twice")
            report.equal(try await store.removePending(acceptedBefore: at(50)), [late], "retention")
            report.equal(try await store.pending(deviceID: 3, environment: .sandbox), [never], "kept")
        },
        StoreConformanceCase(name: "feedback per environment and topic, removed only if unchanged") { store, report in
            let tokenA = Array(repeating: UInt8(0xA), count: 32)
            let tokenB = Array(repeating: UInt8(0xB), count: 32)
            let a = FeedbackEntry(environment: .production, topic: "com.example.one", token: tokenA, timestamp: at(10))
            let b = FeedbackEntry(environment: .production, topic: "com.example.one", token: tokenB, timestamp: at(20))
            let otherTopic = FeedbackEntry(environment: .production, topic: "com.example.two", token: tokenA, timestamp: at(30))
            let otherEnvironment = FeedbackEntry(environment: .sandbox, topic: "com.example.one", token: tokenA, timestamp: at(40))
            var olderB = b
            olderB.timestamp = at(15)
            // The same token twice in one batch: the newer time is kept.
            try await store.addFeedback([a, b, otherTopic, otherEnvironment, olderB])
            let listed = try await store.feedback(environment: .production, topic: "com.example.one")
            report.equal(listed, [a, b], "production list")
            var newerA = a
            newerA.timestamp = at(60)
            var newestA = a
            newestA.timestamp = at(70)
            try await store.addFeedback([newerA])
            try await store.addFeedback([])
            report.equal(try await store.feedback(environment: .production, topic: "com.example.one"), [b, newerA], "a newer entry replaces")
            try await store.addFeedback([newestA, newerA])
            report.equal(try await store.feedback(environment: .production, topic: "com.example.one"), [b, newestA], "the newest of one batch")
            newerA = newestA
            try await store.removeFeedback(listed)
            report.equal(try await store.feedback(environment: .production, topic: "com.example.one"), [newerA], "newer entry kept")
            report.equal(try await store.feedback(environment: .production, topic: "com.example.two"), [otherTopic], "other topic")
            report.equal(try await store.feedback(environment: .sandbox, topic: "com.example.one"), [otherEnvironment], "other environment")
        },
        StoreConformanceCase(name: "delivery log keeps events in order, each with its app") { store, report in
            let id = UUID()
            let events = [
                DeliveryEvent(notificationID: id, bundleID: "com.example.one", kind: .accepted, at: at(1)),
                DeliveryEvent(notificationID: id, bundleID: "com.example.one", kind: .stored, at: at(1)),
                // Another team's push that reused the apns-id: kept under its own app.
                DeliveryEvent(notificationID: id, bundleID: "com.example.two", kind: .rejected, at: at(1), detail: "BadDeviceToken"),
                DeliveryEvent(notificationID: id, bundleID: "com.example.one", kind: .delivered, at: at(2)),
                DeliveryEvent(notificationID: id, bundleID: "com.example.one", kind: .rejected, at: at(3), detail: "BadDeviceToken"),
            ]
            try await store.appendDeliveryEvents(Array(events.prefix(3)))
            try await store.appendDeliveryEvents([DeliveryEvent(notificationID: UUID(), bundleID: "com.example.one", kind: .accepted, at: at(1))])
            try await store.appendDeliveryEvents(Array(events.suffix(2)))
            report.equal(try await store.deliveryEvents(notificationID: id), events, "events")
        },
        StoreConformanceCase(name: "concurrent writers do not interleave transactions") { store, report in
            let token = Array(repeating: UInt8(3), count: 32)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for device in 0..<20 {
                    group.addTask {
                        let batch = (0..<5).map { app in
                            PendingNotification(
                                deviceID: UInt64(device), bundleID: "com.example.app\(app)", environment: .production,
                                notification: notification(token, topic: "com.example.app\(app)", expiresIn: 100), acceptedAt: at(Double(app)))
                        }
                        _ = try await store.storePending(batch)
                    }
                }
                try await group.waitForAll()
            }
            for device in 0..<20 {
                report.equal(try await store.pending(deviceID: UInt64(device), environment: .production).count, 5, "device \(device)")
            }
        },
        StoreConformanceCase(name: "virtual tokens: added once, listed in order and by page, changed, removed") { store, report in
            func token(_ n: UInt8) -> [UInt8] { [n] + Array(repeating: 0xAB, count: 31) }
            func virtual(_ n: UInt8, _ bundleID: String = "com.example.one", _ environment: Environment = .sandbox) -> VirtualToken {
                VirtualToken(environment: environment, bundleID: bundleID, token: token(n), registeredAt: at(Double(n)))
            }
            report.equal(try await store.addVirtualTokens((1...300).reversed().map { virtual(UInt8($0 % 256)) } ).count, 256, "added (256 distinct of 300)")
            report.equal(try await store.addVirtualTokens([virtual(1), virtual(1, "com.example.two"), virtual(1, "com.example.one", .production)]).count, 2,
                "added again: only the other app's and the other environment's")
            report.equal(try await store.virtualTokenCount(environment: .sandbox, bundleID: "com.example.one"), 256, "count")
            let page = try await store.virtualTokens(environment: .sandbox, bundleID: "com.example.one", after: nil, limit: 3)
            report.equal(page.map(\.token), [token(0), token(1), token(2)], "first page, in token order")
            report.equal(page.first?.registeredAt, at(0), "its time")
            let next = try await store.virtualTokens(environment: .sandbox, bundleID: "com.example.one", after: token(2), limit: 2)
            report.equal(next.map(\.token), [token(3), token(4)], "next page")
            report.equal(try await store.virtualTokens(environment: nil, bundleID: nil, after: nil, limit: nil).count, 258, "every one")
            report.equal(try await store.virtualToken(environment: .sandbox, bundleID: "com.example.two", token: token(1)), virtual(1, "com.example.two"), "one")
            report.equal(try await store.virtualToken(environment: .sandbox, bundleID: "com.example.two", token: token(2)), nil, "missing")

            var changed = try await store.updateVirtualToken(environment: .sandbox, bundleID: "com.example.one", token: token(5), offline: true, uninstalled: nil)
            report.equal(changed?.offline, true, "set offline")
            report.equal(changed?.uninstalledAt, nil, "not uninstalled")
            changed = try await store.updateVirtualToken(
                environment: .sandbox, bundleID: "com.example.one", token: token(5), offline: nil, uninstalled: .some(at(1000)))
            report.equal(changed?.offline, true, "still offline")
            report.equal(changed?.uninstalledAt, at(1000), "uninstalled")
            changed = try await store.updateVirtualToken(
                environment: .sandbox, bundleID: "com.example.one", token: token(5), offline: false, uninstalled: .some(nil))
            report.equal(changed.map { [$0.offline, $0.uninstalledAt == nil] }, [false, true], "online and installed again")
            report.equal(
                try await store.updateVirtualToken(environment: .production, bundleID: "com.example.one", token: token(5), offline: true, uninstalled: nil),
                nil, "no such token in production")
            report.equal(try await store.addVirtualTokens([VirtualToken(environment: .sandbox, bundleID: "com.example.one", token: token(6), offline: true,
                registeredAt: at(0), uninstalledAt: at(1))]).count, 0, "a token there already")
            report.equal(try await store.virtualToken(environment: .sandbox, bundleID: "com.example.one", token: token(6))?.offline, false,
                "adding again leaves its state")

            report.equal(try await store.removeVirtualTokens(environment: .sandbox, bundleID: "com.example.one", tokens: [token(1), token(2), token(250)]), 3, "removed")
            report.equal(try await store.removeVirtualTokens(environment: .sandbox, bundleID: "com.example.one", tokens: [token(1)]), 0, "removed already")
            report.equal(try await store.removeVirtualTokens(environment: .sandbox, bundleID: "com.example.one", tokens: nil), 253, "the rest")
            report.equal(try await store.virtualTokens(environment: nil, bundleID: nil, after: nil, limit: nil).count, 2, "other apps' and environments' stay")
        },
    ]
}
