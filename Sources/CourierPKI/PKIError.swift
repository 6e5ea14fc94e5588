/// Errors of provisioning: a code, a message that names the problem, and
/// where it was raised. Equal by code.
public struct PKIError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        case invalidArgument
        case notFound
        case alreadyExists
        case badFile
        case badCertificate
        /// What is asked cannot be done to this thing (revoking the CA).
        case notAllowed
    }

    public var code: Code
    public var message: String
    public var file: String
    public var line: Int

    public init(_ code: Code, _ message: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.message = message
        self.file = file
        self.line = line
    }

    public var description: String { message }

    public static func == (lhs: PKIError, rhs: PKIError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}
