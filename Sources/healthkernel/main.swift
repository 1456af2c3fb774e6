import ArgumentParser
import Auth
import Chrono
import JSON
import JSONParsing
import JSONRPC
import Kernel
import Postgres
import Logging
import Storage
import Store

#if canImport(Glibc)
import Glibc
#endif

/// The path of this executable (`/proc/self/exe`), for the child processes it runs.
func ownExecutable() -> String? {
    var buffer = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard n > 0 else { return nil }
    return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Exit codes the CLI promises (documented in the README).
enum ExitStatus {
    static let callFailed: Int32 = 1
    static let startupFailed: Int32 = 2
    static let storeDamaged: Int32 = StoreTool.damagedExitStatus
    static let dataDirLocked: Int32 = 4
    static let storageFailed: Int32 = 5
}

/// Options every command that runs a kernel takes. Their help, checks and environment variables come
/// from the kernel's table of settings (`KernelConfig.help(for:)`).
struct KernelOptions: ParsableArguments {
    @Option(help: ArgumentHelp(KernelConfig.help(for: "store.dataDir")))
    var dataDir: String?

    @Flag(help: ArgumentHelp(KernelConfig.help(for: "store.memoryOnly")))
    var memoryOnly = false

    @Option(help: ArgumentHelp(KernelConfig.help(for: "store.url")))
    var store: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "store.schema")))
    var storeSchema: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "store.fsync")))
    var fsync: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "kernel.maxLineBytes")))
    var maxLineBytes: String?

    @Option(help: "JSON configuration file (default: $HEALTHKERNEL_CONFIG).")
    var config: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "kernel.logLevel")))
    var logLevel: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "store.snapshotEveryRecords")))
    var snapshotEveryRecords: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "store.snapshotEverySeconds")))
    var snapshotEverySeconds: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "auth.jwtSecret")))
    var jwtSecret: String?

    @Flag(help: .hidden)
    var enableTestMethods = false

    @Option(help: .hidden)
    var failLogAppendsBeyondBytes: Int?

    /// Test only: shifts the kernel's clock, so a test can let a timer "run" across a restart.
    @Option(help: .hidden)
    var clockOffsetSeconds: Int64 = 0

    /// The merged configuration, or exit 2 with the reason on stderr; `also` are a command's own flags
    /// (`serve --listen`), by setting key.
    func load(also: [(String, String?)] = []) -> KernelConfig {
        var o = ConfigOverrides()
        o.configFile = config
        let given: [(String, String?)] = [
            ("store.dataDir", dataDir), ("store.memoryOnly", memoryOnly ? "true" : nil), ("store.url", store),
            ("store.schema", storeSchema), ("store.fsync", fsync), ("kernel.maxLineBytes", maxLineBytes),
            ("kernel.logLevel", logLevel), ("store.snapshotEveryRecords", snapshotEveryRecords),
            ("store.snapshotEverySeconds", snapshotEverySeconds), ("auth.jwtSecret", jwtSecret),
        ]
        for (key, value) in given + also { o.values[key] = value }
        var config = Self.load(o)
        config.enableTestMethods = enableTestMethods
        config.failLogAppendsBeyondBytes = failLogAppendsBeyondBytes
        return config
    }

    /// The configuration `overrides` and the environment make, or exit 2 with the reason on stderr.
    static func load(_ overrides: ConfigOverrides) -> KernelConfig {
        do {
            return try KernelConfig.load(overrides: overrides, environment: environment(), readFile: readWholeFile)
        } catch {
            fail("healthkernel: \(error.description)", status: ExitStatus.startupFailed)
        }
    }

    /// Starts a kernel, or exits with the status that says why it cannot start.
    func start(_ config: KernelConfig, logger: Logger) -> Kernel {
        Self.start(config, clockOffsetSeconds: clockOffsetSeconds, logger: logger)
    }

    static func start(_ config: KernelConfig, clockOffsetSeconds: Int64 = 0, logger: Logger) -> Kernel {
        var config = config
        config.executable = ownExecutable()
        do {
            return try Kernel(config: config, clock: SystemClock(offsetMilliseconds: clockOffsetSeconds * 1000), logger: logger)
        } catch let error as AuthSetupError {
            fail("healthkernel: \(error)", status: ExitStatus.startupFailed)
        } catch let error as PostgresOpenError {
            fail("healthkernel: \(error)", status: ExitStatus.startupFailed)
        } catch let error as StoreOpenError {
            switch error {
            case .locked: fail("healthkernel: \(error)", status: ExitStatus.dataDirLocked)
            case .damaged: fail("healthkernel: \(error)", status: ExitStatus.storeDamaged)
            case .io: fail("healthkernel: \(error)", status: ExitStatus.startupFailed)
            }
        } catch {
            fail("healthkernel: cannot start: \(error)", status: ExitStatus.startupFailed)
        }
    }
}

