import CourierCore
import Foundation

/// What the admin API changes or reads that one node keeps alone and
/// several nodes share through the store (`Cluster`): chosen once, when
/// the admin server is made (`AdminServer.init`), so that no route asks
/// which it is.
struct AdminScope: Sendable {
    /// The fault rules: this node's, or every node's.
    let faults: any FaultRuleBook
    /// Clears the inbox: this node's, or every node's.
    let clearInbox: @Sendable () async throws -> Void
    /// The devices connected to other nodes (none with one node).
    let remoteDevices: @Sendable () -> [(key: DeviceKey, node: String, since: Date)]
    /// This node's id, with several nodes.
    let node: String?

    init(cluster: Cluster?, faults: FaultInjector, inbox: NotificationInbox) {
        if let cluster {
            self.faults = cluster
            clearInbox = { try await cluster.clearInbox() }
            remoteDevices = { cluster.remoteDevices() }
            node = cluster.node
        } else {
            self.faults = LocalFaultRules(faults: faults)
            clearInbox = { inbox.clear() }
            remoteDevices = { [] }
            node = nil
        }
    }
}

/// The fault rules as the admin API lists, adds and removes them.
protocol FaultRuleBook: Sendable {
    /// The rules in force, with their counts.
    func listFaults(now: Date) async throws -> [FaultRule]
    /// Nil when there are `FaultInjector.capacity` rules already.
    func addFault(match: FaultMatch, action: FaultAction, count: Int?, until: Date?, now: Date) async throws -> FaultRule?
    func removeFault(id: String) async throws -> Bool
}

/// One node's rules, in its memory.
struct LocalFaultRules: FaultRuleBook {
    let faults: FaultInjector

    func listFaults(now: Date) -> [FaultRule] { faults.list(now: now) }

    func addFault(match: FaultMatch, action: FaultAction, count: Int?, until: Date?, now: Date) -> FaultRule? {
        faults.add(match: match, action: action, count: count, until: until, now: now)
    }

    func removeFault(id: String) -> Bool { faults.remove(id: id) }
}

/// Several nodes' rules, kept in the store.
extension Cluster: FaultRuleBook {}
