import Foundation
import Synchronization

/// What a finished program did.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Foundation's `Process` watches each child through a socket pair that
/// its run loop `select()`s on; `select` takes descriptors below 1024
/// only, and a socket numbered higher overruns its sets and corrupts
/// memory (seen: a crash in `Process.run`, and a test process hung). The
/// tests that open a thousand connections push this process's descriptor
/// numbers past 1024 while they run, so a program is started only while
/// the next descriptor is low enough; starts are taken one at a time.
private let spawning = NSLock()

private func startSafely(_ process: Process) throws {
    spawning.lock()
    defer { spawning.unlock() }
    let deadline = Date().addingTimeInterval(120)
    while true {
        // The next descriptors a socket pair would get, with room for the pipes.
        let probe = open("/dev/null", O_RDONLY | O_CLOEXEC)
        if probe >= 0 { close(probe) }
        if probe < 900 || Date() > deadline { break }
        usleep(20_000)
    }
    try process.run()
}

/// Runs a program to its end. `program` is looked up on the PATH.
public func runProgram(_ program: String, _ arguments: [String], input: Data? = nil, directory: String? = nil) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: program.hasPrefix("/") ? program : "/usr/bin/env")
    process.arguments = program.hasPrefix("/") ? arguments : [program] + arguments
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let out = Pipe()
    let err = Pipe()
    let inPipe = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = inPipe
    try startSafely(process)
    if let input { inPipe.fileHandleForWriting.write(input) }
    try inPipe.fileHandleForWriting.close()
    // Read both pipes to their end before waiting, so a full pipe never blocks the child.
    let errData = CollectedData()
    let errDone = DispatchSemaphore(value: 0)
    let errHandle = err.fileHandleForReading
    Thread {
        errData.set(errHandle.readDataToEndOfFile())
        errDone.signal()
    }.start()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    errDone.wait()
    process.waitUntilExit()
    return ProcessResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData.get(), as: UTF8.self))
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
    private let process: Process
    private let lines = Mutex<[String]>([])
    private let newLine = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    public init(_ program: String, _ arguments: [String], directory: String? = nil, mergeStandardError: Bool = false) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program.hasPrefix("/") ? program : "/usr/bin/env")
        process.arguments = program.hasPrefix("/") ? arguments : [program] + arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let out = Pipe()
        process.standardOutput = out
        process.standardError = mergeStandardError ? out : FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        self.process = process
        try startSafely(process)
        let handle = out.fileHandleForReading
        Thread { [self] in
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let end = pending.firstIndex(of: 0x0A) {
                    let line = String(decoding: pending[pending.startIndex..<end], as: UTF8.self)
                    pending.removeSubrange(pending.startIndex...end)
                    self.lines.withLock { $0.append(line) }
                    self.newLine.signal()
                }
            }
            if !pending.isEmpty { self.lines.withLock { $0.append(String(decoding: pending, as: UTF8.self)) } }
            self.finished.signal()
            self.newLine.signal()
        }.start()
    }

    public var processIdentifier: Int32 { process.processIdentifier }

    public var isRunning: Bool { process.isRunning }

    /// Every line printed so far.
    public var output: [String] { lines.withLock { $0 } }

    /// Waits until a line containing `text` was printed and returns it; nil
    /// when the program ended or `limit` seconds passed first.
    public func waitForLine(containing text: String, limit: TimeInterval = 60) -> String? {
        let deadline = Date().addingTimeInterval(limit)
        while true {
            if let line = output.first(where: { $0.contains(text) }) { return line }
            if !process.isRunning && finished.wait(timeout: .now()) == .success {
                finished.signal()
                return output.first(where: { $0.contains(text) })
            }
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return nil }
            _ = newLine.wait(timeout: .now() + remaining)
        }
    }

    public func signal(_ signal: Int32) {
        kill(process.processIdentifier, signal)
    }

    /// Waits for the program to end (at most `limit` seconds; then kills it)
    /// and returns its exit status, or nil if it had to be killed.
    public func waitForExit(limit: TimeInterval = 60) -> Int32? {
        let deadline = Date().addingTimeInterval(limit)
        while process.isRunning {
            if Date() > deadline {
                process.terminate()
                return nil
            }
            _ = newLine.wait(timeout: .now() + 0.05)
        }
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { process.terminate() }
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
