import Foundation
import Testing

/// Rules of docs/architecture.md that the compiler cannot hold, checked on
/// the sources themselves.
@Suite struct ArchitectureTests {
    /// The repository's `Sources` folder.
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources")

    /// Every Swift source under `folder`: its path from `Sources` and its lines.
    static func files(under folder: String = "") throws -> [(path: String, lines: [Substring])] {
        let root = sources.appendingPathComponent(folder)
        guard let walker = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil) else { return [] }
        var files: [(String, [Substring])] = []
        for case let url as URL in walker where url.pathExtension == "swift" {
            let text = try String(contentsOf: url, encoding: .utf8)
            files.append((String(url.path.dropFirst(sources.path.count + 1)), text.split(separator: "\n", omittingEmptySubsequences: false)))
        }
        return files.sorted { $0.0 < $1.0 }
    }

    /// Nothing outside Delivery reaches the dispatcher's parts: the
    /// interfaces and the admin API use its commands and queries
    /// (`Dispatcher+Surface.swift`); the application, which builds the
    /// parts, hands one to whoever needs it.
    @Test func nothingOutsideDeliveryReachesTheDispatchersParts() throws {
        let parts = ["store", "rules", "log", "feedback", "registrations", "sessions", "broadcasts", "virtuals", "metrics", "cluster", "acknowledger"]
        let reach = try Regex("dispatcher\\??\\.(" + parts.joined(separator: "|") + ")\\b(?!\\s*\\()")
        var found: [String] = []
        for (path, lines) in try Self.files(under: "CourierServer")
        where !path.hasPrefix("CourierServer/Delivery/") && !path.hasPrefix("CourierServer/Application/") {
            for (number, line) in lines.enumerated() where line.contains(reach) && !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                found.append("\(path):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
    }

    /// No source file over 600 lines.
    @Test func noSourceFileIsLong() throws {
        let long = try Self.files().filter { $0.lines.count > 600 }.map { "\($0.path): \($0.lines.count) lines" }
        #expect(long.isEmpty, "\(long.joined(separator: "\n"))")
    }

    /// The server starts no task that no service owns: every task is a
    /// child of a service's task group (or a listener's work), but for
    /// this one, with its reason.
    @Test func theServerStartsNoTaskOfItsOwn() throws {
        let allowed = [
            // A job handed to work that has ended: not reached (the listener
            // finishes its work after its connections), kept so that a job's
            // promise is never dropped.
            "CourierServer/Listeners/ConnectionWork.swift"
        ]
        let unstructured = try Regex("(^|[^.\\w])Task(\\.detached)? *(\\{|\\()")
        var found: [String] = []
        for (path, lines) in try Self.files(under: "CourierServer") + Self.files(under: "CourierCore") where !allowed.contains(path) {
            for (number, line) in lines.enumerated() where line.contains(unstructured) && !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                found.append("\(path):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
    }
}
