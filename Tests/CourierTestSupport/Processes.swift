import Foundation
import Synchronization

/// What a finished program did.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// A child process started with `posix_spawnp`: standard input, output and
/// error on the descriptors given, every other descriptor closed in the
/// child. Foundation's `Process` is not used: on Linux it watches each child
/// through a socket that its run loop `select()`s on (a descriptor above 1023
/// overruns the sets), and a fresh-clone CI run crashed inside `Process.run`
/// (a memcpy) while other tests opened and closed thousands of connections.
struct Child: Sendable {
    let pid: pid_t

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later)
    /// and `posix_spawn_file_actions_addchdir_np` (2.29), which the Glibc
    /// module does not declare.
    private static let addCloseFrom = unsafeBitCast(
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np"),
        to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)?.self)
    private static let addChangeDirectory = unsafeBitCast(
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addchdir_np"),
        to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32)?.self)

    /// Starts `program` (looked up on the PATH unless it is a path).
    static func start(_ program: String, _ arguments: [String], directory: String?, input: Int32, output: Int32, error: Int32) throws -> Child {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, error, 2)
        guard let addCloseFrom, let addChangeDirectory else { throw POSIXError(.ENOSYS) }
        _ = addCloseFrom(&actions, 3)
        if let directory { _ = addChangeDirectory(&actions, directory) }
        // The child starts with no signal blocked and the default handlers.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv: [UnsafeMutablePointer<CChar>?] = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let result = posix_spawnp(&pid, program, &actions, &attributes, argv, environ)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        return Child(pid: pid)
    }

    /// A pipe (every child closes the descriptors it does not get through `dup2`).
    static func pipe() throws -> (read: Int32, write: Int32) {
        var descriptors: [Int32] = [0, 0]
        guard Glibc.pipe(&descriptors) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return (descriptors[0], descriptors[1])
    }

    /// Everything until the end of the file, then closes it.
    static func readAll(_ descriptor: Int32) -> Data {
        defer { close(descriptor) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count > 0 {
                data.append(contentsOf: buffer[0..<count])
            } else if count == 0 || errno != EINTR {
                return data
            }
        }
    }

    /// Writes all of `data`, then closes the descriptor.
    static func writeAll(_ data: Data, to descriptor: Int32) {
        defer { close(descriptor) }
        let bytes = [UInt8](data)
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count > 0 { offset += count } else if count == 0 || errno != EINTR { return }
        }
    }

    /// The exit status once the child ended (128 + the signal when a signal
    /// ended it); nil while it runs, when `block` is false.
    func wait(block: Bool = true) -> Int32? {
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, block ? 0 : WNOHANG)
            if result == pid { break }
            if result == 0 { return nil }
            if result < 0 && errno == EINTR { continue }
            return -1
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

/// Runs a program to its end. `program` is looked up on the PATH.
public func runProgram(_ program: String, _ arguments: [String], input: Data? = nil, directory: String? = nil) throws -> ProcessResult {
    let inPipe = try Child.pipe()
    let out = try Child.pipe()
    let err = try Child.pipe()
    let child: Child
    do {
        child = try Child.start(program, arguments, directory: directory, input: inPipe.read, output: out.write, error: err.write)
    } catch {
        for descriptor in [inPipe.read, inPipe.write, out.read, out.write, err.read, err.write] { close(descriptor) }
        throw error
    }
    for descriptor in [inPipe.read, out.write, err.write] { close(descriptor) }
    // Input written and both outputs read at once, so a full pipe never blocks the child.
    let writer = Thread { Child.writeAll(input ?? Data(), to: inPipe.write) }
    writer.start()
    let errData = CollectedData()
    let errDone = DispatchSemaphore(value: 0)
    Thread {
        errData.set(Child.readAll(err.read))
        errDone.signal()
    }.start()
    let outData = Child.readAll(out.read)
    errDone.wait()
    let status = child.wait() ?? -1
    return ProcessResult(status: status, stdout: String(decoding: outData, as: UTF8.self), stderr: String(decoding: errData.get(), as: UTF8.self))
}

/// `runProgram` for async tests: the wait happens on a thread of its own,
/// so that a server running in the same process keeps the concurrency
/// pool's threads while the program talks to it.
public func runProgram(_ program: String, _ arguments: [String], input: Data? = nil, directory: String? = nil) async throws -> ProcessResult {
    try await withCheckedThrowingContinuation { continuation in
        Thread {
            continuation.resume(with: Result { try runProgram(program, arguments, input: input, directory: directory) as ProcessResult })
        }.start()
    }
}

