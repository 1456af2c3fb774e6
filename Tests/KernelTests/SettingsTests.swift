import Testing
import Rewards
import ScreenTime
import Health
import Auth
import Subscriptions
import TestSupport
@testable import Kernel

/// The table of settings: every source of a setting is checked by its one row and named in errors.
@Suite(.oneStoreOnly) struct SettingsTests {
    /// A value each checked setting refuses.
    func bad(_ s: Setting) -> String? {
        switch s.kind {
        case .integer: return "-7x"
        case .boolean: return "maybe"
        case .oneOf: return "sometimes"
        case .text, .path: return ["store.schema": "pg_catalog", "auth.jwtSecret": "short", "appStore.bundleId": ""][s.key]
        }
    }

    func load(file: String? = nil, env: [String: String] = [:], flags: [String: String] = [:]) throws(ConfigError) -> KernelConfig {
        var o = ConfigOverrides()
        o.configFile = file == nil ? nil : "config.json"
        o.values = flags
        return try KernelConfig.load(overrides: o, environment: env, readFile: { _ in file.map { Array($0.utf8) } })
    }

    @Test func everySourceOfASettingIsCheckedAndNamed() throws {
        for s in Setting.all {
            guard let value = bad(s) else { continue }
            if let name = s.environment {
                #expect(throws: ConfigError.self) { try load(env: [name: value]) }
                do { _ = try load(env: [name: value]) } catch { #expect(error.description.hasPrefix(name), "\(error)") }
            }
            if let flag = s.flag {
                do { _ = try load(flags: [s.key: value]); Issue.record("--\(flag) \(value) accepted") } catch {
                    #expect(error.description.hasPrefix("--\(flag)"), "\(error)")
                }
            }
            let json = #"{"\#(s.section)":{"\#(s.name)":"\#(value)"}}"#
            do { _ = try load(file: json); Issue.record("\(s.key) \(value) accepted in the file") } catch {
                #expect(error.description.contains(s.key), "\(error)")
            }
        }
    }

    @Test func flagsOverrideTheEnvironmentWhichOverridesTheFile() throws {
        let file = #"{"store":{"fsync":"never","schema":"from_file","connectTimeoutSeconds":5}}"#
        let config = try load(file: file, env: ["HEALTHKERNEL_FSYNC": "everysec", "HEALTHKERNEL_STORE_SCHEMA": "from_env"],
                              flags: ["store.fsync": "always"])
        #expect(config.fsync == .always)
        #expect(config.storeSchema == "from_env")
        #expect(config.storeConnectTimeoutSeconds == 5)
        #expect(throws: ConfigError.self) { try load(file: #"{"store":{"colour":"red"}}"#) }
    }

    /// The domains' scalar settings are rows of the same table: the file, then the environment.
    @Test func domainSettingsComeThroughTheTable() throws {
        let file = #"{"health":{"unknownTypes":"skip","maxHistoryDays":30},"screentime":{"toleranceMinutes":9,"pointsPerMinute":2},"rewards":{"xpPerMinute":20}}"#
        let config = try load(file: file, env: ["HEALTHKERNEL_HEALTH_UNKNOWN_TYPES": "refuse"])
        #expect(config.domains[HealthConfig.self].unknownTypes == .refuse, "the environment overrides the file")
        #expect(config.domains[HealthConfig.self].maxHistoryDays == 30)
        #expect(config.domains[ScreenTimeConfig.self] == { var c = ScreenTimeConfig(); (c.toleranceMinutes, c.pointsPerMinute) = (9, 2); return c }())
        #expect(config.domains[RewardsConfig.self].xpPerMinute == 20)
        #expect(throws: ConfigError.self) { try load(file: #"{"rewards":{"xpPerMinute":0}}"#) }
        #expect(throws: ConfigError.self) { try load(file: #"{"health":{"colour":"red"}}"#) }
    }

    /// A section with values that have members (`auth`, `appStore`) is read once: its single values by
    /// their rows, the rest by the owning module, and a key neither knows is refused.
    @Test func sectionsWithMembersShareTheirReaderWithTheRows() throws {
        let file = #"{"auth":{"accessTokenTtlSeconds":120,"sessionsPerUser":3,"acceptedIssuers":["https://issuer.example"]},"appStore":{"bundleId":"com.example.app","refreshIntervalSeconds":600,"environments":["Sandbox"]}}"#
        let config = try load(file: file)
        #expect(config.auth.accessTokenTtlSeconds == 120 && config.auth.sessionsPerUser == 3)
        #expect(config.auth.acceptedIssuers == ["https://issuer.example"])
        #expect(config.auth.refreshTokenTtlSeconds == AuthConfig().refreshTokenTtlSeconds, "a row the file leaves out keeps its default")
        #expect(config.domains[AppStoreConfig.self].bundleId == "com.example.app")
        #expect(config.domains[AppStoreConfig.self].refreshIntervalSeconds == 600)
        #expect(config.domains[AppStoreConfig.self].environments == ["Sandbox"])
        for bad in [#"{"auth":{"colour":"red"}}"#, #"{"appStore":{"colour":"red"}}"#, #"{"auth":{"accessTokenTtlSeconds":5}}"#] {
            #expect(throws: ConfigError.self, "\(bad)") { try load(file: bad) }
        }
    }
}
