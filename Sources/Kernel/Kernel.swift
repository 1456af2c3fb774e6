import Auth
import Chrono
import JSON
import JSONRPC
import Logging
import DomainSupport
import Postgres
import Storage
import Store
import Threads
#if canImport(Glibc)
import Glibc
#endif

/// The composition root: builds the store and every domain, registers every method in one list, and
/// hands out connections.
public final class Kernel {
    /// The configuration in force.
    public let config: KernelConfig
    /// Every method served.
    public let registry: MethodRegistry
    /// The request dispatcher all connections share.
    public let dispatcher: Dispatcher
    /// The data: the in-memory store with its data dir, or PostgreSQL.
    let storage: any KernelStore
    /// The in-memory store, when it is the one in use (snapshots, its data dir).
    public let store: Store?
    /// The PostgreSQL store, when it is the one in use.
    public var postgres: PostgresStore? { storage as? PostgresStore }
    /// Accounts and tokens.
    public let auth: AuthService
    /// When the kernel started.
    public let startedAt: Timestamp
    /// Wall and monotonic time for everything the kernel does (the servers' too).
    public let clock: Clock

    /// Where ids, secrets and salts are drawn from.
    public let random: RandomSource
    /// Subscriptions' end-of-life alarms (`fireDue()` when the kernel was given an executor).
    public let alarm: SubscriptionAlarm

