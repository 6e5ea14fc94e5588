import Foundation

/// What one node tells the others (docs/operations.md), sent through the
/// store's channel (`NodeCoordination.publish`): one case per message,
/// and its text.
///
/// Version 1, the text every node has sent since several nodes existed:
/// the verb, then the fields, separated by single spaces (below, each case
/// with its text). Numbers are decimal, times milliseconds since 1970,
/// tokens hex, a missing value `-`. A text field (a node id, a bundle id,
/// a channel or rule id) is never empty, and a space or `%` in one is
/// percent-encoded (no id Courier makes has either, so the text is the
/// same as before the type). A later version puts `v2` (and so on) first;
/// a node ignores a message it cannot read — a later version's, or one
/// with a verb, a field count or a value it does not know — so nodes of
/// two versions run side by side during an upgrade.
public enum ClusterMessage: Sendable, Hashable {
    /// `handover`: what other nodes handed over to this one waits in the store (to one node's channel).
    case handOver
    /// `drain ENV DEVICE`: send the device what is held for it (to the node it is connected to).
    case drain(environment: Environment, deviceID: UInt64)
    /// `online NODE ENV DEVICE GENERATION SINCE`: the device connected to the node.
    case online(from: String, environment: Environment, deviceID: UInt64, generation: Int64, since: Date)
    /// `offline NODE ENV DEVICE GENERATION`: that connection of the device ended.
    case offline(from: String, environment: Environment, deviceID: UInt64, generation: Int64)
    /// `registration NODE ENV DEVICE BUNDLE`: an app's registration on the device changed.
    case registrationChanged(from: String, environment: Environment, deviceID: UInt64, bundleID: String)
    /// `reset NODE DEVICE`: the device was reset; its registrations ended.
    case deviceReset(from: String, deviceID: UInt64)
    /// `virtual NODE ENV BUNDLE TOKEN|-`: an app's virtual tokens changed, one or (`-`) any number.
    case virtualTokensChanged(from: String, environment: Environment, bundleID: String, token: [UInt8]?)
    /// `channel-deleted NODE ENV ID`: a broadcast channel was deleted.
    case channelDeleted(from: String, environment: Environment, id: String)
    /// `gone NODE`: the node stopped, or was found dead.
    case gone(node: String)
    /// `faults NODE`: the shared fault rules changed.
    case faultsChanged(from: String)
    /// `inbox NODE`: the node shared inbox entries.
    case inboxShared(from: String)
    /// `joined NODE`: the node started.
    case joined(node: String)
    /// `inbox-clear NODE UPTO`: every inbox drops what it received up to then.
    case inboxCleared(from: String, upTo: Date)
    /// `fault-count NODE ID REMAINING|- HITS`: a shared rule's counts.
    case faultCount(from: String, id: String, remaining: Int?, hits: Int)
    /// `broadcast NODE NUMBER`: a broadcast the node relayed, by its number in the store.
    case broadcastRelayed(from: String, number: Int64)

    /// The node that sent it, when the message says (all but `handover` and `drain`).
    public var sender: String? {
        switch self {
        case .handOver, .drain: nil
        case .online(let from, _, _, _, _), .offline(let from, _, _, _), .registrationChanged(let from, _, _, _), .deviceReset(let from, _),
            .virtualTokensChanged(let from, _, _, _), .channelDeleted(let from, _, _), .faultsChanged(let from), .inboxShared(let from),
            .inboxCleared(let from, _), .faultCount(let from, _, _, _), .broadcastRelayed(let from, _):
            from
        case .gone(let node), .joined(let node): node
        }
    }

    /// The message's text (version 1).
    public var text: String {
        let fields: [String]
        switch self {
        case .handOver: fields = ["handover"]
        case .drain(let environment, let deviceID): fields = ["drain", environment.rawValue, String(deviceID)]
        case .online(let from, let environment, let deviceID, let generation, let since):
            fields = ["online", Self.escaped(from), environment.rawValue, String(deviceID), String(generation), String(since.storeMillis)]
        case .offline(let from, let environment, let deviceID, let generation):
            fields = ["offline", Self.escaped(from), environment.rawValue, String(deviceID), String(generation)]
        case .registrationChanged(let from, let environment, let deviceID, let bundleID):
            fields = ["registration", Self.escaped(from), environment.rawValue, String(deviceID), Self.escaped(bundleID)]
        case .deviceReset(let from, let deviceID): fields = ["reset", Self.escaped(from), String(deviceID)]
        case .virtualTokensChanged(let from, let environment, let bundleID, let token):
            fields = ["virtual", Self.escaped(from), environment.rawValue, Self.escaped(bundleID), token.map(Hex.encode) ?? "-"]
        case .channelDeleted(let from, let environment, let id): fields = ["channel-deleted", Self.escaped(from), environment.rawValue, Self.escaped(id)]
        case .gone(let node): fields = ["gone", Self.escaped(node)]
        case .faultsChanged(let from): fields = ["faults", Self.escaped(from)]
        case .inboxShared(let from): fields = ["inbox", Self.escaped(from)]
        case .joined(let node): fields = ["joined", Self.escaped(node)]
        case .inboxCleared(let from, let upTo): fields = ["inbox-clear", Self.escaped(from), String(upTo.storeMillis)]
        case .faultCount(let from, let id, let remaining, let hits):
            fields = ["fault-count", Self.escaped(from), Self.escaped(id), remaining.map(String.init) ?? "-", String(hits)]
        case .broadcastRelayed(let from, let number): fields = ["broadcast", Self.escaped(from), String(number)]
        }
        return fields.joined(separator: " ")
    }

