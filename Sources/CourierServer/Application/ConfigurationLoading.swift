import CourierCore
import Foundation

/// A configuration file that cannot be used, with a one-line message.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension CourierConfiguration {
    /// Reads a configuration file. Keys the file leaves out keep their
    /// defaults; unknown keys and wrong types are errors naming the key.
    public static func load(contentsOf path: String) throws -> CourierConfiguration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("cannot read configuration file \(path): \(ConfigurationText.unreadable(path))")
        }
        return try decode(data, source: path)
    }

    /// Decodes a configuration from JSON text (see `load(contentsOf:)`).
    public static func decode(_ data: Data, source: String = "configuration") throws -> CourierConfiguration {
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: data)
        } catch {
            throw ConfigurationError("\(source) is not valid JSON: \(ConfigurationText.syntaxError(error, in: data))")
        }
        if let comma = ConfigurationText.trailingComma(in: data) {
            throw ConfigurationError("\(source) is not valid JSON: a comma before a closing bracket at \(comma)")
        }
        guard let object = parsed as? [String: Any] else { throw ConfigurationError("\(source) must hold a JSON object") }
        let defaults = try JSONSerialization.jsonObject(with: JSONEncoder().encode(CourierConfiguration())) as! [String: Any]
        let merged = try merge(object, over: defaults, path: "", source: source)
        if let kind = (merged["store"] as? [String: Any])?["kind"] as? String, StoreSettings.Kind(rawValue: kind) == nil {
            throw ConfigurationError(
                "\(source): 'store.kind' is '\(kind)', not one of \(StoreSettings.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let configuration: CourierConfiguration
        do {
            configuration = try JSONDecoder().decode(CourierConfiguration.self, from: JSONSerialization.data(withJSONObject: merged))
        } catch let DecodingError.typeMismatch(type, context), let DecodingError.valueNotFound(type, context) {
            let key = context.codingPath.map(\.stringValue).joined(separator: ".")
            let given = ConfigurationText.value(at: context.codingPath, in: merged).map { ", not \($0)" } ?? ""
            throw ConfigurationError("\(source): key '\(key)' has a value of the wrong type: it takes \(ConfigurationText.expected(type))\(given)")
        } catch let DecodingError.dataCorrupted(context) {
            let key = context.codingPath.map(\.stringValue).joined(separator: ".")
            let given = ConfigurationText.value(at: context.codingPath, in: merged).map { " (\($0))" } ?? ""
            throw ConfigurationError("\(source): key '\(key)' has a value of the wrong type\(given)")
        }
        try configuration.validate(source: source)
        return configuration
    }

    /// Overlays `object` on the defaults, refusing keys the defaults lack.
    private static func merge(_ object: [String: Any], over defaults: [String: Any], path: String, source: String) throws -> [String: Any] {
        var result = defaults
        for (key, value) in object {
            let keyPath = path.isEmpty ? key : "\(path).\(key)"
            guard let defaultValue = defaults[key] else { throw ConfigurationError("\(source): unknown key '\(keyPath)'") }
            if let nested = value as? [String: Any] {
                guard let nestedDefaults = defaultValue as? [String: Any] else {
                    throw ConfigurationError("\(source): key '\(keyPath)' has a value of the wrong type: it takes no object")
                }
                result[key] = try merge(nested, over: nestedDefaults, path: keyPath, source: source)
            } else if defaultValue is [String: Any] {
                let given = ConfigurationText.value(at: [], in: value).map { ", not \($0)" } ?? ""
                throw ConfigurationError("\(source): key '\(keyPath)' has a value of the wrong type: it takes an object\(given)")
            } else {
                result[key] = value
            }
        }
        return result
    }

    /// Checks values the types alone do not.
    public func validate(source: String = "configuration") throws {
        let portKeys: [(String, Int)] =
            [("network.adminPort", network.adminPort)]
            + [("production", network.production), ("sandbox", network.sandbox)].flatMap { name, ports in
                [
                    ("network.\(name).binary", ports.binary), ("network.\(name).feedback", ports.feedback),
                    ("network.\(name).http2", ports.http2), ("network.\(name).device", ports.device),
                    ("network.\(name).channels", ports.channels),
                ]
            }
        for (key, port) in portKeys where !(0...65_535).contains(port) {
            throw ConfigurationError("\(source): '\(key)' is \(port), not a port (0-65535)")
        }
        guard limits.tokenLength >= 32, limits.tokenLength <= 254, limits.tokenLength % 2 == 0 else {
            throw ConfigurationError("\(source): 'limits.tokenLength' must be even, 32 to 254")
        }
        let payloadKeys = [
            ("binaryLegacy", limits.payload.binaryLegacy), ("binaryCommand2", limits.payload.binaryCommand2),
            ("http2", limits.payload.http2), ("http2VoIP", limits.payload.http2VoIP), ("broadcast", limits.payload.broadcast),
        ]
        for (key, value) in payloadKeys where !(1...65_535).contains(value) {
            throw ConfigurationError("\(source): 'limits.payload.\(key)' must be 1 to 65535")
        }
        for name in virtualDevices.acceptAnyToken.keys.sorted() where Environment(rawValue: name) == nil {
            throw ConfigurationError("\(source): 'virtualDevices.acceptAnyToken.\(name)' names no environment: use production or sandbox")
        }
        guard (1...1_000_000).contains(limits.channelsPerApp) else {
            throw ConfigurationError("\(source): 'limits.channelsPerApp' must be 1 to 1000000")
        }
        guard network.handshakeTimeout > 0 else { throw ConfigurationError("\(source): 'network.handshakeTimeout' must be more than 0") }
        guard (1...1_000_000).contains(http2.maxConcurrentStreams) else {
            throw ConfigurationError("\(source): 'http2.maxConcurrentStreams' must be 1 to 1000000")
        }
        guard http2.idleTimeout > 0 else { throw ConfigurationError("\(source): 'http2.idleTimeout' must be more than 0") }
        guard (1_024...16_777_216).contains(limits.deviceMaxFrameLength) else {
            throw ConfigurationError("\(source): 'limits.deviceMaxFrameLength' must be 1024 to 16777216")
        }
        guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(logLevel) else {
            throw ConfigurationError("\(source): 'logLevel' must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard Identifiers.isTenCharacterID(demo.teamID) else {
            throw ConfigurationError("\(source): 'demo.teamID' must be ten characters A-Z, 0-9")
        }
        guard Identifiers.isBundleID(demo.bundleID) else {
            throw ConfigurationError("\(source): 'demo.bundleID' is not a bundle id")
        }
        guard !dataDirectory.isEmpty else { throw ConfigurationError("\(source): 'dataDirectory' is empty") }
        guard cluster.node.isEmpty || ClusterSettings.isNodeID(cluster.node) else {
            throw ConfigurationError("\(source): 'cluster.node' must be 1 to 40 characters a-z, 0-9 and '-'")
        }
        guard (0...65535).contains(cluster.peerPort) else { throw ConfigurationError("\(source): 'cluster.peerPort' must be 0 to 65535") }
        guard cluster.heartbeatInterval > 0 else { throw ConfigurationError("\(source): 'cluster.heartbeatInterval' must be more than 0") }
        guard cluster.nodeTimeout >= 2 * cluster.heartbeatInterval else {
            throw ConfigurationError("\(source): 'cluster.nodeTimeout' must be at least twice 'cluster.heartbeatInterval'")
        }
        if store.kind == .postgresql {
            for (key, value) in [("store.host", store.host), ("store.database", store.database), ("store.user", store.user)] where value.isEmpty {
                throw ConfigurationError("\(source): '\(key)' is empty")
            }
            guard (1...65_535).contains(store.port) else { throw ConfigurationError("\(source): 'store.port' is \(store.port), not a port (1-65535)") }
            guard (1...1_000).contains(store.connections) else { throw ConfigurationError("\(source): 'store.connections' must be 1 to 1000") }
            guard ["disable", "require"].contains(store.tls) else { throw ConfigurationError("\(source): 'store.tls' must be disable or require") }
        }
        let positive = [
            ("qos.burstWindow", qos.burstWindow), ("qos.retention", qos.retention), ("qos.tokenRateWindow", qos.tokenRateWindow),
            ("qos.tickInterval", qos.tickInterval),
        ]
        let limits = [
            ("connections.maxPerListener", connections.maxPerListener), ("connections.maxPerDeviceListener", connections.maxPerDeviceListener),
            ("connections.maxPerAddress", connections.maxPerAddress), ("connections.reconnectLimit", connections.reconnectLimit),
            ("connections.maxPerIdentity", connections.maxPerIdentity),
            ("connections.maxUnfinishedRequestBytes", connections.maxUnfinishedRequestBytes),
            ("connections.maxFailedAuthenticationsPerAddress", connections.maxFailedAuthenticationsPerAddress),
        ]
        for (key, value) in limits where value < 1 {
            throw ConfigurationError("\(source): '\(key)' must be at least 1")
        }
        guard connections.maxUnauthenticatedPerAddress >= 0 else {
            throw ConfigurationError("\(source): 'connections.maxUnauthenticatedPerAddress' must be 0 (a fifth of maxPerAddress) or more")
        }
        guard connections.unauthenticatedShare > 0, connections.unauthenticatedShare <= 1 else {
            throw ConfigurationError("\(source): 'connections.unauthenticatedShare' must be more than 0 and at most 1")
        }
        guard connections.maxPerSandboxDeviceListener >= 0 else {
            throw ConfigurationError("\(source): 'connections.maxPerSandboxDeviceListener' must be 0 (as maxPerDeviceListener) or more")
        }
        // Below one largest device frame a connection could not take one notification.
        guard connections.maxUnreadBytes >= 16_384 else {
            throw ConfigurationError("\(source): 'connections.maxUnreadBytes' must be at least 16384")
        }
        let times = [
            ("connections.authenticationTimeout", connections.authenticationTimeout), ("connections.binaryIdleTimeout", connections.binaryIdleTimeout),
            ("connections.unfinishedFrameTimeout", connections.unfinishedFrameTimeout), ("connections.feedbackTimeout", connections.feedbackTimeout),
            ("connections.reconnectWindow", connections.reconnectWindow), ("connections.refusalLogInterval", connections.refusalLogInterval),
        ]
        for (key, value) in positive + times where !(value > 0) {
            throw ConfigurationError("\(source): '\(key)' must be more than 0")
        }
        guard qos.silentBudgetPerHour >= 0 else { throw ConfigurationError("\(source): 'qos.silentBudgetPerHour' must be 0 or more") }
        guard qos.tokenRateLimit >= 1 else { throw ConfigurationError("\(source): 'qos.tokenRateLimit' must be at least 1") }
        guard (1...86_400).contains(qos.keepAlive) else { throw ConfigurationError("\(source): 'qos.keepAlive' must be 1 to 86400") }
        guard (0...1_000_000).contains(inbox.capacity) else { throw ConfigurationError("\(source): 'inbox.capacity' must be 0 to 1000000") }
        guard inbox.maxAge > 0 else { throw ConfigurationError("\(source): 'inbox.maxAge' must be more than 0") }
        guard threads.realtimePriority == 0 || RealtimeScheduling.priorities.contains(threads.realtimePriority) else {
            throw ConfigurationError("\(source): 'threads.realtimePriority' must be 0 (off) or 1 to 99")
        }
    }
}