final class CollectedData: Sendable {
    private let data = Mutex(Data())
    func set(_ value: Data) { data.withLock { $0 = value } }
    func get() -> Data { data.withLock { $0 } }
}

/// A program running beside the test, whose output lines can be awaited.
public final class RunningProgram: Sendable {
    private let child: Child
    private let exitStatus = Mutex<Int32?>(nil)
    private let lines = Mutex<[String]>([])
    private let newLine = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    public init(_ program: String, _ arguments: [String], directory: String? = nil, mergeStandardError: Bool = false) throws {
        let out = try Child.pipe()
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        defer { close(null) }
        do {
            child = try Child.start(program, arguments, directory: directory, input: null, output: out.write, error: mergeStandardError ? out.write : null)
        } catch {
            close(out.read)
            close(out.write)
            throw error
        }
        close(out.write)
        let descriptor = out.read
        Thread { [self] in
            var pending = Data()
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                pending.append(contentsOf: buffer[0..<count])
                while let end = pending.firstIndex(of: 0x0A) {
                    let line = String(decoding: pending[pending.startIndex..<end], as: UTF8.self)
                    pending.removeSubrange(pending.startIndex...end)
                    self.lines.withLock { $0.append(line) }
                    self.newLine.signal()
                }
            }
            close(descriptor)
            if !pending.isEmpty { self.lines.withLock { $0.append(String(decoding: pending, as: UTF8.self)) } }
            self.finished.signal()
            self.newLine.signal()
        }.start()
    }

    public var processIdentifier: Int32 { child.pid }

    public var isRunning: Bool { status(block: false) == nil }

    /// The exit status, once the program ended (reaped once, then remembered).
    private func status(block: Bool) -> Int32? {
        exitStatus.withLock { known in
            if known == nil { known = child.wait(block: block) }
            return known
        }
    }

    /// Every line printed so far.
    public var output: [String] { lines.withLock { $0 } }

    /// Waits until a line containing `text` was printed and returns it; nil
    /// when the program ended or `limit` seconds passed first.
    public func waitForLine(containing text: String, limit: TimeInterval = 60) -> String? {
        let deadline = Date().addingTimeInterval(limit)
        while true {
            if let line = output.first(where: { $0.contains(text) }) { return line }
            if !isRunning && finished.wait(timeout: .now()) == .success {
                finished.signal()
                return output.first(where: { $0.contains(text) })
            }
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return nil }
            _ = newLine.wait(timeout: .now() + min(remaining, 0.05))
        }
    }

    public func signal(_ signal: Int32) {
        if isRunning { kill(child.pid, signal) }
    }

    /// Waits for the program to end (at most `limit` seconds; then kills it)
    /// and returns its exit status, or nil if it had to be killed. Its
    /// output is read to the end first (at most 5 s more), so that
    /// `output` then holds its last line too.
    public func waitForExit(limit: TimeInterval = 60) -> Int32? {
        let deadline = Date().addingTimeInterval(limit)
        while isRunning {
            if Date() > deadline {
                // Killed, so that reaping it cannot wait.
                kill(child.pid, SIGKILL)
                _ = status(block: true)
                return nil
            }
            _ = newLine.wait(timeout: .now() + 0.05)
        }
        if finished.wait(timeout: .now() + 5) == .success { finished.signal() }
        return status(block: false)
    }

    /// `waitForLine` for async tests: the wait happens on a thread of its own,
    /// so that it holds none of the concurrency pool's threads (two of them
    /// on two cores), which a server running in the same process needs to
    /// answer the program.
    public func waitForLine(containing text: String, limit: TimeInterval = 60) async -> String? {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: self.waitForLine(containing: text, limit: limit) as String?) }.start()
        }
    }

    /// `waitForExit` for async tests, on a thread of its own (see `waitForLine`).
    public func waitForExit(limit: TimeInterval = 60) async -> Int32? {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: self.waitForExit(limit: limit) as Int32?) }.start()
        }
    }

    /// One still running is asked to stop (SIGTERM), without waiting for it.
    deinit {
        if isRunning { kill(child.pid, SIGTERM) }
    }
}

/// A new empty temporary directory; the test removes it with
/// `removeTemporaryDirectory` when it is done.
public func temporaryDirectory(_ prefix: String = "courier-test") throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Removes a directory made by `temporaryDirectory` and everything in it.
public func removeTemporaryDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// The folder holding the test binaries, where SwiftPM also puts `courier`.
public func productsDirectory() -> URL {
    #if os(macOS)
    for bundle in Bundle.allBundles where bundle.bundlePath.hasSuffix(".xctest") {
        return bundle.bundleURL.deletingLastPathComponent()
    }
    #endif
    return URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
}
