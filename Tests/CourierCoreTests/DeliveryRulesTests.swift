import CourierCore
import Foundation
import Testing

/// docs/delivery.md, row by row, against `DeliveryRules` alone: no socket,
/// no store, no event loop.
@Suite struct DeliveryRulesTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let app = AppNumber("com.example.app")
    static let rules = DeliveryRules(QoSConfiguration(burstWindow: 10, silentBudgetPerHour: 2, retention: 86_400, tokenRateLimit: 3, tokenRateWindow: 60))

    static func notification(
        expiration: Date? = nil, priority: Priority = .immediate, silent: Bool = false, collapseID: String? = nil, id: UUID = UUID()
    ) -> PushNotification {
        PushNotification(
            id: id, token: [1, 2, 3], topic: "com.example.app", payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), expiration: expiration,
            priority: priority, collapseID: collapseID, isSilent: silent)
    }

    /// The events' kinds, in order.
    static func kinds(_ events: [DeliveryEvent]) -> [DeliveryEvent.Kind] { events.map(\.kind) }

    // MARK: Order of checks

    struct CheckCase: Sendable, CustomTestStringConvertible {
        var row: String
        var topicAllowed: Bool
        var problem: TokenProblem?
        var reason: Reason?
        var timestamp: Date?
        var testDescription: String { row }
    }

    static let removedAt = now.addingTimeInterval(-300)

    static let checks: [CheckCase] = [
        CheckCase(row: "1. topic not the provider's", topicAllowed: false, problem: nil, reason: .topicDisallowed),
        CheckCase(row: "1 before 2. topic not the provider's, token forged too", topicAllowed: false, problem: .unopened, reason: .topicDisallowed),
        CheckCase(row: "2. token does not open", topicAllowed: true, problem: .unopened, reason: .badDeviceToken),
        CheckCase(row: "3. token of another app", topicAllowed: true, problem: .ofAnotherApp, reason: .deviceTokenNotForTopic),
        CheckCase(row: "4. token the device no longer holds", topicAllowed: true, problem: .notHeld, reason: .badDeviceToken),
        CheckCase(row: "5. app removed from the device", topicAllowed: true, problem: .removed(at: removedAt), reason: .unregistered, timestamp: removedAt),
        CheckCase(row: "accepted", topicAllowed: true, problem: nil, reason: nil),
    ]

    @Test(arguments: checks) func theChecksInTheirOrder(_ check: CheckCase) {
        var window = RateWindow.unopened
        var silent: RateWindow?
        var events: [DeliveryEvent] = []
        let n = Self.notification()
        let decision = Self.rules.decide(
            n, of: Self.app, topicAllowed: check.topicAllowed, tokenProblem: check.problem, tokenWindow: &window, presence: .offline, silentWindow: &silent, now: Self.now,
            events: &events)
        guard let reason = check.reason else {
            #expect(decision == .accepted(.kept(stored: true, sending: .later)))
            #expect(window.count == 1)
            return
        }
        guard case .refused(let refusal) = decision else {
            Issue.record("accepted, expected \(reason)")
            return
        }
        #expect(refusal.reason == reason)
        #expect(refusal.result == .rejected(reason, timestamp: check.timestamp))
        // Only an app removed from the device leaves a feedback entry.
        #expect(refusal.addsFeedback == (reason == .unregistered))
        // Logged under the app; a topic that is not the provider's is no app's to log (the inbox keeps it).
        let logged = reason == .topicDisallowed ? [] : [DeliveryEvent(notificationID: n.id, app: Self.app, kind: .rejected, at: Self.now, detail: reason.rawValue)]
        #expect(events == logged)
        // A refused push does not count against the token's rate.
        #expect(window == .unopened)
    }

    @Test func sixTheTokensRateWindow() {
        var window = RateWindow.unopened
        for _ in 0..<3 { #expect(Self.rules.refusal(takingFrom: &window, now: Self.now) == nil) }
        #expect(Self.rules.refusal(takingFrom: &window, now: Self.now.addingTimeInterval(59))?.reason == .tooManyRequests)
        // A refusal takes nothing: the window still holds three.
        #expect(window.count == 3)
        // The window (60 s from its first push) ends; the next push opens another.
        #expect(Self.rules.refusal(takingFrom: &window, now: Self.now.addingTimeInterval(60)) == nil)
        #expect(window == RateWindow(start: Self.now.addingTimeInterval(60), count: 1))
    }

    @Test func aFullRateWindowRefusesAfterTheOtherChecksPassed() {
        var window = RateWindow(start: Self.now, count: 3)
        var silent: RateWindow?
        var events: [DeliveryEvent] = []
        let decision = Self.rules.decide(
            Self.notification(), of: Self.app, topicAllowed: true, tokenProblem: nil, tokenWindow: &window, presence: .online, silentWindow: &silent, now: Self.now,
            events: &events)
        #expect(decision == .refused(DeliveryRules.Refusal(.tooManyRequests)))
        #expect(Self.kinds(events) == [.rejected])
    }

    // MARK: After acceptance

    struct AdmissionCase: Sendable, CustomTestStringConvertible {
        /// The situation, as docs/delivery.md's table names it.
        var situation: String
        var notification: PushNotification
        var presence: DevicePresence
        var silentWindow: RateWindow? = nil
        var admission: DeliveryRules.Admission
        var kinds: [DeliveryEvent.Kind]
        var testDescription: String { situation }
    }

    static let past = now.addingTimeInterval(-1)
    static let tomorrow = now.addingTimeInterval(86_400)
    static let never = Date(timeIntervalSince1970: 0)

    static let admissions: [AdmissionCase] = [
        AdmissionCase(
            situation: "expiration in the past", notification: notification(expiration: past), presence: .online, admission: .dropped,
            kinds: [.accepted, .expired]),
        AdmissionCase(
            situation: "silent push over its app's `qos.silentBudgetPerHour` on the device", notification: notification(priority: .conservePower, silent: true),
            presence: .online, silentWindow: RateWindow(start: now.addingTimeInterval(-10), count: 2), admission: .dropped,
            kinds: [.accepted, .throttled]),
        AdmissionCase(
            situation: "may be stored (expiration absent or > 0)", notification: notification(expiration: tomorrow), presence: .offline,
            admission: .kept(stored: true, sending: .later), kinds: [.accepted, .stored]),
        AdmissionCase(
            situation: "device online, app enabled, priority 10", notification: notification(), presence: .online,
            admission: .kept(stored: true, sending: .now), kinds: [.accepted, .stored]),
        AdmissionCase(
            situation: "device online, app enabled, priority 5", notification: notification(priority: .conservePower), presence: .online,
            admission: .kept(stored: true, sending: .withBurst), kinds: [.accepted, .stored]),
        AdmissionCase(
            situation: "device offline (or app disabled by a Filter), expiration 0", notification: notification(expiration: never), presence: .offline,
            admission: .dropped, kinds: [.accepted, .expired]),
        AdmissionCase(
            situation: "device offline, may be stored", notification: notification(), presence: .offline, admission: .kept(stored: true, sending: .later),
            kinds: [.accepted, .stored]),
        // Beside the table's rows: what the rows combine to.
        AdmissionCase(
            situation: "app disabled by a Filter, expiration 0", notification: notification(expiration: never), presence: .appDisabled, admission: .dropped,
            kinds: [.accepted, .expired]),
        AdmissionCase(
            situation: "app disabled by a Filter, may be stored", notification: notification(expiration: tomorrow), presence: .appDisabled,
            admission: .kept(stored: true, sending: .later), kinds: [.accepted, .stored]),
        AdmissionCase(
            situation: "device online, expiration 0 (tried once, never held)", notification: notification(expiration: never), presence: .online,
            admission: .kept(stored: false, sending: .now), kinds: [.accepted]),
        AdmissionCase(
            situation: "silent push within the budget", notification: notification(priority: .conservePower, silent: true), presence: .online,
            silentWindow: RateWindow(start: now.addingTimeInterval(-10), count: 1), admission: .kept(stored: true, sending: .withBurst),
            kinds: [.accepted, .stored]),
        AdmissionCase(
            situation: "silent push, the budget's hour over", notification: notification(priority: .conservePower, silent: true), presence: .online,
            silentWindow: RateWindow(start: now.addingTimeInterval(-3600), count: 2), admission: .kept(stored: true, sending: .withBurst),
            kinds: [.accepted, .stored]),
        AdmissionCase(
            situation: "expired and silent: expiry first", notification: notification(expiration: past, silent: true), presence: .online,
            silentWindow: RateWindow(start: now, count: 2), admission: .dropped, kinds: [.accepted, .expired]),
        AdmissionCase(
            situation: "virtual device online (a token Courier did not issue, registered to the app: [virtual-devices.md](virtual-devices.md))",
            notification: notification(expiration: tomorrow), presence: .virtual, admission: .takenByVirtualDevice,
            kinds: [.accepted, .deliveredToVirtualDevice]),
        AdmissionCase(
            situation: "virtual device online, expired before it was accepted", notification: notification(expiration: past), presence: .virtual,
            admission: .dropped, kinds: [.accepted, .expired]),
        AdmissionCase(
            situation: "virtual device online, silent push over its budget", notification: notification(priority: .conservePower, silent: true),
            presence: .virtual, silentWindow: RateWindow(start: now.addingTimeInterval(-10), count: 2), admission: .dropped,
            kinds: [.accepted, .throttled]),
    ]

    @Test(arguments: admissions) func afterAcceptance(_ row: AdmissionCase) {
        var silent = row.silentWindow
        var events: [DeliveryEvent] = []
        let admission = Self.rules.admit(row.notification, of: Self.app, presence: row.presence, silentWindow: &silent, now: Self.now, events: &events)
        #expect(admission == row.admission)
        #expect(Self.kinds(events) == row.kinds)
        #expect(events.allSatisfy { $0.notificationID == row.notification.id && $0.at == Self.now })
        if !row.notification.isSilent {
            // Only a silent push opens or counts a silent budget.
            #expect(silent == row.silentWindow)
        } else if row.kinds.contains(.throttled) {
            #expect(silent == row.silentWindow)
        } else if row.kinds.contains(.stored) {
            #expect(silent?.count ?? 0 >= 1)
        }
    }

    /// Every situation of docs/delivery.md's "After acceptance" table has
    /// its case here, so that the table and the rules cannot drift apart.
    @Test func everyRowOfTheDocumentHasItsCase() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/delivery.md"), encoding: .utf8)
        var inTable = false
        var situations: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("#") { inTable = line.hasPrefix("## After acceptance") }
            guard inTable, line.hasPrefix("|"), !line.contains("---") else { continue }
            situations.append(line.split(separator: "|").first!.trimmingCharacters(in: .whitespaces))
        }
        situations.removeFirst()  // the header
        #expect(situations.count == 10)
        let covered =
            Set(Self.admissions.map(\.situation)).union([
                "acknowledged by the device",
                "one a device could not read: refused by the device (Ack status 1), or failing the item bounds the server checks before sending",
            ])
        for situation in situations {
            #expect(covered.contains(situation), "no case for the row \"\(situation)\"")
        }
    }

    @Test func theSilentBudgetOpensWithTheFirstSilentPush() {
        var silent: RateWindow?
        var events: [DeliveryEvent] = []
        for _ in 0..<2 {
            #expect(Self.rules.admit(Self.notification(silent: true), of: Self.app, presence: .offline, silentWindow: &silent, now: Self.now, events: &events) != .dropped)
        }
        #expect(silent == RateWindow(start: Self.now, count: 2))
        #expect(Self.rules.admit(Self.notification(silent: true), of: Self.app, presence: .offline, silentWindow: &silent, now: Self.now, events: &events) == .dropped)
        #expect(events.last?.detail == "silent budget of 2 per hour used up")
    }

    // MARK: Held, queued, acknowledged

    @Test func aHeldNotificationReplacedOrCoalesced() {
        let old = Self.notification(collapseID: "score")
        let same = Self.notification(collapseID: "score")
        let other = Self.notification(collapseID: "news")
        let none = Self.notification()
        #expect(Self.rules.replacement(of: old, by: same, of: Self.app, at: Self.now).kind == .coalesced)
        #expect(Self.rules.replacement(of: old, by: other, of: Self.app, at: Self.now).kind == .replaced)
        #expect(Self.rules.replacement(of: none, by: Self.notification(), of: Self.app, at: Self.now).kind == .replaced)
        let event = Self.rules.replacement(of: old, by: same, of: Self.app, at: Self.now)
        #expect(event.notificationID == old.id)
        #expect(event.detail == "by \(same.id.lowercasedString)")
    }

    @Test func aBurstCoalescesTheSameAppAndCollapseIDOnly() {
        var burst = BurstQueue<Int>(since: Self.now)
        let first = Self.notification(priority: .conservePower, collapseID: "score")
        #expect(burst.add(1, notification: first, app: Self.app, at: Self.now) == nil)
        // The same collapse id for another app is another notification.
        #expect(burst.add(2, notification: Self.notification(priority: .conservePower, collapseID: "score"), app: AppNumber("com.example.other"), at: Self.now) == nil)
        #expect(burst.add(3, notification: Self.notification(priority: .conservePower), app: Self.app, at: Self.now) == nil)
        let later = Self.notification(priority: .conservePower, collapseID: "score")
        let coalesced = burst.add(4, notification: later, app: Self.app, at: Self.now.addingTimeInterval(2))
        #expect(coalesced?.notificationID == first.id)
        #expect(coalesced?.kind == .coalesced)
        #expect(coalesced?.detail == "by \(later.id.lowercasedString)")
        // Arrival order, the replaced one gone, the newer one last.
        #expect(burst.elements == [2, 3, 4])
        #expect(burst.since == Self.now)
    }

    @Test(arguments: [(9.999, false), (10, true), (60, true)])
    func aBurstGoesOutOnceItsWindowPassed(after seconds: Double, due: Bool) {
        #expect(Self.rules.burstIsDue(since: Self.now, at: Self.now.addingTimeInterval(seconds)) == due)
    }

    @Test func heldForAnOfflineDeviceSentOnReconnectUnlessExpired() {
        #expect(Self.rules.onConnect(held: Self.notification(expiration: Self.tomorrow), of: Self.app, now: Self.now) == nil)
        #expect(Self.rules.onConnect(held: Self.notification(), of: Self.app, now: Self.now) == nil)
        let expired = Self.notification(expiration: Self.past)
        #expect(Self.rules.onConnect(held: expired, of: Self.app, now: Self.now) == DeliveryEvent(notificationID: expired.id, app: Self.app, kind: .expired, at: Self.now))
    }

    @Test func heldLongerThanTheRetentionIsSwept() {
        #expect(Self.rules.retentionCutoff(at: Self.now) == Self.now.addingTimeInterval(-86_400))
        let held = Self.notification()
        #expect(Self.rules.swept(held, of: Self.app, overRetention: true, at: Self.now).detail == "held longer than the retention limit")
        #expect(Self.rules.swept(held, of: Self.app, overRetention: false, at: Self.now) == DeliveryEvent(notificationID: held.id, app: Self.app, kind: .expired, at: Self.now))
    }

    /// A sandbox notification's events carry its unique id, to be logged
    /// under it too; a production one's carry none.
    @Test func aSandboxNotificationsEventsCarryItsUniqueID() {
        var sandbox = Self.notification()
        sandbox.identify(in: .sandbox)
        let unique = try! #require(sandbox.uniqueID)
        #expect(unique == sandbox.deliveryID)
        let swept = Self.rules.swept(sandbox, of: Self.app, overRetention: false, at: Self.now)
        #expect(swept.alias == unique)
        #expect(swept.underAlias == DeliveryEvent(notificationID: unique, app: Self.app, kind: .expired, at: Self.now))
        var production = Self.notification()
        production.identify(in: .production)
        #expect(production.uniqueID == nil)
        #expect(Self.rules.swept(production, of: Self.app, overRetention: false, at: Self.now).underAlias == nil)
        // A held notification read back: its unique id follows from its environment.
        #expect(PendingNotification(deviceID: 1, bundleID: "com.a.b", environment: .sandbox, notification: production, acceptedAt: Self.now).notification.uniqueID
            == production.deliveryID)
        #expect(PendingNotification(deviceID: 1, bundleID: "com.a.b", environment: .production, notification: sandbox, acceptedAt: Self.now).notification.uniqueID == nil)
    }

    @Test func queuedForABurstWhenTheDeviceWentOffline() {
        // One that may be stored is held, and goes out on the next connection.
        #expect(Self.rules.wentOffline(queued: Self.notification(priority: .conservePower), of: Self.app, at: Self.now) == nil)
        let once = Self.notification(expiration: Self.never, priority: .conservePower)
        #expect(Self.rules.wentOffline(queued: once, of: Self.app, at: Self.now)?.kind == .expired)
    }

    @Test func acknowledgedOrRefusedByTheDevice() {
        let id = UUID()
        #expect(Self.rules.acknowledgement(of: id, of: Self.app, alias: nil, unreadable: false, at: Self.now) == DeliveryEvent(notificationID: id, app: Self.app, kind: .acknowledged, at: Self.now))
        let refused = Self.rules.acknowledgement(of: id, of: Self.app, alias: nil, unreadable: true, at: Self.now)
        #expect(refused.kind == .discarded)
        #expect(refused.detail == "the device could not read it")
        let checked = Self.rules.unreadable(Self.notification(), of: Self.app, problem: "collapse id longer than 64 bytes", at: Self.now)
        #expect(checked.kind == .discarded)
        #expect(checked.detail == "a device could not read it: collapse id longer than 64 bytes")
    }
}
