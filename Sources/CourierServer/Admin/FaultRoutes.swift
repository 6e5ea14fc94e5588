import CourierCore
import Foundation
import Hummingbird

/// Fault rules over the admin API (docs/admin-api.md, "Faults"): listed,
/// added, removed — this node's, or with several nodes every node's, kept
/// in the store (`AdminScope.faults`).
struct FaultRoutes {
    let rules: any FaultRuleBook
    let clock: any WallClock

    func add(to api: RouterGroup<BasicRequestContext>) {
        api.get("faults") { [rules, clock] _, _ in
            FaultList(faults: try await rules.listFaults(now: clock.now()).map(FaultJSON.init))
        }
        api.post("faults") { [rules, clock] request, context in
            let body = try await request.decode(as: FaultRequestBody.self, context: context)
            let now = clock.now()
            let (match, action, count, until) = try body.rule(now: now)
            guard let rule = try await rules.addFault(match: match, action: action, count: count, until: until, now: now) else {
                throw HTTPError(.conflict, message: "there are \(FaultInjector.capacity) fault rules already; remove one first")
            }
            return EditedResponse(status: .created, response: FaultJSON(rule))
        }
        api.delete("faults/:id") { [rules] _, context in
            let id = try context.parameters.require("id")
            guard try await rules.removeFault(id: id) else { throw HTTPError(.notFound, message: "no fault rule \(id)") }
            return Removed(removed: id)
        }
    }
}

// MARK: Faults

/// `POST /v1/faults`: a rule as the API takes it (docs/admin-api.md).
struct FaultRequestBody: Decodable {
    var match: FaultMatchJSON?
    /// reject, delay or close.
    var action: String
    var reason: String?
    /// For `Unregistered`: the time it says the token stopped.
    var timestamp: TimeValue?
    var binaryStatus: Int?
    var milliseconds: Int?
    /// Notifications it acts on at most.
    var count: Int?
    /// Seconds it stays in force.
    var seconds: Double?

    /// The rule's parts, or a 422 naming what is wrong.
    func rule(now: Date) throws -> (FaultMatch, FaultAction, Int?, Date?) {
        func invalid(_ message: String) -> HTTPError { HTTPError(.unprocessableContent, message: message) }
        var match = FaultMatch()
        if let given = self.match {
            if let token = given.token {
                guard let bytes = Hex.decode(token), !bytes.isEmpty else { throw invalid("'match.token' is not a device token in hex") }
                match.token = bytes
            }
            match.topic = given.topic
            match.teamID = given.team
            match.keyID = given.keyID
            match.certificateSerial = given.certificateSerial
            if let interface = given.interface {
                guard let value = ProviderInterface(rawValue: interface) else { throw invalid("'match.interface' must be http2 or binary") }
                match.interface = value
            }
            if let environment = given.environment {
                guard let value = Environment(rawValue: environment) else { throw invalid("'match.environment' must be production or sandbox") }
                match.environment = value
            }
        }
        let kind = self.action
        func reason(_ name: String?) throws -> Reason {
            guard let name else { throw invalid("'\(kind)' needs a 'reason' (a reason of docs/protocol.md, such as BadDeviceToken)") }
            guard let known = Reason.Known(rawValue: name) else { throw invalid("'\(name)' is not a reason of docs/protocol.md") }
            return Reason(known)
        }
        // Every field given is checked, whether the action uses it or not.
        if let milliseconds, !(1...60_000).contains(milliseconds) { throw invalid("'milliseconds' must be 1 to 60000") }
        if let binaryStatus, !(1...255).contains(binaryStatus) { throw invalid("'binaryStatus' must be 1 to 255") }
        if let name = self.reason { _ = try reason(name) }
        if let value = self.timestamp {
            do { _ = try InboxQuery.date(value.text, "timestamp") } catch { throw invalid("'timestamp' must be a time from 1970 to 9999") }
        }
        let action: FaultAction
        switch kind {
        case "reject":
            let timestamp = try self.timestamp.map { value in
                do { return try InboxQuery.date(value.text, "timestamp") } catch { throw invalid("'timestamp' must be a time from 1970 to 9999") }
            }
            var status: BinaryStatus?
            if let binaryStatus {
                guard (1...255).contains(binaryStatus) else { throw invalid("'binaryStatus' must be 1 to 255") }
                status = BinaryStatus(rawValue: UInt8(binaryStatus))
            }
            action = .reject(reason: try reason(self.reason), timestamp: timestamp, binaryStatus: status)
        case "delay":
            guard let milliseconds, (1...60_000).contains(milliseconds) else { throw invalid("'delay' needs 'milliseconds', 1 to 60000") }
            action = .delay(milliseconds: milliseconds)
        case "close":
            action = .close(reason: try reason(self.reason ?? "Shutdown"))
        default:
            throw invalid("'action' must be reject, delay or close")
        }
        if let count, !(1...1_000_000_000).contains(count) { throw invalid("'count' must be 1 to 1000000000") }
        if let seconds, !(1...31_536_000).contains(seconds) { throw invalid("'seconds' must be 1 to 31536000 (a year)") }
        return (match, action, count, seconds.map { now.addingTimeInterval($0) })
    }
}