struct HealthKernelCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "healthkernel",
        abstract: "Backend kernel for health and wellbeing apps: JSON-RPC 2.0, one request per line, on stdin/stdout.",
        discussion: """
            Spawn `healthkernel serve` from your app and write one JSON-RPC request per line to its stdin; \
            read one response per line from its stdout. Logs go to stderr. \
            `healthkernel call` runs one request for shell scripts.
            """,
        version: KernelVersion.version,
        subcommands: [Serve.self, Call.self, Token.self, Mcp.self, StoreCommand.self, HealthCommand.self, VersionCommand.self],
        defaultSubcommand: Serve.self
    )
}

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve JSON-RPC requests from stdin until EOF, SIGTERM or SIGINT (the default command).",
        discussion: """
            With --listen unix:PATH the kernel also accepts connections on a Unix socket (mode 0600; 0660 with --listen-group), each \
            its own JSON-RPC stream, so several processes share one live kernel and its data dir.
            """
    )

    @OptionGroup var options: KernelOptions

    @Option(help: ArgumentHelp(KernelConfig.help(for: "serve.listen")))
    var listen: String?

    @Flag(help: ArgumentHelp(KernelConfig.help(for: "serve.noStdin")))
    var noStdin = false

    @Option(help: ArgumentHelp(KernelConfig.help(for: "serve.maxUnreadBytes")))
    var maxUnreadBytes: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "serve.maxInputBytes")))
    var maxInputBytes: String?

    @Option(help: ArgumentHelp(KernelConfig.help(for: "serve.ordering")))
    var ordering: String?

    func run() throws {
        let config = options.load(also: [("serve.listen", listen), ("serve.noStdin", noStdin ? "true" : nil),
                                         ("serve.maxUnreadBytes", maxUnreadBytes), ("serve.maxInputBytes", maxInputBytes),
                                         ("serve.ordering", ordering)])
        Self.serve(config, clockOffsetSeconds: options.clockOffsetSeconds)
    }

    /// Serves with `config` until the input ends or a signal stops the kernel.
    static func serve(_ config: KernelConfig, clockOffsetSeconds: Int64 = 0) {
        let (listen, noStdin, ordering) = (config.serve.listen, config.serve.noStdin, config.serve.ordering)
        let (maxUnreadBytes, maxInputBytes) = (config.serve.maxUnreadBytes, config.serve.maxInputBytes)
        if noStdin && listen == nil { fail("healthkernel: --no-stdin needs --listen", status: ExitStatus.startupFailed) }
        let logger = bootstrapLogging(level: config.logLevel)
        let outputFD = StdioServer.protectStdout()
        StdioServer.installSignalHandlers()
        let kernel = KernelOptions.start(config, clockOffsetSeconds: clockOffsetSeconds, logger: logger)
        var inputFD: Int32 = 0
        if noStdin {
            // A pipe nobody writes to: the stdio stream stays open and only a signal ends the kernel.
            var fds: [Int32] = [0, 0]
            _ = pipe(&fds)
            inputFD = fds[0]
        }
        let server = StdioServer(connection: kernel.connection(ordering: ordering), inputFD: inputFD, outputFD: outputFD)
        server.log = { logger.warning("\($0)") }
        kernel.onOtherKernelsChanges(server.wake)
        if let store = kernel.store {
            server.afterWrite = { store.snapshotIfDue() }
            server.mayBusyWait = { !store.isSnapshotRunning }
        }
        var sockets: SocketServer?
        if let listen {
            let lock = ServingLock()
            server.lock = lock
            let socketServer = SocketServer(path: String(listen.dropFirst(5)), lock: lock, maxUnreadBytes: maxUnreadBytes,
                                            maxInputBytes: maxInputBytes, clock: kernel.clock,
                                            makeConnection: { kernel.connection() })
            socketServer.log = { logger.warning("\($0)") }
            socketServer.groupAccess = config.serve.listenGroup
            socketServer.applyBacklog = { kernel.dispatcher.applyBacklog() }
            // The same trigger as stdio's, under the same lock: one owner for snapshots, whichever
            // stream wrote, and one with --no-stdin too (#52 items 2-3).
            if let store = kernel.store { socketServer.afterRound = { store.snapshotIfDue() } }
            socketServer.onStorageFailure = {
                fail("healthkernel: syncing the log failed; stopped so that no further write is acknowledged",
                     status: ExitStatus.storageFailed)
            }
            do {
                try socketServer.start()
            } catch {
                kernel.shutdown()
                fail("healthkernel: \(error)", status: ExitStatus.startupFailed)
            }
            logger.info("listening on \(listen)")
            sockets = socketServer
        }
        let ending = server.run()
        logger.debug("stopping: \(ending)")
        sockets?.stop()
        if ending == .storageFailure {
            fail("healthkernel: syncing the log failed; stopped so that no further write is acknowledged",
                 status: ExitStatus.storageFailed)
        }
        kernel.shutdown()
    }
}

