import Auth
import DomainSupport
import JSON
import Store

/// The kernel's own settings, one row each (as redis keeps its config): the config file key, its type
/// and check, its default, the environment variable and the command-line flag that also set it, and
/// where it lands in `KernelConfig`. File, environment and flags all go through the row, so a setting
/// is checked in one place and every source names it the same way. The domains' sections (`screentime`,
/// `appStore`, ...), `auth` and `limits` are read by their own modules.
struct Setting: Sendable {
    /// What a value may be.
    enum Kind: Sendable {
        case text
        /// A path, relative to the config file's folder when it comes from the file.
        case path
        case integer(ClosedRange<Int64>)
        case boolean
        case oneOf([String])
    }

    /// A value, from any source.
    enum Value {
        case text(String)
        case integer(Int64)
        case boolean(Bool)

        var text: String { if case .text(let s) = self { return s }; return "" }
        var integer: Int { if case .integer(let i) = self { return Int(i) }; return 0 }
        var boolean: Bool { if case .boolean(let b) = self { return b }; return false }
    }

    /// `section.name` in the config file.
    let key: String
    let kind: Kind
    /// The default, as the README and `--help` show it.
    let defaultValue: String
    let environment: String?
    /// Long flag without its dashes.
    let flag: String?
    /// For `--help`.
    let summary: String
    /// Whether the config file key is read here (`auth.jwtSecret` is read with the rest of `auth`).
    var inFile = true
    /// A check beyond the kind: the message when the value is refused.
    var check: @Sendable (Value) -> String? = { _ in nil }
    let apply: @Sendable (inout KernelConfig, Value) -> Void

    var section: Substring { key.prefix { $0 != "." } }
    var name: Substring { key.drop { $0 != "." }.dropFirst() }

    /// What the value must be, for messages.
    var expectation: String {
        switch kind {
        case .text, .path: return "a string"
        case .integer(let r): return "a whole number from \(r.lowerBound) to \(r.upperBound)"
        case .boolean: return "true or false"
        case .oneOf(let values): return "one of \(values.joined(separator: ", "))"
        }
    }

    /// A value from the environment or the command line (`source` names it in the error).
    func parse(_ text: String, source: String) throws(ConfigError) -> Value {
        let value: Value
        switch kind {
        case .text, .path: value = .text(text)
        case .integer(let range):
            guard let i = Int64(text), range.contains(i) else { throw ConfigError("\(source) must be \(expectation)") }
            value = .integer(i)
        case .boolean:
            guard let b = ["1": true, "true": true, "0": false, "false": false][text] else { throw ConfigError("\(source) must be \(expectation)") }
            value = .boolean(b)
        case .oneOf(let values):
            guard values.contains(text) else { throw ConfigError("\(source) must be \(expectation)") }
            value = .text(text)
        }
        if let problem = check(value) { throw ConfigError("\(source) \(problem)") }
        return value
    }

    /// The value of this setting in a config file section, if present (errors name the field).
    func read(_ section: inout ObjectReader, files: ConfigFiles) throws(FieldError) -> Value? {
        let n = String(name)
        let value: Value
        switch kind {
        case .text:
            guard let s: String = try section.optional(n) else { return nil }
            value = .text(s)
        case .path:
            guard let s: String = try section.optional(n) else { return nil }
            value = .text(files.resolve(s))
        case .integer(let range):
            guard let i = try section.optional(n, in: range) else { return nil }
            value = .integer(i)
        case .boolean:
            guard let b: Bool = try section.optional(n) else { return nil }
            value = .boolean(b)
        case .oneOf(let values):
            guard let s: String = try section.optional(n) else { return nil }
            guard values.contains(s) else { throw FieldError.outOfRange(section.path(n), "must be \(expectation)") }
            value = .text(s)
        }
        if let problem = check(value) { throw FieldError.outOfRange(section.path(n), problem) }
        return value
    }
}

extension Setting {
    static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
    static let int32 = Int64(1)...Int64(Int32.max)

