import Storage
import Auth
import JSON
import JSONRPC
import Store
import JSONParsing
import DomainSupport

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
    /// `storeURL` is a transaction-mode pooler (`store.pooler`).
    public var storePooler = false
    /// A direct URL for change notifications when `storeURL` is a pooler (`store.listenUrl`).
    public var storeListenURL: String?
    /// Durability of acknowledged writes.
    public var fsync: FsyncMode = .standard
    /// Longest request line accepted, in bytes.
    public var maxLineBytes = 16 * 1024 * 1024
    /// The longest answer: the line limit, but never below 256 KiB, so that a kernel reading short
    /// requests (a tight `--max-line-bytes`) still answers `kernel.info` and ordinary reads.
    public var maxAnswerBytes: Int { max(maxLineBytes, 256 << 10) }
    /// swift-log level name for stderr logging.
    public var logLevel = "info"
    /// Snapshot after this many log records.
    public var snapshotEveryRecords = 100_000
    /// Changes from which one request's write is big (`Transaction.bigUnit`).
    public var bigUnitEntries = Transaction.bigUnit
    /// Snapshot this many seconds after the first change since the last one (0: never by time).
    public var snapshotEverySeconds = 300
    /// Snapshot once this many bytes of log follow the last one (0: never by size).
    public var snapshotEveryBytes = 64 << 20
    /// Register the test-only methods (`test.write`, `test.dump`); off unless a test asks.
    public var enableTestMethods = false
    /// Accounts, tokens and identity providers.
    public var auth = AuthConfig()
    /// What one user may ask and keep.
    public var limits = UserLimits()
    /// How `healthkernel serve` serves (`serve` section, or its flags).
    public var serve = ServeSettings()
    /// The `healthkernel` executable this kernel runs as, when it is one (not a setting: a fact the
    /// executable states), for the imports `health.importExport` runs as child processes.
    public var executable: String?
    /// Each domain's own configuration (say Screen Time's tolerance, penalty and exchange rates).
    public var domains = DomainConfigs()
    /// Test hook: log appends fail with ENOSPC past this many bytes (for machines without a tiny tmpfs).
    public var failLogAppendsBeyondBytes: Int?
    /// Test hook: file operations of the data dir that fail, or are watched (crash tests).
    public var storeFaults: FaultInjector?
    /// Test hook: log segments start afresh past this size (default 64 MiB).
    public var segmentBytes: Int?

    /// The defaults.
    public init() {}
}

/// A configuration problem that stops start-up; the message names the key.
public struct ConfigError: Error, CustomStringConvertible, Equatable {
    public let description: String
    /// An error with a message.
    public init(_ description: String) { self.description = description }
}

/// Command-line values, by setting key (`store.fsync`: see `Setting.all`); absent where the flag was
/// not given.
public struct ConfigOverrides: Sendable {
    public var configFile: String?
    public var values: [String: String] = [:]
    /// No overrides.
    public init() {}
}

extension KernelConfig {
    /// `--help` text of a setting (`store.fsync`): summary, default and environment variable.
    public static func help(for key: String) -> String { Setting.help(key) }

    /// The setting a long flag sets (`fsync`: `store.fsync`), and whether the flag is a switch (takes
    /// no value); nil for a flag no setting has.
    public static func setting(forFlag flag: String) -> (key: String, isSwitch: Bool)? {
        Setting.byFlag[flag].map { ($0.key, { if case .boolean = $0.kind { true } else { false } }($0)) }
    }

    /// The long flag of a setting, for messages (`store.fsync`: `--fsync`).
    static func flag(_ key: String) -> String { Setting.byKey[key]?.flag.map { "--" + $0 } ?? key }

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
        try config.applyDomains(environment: environment, readFile: readFile)
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
            // One reader a section: its rows first (so the structured part can check what they set),
            // then the module that reads its values with members, then one check for unknown keys.
            let structured = Kernel.domains.flatMap(\.sections).filter { !Setting.sections.contains($0) }
            for section in Setting.sections + structured where top.has(section) {
                var reader = try top.object(section)
                for setting in Setting.all where setting.section == section {
                    if let value = try setting.read(&reader, files: files) { setting.apply(&self, value) }
                }
                if section == "auth" { try auth.readStructured(&reader, resolve: { files.resolve($0) }) }
                for domain in Kernel.domains where domain.sections.contains(section) {
                    try domain.readSection(section, &reader, files, &domains)
                }
                try reader.finish()
            }
            try top.finish()
        } catch {
            let what = error.reason == "unknown_field" ? "unknown key" : "bad value for"
            throw ConfigError("config file \(path): \(what) \(error.field.dropFirst("config.".count)): \(error.message)")
        }
    }

    mutating func apply(environment env: [String: String]) throws(ConfigError) {
        for setting in Setting.all {
            guard let name = setting.environment, let text = env[name] else { continue }
            setting.apply(&self, try setting.parse(text, source: name))
        }
    }

    /// The domains' own variables (`HEALTHKERNEL_APPSTORE_KEY`), and their checks of what must be set.
    mutating func applyDomains(environment env: [String: String], readFile: (String) -> [UInt8]?) throws(ConfigError) {
        for domain in Kernel.domains {
            do throws(FieldError) {
                try domain.readEnvironment(env, readFile, &domains)
            } catch {
                throw ConfigError(error.message)
            }
        }
    }

    mutating func apply(overrides o: ConfigOverrides) throws(ConfigError) {
        for setting in Setting.all {
            guard let text = o.values[setting.key] else { continue }
            setting.apply(&self, try setting.parse(text, source: Self.flag(setting.key)))
        }
        if let unknown = o.values.keys.first(where: { Setting.byKey[$0] == nil }) {
            throw ConfigError("no setting \(unknown)")
        }
    }
}

/// How `healthkernel serve` serves, beside stdin.
public struct ServeSettings: Sendable, Equatable {
    /// `unix:PATH`: also serve connections on a Unix socket.
    public var listen: String?
    /// Serve only `listen` connections, not stdin.
    public var noStdin = false
    /// The `listen` socket is 0660, not 0600: members of the kernel's group may connect too.
    public var listenGroup = false
    /// A socket connection whose unread answers and events pass this many bytes is cut.
    public var maxUnreadBytes = 64 << 20
    /// While all socket connections' unfinished request lines hold more than this many bytes, the one
    /// with the longest is cut.
    public var maxInputBytes = 256 << 20
    /// The order of responses on stdout.
    public var ordering = ResponseOrdering.read

    public init() {}
}
