import DomainSupport
import Health
import JSON
import JSONRPC
import ScreenTime
import Sessions
import Postgres
import Rewards
import Store
import Subscriptions
import Sync

extension Kernel {
    /// Every domain the kernel serves, in the order their methods are listed. Adding a domain: one line here.
    static let domains: [DomainEntry] = [
        .of(ScreenTimeDomain.self),
        .of(RewardsDomain.self),
        .of(SessionsDomain.self),
        .of(SubscriptionsDomain.self),
        .of(HealthDomain.self),
        .of(SyncDomain.self),
    ]
}

/// A domain with its type erased, as the composition root uses it: its config sections, then its tables
/// (registered before the store recovers), then its methods (built after).
struct DomainEntry: Sendable {
    /// The config file sections it reads.
    let sections: [String]
    /// Reads one of its sections into the configuration.
    let readSection: @Sendable (String, inout ObjectReader, ConfigFiles, inout DomainConfigs) throws(FieldError) -> Void
    /// Reads its environment variables into the configuration.
    let readEnvironment: @Sendable ([String: String], (String) -> [UInt8]?, inout DomainConfigs) throws(FieldError) -> Void
    /// Registers its tables; returns what builds it once the store has recovered.
    let register: @Sendable (Store) -> (DomainConfigs, DomainContext) -> [RegisteredMethod]
    /// The same on PostgreSQL.
    let registerOnPostgres: @Sendable (PostgresStore) -> (DomainConfigs, DomainContext) -> [RegisteredMethod]

    /// The entry of domain `D`. Generic, so the call that registers `D`'s tables is compiled for the
    /// concrete store and rows (as a direct call would be).
    static func of<D: Domain>(_ domain: D.Type) -> DomainEntry {
        DomainEntry(
            sections: D.Config.sections,
            readSection: { (name, reader, files, configs) throws(FieldError) in
                var config = configs[D.Config.self]
                try config.read(section: name, &reader, files: files)
                configs[D.Config.self] = config
            },
            readEnvironment: { (environment, readFile, configs) throws(FieldError) in
                var config = configs[D.Config.self]
                try config.read(environment: environment, readFile: readFile)
                configs[D.Config.self] = config
            },
            register: { store in
                let tables = D.tables(store)
                return { configs, context in D(config: configs[D.Config.self], tables: tables, context: context).methods }
            },
            registerOnPostgres: { store in
                let tables = D.tables(store)
                return { configs, context in D(config: configs[D.Config.self], tables: tables, context: context).methods }
            })
    }
}

/// The configuration of every domain, by its type: the defaults until a config file says otherwise.
public struct DomainConfigs: Sendable, Equatable {
    private var byType: [ObjectIdentifier: any DomainConfig] = [:]

    public init() {}

    public subscript<C: DomainConfig>(_ type: C.Type) -> C {
        get { byType[ObjectIdentifier(type)] as? C ?? C() }
        set { byType[ObjectIdentifier(type)] = newValue }
    }

    public static func == (a: DomainConfigs, b: DomainConfigs) -> Bool {
        a.byType.count == b.byType.count && a.byType.allSatisfy { key, value in
            b.byType[key].map { value.isEqual(to: $0) } ?? false
        }
    }
}

extension DomainConfig {
    fileprivate func isEqual(to other: any DomainConfig) -> Bool { (other as? Self) == self }
}
