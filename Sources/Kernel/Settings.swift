import Auth
import DomainSupport
import JSON
import Rewards
import ScreenTime
import Health
import JSONRPC
import Storage
import Subscriptions

/// The kernel's own settings, one row each (as redis keeps its config): the config file key, its type
/// and check, its default, the environment variable and the command-line flag that also set it, and
/// where it lands in `KernelConfig`. File, environment and flags all go through the row, so a setting
/// is checked in one place and every source names it the same way. Values with members (`auth.providers`,
/// `appStore.serverApi`, lists) are read by their own modules from the same section.
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

/// Typed rows: each pairs a kind with a setter of the matching type, so a value reaches its field as
/// what it was checked to be, never as a fallback `""`, `0` or `false`.
extension Setting {
    /// Setters get what their kind produces; any other value is a bug of this file.
    private static func mismatch(_ key: String, _ value: Value) -> Never {
        preconditionFailure("setting \(key) got \(value), not a value of its kind")
    }

    static func text(_ key: String, path: Bool = false, default defaultValue: String, environment: String?, flag: String?, _ summary: String,
                     check: @escaping @Sendable (String) -> String? = { _ in nil },
                     set: @escaping @Sendable (inout KernelConfig, String) -> Void) -> Setting {
        Setting(key: key, kind: path ? .path : .text, defaultValue: defaultValue, environment: environment, flag: flag, summary: summary,
                check: { value in
                    guard case .text(let s) = value else { return nil }
                    return check(s)
                }, apply: { config, value in
                    guard case .text(let s) = value else { mismatch(key, value) }
                    set(&config, s)
                })
    }

    static func integer(_ key: String, _ range: ClosedRange<Int64>, default defaultValue: String, environment: String?, flag: String?,
                        _ summary: String, set: @escaping @Sendable (inout KernelConfig, Int) -> Void) -> Setting {
        Setting(key: key, kind: .integer(range), defaultValue: defaultValue, environment: environment, flag: flag, summary: summary,
                apply: { config, value in
                    guard case .integer(let i) = value else { mismatch(key, value) }
                    set(&config, Int(i))
                })
    }

    static func boolean(_ key: String, default defaultValue: String, environment: String?, flag: String?, _ summary: String,
                        set: @escaping @Sendable (inout KernelConfig, Bool) -> Void) -> Setting {
        Setting(key: key, kind: .boolean, defaultValue: defaultValue, environment: environment, flag: flag, summary: summary,
                apply: { config, value in
                    guard case .boolean(let b) = value else { mismatch(key, value) }
                    set(&config, b)
                })
    }

    /// One of an enumeration's cases, by raw value.
    static func choice<E: RawRepresentable & CaseIterable & Sendable>(_ key: String, _ type: E.Type, default defaultValue: E, environment: String?,
                                                                     flag: String?, _ summary: String,
                                                                     set: @escaping @Sendable (inout KernelConfig, E) -> Void) -> Setting
        where E.RawValue == String {
        Setting(key: key, kind: .oneOf(E.allCases.map(\.rawValue)), defaultValue: defaultValue.rawValue, environment: environment, flag: flag,
                summary: summary, apply: { config, value in
                    guard case .text(let s) = value, let e = E(rawValue: s) else { mismatch(key, value) }
                    set(&config, e)
                })
    }

    /// One of these strings.
    static func choice(_ key: String, _ values: [String], default defaultValue: String, environment: String?, flag: String?, _ summary: String,
                       set: @escaping @Sendable (inout KernelConfig, String) -> Void) -> Setting {
        Setting(key: key, kind: .oneOf(values), defaultValue: defaultValue, environment: environment, flag: flag, summary: summary,
                apply: { config, value in
                    guard case .text(let s) = value else { mismatch(key, value) }
                    set(&config, s)
                })
    }
}

extension Setting {
    static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
    static let int32 = Int64(1)...Int64(Int32.max)