/// A rule's match as the API writes and reads it.
struct FaultMatchJSON: Codable {
    var token: String?
    var topic: String?
    var team: String?
    var keyID: String?
    var certificateSerial: String?
    var interface: String?
    var environment: String?
}

struct FaultJSON: ResponseCodable {
    var id: String
    var match: FaultMatchJSON
    var action: String
    var reason: String?
    var timestamp: String?
    var binaryStatus: Int?
    var milliseconds: Int?
    /// Notifications it may still act on.
    var remaining: Int?
    var until: String?
    var hits: Int
    var createdAt: String

    init(_ rule: FaultRule) {
        id = rule.id
        let m = rule.match
        match = FaultMatchJSON(
            token: m.token.map(Hex.encode), topic: m.topic, team: m.teamID, keyID: m.keyID, certificateSerial: m.certificateSerial,
            interface: m.interface?.rawValue, environment: m.environment?.rawValue)
        switch rule.action {
        case .reject(let reason, let timestamp, let status):
            action = "reject"
            self.reason = reason.rawValue
            self.timestamp = timestamp.map(adminTime)
            binaryStatus = status.map { Int($0.rawValue) }
        case .delay(let milliseconds):
            action = "delay"
            self.milliseconds = milliseconds
        case .close(let reason):
            action = "close"
            self.reason = reason.rawValue
        }
        remaining = rule.remaining
        until = rule.until.map(adminTime)
        hits = rule.hits
        createdAt = adminTime(rule.createdAt)
    }
}

extension FaultJSON {
    /// The rule this shows (how several nodes keep a rule in the store,
    /// `Cluster`); nil for one this version cannot read.
    func rule() -> FaultRule? {
        func time(_ text: String?) -> Date? { text.flatMap { try? InboxQuery.date($0, "time") } }
        let action: FaultAction
        switch (self.action, reason, milliseconds) {
        case ("reject", let reason?, _):
            action = .reject(
                reason: Reason(rawValue: reason), timestamp: time(timestamp),
                binaryStatus: binaryStatus.map { BinaryStatus(rawValue: UInt8(truncatingIfNeeded: $0)) })
        case ("delay", _, let milliseconds?): action = .delay(milliseconds: milliseconds)
        case ("close", let reason?, _): action = .close(reason: Reason(rawValue: reason))
        default: return nil
        }
        guard let createdAt = time(createdAt) else { return nil }
        let match = FaultMatch(
            token: self.match.token.flatMap(Hex.decode), topic: self.match.topic, teamID: self.match.team, keyID: self.match.keyID,
            certificateSerial: self.match.certificateSerial, interface: self.match.interface.flatMap(ProviderInterface.init),
            environment: self.match.environment.flatMap(Environment.init))
        var rule = FaultRule(id: id, match: match, action: action, remaining: remaining, until: time(until), createdAt: createdAt)
        rule.hits = hits
        return rule
    }
}

struct FaultList: ResponseCodable {
    var faults: [FaultJSON]
}

struct Removed: ResponseCodable {
    var removed: String
}
