import CourierCore
import Foundation
import NIOSSL

/// A device's identity directory, as `courier pki device-cert` makes it:
/// `cert.pem`, `key.pem`, `ca.pem` and `identity.json` (device id,
/// generation, gateway, and the app tokens the device holds).
public struct DeviceCredentials: Sendable {
    public let directory: String
    public var file: DeviceIdentityFile

    public var certificatePath: String { directory + "/cert.pem" }
    public var keyPath: String { directory + "/key.pem" }
    public var caPath: String { directory + "/ca.pem" }
    public var identityPath: String { directory + "/identity.json" }

    public var deviceID: UInt64 { UInt64(file.deviceID, radix: 16) ?? 0 }

    public static func load(from directory: String) throws -> DeviceCredentials {
        let path = directory + "/identity.json"
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DeviceClientError.badIdentity("no identity.json in \(directory): make one with 'courier pki device-cert --out \(directory)'")
        }
        let file: DeviceIdentityFile
        do {
            file = try JSONDecoder().decode(DeviceIdentityFile.self, from: data)
        } catch {
            throw DeviceClientError.badIdentity("\(path) is not a device identity file")
        }
        guard UInt64(file.deviceID, radix: 16) != nil else { throw DeviceClientError.badIdentity("\(path) has no valid device id") }
        for name in ["cert.pem", "key.pem", "ca.pem"] where !FileManager.default.fileExists(atPath: directory + "/" + name) {
            throw DeviceClientError.badIdentity("\(directory) has no \(name)")
        }
        return DeviceCredentials(directory: directory, file: file)
    }

    /// TLS towards the device gateway: the device's certificate and key,
    /// Courier's CA as the only trust root.
    public func tlsConfiguration() throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        configuration.trustRoots = .file(caPath)
        configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
        configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: keyPath, format: .pem))
        return configuration
    }

    /// The token held for an app in an environment.
    public func token(for bundleID: String, in environment: Environment) -> [UInt8]? {
        file.tokens[environment.rawValue]?[bundleID].flatMap(Hex.decode)
    }

    public mutating func setToken(_ token: [UInt8]?, for bundleID: String, in environment: Environment) {
        file.tokens[environment.rawValue, default: [:]][bundleID] = token.map(Hex.encode)
    }

    /// Every token held in an environment.
    public func tokens(in environment: Environment) -> [[UInt8]] {
        (file.tokens[environment.rawValue] ?? [:]).values.sorted().compactMap(Hex.decode)
    }

    public func save() throws {
        try file.encoded().write(to: URL(fileURLWithPath: identityPath), options: .atomic)
    }
}

/// What can go wrong for a device.
public enum DeviceClientError: Error, Sendable, Hashable, CustomStringConvertible {
    case badIdentity(String)
    /// The server refused the connection (ConnectAck status).
    case refused(String)
    /// The server reported a protocol error.
    case protocolError(code: UInt8, message: String)
    /// The app is not known to the server.
    case unknownApp(String)
    /// The app has no such broadcast channel (or, unsubscribing, the
    /// device was not subscribed to it).
    case unknownChannel(String)
    /// The connection holds as many subscriptions as the server allows.
    case tooManySubscriptions
    /// No connection right now; try again.
    case disconnected
    case stopped
    /// Could not connect.
    case unreachable(String)

    public var description: String {
        switch self {
        case .badIdentity(let message): message
        case .refused(let why): "the server refused the device: \(why)"
        case .protocolError(let code, let message): "protocol error \(code): \(message)"
        case .unknownApp(let bundleID): "the server has no app \(bundleID)"
        case .unknownChannel(let channelID): "the app has no broadcast channel \(channelID)"
        case .tooManySubscriptions: "the server allows no more broadcast subscriptions on this connection"
        case .disconnected: "not connected"
        case .stopped: "the client was stopped"
        case .unreachable(let why): "cannot connect to the device gateway \(why)"
        }
    }
}