    /// A kernel for `config`: opens (and recovers) the store, then registers the methods. Its time comes
    /// from `clock`, its randomness from `random`, and the work it runs off the serving thread goes to
    /// `executor` (nil: its own threads) alone: a simulation passes seeded and simulated ones, and then
    /// fires the subscriptions' alarms itself (`alarm.fireDue()`), as no thread of the kernel waits for them.
    /// With `config.storeURL`, its PostgreSQL sessions come from `database` when given (the simulation's
    /// model of the server), else from libpq at that URL.
    public init(config: KernelConfig, clock: Clock = SystemClock(), random: RandomSource = SystemRandom(), logger: Logger,
                executor: (any Executor)? = nil, database: (any Database)? = nil) throws {
        self.clock = clock
        self.random = random
        self.config = config
        let stats = RequestStats()
        startedAt = clock.now()
        let storage: any KernelStore
        let tables: Tables
        let builders: [(DomainConfigs, DomainContext) -> [RegisteredMethod]]
        let sharedSecret: [UInt8]?
        if var options = config.postgresOptions {
            options.database = database
            let postgres = try PostgresStore(options: options, clock: clock, random: random, log: { [logger] in logger.warning("\($0)") })
            if let executor { postgres.runOff(on: executor) }
            if postgres.migration.from != postgres.migration.to {
                logger.info("schema \(options.schema) migrated from version \(postgres.migration.from) to \(postgres.migration.to)")
            }
            tables = Tables(postgres)
            builders = Self.domains.map { $0.registerOnPostgres(postgres) }
            // Kernels on one database sign and check each other's tokens and cursors.
            sharedSecret = config.auth.jwtSecret == nil ? try postgres.sharedSecret(named: "jwt-secret") : nil
            (storage, store) = (postgres, nil)
        } else {
            var options = StoreOptions(dataDir: config.memoryOnly ? nil : config.dataDir)
            options.fsync = config.fsync
            options.snapshotEveryRecords = config.snapshotEveryRecords
            options.bigUnit = config.bigUnitEntries
            options.tombstonesPerUser = Int(config.limits.tombstonesPerUser)
            options.snapshotEverySeconds = config.snapshotEverySeconds
            options.snapshotEveryBytes = config.snapshotEveryBytes
            options.failAppendsBeyondBytes = config.failLogAppendsBeyondBytes
            options.faults = config.storeFaults
            if let bytes = config.segmentBytes { options.segmentBytes = bytes }
            let memory = Store(options: options, clock: clock, log: { [logger] in logger.warning("\($0)") })
            if let executor { memory.background = executor }
            tables = Tables(memory)
            builders = Self.domains.map { $0.register(memory) }
            try memory.open()
            (storage, store, sharedSecret) = (memory, memory, nil)
        }
        self.storage = storage
        let auth: AuthService
        do {
            auth = try Self.makeAuth(config: config, store: storage, secret: sharedSecret, tables: tables.auth, clock: clock, random: random, logger: logger)
        } catch {
            store?.abandon()
            throw error
        }
        try auth.upgradeLegacyIndex()
        // Start-up reads ran outside any request: their scope (and, on PostgreSQL, its locks) ends here.
        storage.endRequest()
        // From here the dispatcher flushes after every batch: the batch's requests share one commit.
        (storage as? PostgresStore)?.groupCommit = true
        self.auth = auth
        let info = InfoSections()
        let context = DomainContext(store: storage, cursorSecrets: auth.cursorSecrets, entities: EntityRenderers(), limits: config.limits,
                                    maxAnswerBytes: config.maxAnswerBytes, info: info, clock: clock, random: random)
        // Mails for the host (auth.mail) are a synced entity: the feed and events name them; with
        // includeData they show without their token, which only `auth.mail` gives.
        context.entities.add(["auth.mail": { (user, id, now) throws(RPCError) in try auth.renderMail(user: user, id: id, now: now) }])
        let events = EventHub()
        // Given an executor, the kernel starts no thread of its own: its runner fires due alarms.
        alarm = SubscriptionAlarm(clock: clock, ownThread: executor == nil)
        events.alarm = alarm
        events.onEnded = { [logger] in
            logger.warning("events: a subscription ended at its service token's expiry (events.ended sent); renew it with events.renew before then")
        }
        registry = try MethodRegistry(
            Self.methods(config: config, store: storage, auth: auth, events: events, stats: stats, startedAt: startedAt, info: info)
                + builders.flatMap { $0(config.domains, context) }
                + Self.testMethods(config: config, store: storage, tables: tables),
            info: [
                "title": "healthkernel",
                "version": .string(KernelVersion.version),
                "description": "Embeddable backend kernel for health and wellbeing apps: line-delimited JSON-RPC 2.0 on stdio.",
            ])
        dispatcher = Dispatcher(
            registry: registry, authenticator: auth, clock: clock, stats: stats,
            onInternalError: { [logger, logged = InternalErrorLog()] message in
                if logged.first(message) { logger.error("internal error: \(message)") }
            }
        )
        dispatcher.journal = storage
        if let executor { dispatcher.workers = executor }
        dispatcher.hub = events
        dispatcher.maxAnswerBytes = config.maxAnswerBytes
        if config.limits.requestsPerSecond > 0 && config.limits.burst > 0 {
            dispatcher.rateLimiter = RateLimiter(perSecond: config.limits.requestsPerSecond, burst: config.limits.burst)
        }
        events.onSubscribersChanged = { [storage] in storage.collectsChanges = $0 }
    }

    /// The tables of the kernel's own layers (the domains register theirs), registered with the store
    /// before it recovers.
    struct Tables {
        let auth: AuthTables
        let test: any StorageTable<TestValue>
        init(_ store: some Storage) {
            auth = AuthTables(store)
            test = store.table("test.values", of: TestValue.self)
        }
    }

