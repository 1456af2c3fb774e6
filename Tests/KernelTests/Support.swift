import Foundation
import Threads
import JSON
import JSONParsing
import JSONRPC
import Kernel
import Logging
import Storage
import Chrono
import TestSupport

/// Paths of the package, found from this file so tests run from any working directory.
enum Paths {
    static let root: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let protocolDir = root.appendingPathComponent("protocol")
    static let transcripts = protocolDir.appendingPathComponent("transcripts")

    /// The built `healthkernel` binary: $HEALTHKERNEL_BIN, else beside the test bundle.
    static var binary: String {
        if let explicit = ProcessInfo.processInfo.environment["HEALTHKERNEL_BIN"] { return explicit }
        let exe = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var dir = exe.deletingLastPathComponent()
        // On Linux the test runner is `<build>/healthkernelPackageTests.xctest`; elsewhere it sits deeper.
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent("healthkernel").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return root.appendingPathComponent(".build/debug/healthkernel").path
    }
}

/// The HS256 secret test kernels use, so transcripts can carry pre-signed tokens.
let testSecret = "healthkernel-test-secret-0123456789abcdef"
/// A service_role token signed with `testSecret`, valid until 2100.
let testServiceToken = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJoZWFsdGhrZXJuZWwiLCJyb2xlIjoic2VydmljZV9yb2xlIiwiaWF0IjoxNzYzNzY5NjAwLCJleHAiOjQxMDI0NDQ4MDB9.-w2-Ea2Bq7_pOPi_SiBiUCgGjfaQPSGeZGm6SqsWQjY"

/// A kernel in this process, memory-only (or, with `HEALTHKERNEL_TEST_STORE=postgres`, on a fresh
/// schema of the test PostgreSQL, unless the test gave it a data dir or a store of its own).
func makeKernel(clock: Clock = SystemClock(), random: RandomSource = SystemRandom(), executor: (any Executor)? = nil,
                _ configure: (inout KernelConfig) -> Void = { _ in }) throws -> Kernel {
    var config = KernelConfig()
    config.memoryOnly = true
    config.auth.jwtSecret = testSecret
    configure(&config)
    if testStoreKind != "memory", config.memoryOnly, config.storeURL == nil { StoreKind.postgres.configure(&config) }
    var logger = Logger(label: "test")
    // HK_TEST_LOG=1 shows the kernels' warnings (how the sign-up race's batch failures were found).
    logger.logLevel = ProcessInfo.processInfo.environment["HK_TEST_LOG"] != nil ? .warning : .critical
    return try Kernel(config: config, clock: clock, random: random, logger: logger, executor: executor,
                      database: config.storeURL == modelURL ? testDatabase : nil)
}

/// The URL of the model of PostgreSQL in a `postgres-model` run.
let modelURL = "postgres://model"

/// The stores a kernel can run on, for tests that run once per store.
enum StoreKind: String, CaseIterable, CustomStringConvertible, Sendable {
    case memory, postgres
    var description: String { rawValue }

    /// Points `config` at this store (a fresh schema of the test server for PostgreSQL).
    func configure(_ config: inout KernelConfig) {
        guard self == .postgres else { return }
        config.memoryOnly = false
        config.storeURL = testDatabase == nil ? TestPostgres.url : modelURL
        config.storeSchema = TestPostgres.freshSchema()
        if testDatabase == nil, let direct = TestPostgres.listenURL {
            config.storePooler = true
            config.storeListenURL = direct
        }
    }
}

/// A kernel in this process on `store`, for in-process transcripts.
func makeKernel(on store: StoreKind, _ configure: (inout KernelConfig) -> Void = { _ in }) throws -> Kernel {
    try makeKernel { config in
        configure(&config)
        store.configure(&config)
    }
}

/// Calls a kernel in this process, one request at a time, over a connection of its own.
final class InProcessClient: @unchecked Sendable {
    var connection: Connection
    var id = 0
    init(_ kernel: Kernel) { connection = kernel.connection() }

    /// The response to one request.
    func call(_ method: String, _ params: JSON) -> JSON {
        id += 1
        let request: JSON = ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": .string(method), "params": params]
        connection.receive(request.bytes + [0x0A])
        _ = connection.endBatch()
        defer { connection.output.removeAll() }
        return (try? JSON.parse(Array(connection.output.dropLast()))) ?? .null
    }
}

/// What a finished subprocess left behind.
struct ProcessResult {
    let status: Int32
    let stdout: Data
    let stderr: Data
    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    var stderrText: String { String(decoding: stderr, as: UTF8.self) }
    /// stdout split into lines, each parsed as JSON.
    func responses() throws -> [JSON] {
        try stdoutText.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map { try JSON.parse(String($0)) }
    }
}