struct Call: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run one request and print its result as JSON; on error print it to stderr and exit 1.",
        discussion: "Example: healthkernel call kernel.info | jq .version"
    )

    @Argument(help: "Method name, e.g. kernel.info.")
    var method: String

    @Argument(help: "Params as a JSON object (default: {}).")
    var params: String?

    @Option(help: "Bearer token, sent as params.auth.")
    var token: String?

    @Option(help: "Send the request to the kernel listening on this Unix socket (unix:PATH or PATH) instead of opening the data dir.")
    var connect: String?

    @Option(help: "With --connect: how long to keep trying while the socket does not exist yet or nobody accepts on it (seconds).")
    var connectWait: Double = 5

    @OptionGroup var options: KernelOptions

    func run() throws {
        if let connect {
            return callThroughSocket(connect.hasPrefix("unix:") ? String(connect.dropFirst(5)) : connect)
        }
        let config = options.load()
        let logger = bootstrapLogging(level: config.logLevel)
        let request = requestLine()
        let kernel = options.start(config, logger: logger)
        var connection = kernel.connection()
        let (out, fatal) = connection.exchange(request)
        if fatal { fail("healthkernel call: syncing the log failed", status: ExitStatus.storageFailed) }
        connection.close()
        kernel.shutdown()
        printResponse(out)
    }

    /// The request as one line.
    func requestLine() -> [UInt8] {
        let request: JSON = ["jsonrpc": "2.0", "id": 1, "method": .string(method), "params": .object(requestParams())]
        return request.bytes + [UInt8(ascii: "\n")]
    }

    /// The params given, with the token as `auth`.
    func requestParams() -> JSONObject {
        var paramsObject = JSONObject()
        if let params {
            guard case .object(let o)? = try? JSON.parse(params) else {
                fail("healthkernel call: PARAMS_JSON must be a JSON object", status: ExitStatus.startupFailed)
            }
            paramsObject = o
        }
        if let token { paramsObject["auth"] = .string(token) }
        return paramsObject
    }

    /// Sends the request to a live kernel's socket and prints its answer.
    func callThroughSocket(_ path: String) {
        let link: SocketLink
        do {
            link = try SocketLink(path: path, waitSeconds: connectWait, command: "healthkernel call")
        } catch {
            fail("healthkernel call: \(error)", status: ExitStatus.callFailed)
        }
        let response = link.call(method, requestParams())
        link.close()
        printResponse(response == .null ? [] : response.bytes)
    }

    /// Prints a response's result, or its error on stderr with exit status 1.
    func printResponse(_ out: [UInt8]) {
        guard let response = try? JSON.parse(out) else { fail("healthkernel call: no response", status: ExitStatus.callFailed) }
        if let result = response["result"] {
            writeStdout(result.serialized + "\n")
        } else {
            let error = response["error"] ?? .null
            fail("healthkernel call: error \(error.serialized)", status: ExitStatus.callFailed)
        }
    }
}

struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print an access token signed with the data dir's secret (for scripts, development and service use).",
        discussion: """
            Examples: TOKEN=$(healthkernel token --user 3f1c...); healthkernel call auth.user --token "$TOKEN"
            healthkernel token --role service_role   (a service token, for kernel.snapshot)
            """
    )

    @Option(help: "The user: a user id (UUID), or the email of an existing account (needs the data dir unlocked).")
    var user: String?

    @Option(help: "authenticated (default) or service_role.")
    var role: String = "authenticated"

    @Option(help: "Lifetime in seconds.")
    var ttl: Int = 3600

    @OptionGroup var options: KernelOptions

    func run() throws {
        guard role == "authenticated" || role == "service_role" else {
            fail("healthkernel token: --role must be authenticated or service_role", status: ExitStatus.startupFailed)
        }
        guard (60...31_536_000).contains(ttl) else {
            fail("healthkernel token: --ttl must be 60 to 31536000 seconds", status: ExitStatus.startupFailed)
        }
        let config = options.load()
        if config.memoryOnly && config.auth.jwtSecret == nil {
            fail("healthkernel token: a memory-only kernel makes a new secret each run; pass --jwt-secret", status: ExitStatus.startupFailed)
        }
        var subject: String?
        if let user {
            if let id = Identifiers.canonicalUUID(user) {
                subject = id
            } else {
                let kernel = options.start(config, logger: bootstrapLogging(level: config.logLevel))
                guard let id = try? kernel.auth.userID(forEmail: user) else {
                    fail("healthkernel token: no account with that email", status: ExitStatus.callFailed)
                }
                subject = id
                kernel.shutdown()
            }
        } else if role == "authenticated" {
            fail("healthkernel token: --user is required for a user token", status: ExitStatus.startupFailed)
        }
        let secret: [UInt8]
        do {
            if !config.memoryOnly, case .failure(let e) = DataDirAccess.prepare(config.dataDir) { throw AuthSetupError(e.description) }
            secret = try JWTSecret.resolve(configured: config.auth.jwtSecret, dataDir: config.memoryOnly ? nil : config.dataDir)
        } catch {
            fail("healthkernel token: \(error)", status: ExitStatus.startupFailed)
        }
        let token = try TokenMinter(secret: secret, ttl: ttl).mint(sub: subject, role: role, now: SystemClock().now())
        writeStdout(token + "\n")
    }
}

struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Look into or repair a data dir offline; move data between a data dir and PostgreSQL; bring a PostgreSQL schema to this binary's version.",
        subcommands: [Inspect.self, Verify.self, Export.self, Import.self, Repair.self, Migrate.self]
    )

    struct DirOption: ParsableArguments {
        @Option(help: "The data dir.")
        var dataDir: String = "data"
    }

    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a JSON summary: snapshot, log segments, last seq, damage.")
        @OptionGroup var dir: DirOption
        func run() throws { writeStdout(StoreTool.inspect(dir.dataDir).serialized + "\n") }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check every record's checksum and sequence; exit 0 when intact, 3 when damaged.")
        @OptionGroup var dir: DirOption
        func run() throws {
            let (status, report) = StoreTool.verify(dir.dataDir)
            writeStdout(report.joined(separator: "\n") + "\n")
            if status != 0 { throw ExitCode(status) }
        }
    }

    struct Export: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every row as JSON lines (for jq, or for store import): of a data dir, its snapshot rows and log records; of PostgreSQL (--store or store.url, no --data-dir), its rows and unique keys.")
        @OptionGroup var options: KernelOptions

        func run() throws {
            var buffer = ""
            var trailer = ExportTrailer()
            let emit = { (line: JSON) in
                let text = line.serialized
                trailer.add(Array(text.utf8))
                buffer += text + "\n"
                if buffer.utf8.count > 1 << 16 { writeStdout(buffer); buffer = "" }
            }
            let config = options.load()
            if options.dataDir == nil, config.storeURL != nil {
                let kernel = options.start(config, logger: bootstrapLogging(level: config.logLevel))
                defer { kernel.shutdown() }
                do {
                    try kernel.exportRows(emit)
                } catch {
                    fail("healthkernel store export: \(error)", status: ExitStatus.startupFailed)
                }
                writeStdout(buffer + trailer.line.serialized + "\n")
                return
            }
            let damage = StoreTool.export(options.dataDir ?? "data", emit: emit)
            // A damaged store's export has no end line: store import refuses it as cut short.
            writeStdout(damage == nil ? buffer + trailer.line.serialized + "\n" : buffer)
            if let damage { fail("healthkernel store export: \(damage)", status: ExitStatus.storeDamaged) }
        }
    }

    struct Import: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Read store export lines from stdin into an empty store: PostgreSQL (--store or store.url) or a data dir.",
            discussion: "Example: healthkernel store export --data-dir data | healthkernel store import --store postgres://... "
                + "Every line is checked before any is applied; a file with a bad line is refused whole. Each user's feed "
                + "positions and their order move along, so clients' cursors keep working. Prints {\"imported\": N}.")
        @OptionGroup var options: KernelOptions

        func run() throws {
            let config = options.load()
            guard !config.memoryOnly else {
                fail("healthkernel store import: --memory-only would keep nothing", status: ExitStatus.startupFailed)
            }
            let kernel = options.start(config, logger: bootstrapLogging(level: config.logLevel))
            defer { kernel.shutdown() }
            do {
                try kernel.checkImportTarget()
                // First pass: every line checked, and kept in an unlinked temporary file; nothing is
                // applied unless all of them pass, so a refused file leaves the store empty.
                var template = Array("\(getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp")/healthkernel-import-XXXXXX".utf8CString)
                let spool = mkstemp(&template)
                guard spool >= 0 else { throw MoveError("cannot make a temporary file to hold the lines: \(String(cString: strerror(errno)))") }
                unlink(String(cString: template))
                defer { close(spool) }
                var check = kernel.importCheck()
                var trailer = ExportTrailer(), ended = false
                var lines = FileLines(fd: 0, maxLineBytes: FileLines.maxImportLine), lineNumber = 0
                while let bytes = try lines.next() {
                    lineNumber += 1
                    guard !ended else { throw MoveError("line \(lineNumber) comes after the export's end line; nothing was imported") }
                    let line: JSON
                    do { line = try JSON.parseAllowingNul(bytes) } catch { throw MoveError("line \(lineNumber) is not JSON: \(error)") }
                    if line["type"]?.stringValue == ExportTrailer.type {
                        do { try trailer.check(line) } catch { throw MoveError("line \(lineNumber): \(error); nothing was imported") }
                        ended = true
                        continue
                    }
                    do { try check.line(line) } catch { throw MoveError("line \(lineNumber): \(error); nothing was imported") }
                    trailer.add(bytes)
                    guard writeAll(spool, bytes + [0x0A]) else { throw MoveError("cannot write the temporary file: \(String(cString: strerror(errno)))") }
                }
                guard ended else {
                    throw MoveError("the input ends after \(lineNumber) lines without the export's end line: it was cut short "
                        + "(or made by a kernel before 0.3.0: export it again); nothing was imported")
                }
                do { try check.finish() } catch { throw MoveError("\(error); nothing was imported") }
                guard lseek(spool, 0, SEEK_SET) == 0 else { throw MoveError("cannot read the temporary file back") }
                var checked = FileLines(fd: spool, maxLineBytes: FileLines.maxImportLine)
                let count = try kernel.importRows {
                    guard let bytes = try checked.next() else { return nil }
                    return try JSON.parseAllowingNul(bytes)
                }
                writeStdout(#"{"imported":\#(count)}"# + "\n")
            } catch {
                kernel.shutdown()
                fail("healthkernel store import: \(error)", status: ExitStatus.startupFailed)
            }
        }
    }

    struct Repair: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Move damaged parts aside (*.broken), keeping every record before the damage.")
        @OptionGroup var dir: DirOption
        func run() throws {
            do {
                let actions = try StoreTool.repair(dir.dataDir)
                writeStdout((actions.isEmpty ? ["nothing to repair"] : actions).joined(separator: "\n") + "\n")
            } catch {
                let status = if case .locked = error { ExitStatus.dataDirLocked } else { ExitStatus.startupFailed }
                fail("healthkernel store repair: \(error)", status: status)
            }
        }
    }
}

extension StoreCommand {
    struct Migrate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create or upgrade the PostgreSQL schema (--store or store.url) and print its versions as JSON.",
            discussion: "Kernels migrate at start too; this runs it ahead, e.g. in a deploy step. Exit 2 when the "
                + "database is unreachable or its schema is newer than this binary.")
        @OptionGroup var options: KernelOptions

        func run() throws {
            let config = options.load()
            let logger = bootstrapLogging(level: config.logLevel)
            guard let postgres = config.postgresOptions else {
                fail("healthkernel store migrate: no PostgreSQL URL (--store, HEALTHKERNEL_STORE_URL or store.url)",
                     status: ExitStatus.startupFailed)
            }
            do {
                let store = try PostgresStore(options: postgres, clock: SystemClock(), log: { logger.warning("\($0)") })
                defer { store.shutdown() }
                let out: JSON = ["schema": .string(config.storeSchema), "from": .int(Int64(store.migration.from)),
                                 "to": .int(Int64(store.migration.to))]
                writeStdout(out.serialized + "\n")
            } catch {
                fail("healthkernel store migrate: \(error)", status: ExitStatus.startupFailed)
            }
        }
    }
}

