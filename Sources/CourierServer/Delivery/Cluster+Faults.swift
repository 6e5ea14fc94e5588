import CourierCore
import Foundation

/// The admin API's fault rules, shared by the nodes through the store:
/// added and removed for every node, each hit counted in the store and
/// its counts announced.
extension Cluster {
    /// Adds a rule for every node; nil when there are `FaultInjector.capacity` already.
    func addFault(match: FaultMatch, action: FaultAction, count: Int?, until: Date?, now: Date) async throws -> FaultRule? {
        guard faults.count < FaultInjector.capacity else { return nil }
        let rule = FaultRule(
            id: "f\(try await coordination.nextRuleNumber())", match: match, action: action, remaining: count, until: until, createdAt: now)
        // Kept as the admin API shows it.
        let body = String(decoding: try JSONEncoder().encode(FaultJSON(rule)), as: UTF8.self)
        try await coordination.addRule(SharedRule(id: rule.id, body: body, remaining: count, hits: 0))
        guard faults.insert(rule) else { return nil }
        await publish(.faultsChanged(from: node))
        return rule
    }

    func removeFault(id: String) async throws -> Bool {
        guard try await coordination.removeRule(id: id) else { return false }
        _ = faults.remove(id: id)
        await publish(.faultsChanged(from: node))
        return true
    }

    /// The rules in force with the counts of every node.
    func listFaults(now: Date) async throws -> [FaultRule] {
        try await coordination.rules().compactMap { shared -> FaultRule? in
            guard var rule = (try? JSONDecoder().decode(FaultJSON.self, from: Data(shared.body.utf8)))?.rule() else { return nil }
            // The counts are the store's.
            rule.remaining = shared.remaining
            rule.hits = shared.hits
            return rule
        }.filter { rule in rule.until.map { $0 > now } ?? true }
    }

    /// Reads the shared rules into this node's.
    func reloadFaults() async {
        do {
            faults.replaceAll(try await listFaults(now: clock.now()))
        } catch {
            logger.error("store failed reading the fault rules", metadata: ["courier.error": "\(error)"])
        }
    }

    /// A rule acted here: counted in the store, and the counts told to the others.
    func counted(_ rule: FaultRule) {
        send(.countHit(ruleID: rule.id))
    }
}