/// Runs the real binary with `arguments`, writes `input` to its stdin from another thread, closes it,
/// and collects stdout and stderr.
func runBinary(_ arguments: [String], input: Data = Data(), environment: [String: String] = [:]) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: Paths.binary)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    try process.run()
    let writer = Thread {
        // The throwing write: a child that exits before reading (a start-up failure) is EPIPE here, which
        // `write(_:)` turns into a crash of the whole test process.
        if !input.isEmpty { try? stdin.fileHandleForWriting.write(contentsOf: input) }
        try? stdin.fileHandleForWriting.close()
    }
    writer.start()
    let errBox = DataBox()
    let errReader = Thread { errBox.data = stderr.fileHandleForReading.readDataToEndOfFile() }
    errReader.start()
    let out = stdout.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    while !errBox.done { usleep(1000) }
    return ProcessResult(status: process.terminationStatus, stdout: out, stderr: errBox.data)
}

final class DataBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value = Data()
    private var finished = false
    var data: Data {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue; finished = true } }
    }
    var done: Bool { lock.withLock { finished } }
}

/// Joins request lines into one stdin stream.
func stream(_ lines: [String]) -> Data {
    Data(lines.map { $0 + "\n" }.joined().utf8)
}

/// Waits up to `seconds` for `process` to exit; kills it (SIGKILL) and returns false when it does not,
/// so a hung kernel fails its test instead of hanging the suite.
func waitForExit(_ process: Process, seconds: Double) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning && Date() < deadline { usleep(2000) }
    if process.isRunning {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return false
    }
    return true
}

/// A kernel process whose stdin and stdout the test drives through raw file descriptors.
final class LiveKernel: @unchecked Sendable {
    let process = Process()
    let input: Int32
    let output: Int32
    private var buffer: [UInt8] = []

    init(_ arguments: [String]) throws {
        signal(SIGPIPE, SIG_IGN)  // a killed kernel must show up as EPIPE here, not kill the test runner
        process.executableURL = URL(fileURLWithPath: Paths.binary)
        process.arguments = arguments
        // Pipes made close-on-exec: tests run in parallel, and a kernel spawned by another test while this
        // one starts must not inherit this kernel's stdin write end, or this kernel would see no EOF when
        // `closeInput` closes ours (it hung at exit once in about seven runs under load). The child gets
        // its ends through dup2, which clears the flag.
        func pipe() -> (read: Int32, write: Int32) {
            var fds: [Int32] = [-1, -1]
            precondition(Glibc.pipe(&fds) == 0, "pipe")
            // pipe2(O_CLOEXEC) is not in Swift's Glibc module; the window until fcntl is a few instructions.
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            return (fds[0], fds[1])
        }
        let stdin = pipe(), stdout = pipe()
        process.standardInput = FileHandle(fileDescriptor: stdin.read, closeOnDealloc: false)
        process.standardOutput = FileHandle(fileDescriptor: stdout.write, closeOnDealloc: false)
        process.standardError = FileHandle.nullDevice
        try process.run()
        close(stdin.read)
        close(stdout.write)
        input = stdin.write
        output = stdout.read
    }

    /// Writes lines; false once the kernel is gone.
    @discardableResult
    func send(_ lines: [String]) -> Bool {
        let bytes = Array(lines.map { $0 + "\n" }.joined().utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(input, $0.baseAddress! + offset, $0.count - offset) }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }

    /// The next complete response line, or nil at EOF.
    func readLine() -> JSON? {
        readRawLine(timeoutSeconds: -1).flatMap { try? JSON.parse($0) }
    }

    /// The next complete response line as text, or nil at EOF or after `timeoutSeconds` (-1: no limit)
    /// without one. Only newly read bytes are searched, so a multi-megabyte line costs linear time.
    func readRawLine(timeoutSeconds: Int32) -> String? {
        var searched = 0
        while true {
            if let nl = buffer[searched...].firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[..<nl], as: UTF8.self)
                buffer = Array(buffer[(nl + 1)...])
                return line
            }
            searched = buffer.count
            var fds = [pollfd(fd: output, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 1, timeoutSeconds < 0 ? -1 : timeoutSeconds * 1000) > 0 else { return nil }
            var chunk = [UInt8](repeating: 0, count: 1 << 20)
            let n = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if n <= 0 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }

    /// One request, one response.
    func call(_ method: String, _ params: JSON = [:], id: Int = 1) -> JSON? {
        send([JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", .int(Int64(id))), ("method", .string(method)), ("params", params)])).serialized])
        return readLine()
    }

    func closeInput() { close(input) }

    func kill9() { kill(process.processIdentifier, SIGKILL) }

    /// Waits for exit (killing it after `seconds`); returns the exit status, or nil if it had to be killed.
    func finish(seconds: Double = 30) -> Int32? {
        let exited = waitForExit(process, seconds: seconds)
        close(output)
        return exited && process.terminationReason == .exit ? process.terminationStatus : nil
    }
}

