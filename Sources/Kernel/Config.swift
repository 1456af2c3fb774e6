import Auth
import JSON
import JSONParsing
import DomainSupport
import Store

/// Everything the kernel is configured with, after file, environment and flags were merged in that order.
public struct KernelConfig: Sendable, Equatable {
    /// Where the store keeps its files; ignored when `memoryOnly`.
    public var dataDir: String = "data"
    /// Keep everything in memory and write no files.
    public var memoryOnly = false
    /// PostgreSQL instead of the data dir (`store.url`, `HEALTHKERNEL_STORE_URL`, `--store`).
    public var storeURL: String?
    /// The PostgreSQL schema every object lives in.
    public var storeSchema = "healthkernel"
    /// How long start-up retries an unreachable PostgreSQL.
    public var storeConnectTimeoutSeconds = 30
    /// Durability of acknowledged writes.
    public var fsync: FsyncMode = .always
    /// Longest request line accepted, in bytes.
    public var maxLineBytes = 16 * 1024 * 1024
    /// The longest answer: the line limit, but never below 64 KiB, so that a kernel reading short
    /// requests (a tight `--max-line-bytes`) still answers `kernel.info` and ordinary reads.
    public var maxAnswerBytes: Int { max(maxLineBytes, 64 << 10) }
    /// swift-log level name for stderr logging.
    public var logLevel = "info"
    /// Snapshot after this many log records.
    public var snapshotEveryRecords = 100_000
    /// Snapshot this many seconds after the first change since the last one (0: never by time).
    public var snapshotEverySeconds = 300
    /// Register the test-only methods (`test.write`, `test.dump`); off unless a test asks.
    public var enableTestMethods = false
    /// Accounts, tokens and identity providers.
    public var auth = AuthConfig()
    /// What one user may ask and keep.
    public var limits = UserLimits()
    /// Each domain's own configuration (say Screen Time's tolerance, penalty and exchange rates).
    public var domains = DomainConfigs()
    /// Test hook: log appends fail with ENOSPC past this many bytes (for machines without a tiny tmpfs).
    public var failLogAppendsBeyondBytes: Int?

    /// The defaults.
    public init() {}
}

/// A configuration problem that stops start-up; the message names the key.
public struct ConfigError: Error, CustomStringConvertible, Equatable {
    public let description: String
    /// An error with a message.
    public init(_ description: String) { self.description = description }
}

/// Command-line values; nil where the flag was not given.
public struct ConfigOverrides: Sendable {
    public var configFile: String?
    public var dataDir: String?
    public var memoryOnly: Bool?
    public var storeURL: String?
    public var fsync: String?
    public var maxLineBytes: Int?
    public var logLevel: String?
    public var snapshotEveryRecords: Int?
    public var snapshotEverySeconds: Int?
    public var jwtSecret: String?
    /// No overrides.
    public init() {}
}

