import CourierCore
import CourierPKI
import CourierSQLite
import Crypto
import Foundation
import Logging
import Testing

@testable import CourierServer

/// The registration cache keeps a token as its generation when the codec
/// issued it as its device's and app's, and as it is otherwise; either way
/// it answers as the store would.
@Suite struct RegistrationCacheTests {
    let bundleID = "com.example.demo"
    let start = Date(timeIntervalSince1970: 1_750_000_000)

    /// A store with the app (and its team) and device 7.
    func store() async throws -> SQLiteStore {
        let store = try await SQLiteStore.inMemory(logger: Logger(label: "test"))
        try await store.createTeam(Team(id: "DEMOTEAM01", name: "Demo", createdAt: start))
        try await store.createApp(App(bundleID: bundleID, teamID: "DEMOTEAM01", createdAt: start))
        try await store.createDevice(Device(id: 7, certificateSerial: "07", createdAt: start))
        return store
    }

    /// The sizes the comments of `CachedRegistration`, `CacheKey` and
    /// `SessionTable` state: an idle device's cached registration is 24
    /// bytes beside a 16-byte key, a session table's slot 16.
    @Test func theCachesAreTheSizesTheirCommentsSay() {
        #expect(MemoryLayout<CachedRegistration>.stride == 24)
        #expect(MemoryLayout<CacheKey>.stride == 16)
        #expect(MemoryLayout<UInt64>.stride + MemoryLayout<DeviceSession>.stride == 16)
        #expect(MemoryLayout<DeviceKey>.stride == 16, "the environment beside the id would make the key 16, the slot 24")
    }

    func registrations(_ store: any Store, codec: DeviceTokenCodec) -> Registrations {
        Registrations(
            store: store, codecs: [.production: codec], rules: DeliveryRules(QoSConfiguration()), clock: ManualWallClock(start))
    }

    func checked(_ registrations: Registrations, _ token: [UInt8]) throws -> CheckedToken {
        try registrations.check(TokenKey(environment: .production, bytes: token), bundleID: bundleID, now: start).get()
    }

    /// What the cache alone says of a device token: nil when it cannot
    /// say, else `problem(of:now:)`'s answer (`.some(nil)`: none).
    func cached(_ registrations: Registrations, _ token: [UInt8]) throws -> TokenProblem?? {
        registrations.cached(try checked(registrations, token), now: start).map { $0.problem }
    }

    @Test func aTokenKeptAsItsGenerationIsHeldOnlyInThatGeneration() async throws {
        let store = try await store()
        let codec = try DeviceTokenCodec(secret: SymmetricKey(size: .bits256), environment: .production)
        let registrations = registrations(store, codec: codec)
        let key = RegistrationKey(deviceID: 7, bundleID: bundleID, environment: .production)

        let first = try #require(try await registrations.register(deviceID: 7, generation: 1, bundleID: bundleID, environment: .production))
        #expect(first.changed)
        #expect(try await registrations.registration(key)?.token == first.token)
        #expect(try cached(registrations, first.token) == .some(nil))
        // Registering again in the same generation changes nothing.
        #expect(try await registrations.register(deviceID: 7, generation: 1, bundleID: bundleID, environment: .production)?.changed == false)

        // A reset: the next generation's token is held, the first's no longer.
        let second = try #require(try await registrations.register(deviceID: 7, generation: 2, bundleID: bundleID, environment: .production))
        #expect(second.changed && second.token != first.token)
        #expect(try cached(registrations, first.token) == .some(.notHeld))
        #expect(try cached(registrations, second.token) == .some(nil))
        #expect(try await registrations.registration(key)?.token == second.token)
        #expect(try await store.registration(deviceID: 7, bundleID: bundleID, environment: .production)?.token == second.token)

        // Removed: answered from the cache with the time, and the store's record read back as it is.
        #expect(try await registrations.unregister(deviceID: 7, bundleID: bundleID, environment: .production, at: start.addingTimeInterval(5)))
        #expect(try cached(registrations, second.token) == .some(.removed(at: start.addingTimeInterval(5))))
        let removed = try #require(try await registrations.registration(key))
        #expect(removed.token == second.token && !removed.active && removed.unregisteredAt == start.addingTimeInterval(5))
    }

    func checkedLiveActivity(_ registrations: Registrations, _ token: [UInt8]) throws -> CheckedToken {
        try registrations.check(TokenKey(environment: .production, bytes: token), bundleID: bundleID, liveActivity: true, now: start).get()
    }