    /// Every setting of the kernel's own, in the order `--help` and the README list them.
    static let all: [Setting] = [
        .text("store.dataDir", path: true, default: "data", environment: "HEALTHKERNEL_DATA_DIR", flag: "data-dir",
              "Folder for the store's files.") { $0.dataDir = $1 },
        .boolean("store.memoryOnly", default: "false", environment: "HEALTHKERNEL_MEMORY_ONLY", flag: "memory-only",
                 "Keep everything in memory; write no files.") { $0.memoryOnly = $1 },
        .text("store.url", default: "none", environment: "HEALTHKERNEL_STORE_URL", flag: "store",
              "PostgreSQL URL (postgres://user@host/db): store everything there instead of the data dir.") { config, url in
            // An empty value (an unset variable passed through) leaves the URL as the other sources set it.
            if !url.isEmpty { config.storeURL = url }
        },
        .text("store.schema", default: "healthkernel", environment: "HEALTHKERNEL_STORE_SCHEMA", flag: "store-schema",
              "The PostgreSQL schema every object lives in.",
              check: { s in !s.isEmpty && s.utf8.count <= 63 && !s.hasPrefix("pg_") ? nil : "must be 1 to 63 bytes and not start with pg_" }) {
            $0.storeSchema = $1
        },
        .boolean("store.pooler", default: "false", environment: "HEALTHKERNEL_STORE_POOLER", flag: nil,
                 "store.url is a transaction-mode pooler (PgBouncer, Supavisor): keep nothing in database sessions.") { $0.storePooler = $1 },
        .text("store.listenUrl", default: "none", environment: "HEALTHKERNEL_STORE_LISTEN_URL", flag: nil,
              "With store.pooler, a direct PostgreSQL URL (not through the pooler) to hear other kernels' changes on (LISTEN); without it, events carry this kernel's changes only.") { config, url in
            if !url.isEmpty { config.storeListenURL = url }
        },
        .integer("store.connectTimeoutSeconds", 0...3600, default: "30", environment: nil, flag: nil,
                 "How long start-up retries an unreachable PostgreSQL.") { $0.storeConnectTimeoutSeconds = $1 },
        .choice("store.fsync", FsyncMode.self, default: .standard, environment: "HEALTHKERNEL_FSYNC", flag: "fsync",
                "When acknowledged writes reach the disk.") { $0.fsync = $1 },
        .integer("store.snapshotEveryRecords", int32, default: "100000", environment: nil, flag: "snapshot-every-records",
                 "Take a snapshot after this many log records.") { $0.snapshotEveryRecords = $1 },
        .integer("store.bigUnitEntries", 1...(1 << 30), default: String(Transaction.bigUnit), environment: nil, flag: nil,
                 "A write of this many changes or more is planned on a worker thread and finished off the serving thread (in slices between other requests on a data dir, on a connection of its own on PostgreSQL).") {
            $0.bigUnitEntries = $1
        },
        .integer("store.snapshotEverySeconds", 0...Int64(Int32.max), default: "300", environment: nil, flag: "snapshot-every-seconds",
                 "Take a snapshot this many seconds after a change (0 turns it off).") { $0.snapshotEverySeconds = $1 },
        .integer("store.snapshotEveryBytes", 0...Int64(Int32.max), default: "67108864 (64 MiB)", environment: nil, flag: nil,
                 "Take a snapshot once this many bytes of log follow the last one (0 turns it off).") { $0.snapshotEveryBytes = $1 },
        .integer("kernel.maxLineBytes", int32, default: "16777216 (16 MiB)", environment: "HEALTHKERNEL_MAX_LINE_BYTES", flag: "max-line-bytes",
                 "Longest request line accepted, in bytes.") { $0.maxLineBytes = $1 },
        .choice("kernel.logLevel", logLevels, default: "info", environment: "HEALTHKERNEL_LOG_LEVEL", flag: "log-level",
                "Log level for stderr.") { $0.logLevel = $1 },
        // How `healthkernel serve` serves besides stdin.
        .text("serve.listen", default: "none", environment: nil, flag: "listen", "Also serve connections on a Unix socket: unix:PATH.",
              check: { $0.hasPrefix("unix:") && $0.count > 5 ? nil : "takes unix:PATH" }) { $0.serve.listen = $1 },
        .boolean("serve.noStdin", default: "false", environment: nil, flag: "no-stdin",
                 "Do not read stdin: serve only --listen connections until SIGTERM or SIGINT.") { $0.serve.noStdin = $1 },
        .boolean("serve.listenGroup", default: "false", environment: nil, flag: "listen-group",
                 "Make the --listen socket 0660, not 0600: members of the kernel's group may connect too (the Debian package's group healthkernel).") {
            $0.serve.listenGroup = $1
        },
        .integer("serve.maxUnreadBytes", 65_536...(1 << 40), default: String(ServeSettings().maxUnreadBytes), environment: nil,
                 flag: "max-unread-bytes", "Cut a socket connection whose unread answers and events pass this many bytes.") {
            $0.serve.maxUnreadBytes = $1
        },
        .integer("serve.maxInputBytes", 65_536...(1 << 40), default: String(ServeSettings().maxInputBytes), environment: nil,
                 flag: "max-input-bytes",
                 "Cut the socket connection with the longest unfinished request line while all of them together hold more than this many bytes.") {
            $0.serve.maxInputBytes = $1
        },
        .choice("serve.ordering", ResponseOrdering.self, default: ServeSettings().ordering, environment: nil, flag: "ordering",
                "Order of responses on stdout: read (the order requests were read) or completion (each as soon as it is done; match answers by id).") {
            $0.serve.ordering = $1
        },
        // The domains' scalar settings (a domain's nested sections, appStore and auth, read themselves).
        .integer("screentime.toleranceMinutes", 0...1440, default: String(ScreenTimeConfig().toleranceMinutes), environment: nil, flag: nil,
                 "Minutes a verified day may differ from the claim and still match.") { $0.domains[ScreenTimeConfig.self].toleranceMinutes = Int64($1) },
        .integer("screentime.pointsPerMinute", 0...1_000_000, default: String(ScreenTimeConfig().pointsPerMinute), environment: nil, flag: nil,
                 "Penalty points per minute used beyond the claim and the tolerance.") { $0.domains[ScreenTimeConfig.self].pointsPerMinute = Int64($1) },
        .integer("rewards.xpPerMinute", 1...1_000_000, default: String(RewardsConfig().xpPerMinute), environment: nil, flag: nil,
                 "XP rewards.redeem takes for one unlock minute.") { $0.domains[RewardsConfig.self].xpPerMinute = Int64($1) },
        .choice("health.unknownTypes", UnknownTypePolicy.self, default: HealthConfig().unknownTypes, environment: "HEALTHKERNEL_HEALTH_UNKNOWN_TYPES",
                flag: nil, "What health.ingest does with a sample of a HealthKit type the kernel does not know.") {
            $0.domains[HealthConfig.self].unknownTypes = $1
        },
        .integer("health.maxHistoryDays", HealthConfig.historyDays, default: String(HealthConfig().maxHistoryDays),
                 environment: "HEALTHKERNEL_HEALTH_MAX_HISTORY_DAYS", flag: nil,
                 "How many days before the kernel's clock an item may start (0: no bound).") { $0.domains[HealthConfig.self].maxHistoryDays = Int64($1) },
        // What one user may ask and keep (`UserLimits` holds the defaults; 0 turns a limit off).
        .integer("limits.requestsPerSecond", 0...1_000_000_000, default: String(UserLimits().requestsPerSecond), environment: nil, flag: nil,
                 "Requests per second per user, refilling a bucket of limits.burst.") { $0.limits.requestsPerSecond = Int64($1) },
        .integer("limits.burst", 0...1_000_000_000, default: String(UserLimits().burst), environment: nil, flag: nil,
                 "Requests one user may send at once before limits.requestsPerSecond applies.") { $0.limits.burst = Int64($1) },
        .integer("limits.healthItemsPerUser", 0...Int64(Int32.max) * 16, default: String(UserLimits().healthItemsPerUser), environment: nil,
                 flag: nil, "HealthKit items one user keeps.") { $0.limits.healthItemsPerUser = Int64($1) },
        .integer("limits.rawBytesPerUser", 0...(1 << 50), default: String(UserLimits().rawBytesPerUser), environment: nil, flag: nil,
                 "Bytes of Screen Time raw one user keeps.") { $0.limits.rawBytesPerUser = Int64($1) },
        .integer("limits.tombstonesPerUser", 0...Int64(Int32.max), default: String(UserLimits().tombstonesPerUser), environment: nil, flag: nil,
                 "Deleted records' feed entries kept per user and synced table.") { $0.limits.tombstonesPerUser = Int64($1) },
        .integer("limits.sessionsPerUser", 0...Int64(Int32.max), default: String(UserLimits().sessionsPerUser), environment: nil, flag: nil,
                 "Meditation sessions one user keeps.") { $0.limits.sessionsPerUser = Int64($1) },
        .integer("limits.rewardsLedgerPerUser", 0...Int64(Int32.max), default: String(UserLimits().rewardsLedgerPerUser), environment: nil,
                 flag: nil, "Rewards credits and unlock windows one user keeps.") { $0.limits.rewardsLedgerPerUser = Int64($1) },
        .text("auth.jwtSecret", default: "generated into <data-dir>/jwt-secret, or the database", environment: "HEALTHKERNEL_JWT_SECRET",
              flag: "jwt-secret", "HS256 secret for access tokens, 32 bytes or more.",
              check: { $0.utf8.count >= 32 ? nil : "must be at least 32 bytes" }) { $0.auth.jwtSecret = $1 },
        // The rest of `auth` (secret lists, providers) and of `appStore` (lists, nested objects) is read by
        // the owning module from the same section: values with members are not rows.
        .integer("auth.accessTokenTtlSeconds", 60...(7 * 86_400), default: String(AuthConfig().accessTokenTtlSeconds), environment: nil,
                 flag: nil, "How long an access token is valid.") { $0.auth.accessTokenTtlSeconds = $1 },
        .integer("auth.refreshTokenTtlSeconds", 3600...(365 * 86_400), default: String(AuthConfig().refreshTokenTtlSeconds), environment: nil,
                 flag: nil, "How long a refresh token is valid.") { $0.auth.refreshTokenTtlSeconds = $1 },
        .integer("auth.refreshReuseIntervalSeconds", 0...3600, default: String(AuthConfig().refreshReuseIntervalSeconds), environment: nil,
                 flag: nil, "A spent refresh token presented again this soon answers its first use's session; later it revokes the sign-in session.") {
            $0.auth.refreshReuseIntervalSeconds = $1
        },
        .integer("auth.signUpsPerHourPerAddress", 0...1_000_000, default: String(AuthConfig().signUpsPerHourPerAddress), environment: nil,
                 flag: nil, "Sign-ups an hour from one client address (0: no limit).") { $0.auth.signUpsPerHourPerAddress = $1 },
        .integer("auth.signUpsPerHourWithoutAddress", 0...1_000_000, default: String(AuthConfig().signUpsPerHourWithoutAddress),
                 environment: nil, flag: nil, "Sign-ups an hour, together, from requests naming no client address (0: no limit).") {
            $0.auth.signUpsPerHourWithoutAddress = $1
        },
        .boolean("auth.requireEmailVerification", default: "false", environment: nil, flag: nil,
                 "Sign-up mails a verification link and answers the same whether or not the email has an account; sign-in waits for the link.") {
            $0.auth.requireEmailVerification = $1
        },
        .integer("auth.sessionsPerUser", 0...1_000_000, default: String(AuthConfig().sessionsPerUser), environment: nil, flag: nil,
                 "Sign-in sessions kept per user; a new one ends the oldest past it (0: no limit).") { $0.auth.sessionsPerUser = $1 },
        .text("auth.jwks", path: true, default: "none", environment: nil, flag: nil,
              "JWKS file with ES256/RS256 keys of access tokens signed elsewhere.") { $0.auth.jwksPath = $1 },
        .text("appStore.bundleId", default: "none (no receipt verifies)", environment: nil, flag: nil,
              "The app's bundle id.", check: AppStoreConfig.checkBundleId) { $0.domains[AppStoreConfig.self].bundleId = $1 },
        .integer("appStore.appAppleId", 1...Int64.max, default: "none", environment: nil, flag: nil,
                 "The app's Apple id, checked on Production notifications.") { $0.domains[AppStoreConfig.self].appAppleId = Int64($1) },
        .integer("appStore.refreshIntervalSeconds", 60...(7 * 86_400), default: String(AppStoreConfig().refreshIntervalSeconds),
                 environment: nil, flag: nil, "How long after subscriptions.refresh looked at a membership it is due again.") {
            $0.domains[AppStoreConfig.self].refreshIntervalSeconds = Int64($1)
        },
    ]

    static let byKey = Dictionary(uniqueKeysWithValues: all.map { ($0.key, $0) })
    static let byFlag = Dictionary(uniqueKeysWithValues: all.compactMap { s in s.flag.map { ($0, s) } })

    /// The config file's sections the table reads, in the order their rows come.
    static let sections: [String] = all.reduce(into: []) { list, s in
        if !list.contains(String(s.section)) { list.append(String(s.section)) }
    }

    /// `--help` text of the setting `key`: its summary, default and environment variable.
    static func help(_ key: String) -> String {
        guard let s = byKey[key] else { return "" }
        return s.summary + " (default: \(s.defaultValue)" + (s.environment.map { "; $\($0)" } ?? "") + ")"
    }
}
