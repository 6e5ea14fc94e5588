import CourierCore
import Foundation

/// What is wrong with a configuration file's text, in words a user acts
/// on: where a JSON syntax error is (line and column), the trailing comma
/// the parser would take silently, why a file cannot be read, and what
/// type a key wants.
enum ConfigurationText {
    /// Why `path` cannot be read: it does not exist, is a folder, or may
    /// not be read.
    static func unreadable(_ path: String) -> String {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return "no such file" }
        if isDirectory.boolValue { return "it is a folder" }
        if !FileManager.default.isReadableFile(atPath: path) { return "permission denied" }
        return "it could not be read"
    }

    /// A syntax error of the parser, with its place: the parser names a
    /// character offset ("around character 8") or the end of the text.
    static func syntaxError(_ error: any Error, in data: Data) -> String {
        let detail = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String ?? ""
        if detail.localizedCaseInsensitiveContains("end of file") { return "it ends before its last value or bracket is complete" }
        if let range = detail.range(of: "character "), let offset = Int(detail[range.upperBound...].prefix { $0.isNumber }) {
            return "a syntax error at \(position(of: offset, in: data))"
        }
        return detail.isEmpty ? "a syntax error" : detail
    }

    /// A comma just before a `}` or `]` (JSON has none there; the parser
    /// takes it): where it is, or nil.
    static func trailingComma(in data: Data) -> String? {
        JSONText.trailingComma(in: data).map { position(of: $0, in: data) }
    }

    /// "line L, column C" (from 1) of a byte offset (from 0).
    static func position(of offset: Int, in data: Data) -> String {
        let before = data.prefix(max(0, min(offset, data.count)))
        let line = before.reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
        let column = before.count - (before.lastIndex(of: 0x0A).map { $0 - before.startIndex + 1 } ?? 0) + 1
        return "line \(line), column \(column)"
    }

    /// What a value of `type` is, in a user's words.
    static func expected(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int32.Type, is Int64.Type, is UInt16.Type, is UInt32.Type, is UInt8.Type: "a whole number"
        case is Double.Type, is Float.Type: "a number"
        default: "\(type)".hasPrefix("Array") ? "a list" : "an object"
        }
    }

    /// The value at `path` of a decoded JSON object, as JSON text.
    static func value(at path: [any CodingKey], in object: Any) -> String? {
        var current: Any = object
        for key in path {
            if let index = key.intValue, let list = current as? [Any], list.indices.contains(index) {
                current = list[index]
            } else if let dictionary = current as? [String: Any], let next = dictionary[key.stringValue] {
                current = next
            } else {
                return nil
            }
        }
        guard let data = try? JSONSerialization.data(withJSONObject: current, options: [.fragmentsAllowed, .sortedKeys]) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