    /// `problem(of:now:)` answers for device and Live Activity tokens, from
    /// the store (a registrations table that has cached nothing) and from
    /// the cache alike.
    @Test func problemsOfDeviceAndLiveActivityTokens() async throws {
        let store = try await store()
        let codec = try DeviceTokenCodec(secret: SymmetricKey(size: .bits256), environment: .production)
        let registrations = registrations(store, codec: codec)
        func liveActivityToken(generation: UInt32, activity: UInt32) -> [UInt8] {
            codec.issue(DeviceTokenContents(deviceID: 7, generation: generation, bundleID: bundleID, activity: activity))
        }
        /// The problem of each token, asked of a table loading from the store, then twice of one
        /// table; the second time, the cache alone says the same.
        func problems(device: [[UInt8]], liveActivity: [[UInt8]]) async throws -> [[TokenProblem?]] {
            var answers: [[TokenProblem?]] = []
            for (round, asked) in [self.registrations(store, codec: codec), registrations, registrations].enumerated() {
                var row: [TokenProblem?] = []
                for token in try device.map({ try checked(asked, $0) }) + liveActivity.map({ try checkedLiveActivity(asked, $0) }) {
                    let problem = try await asked.problem(of: token, now: start)
                    if round == 2 {
                        #expect(asked.cached(token, now: start).map { $0.problem } == .some(problem))
                    }
                    row.append(problem)
                }
                answers.append(row)
            }
            return answers
        }

        let first = try #require(try await registrations.register(deviceID: 7, generation: 1, bundleID: bundleID, environment: .production))
        let update = liveActivityToken(generation: 1, activity: 42)
        let pushToStart = liveActivityToken(generation: 1, activity: DeviceTokenContents.pushToStart)
        #expect(try await problems(device: [first.token], liveActivity: [update, pushToStart]) == Array(repeating: [nil, nil, nil], count: 3))

        // The activity ended: its update token has expired then; push-to-start goes on. What the
        // table read of the activity is kept until it is told (as the dispatcher tells it, and
        // the other nodes by forgetting the registration).
        let ended = start.addingTimeInterval(3)
        #expect(try await store.endActivity(deviceID: 7, bundleID: bundleID, environment: .production, activity: 42, at: ended))
        #expect(try await registrations.problem(of: try checkedLiveActivity(registrations, update), now: start) == nil)
        registrations.activityEnded(RegistrationKey(deviceID: 7, bundleID: bundleID, environment: .production), 42)
        #expect(try await problems(device: [], liveActivity: [update, pushToStart]) == Array(repeating: [.expired(at: ended), nil], count: 3))
        // Another node's table, told by forgetting the registration.
        let other = self.registrations(store, codec: codec)
        let third = liveActivityToken(generation: 1, activity: 44)
        #expect(try await other.problem(of: try checkedLiveActivity(other, third), now: start) == nil)
        #expect(try await store.endActivity(deviceID: 7, bundleID: bundleID, environment: .production, activity: 44, at: ended))
        other.forget(RegistrationKey(deviceID: 7, bundleID: bundleID, environment: .production))
        #expect(try await other.problem(of: try checkedLiveActivity(other, third), now: start) == .expired(at: ended))

        // A reset: the first generation's tokens, device and Live Activity, are not held any more.
        let second = try #require(try await registrations.register(deviceID: 7, generation: 2, bundleID: bundleID, environment: .production))
        let secondUpdate = liveActivityToken(generation: 2, activity: 43)
        #expect(
            try await problems(device: [first.token, second.token], liveActivity: [pushToStart, secondUpdate])
                == Array(repeating: [.notHeld, nil, .notHeld, nil], count: 3))

        // Removed: its tokens are answered with the time.
        let removedAt = start.addingTimeInterval(5)
        #expect(try await registrations.unregister(deviceID: 7, bundleID: bundleID, environment: .production, at: removedAt))
        #expect(
            try await problems(device: [first.token, second.token], liveActivity: [secondUpdate])
                == Array(repeating: [.notHeld, .removed(at: removedAt), .removed(at: removedAt)], count: 3))
    }

    @Test func aStoredTokenTheCodecDidNotIssueIsKeptAsItIs() async throws {
        let store = try await store()
        // Registered under another secret (the configuration's changed since).
        let before = try DeviceTokenCodec(secret: SymmetricKey(size: .bits256), environment: .production)
        let stored = before.issue(DeviceTokenContents(deviceID: 7, generation: 1, bundleID: bundleID))
        try await store.register(AppRegistration(deviceID: 7, bundleID: bundleID, environment: .production, token: stored, registeredAt: start))

        let codec = try DeviceTokenCodec(secret: SymmetricKey(size: .bits256), environment: .production)
        let registrations = registrations(store, codec: codec)
        let key = RegistrationKey(deviceID: 7, bundleID: bundleID, environment: .production)
        // Loaded into the cache, then answered from it: the stored bytes both times.
        #expect(try await registrations.registration(key)?.token == stored)
        #expect(try await registrations.registration(key)?.token == stored)
        // This codec's token of the same device, app and generation is not the one registered.
        let reissued = codec.issue(DeviceTokenContents(deviceID: 7, generation: 1, bundleID: bundleID))
        #expect(try cached(registrations, reissued) == .some(.notHeld))
        #expect(try await registrations.problem(of: try checked(registrations, reissued), now: start) == .notHeld)
        let liveActivity = codec.issue(DeviceTokenContents(deviceID: 7, generation: 1, bundleID: bundleID, activity: 42))
        #expect(try await registrations.problem(of: try checkedLiveActivity(registrations, liveActivity), now: start) == .notHeld)
        // Registering with this codec replaces it.
        let registered = try #require(try await registrations.register(deviceID: 7, generation: 1, bundleID: bundleID, environment: .production))
        #expect(registered.changed && registered.token == reissued)
        #expect(try cached(registrations, reissued) == .some(nil))
        #expect(try await registrations.registration(key)?.token == reissued)
    }
}
