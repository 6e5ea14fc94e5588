import Crypto
import CourierCore
import Foundation

/// The admin API's bearer token: made at first start (32 random bytes,
/// hex), kept in the data directory readable by its owner only, and
/// printed in the start-up banner.
public enum AdminToken {
    public static let fileName = "admin-token"

    /// The token in `directory`, made first if there is none. Throws a
    /// `ConfigurationError` naming the file when it cannot be read or made.
    public static func loadOrCreate(inDataDirectory directory: String) throws -> (token: String, path: String, created: Bool) {
        let path = (directory as NSString).appendingPathComponent(fileName)
        if let data = FileManager.default.contents(atPath: path) {
            let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard token.count >= 32 else { throw ConfigurationError("\(path) holds no admin token; remove it to have a new one made") }
            return (token, path, false)
        }
        let token = randomHex()
        // Made 0600 from the start (no moment with the umask's permissions), and never over another file.
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { throw ConfigurationError("cannot write the admin token to \(path)") }
        defer { close(descriptor) }
        let line = Array((token + "\n").utf8)
        guard write(descriptor, line, line.count) == line.count else { throw ConfigurationError("cannot write the admin token to \(path)") }
        return (token, path, true)
    }

    /// The token as a client finds it: `COURIER_ADMIN_TOKEN`, else the
    /// data directory's file. Nil when neither has one.
    public static func find(dataDirectory: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let token = environment["COURIER_ADMIN_TOKEN"], !token.isEmpty { return token }
        let path = (dataDirectory as NSString).appendingPathComponent(fileName)
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return token.isEmpty ? nil : token
    }

    /// 32 random bytes in hex: the admin token, a console session's id and its anti-forgery token.
    static func randomHex() -> String {
        Hex.encode(Array(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }))
    }

    /// Compares without stopping at the first difference.
    static func matches(_ presented: Substring, _ token: String) -> Bool {
        let a = Array(presented.utf8)
        let b = Array(token.utf8)
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
