import Foundation
import Synchronization

/// A PostgreSQL server of the tests' own, from the machine's server
/// binaries (Debian's `postgresql` package): `initdb` into a temporary
/// folder, `pg_ctl start` on 127.0.0.1 and a free port, password
/// authentication (scram-sha-256) for the user `courier`. PostgreSQL's
/// server refuses to run as root, so under root it runs as the user
/// `postgres` (the package makes it), or `COURIER_POSTGRES_USER`.
///
/// One server serves the whole test process: started on first use,
/// stopped (and its folder removed) when the process exits. Each test
/// takes a new database of it (`createDatabase`).
public final class PostgresServer: Sendable {
    public let host = "127.0.0.1"
    public let port: Int
    public let user = "courier"
    public let password: String
    let directory: String
    let binaries: String
    let runAs: String?

    /// The folder holding `initdb`, `pg_ctl` and `postgres`: `COURIER_POSTGRES_BIN`,
    /// the PATH, or the newest of Debian's `/usr/lib/postgresql/<version>/bin`.
    public static let binaryDirectory: String? = {
        let fileManager = FileManager.default
        func holdsServer(_ directory: String) -> Bool {
            ["initdb", "pg_ctl", "postgres"].allSatisfy { fileManager.isExecutableFile(atPath: directory + "/" + $0) }
        }
        if let directory = ProcessInfo.processInfo.environment["COURIER_POSTGRES_BIN"] {
            return holdsServer(directory) ? directory : nil
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) where holdsServer(directory) {
            return directory
        }
        let versions = ((try? fileManager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init).sorted()
        return versions.reversed().map { "/usr/lib/postgresql/\($0)/bin" }.first(where: holdsServer)
    }()

    /// Whether the tests that need PostgreSQL can run here.
    public static var available: Bool { binaryDirectory != nil }

    /// What a skipped suite says.
    public static let unavailable =
        "needs PostgreSQL's server binaries (initdb, pg_ctl, postgres), not found on the PATH nor in /usr/lib/postgresql/*/bin: "
        + "install Debian's postgresql package (.ci/run does), or set COURIER_POSTGRES_BIN"

    private static let started = Mutex<Result<PostgresServer, any Error>?>(nil)

    /// The test process's server, started on first use.
    public static func shared() async throws -> PostgresServer {
        try await withCheckedThrowingContinuation { continuation in
            // Started on a thread of its own: initdb and pg_ctl take a second or two.
            Thread {
                continuation.resume(
                    with: started.withLock { started in
                        if let started { return started }
                        let result = Result { try PostgresServer.start() }
                        started = result
                        if case .success(let server) = result { PostgresServer.stopAtExit(server) }
                        return result
                    })
            }.start()
        }
    }

    private init(port: Int, password: String, directory: String, binaries: String, runAs: String?) {
        self.port = port
        self.password = password
        self.directory = directory
        self.binaries = binaries
        self.runAs = runAs
    }

    private static func start() throws -> PostgresServer {
        guard let binaries = binaryDirectory else { throw TestServerError(unavailable) }
        let runAs: String? = getuid() == 0 ? (ProcessInfo.processInfo.environment["COURIER_POSTGRES_USER"] ?? "postgres") : nil
        let directory = try mkdtemp("/tmp/courier-postgres")
        let password = UUID().uuidString
        try Data((password + "\n").utf8).write(to: URL(fileURLWithPath: directory + "/password"))
        try makeCertificates(in: directory)
        if let runAs {
            let owned = try runProgram("chown", ["-R", runAs, directory])
            guard owned.status == 0 else { throw TestServerError("chown \(runAs) \(directory): \(owned.stderr)") }
        }
        var lastFailure = ""
        // A free port can be taken by another program between the look and
        // the start: a few tries.
        for _ in 0..<3 {
            let port = try freePort()
            let server = PostgresServer(port: port, password: password, directory: directory, binaries: binaries, runAs: runAs)
            if !FileManager.default.fileExists(atPath: directory + "/data") {
                let made = try server.run(
                    "initdb",
                    [
                        "-D", directory + "/data", "-U", "courier", "--pwfile=" + directory + "/password", "--auth=scram-sha-256",
                        "-E", "UTF8", "--no-sync",
                    ])
                guard made.status == 0 else { throw TestServerError("initdb failed: \(made.stderr)\(made.stdout)") }
            }
            // TLS on (clients may still connect without it), with a certificate of the tests' own CA for 127.0.0.1.
            let options = [
                "-p \(port)", "-k \(directory)", "-c listen_addresses=127.0.0.1", "-c max_connections=500", "-c fsync=off",
                "-c full_page_writes=off", "-c ssl=on", "-c ssl_cert_file=\(directory)/server.pem", "-c ssl_key_file=\(directory)/server-key.pem",
            ].joined(separator: " ")
            let started = try server.run(
                "pg_ctl", ["-D", directory + "/data", "-l", directory + "/server.log", "-w", "-t", "60", "-o", options, "start"])
            if started.status == 0 { return server }
            lastFailure = started.stdout + started.stderr + ((try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "")
        }
        throw TestServerError("pg_ctl start failed: \(lastFailure)")
    }

    /// The CA of the server's TLS certificate (which names 127.0.0.1), PEM.
    public var caPath: String { directory + "/ca.pem" }

    /// A CA and a server certificate for 127.0.0.1, made with openssl.
    private static func makeCertificates(in directory: String) throws {
        let steps: [[String]] = [
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=courier-test-postgres-ca",
                "-keyout", directory + "/ca-key.pem", "-out", directory + "/ca.pem",
            ],
            [
                "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
                directory + "/server-key.pem", "-out", directory + "/server.csr",
            ],
            [
                "x509", "-req", "-in", directory + "/server.csr", "-CA", directory + "/ca.pem", "-CAkey", directory + "/ca-key.pem",
                "-CAcreateserial", "-days", "2", "-extfile", directory + "/san.ext", "-out", directory + "/server.pem",
            ],
        ]
        try Data("subjectAltName=IP:127.0.0.1,DNS:localhost\n".utf8).write(to: URL(fileURLWithPath: directory + "/san.ext"))
        for step in steps {
            let made = try runProgram("openssl", step)
            guard made.status == 0 else { throw TestServerError("openssl \(step[0]) failed: \(made.stderr)") }
        }
        chmod(directory + "/server-key.pem", 0o600)
    }

    /// A new, empty database; its name.
    public func createDatabase() throws -> String {
        let name = "courier_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let made = try run("psql", [connectionURL(database: "postgres"), "-v", "ON_ERROR_STOP=1", "-q", "-c", "CREATE DATABASE \(name)"])
        guard made.status == 0 else { throw TestServerError("CREATE DATABASE failed: \(made.stderr)") }
        return name
    }

    public func createDatabase() async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try self.createDatabase() as String }) }.start()
        }
    }

    /// A `postgresql://` URL with the password, for psql.
    public func connectionURL(database: String) -> String {
        "postgresql://\(user):\(password)@\(host):\(port)/\(database)"
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`) and removes its folder.
    public func stop() {
        _ = try? run("pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs one of the server's programs, as `runAs` when the tests run as root.
    func run(_ program: String, _ arguments: [String]) throws -> ProcessResult {
        let path = binaries + "/" + program
        let found = FileManager.default.isExecutableFile(atPath: path) ? path : program
        if let runAs { return try runProgram("runuser", ["-u", runAs, "--", found] + arguments, directory: "/") }
        return try runProgram(found, arguments, directory: "/")
    }

    private static let toStop = Mutex<[PostgresServer]>([])

    private static func stopAtExit(_ server: PostgresServer) {
        toStop.withLock { $0.append(server) }
        atexit {
            for server in PostgresServer.toStop.withLock({ $0 }) { server.stop() }
        }
    }
}

/// A test's server that could not be set up, with what it said.
public struct TestServerError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A new folder `<prefix>.XXXXXX`, 0700.
private func mkdtemp(_ prefix: String) throws -> String {
    var template = Array((prefix + ".XXXXXX").utf8CString)
    guard let made = template.withUnsafeMutableBufferPointer({ Glibc.mkdtemp($0.baseAddress!) }) else {
        throw TestServerError("mkdtemp \(prefix): errno \(errno)")
    }
    return String(cString: made)
}

/// A TCP port on 127.0.0.1 free at the moment of asking.
public func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestServerError("socket: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    guard bound == 0 else { throw TestServerError("bind: errno \(errno)") }
    let named = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    guard named == 0 else { throw TestServerError("getsockname: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}