struct VersionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "version", abstract: "Print the kernel and protocol versions.")

    static let line = "healthkernel \(KernelVersion.version) (protocol \(KernelVersion.protocolVersion))\n"

    func run() throws { writeStdout(Self.line) }
}

/// Sends swift-log output to stderr at `level`.
func bootstrapLogging(level: String) -> Logger {
    let parsed = Logger.Level(rawValue: level) ?? .info
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = parsed
        return handler
    }
    return Logger(label: "healthkernel")
}

/// Writes text to stdout with write(2): the CLI's only way to print results.
func writeStdout(_ text: String) {
    var bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeMutableBytes { write(1, $0.baseAddress! + offset, $0.count - offset) }
        if n <= 0 { if errno == EINTR { continue } else { return } }
        offset += n
    }
}

/// Prints `message` to stderr and exits with `status`.
func fail(_ message: String, status: Int32) -> Never {
    let line = Array((message + "\n").utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress!, $0.count) }
    exit(status)
}

func environment() -> [String: String] {
    var env: [String: String] = [:]
    var p = environ
    while let entry = p.pointee {
        let s = String(cString: entry)
        if let eq = s.firstIndex(of: "=") { env[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
        p += 1
    }
    return env
}

func readWholeFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 { if errno == EINTR { continue } else { return nil } }
        if n == 0 { return out }
        out.append(contentsOf: buf[0..<n])
    }
}

// `healthkernel version` alone is answered before the argument parser is built: building it looks up
// protocol conformances by scanning every conformance record of the binary, which took two thirds of
// this command's time (4.9 ms, against 0.7 ms for /bin/true). Any other arguments go to the parser.
if CommandLine.arguments.dropFirst().elementsEqual(["version"]) {
    writeStdout(VersionCommand.line)
    exit(0)
}
// The same for `serve` when every argument is a flag of the settings table (QuickServe says why).
if let overrides = QuickServe.overrides(CommandLine.arguments.dropFirst()) {
    Serve.serve(KernelOptions.load(overrides))
    exit(0)
}
HealthKernelCommand.main()

extension ResponseOrdering: ExpressibleByArgument {}

/// Lines of a file descriptor (stdin, the import spool), read in large blocks straight from it (bytes as
/// read: invalid UTF-8 is not replaced). The search for a newline resumes where it stopped, so a line
/// costs O(its length) however many blocks it spans, and a line longer than `maxLineBytes` is refused
/// with its number instead of being held.
struct FileLines {
    let fd: Int32
    let maxLineBytes: Int
    private var buffer: [UInt8] = []
    private var start = 0
    /// Where the search for the next newline goes on: bytes before it hold none.
    private var scanned = 0
    private var ended = false
    private var number = 0

    /// `store import`'s bound: a data dir's log record holds one commit's changes, and a commit holds at
    /// most a batch of requests, each at most `kernel.maxLineBytes`.
    static let maxImportLine = 256 << 20

    init(fd: Int32, maxLineBytes: Int) {
        self.fd = fd
        self.maxLineBytes = maxLineBytes
    }

    /// The next line without its newline, or nil at EOF.
    mutating func next() throws(MoveError) -> [UInt8]? {
        while true {
            if let nl = buffer[max(start, scanned)...].firstIndex(of: 0x0A) {
                defer { start = nl + 1; scanned = start; number += 1 }
                guard nl - start <= maxLineBytes else { throw tooLong() }
                return Array(buffer[start..<nl])
            }
            scanned = buffer.count
            guard buffer.count - start <= maxLineBytes else { throw tooLong() }
            if ended {
                guard start < buffer.count else { return nil }
                defer { start = buffer.count; number += 1 }
                return Array(buffer[start...])
            }
            // Only what was taken goes (removing nothing would still move the whole buffer).
            if start > 0 {
                buffer.removeFirst(start)
                scanned -= start
                start = 0
            }
            let n = block.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { ended = true } else { buffer.append(contentsOf: block[0..<n]) }
        }
    }

    /// What one read fills, kept from read to read.
    private var block = [UInt8](repeating: 0, count: 1 << 20)

    private func tooLong() -> MoveError { MoveError("line \(number + 1) is longer than \(maxLineBytes >> 20) MiB; nothing was imported") }

}

/// Writes all of `bytes` to `fd` (retrying short writes and EINTR); false on an error.
func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var done = 0
    while done < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return false }
        done += n
    }
    return true
}
