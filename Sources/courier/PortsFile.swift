import Foundation

/// The ports a running `courier serve` actually listens on, written to
/// its data directory (`ports.json`) once every listener is bound and
/// removed when it stops: with port 0 in the configuration (any free
/// port) or another server's data directory, the admin commands given
/// `--data` find the server that uses it, not the configuration's port.
struct PortsFile: Codable, Equatable {
    static let fileName = "ports.json"

    /// The admin API's URL.
    var admin: String?
    /// Each listener's port ("http2.production", "admin", ...).
    var ports: [String: Int]
    /// The server's process.
    var pid: Int32

    static func path(dataDirectory: String) -> String { dataDirectory + "/" + fileName }

    /// Writes the file (replacing it whole).
    func write(dataDirectory: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: Self.path(dataDirectory: dataDirectory)), options: .atomic)
    }

    /// The file of a server using `dataDirectory`, if one is there.
    static func read(dataDirectory: String) -> PortsFile? {
        guard let data = FileManager.default.contents(atPath: path(dataDirectory: dataDirectory)) else { return nil }
        return try? JSONDecoder().decode(PortsFile.self, from: data)
    }

    /// Removes the file, if it is this process's.
    static func remove(dataDirectory: String) {
        guard read(dataDirectory: dataDirectory)?.pid == getpid() else { return }
        try? FileManager.default.removeItem(atPath: path(dataDirectory: dataDirectory))
    }
}