    /// Loads the signing secret and the key sources (JWKS files and URLs) the configuration names.
    static func makeAuth(config: KernelConfig, store: any KernelStore, secret shared: [UInt8]?, tables: AuthTables,
                         clock: Clock, random: RandomSource, logger: Logger) throws -> AuthService {
        let secret = try shared ?? JWTSecret.resolve(configured: config.auth.jwtSecret, dataDir: (store as? Store)?.options.dataDir, random: random)
        let issuerKeys = try config.auth.jwksPath.map { path throws(AuthSetupError) in try KeySource.file(path, logger: logger, clock: clock) } ?? .fixed(KeySet())
        var providerKeys: [String: KeySource] = [:]
        for provider in config.auth.providers {
            if let url = provider.jwksUrl {
                providerKeys[provider.name] = KeySource.url(url, logger: logger, clock: clock)
            } else if let path = provider.jwksPath {
                providerKeys[provider.name] = try KeySource.file(path, logger: logger, clock: clock)
            }
        }
        return try AuthService(config: config.auth, secret: secret, issuerKeys: issuerKeys, providerKeys: providerKeys,
                               store: store, tables: tables, random: random)
    }

    /// The methods of the kernel's own layers, before the domains' (`domains`). A duplicate name stops
    /// start-up.
    static func methods(config: KernelConfig, store: any KernelStore, auth: AuthService,
                        events: EventHub, stats: RequestStats, startedAt: Timestamp, info: InfoSections) -> [RegisteredMethod] {
        [
            RegisteredMethod(RPCDiscover()),
            RegisteredMethod(KernelInfo(startedAt: startedAt, stats: stats, store: store, auth: auth, sections: info)),
            RegisteredMethod(KernelSnapshot(store: store)),
            RegisteredMethod(KernelSetOrdering()),
        ] + AuthDomain(auth).methods + [
            RegisteredMethod(EventsSubscribe(events: events, store: store)),
            RegisteredMethod(EventsUnsubscribe(events: events, store: store)),
            RegisteredMethod(EventsRenew(events: events)),
        ] + {
            let jobs = ImportJobs(executable: config.executable, socket: config.serve.listen.map { String($0.dropFirst(5)) })
            return [RegisteredMethod(HealthImportExport(jobs: jobs, auth: auth)), RegisteredMethod(HealthImportStatus(jobs: jobs))]
        }()
    }

    /// `test.*`, when the configuration asks for them.
    static func testMethods(config: KernelConfig, store: any KernelStore, tables: Tables) -> [RegisteredMethod] {
        guard config.enableTestMethods else { return [] }
        return [RegisteredMethod(TestWrite(store: store, table: tables.test)), RegisteredMethod(TestDump(table: tables.test))]
    }

    /// A new connection (framing state plus output buffer) over this kernel.
    public func connection(ordering: ResponseOrdering = .read) -> Connection {
        Connection(dispatcher: dispatcher, maxLineBytes: config.maxLineBytes, ordering: ordering)
    }

    /// Runs `input` through a fresh connection as if it were a whole stdin stream, and returns stdout.
    public func run(input: [UInt8]) -> [UInt8] {
        var connection = connection()
        connection.receive(input)
        connection.finish()
        _ = connection.endBatch()
        connection.close()
        return connection.output
    }

    /// Called from another thread when changes other kernels committed wait to be announced to this
    /// kernel's subscribed hosts (`.events`), or when a detached commit finished (`.commitDone`,
    /// PostgreSQL): the server ends a round, which announces them and writes the answers that waited.
    public func onOtherKernelsChanges(_ wake: @escaping @Sendable (ServingWake) -> Void) {
        (storage as? PostgresStore)?.onRemoteChanges = { wake(.events) }
        (storage as? PostgresStore)?.onCommitFinished = { wake(.commitDone) }
    }

    /// Clean shutdown: makes everything durable (final snapshot) and releases the data dir.
    public func shutdown() {
        storage.shutdown()
    }
}


/// Which internal errors were logged already: a bad stored row met by every request that reads it is
/// logged once, not once a request. Remembers at most 10,000 distinct messages (then logs again).
final class InternalErrorLog: @unchecked Sendable {
    private let seen = Locked<Set<String>>([])

    /// Whether `message` is new (and now remembered).
    func first(_ message: String) -> Bool {
        seen.withLock { seen in
            if seen.count >= 10_000 { seen.removeAll() }
            return seen.insert(message).inserted
        }
    }
}