    /// Every setting of the kernel's own, in the order `--help` and the README list them.
    static let all: [Setting] = [
        Setting(key: "store.dataDir", kind: .path, defaultValue: "data", environment: "HEALTHKERNEL_DATA_DIR", flag: "data-dir",
                summary: "Folder for the store's files.", apply: { $0.dataDir = $1.text }),
        Setting(key: "store.memoryOnly", kind: .boolean, defaultValue: "false", environment: "HEALTHKERNEL_MEMORY_ONLY",
                flag: "memory-only", summary: "Keep everything in memory; write no files.", apply: { $0.memoryOnly = $1.boolean }),
        Setting(key: "store.url", kind: .text, defaultValue: "none", environment: "HEALTHKERNEL_STORE_URL", flag: "store",
                summary: "PostgreSQL URL (postgres://user@host/db): store everything there instead of the data dir.",
                apply: { $0.storeURL = $1.text.isEmpty ? $0.storeURL : $1.text }),
        Setting(key: "store.schema", kind: .text, defaultValue: "healthkernel", environment: "HEALTHKERNEL_STORE_SCHEMA",
                flag: "store-schema", summary: "The PostgreSQL schema every object lives in.",
                check: { v in
                    let s = v.text
                    return !s.isEmpty && s.utf8.count <= 63 && !s.hasPrefix("pg_") ? nil : "must be 1 to 63 bytes and not start with pg_"
                },
                apply: { $0.storeSchema = $1.text }),
        Setting(key: "store.connectTimeoutSeconds", kind: .integer(0...3600), defaultValue: "30", environment: nil, flag: nil,
                summary: "How long start-up retries an unreachable PostgreSQL.", apply: { $0.storeConnectTimeoutSeconds = $1.integer }),
        Setting(key: "store.fsync", kind: .oneOf(FsyncMode.allCases.map(\.rawValue)), defaultValue: "always",
                environment: "HEALTHKERNEL_FSYNC", flag: "fsync", summary: "When acknowledged writes reach the disk.",
                apply: { $0.fsync = FsyncMode(rawValue: $1.text) ?? .always }),
        Setting(key: "store.snapshotEveryRecords", kind: .integer(int32), defaultValue: "100000", environment: nil,
                flag: "snapshot-every-records", summary: "Take a snapshot after this many log records.",
                apply: { $0.snapshotEveryRecords = $1.integer }),
        Setting(key: "store.snapshotEverySeconds", kind: .integer(0...Int64(Int32.max)), defaultValue: "300", environment: nil,
                flag: "snapshot-every-seconds", summary: "Take a snapshot this many seconds after a change (0 turns it off).",
                apply: { $0.snapshotEverySeconds = $1.integer }),
        Setting(key: "store.snapshotEveryBytes", kind: .integer(0...Int64(Int32.max)), defaultValue: "67108864 (64 MiB)", environment: nil,
                flag: nil, summary: "Take a snapshot once this many bytes of log follow the last one (0 turns it off).",
                apply: { $0.snapshotEveryBytes = $1.integer }),
        Setting(key: "kernel.maxLineBytes", kind: .integer(int32), defaultValue: "16777216 (16 MiB)",
                environment: "HEALTHKERNEL_MAX_LINE_BYTES", flag: "max-line-bytes", summary: "Longest request line accepted, in bytes.",
                apply: { $0.maxLineBytes = $1.integer }),
        Setting(key: "kernel.logLevel", kind: .oneOf(logLevels), defaultValue: "info", environment: "HEALTHKERNEL_LOG_LEVEL",
                flag: "log-level", summary: "Log level for stderr.", apply: { $0.logLevel = $1.text }),
        Setting(key: "auth.jwtSecret", kind: .text, defaultValue: "generated into <data-dir>/jwt-secret, or the database",
                environment: "HEALTHKERNEL_JWT_SECRET", flag: "jwt-secret", summary: "HS256 secret for access tokens, 32 bytes or more.",
                inFile: false, check: { $0.text.utf8.count >= 32 ? nil : "must be at least 32 bytes" },
                apply: { $0.auth.jwtSecret = $1.text }),
    ]

    static let byKey = Dictionary(uniqueKeysWithValues: all.map { ($0.key, $0) })

    /// `--help` text of the setting `key`: its summary, default and environment variable.
    static func help(_ key: String) -> String {
        guard let s = byKey[key] else { return "" }
        return s.summary + " (default: \(s.defaultValue)" + (s.environment.map { "; $\($0)" } ?? "") + ")"
    }
}