extension KernelConfig {
    static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]

    /// Builds the configuration: the JSON file (`--config`, else `HEALTHKERNEL_CONFIG`), then the
    /// `HEALTHKERNEL_*` environment variables, then flags. `readFile` returns a file's bytes or nil.
    public static func load(overrides: ConfigOverrides, environment: [String: String],
                            readFile: @escaping (String) -> [UInt8]?) throws(ConfigError) -> KernelConfig {
        var config = KernelConfig()
        if let path = overrides.configFile ?? environment["HEALTHKERNEL_CONFIG"] {
            guard let bytes = readFile(path) else { throw ConfigError("cannot read config file \(path)") }
            try config.apply(fileBytes: bytes, path: path, readFile: readFile)
        }
        try config.apply(environment: environment)
        try config.apply(overrides: overrides)
        return config
    }

    /// Applies a config file's contents; unknown keys and wrong types are errors naming the key.
    mutating func apply(fileBytes: [UInt8], path: String, readFile: @escaping (String) -> [UInt8]?) throws(ConfigError) {
        let root: JSON
        do {
            root = try JSON.parse(fileBytes)
        } catch {
            throw ConfigError("config file \(path) is not valid JSON: \(error.message)")
        }
        guard case .object(let object) = root else { throw ConfigError("config file \(path) must hold a JSON object") }
        do throws(FieldError) {
            var top = ObjectReader(object, path: "config")
            let files = ConfigFiles(configPath: path, readFile: readFile)
            if top.has("kernel") {
                var kernel = try top.object("kernel")
                if let v = try kernel.optional("maxLineBytes", in: 1...Int64(Int32.max)) { maxLineBytes = Int(v) }
                if let v: String = try kernel.optional("logLevel") {
                    guard Self.logLevels.contains(v) else {
                        throw FieldError.outOfRange(kernel.path("logLevel"), "must be one of \(Self.logLevels.joined(separator: ", "))")
                    }
                    logLevel = v
                }
                try kernel.finish()
            }
            if top.has("auth") {
                var auth = try top.object("auth")
                self.auth = try AuthConfig.read(&auth, resolve: { files.resolve($0) })
            }
            if top.has("limits") {
                var section = try top.object("limits")
                try limits.read(&section)
            }
            for domain in Kernel.domains {
                for name in domain.sections where top.has(name) {
                    var section = try top.object(name)
                    try domain.readSection(name, &section, files, &domains)
                }
            }
            if top.has("store") {
                var store = try top.object("store")
                if let v: String = try store.optional("dataDir") { dataDir = files.resolve(v) }
                if let v: Bool = try store.optional("memoryOnly") { memoryOnly = v }
                if let v: String = try store.optional("url") { storeURL = v }
                if let v: String = try store.optional("schema") {
                    guard !v.isEmpty, v.utf8.count <= 63, !v.hasPrefix("pg_") else {
                        throw FieldError.outOfRange(store.path("schema"), "must be 1 to 63 bytes and not start with pg_")
                    }
                    storeSchema = v
                }
                if let v = try store.optional("connectTimeoutSeconds", in: 0...3600) { storeConnectTimeoutSeconds = Int(v) }
                if let v: String = try store.optional("fsync") {
                    guard let mode = FsyncMode(rawValue: v) else {
                        throw FieldError.outOfRange(store.path("fsync"), "must be always, everysec or never")
                    }
                    fsync = mode
                }
                if let v = try store.optional("snapshotEveryRecords", in: 1...Int64(Int32.max)) { snapshotEveryRecords = Int(v) }
                if let v = try store.optional("snapshotEverySeconds", in: 0...Int64(Int32.max)) { snapshotEverySeconds = Int(v) }
                try store.finish()
            }
            try top.finish()
        } catch {
            let what = error.reason == "unknown_field" ? "unknown key" : "bad value for"
            throw ConfigError("config file \(path): \(what) \(error.field.dropFirst("config.".count)): \(error.message)")
        }
    }

    mutating func apply(environment env: [String: String]) throws(ConfigError) {
        if let v = env["HEALTHKERNEL_DATA_DIR"] { dataDir = v }
        if let v = env["HEALTHKERNEL_STORE_URL"], !v.isEmpty { storeURL = v }
        if let v = env["HEALTHKERNEL_MEMORY_ONLY"] {
            guard let b = ["1": true, "true": true, "0": false, "false": false][v] else {
                throw ConfigError("HEALTHKERNEL_MEMORY_ONLY must be true or false")
            }
            memoryOnly = b
        }
        if let v = env["HEALTHKERNEL_FSYNC"] { try setFsync(v, source: "HEALTHKERNEL_FSYNC") }
        if let v = env["HEALTHKERNEL_MAX_LINE_BYTES"] { try setMaxLineBytes(Int(v), source: "HEALTHKERNEL_MAX_LINE_BYTES") }
        if let v = env["HEALTHKERNEL_LOG_LEVEL"] { try setLogLevel(v, source: "HEALTHKERNEL_LOG_LEVEL") }
        if let v = env["HEALTHKERNEL_JWT_SECRET"] { try setJWTSecret(v, source: "HEALTHKERNEL_JWT_SECRET") }
    }

    mutating func apply(overrides o: ConfigOverrides) throws(ConfigError) {
        if let v = o.dataDir { dataDir = v }
        if let v = o.memoryOnly { memoryOnly = v }
        if let v = o.storeURL { storeURL = v }
        if let v = o.fsync { try setFsync(v, source: "--fsync") }
        if let v = o.maxLineBytes { try setMaxLineBytes(v, source: "--max-line-bytes") }
        if let v = o.logLevel { try setLogLevel(v, source: "--log-level") }
        if let v = o.jwtSecret { try setJWTSecret(v, source: "--jwt-secret") }
        if let v = o.snapshotEveryRecords {
            guard v >= 1 else { throw ConfigError("--snapshot-every-records must be 1 or more") }
            snapshotEveryRecords = v
        }
        if let v = o.snapshotEverySeconds {
            guard v >= 0 else { throw ConfigError("--snapshot-every-seconds must be 0 or more") }
            snapshotEverySeconds = v
        }
    }

    private mutating func setFsync(_ v: String, source: String) throws(ConfigError) {
        guard let mode = FsyncMode(rawValue: v) else { throw ConfigError("\(source) must be always, everysec or never") }
        fsync = mode
    }

    private mutating func setMaxLineBytes(_ v: Int?, source: String) throws(ConfigError) {
        guard let v, v >= 1, v <= Int(Int32.max) else { throw ConfigError("\(source) must be a whole number of bytes, 1 or more") }
        maxLineBytes = v
    }

    private mutating func setJWTSecret(_ v: String, source: String) throws(ConfigError) {
        guard v.utf8.count >= 32 else { throw ConfigError("\(source) must be at least 32 bytes") }
        auth.jwtSecret = v
    }

    private mutating func setLogLevel(_ v: String, source: String) throws(ConfigError) {
        guard Self.logLevels.contains(v) else {
            throw ConfigError("\(source) must be one of \(Self.logLevels.joined(separator: ", "))")
        }
        logLevel = v
    }
}