    /// Reads a message's text; nil for one this version cannot read.
    public init?(text: String) {
        let fields = text.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        guard let verb = fields.first else { return nil }
        var reader = Fields(fields.dropFirst())
        let message: ClusterMessage?
        switch verb {
        case "handover": message = .handOver
        case "drain":
            guard let environment = reader.environment(), let deviceID = reader.device() else { return nil }
            message = .drain(environment: environment, deviceID: deviceID)
        case "online":
            guard let from = reader.text(), let environment = reader.environment(), let deviceID = reader.device(), let generation = reader.number(),
                let since = reader.time()
            else { return nil }
            message = .online(from: from, environment: environment, deviceID: deviceID, generation: generation, since: since)
        case "offline":
            guard let from = reader.text(), let environment = reader.environment(), let deviceID = reader.device(), let generation = reader.number()
            else { return nil }
            message = .offline(from: from, environment: environment, deviceID: deviceID, generation: generation)
        case "registration":
            guard let from = reader.text(), let environment = reader.environment(), let deviceID = reader.device(), let bundleID = reader.text()
            else { return nil }
            message = .registrationChanged(from: from, environment: environment, deviceID: deviceID, bundleID: bundleID)
        case "reset":
            guard let from = reader.text(), let deviceID = reader.device() else { return nil }
            message = .deviceReset(from: from, deviceID: deviceID)
        case "virtual":
            guard let from = reader.text(), let environment = reader.environment(), let bundleID = reader.text(), let token = reader.token() else {
                return nil
            }
            message = .virtualTokensChanged(from: from, environment: environment, bundleID: bundleID, token: token)
        case "channel-deleted":
            guard let from = reader.text(), let environment = reader.environment(), let id = reader.text() else { return nil }
            message = .channelDeleted(from: from, environment: environment, id: id)
        case "gone": message = reader.text().map { .gone(node: $0) }
        case "faults": message = reader.text().map { .faultsChanged(from: $0) }
        case "inbox": message = reader.text().map { .inboxShared(from: $0) }
        case "joined": message = reader.text().map { .joined(node: $0) }
        case "inbox-clear":
            guard let from = reader.text(), let upTo = reader.time() else { return nil }
            message = .inboxCleared(from: from, upTo: upTo)
        case "fault-count":
            guard let from = reader.text(), let id = reader.text(), let remaining = reader.optionalCount(), let hits = reader.count() else { return nil }
            message = .faultCount(from: from, id: id, remaining: remaining, hits: hits)
        case "broadcast":
            guard let from = reader.text(), let number = reader.number() else { return nil }
            message = .broadcastRelayed(from: from, number: number)
        default: return nil
        }
        // Every field read, none left over.
        guard let message, reader.isAtEnd else { return nil }
        self = message
    }

    /// A text field as sent: `%` and spaces percent-encoded.
    static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: " ", with: "%20")
    }

    /// A message's fields, read one after the other; each read is nil
    /// when the next field is missing or not of its kind.
    private struct Fields {
        private var rest: ArraySlice<String>

        init(_ fields: ArraySlice<String>) { rest = fields }

        var isAtEnd: Bool { rest.isEmpty }

        private mutating func next() -> String? {
            guard let field = rest.first, !field.isEmpty else { return nil }
            rest = rest.dropFirst()
            return field
        }

        mutating func text() -> String? { next()?.removingPercentEncoding.flatMap { $0.isEmpty ? nil : $0 } }
        mutating func environment() -> Environment? { next().flatMap(Environment.init(rawValue:)) }
        mutating func device() -> UInt64? { next().flatMap { UInt64($0) } }
        mutating func number() -> Int64? { next().flatMap { Int64($0) } }
        mutating func count() -> Int? { next().flatMap { Int($0) } }

        /// A count, or `-` for none: nil when it is neither.
        mutating func optionalCount() -> Int?? {
            guard let field = next() else { return nil }
            if field == "-" { return .some(nil) }
            return Int(field).map { .some($0) }
        }

        /// A token in hex, or `-` for none: nil when it is neither.
        mutating func token() -> [UInt8]?? {
            guard let field = next() else { return nil }
            if field == "-" { return .some(nil) }
            return Hex.decode(field).flatMap { $0.isEmpty ? nil : .some($0) }
        }

        /// Milliseconds since 1970, from 1970 to 9999.
        mutating func time() -> Date? {
            next().flatMap { Int($0) }.flatMap { (0...253_402_300_799_999).contains($0) ? Date(storeMillis: $0) : nil }
        }
    }
}
