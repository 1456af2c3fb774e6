import Chrono
import JSON
import JSONRPC
import Logging
import Store

/// The composition root: builds the store and every domain, registers every method in one list, and
/// hands out connections.
public final class Kernel {
    /// The configuration in force.
    public let config: KernelConfig
    /// Every method served.
    public let registry: MethodRegistry
    /// The request dispatcher all connections share.
    public let dispatcher: Dispatcher
    /// The data.
    public let store: Store
    /// When the kernel started.
    public let startedAt: Timestamp

    /// A kernel for `config`: opens (and recovers) the store, then registers the methods.
    public init(config: KernelConfig, clock: Clock = SystemClock(), logger: Logger) throws {
        self.config = config
        let stats = RequestStats()
        startedAt = clock.now()
        var options = StoreOptions(dataDir: config.memoryOnly ? nil : config.dataDir)
        options.fsync = config.fsync
        options.snapshotEveryRecords = config.snapshotEveryRecords
        options.snapshotEverySeconds = config.snapshotEverySeconds
        options.failAppendsBeyondBytes = config.failLogAppendsBeyondBytes
        store = Store(options: options, clock: clock, log: { [logger] in logger.warning("\($0)") })
        let tables = Tables(store)
        try store.open()
        registry = try MethodRegistry(
            Self.methods(config: config, store: store, tables: tables, stats: stats, startedAt: startedAt),
            info: [
                "title": "healthkernel",
                "version": .string(KernelVersion.version),
                "description": "Embeddable backend kernel for health and wellbeing apps: line-delimited JSON-RPC 2.0 on stdio.",
            ])
        dispatcher = Dispatcher(
            registry: registry, authenticator: NoTokenIssuer(), clock: clock, stats: stats,
            onInternalError: { [logger] message in logger.error("internal error: \(message)") }
        )
        dispatcher.journal = store
    }

    /// Every table, registered with the store before it recovers.
    struct Tables {
        let test: Table<TestValue>
        init(_ store: Store) {
            test = store.table("test.values", of: TestValue.self)
        }
    }

    /// Every method the kernel serves: the one list. A duplicate name stops start-up.
    static func methods(config: KernelConfig, store: Store, tables: Tables, stats: RequestStats,
                        startedAt: Timestamp) -> [RegisteredMethod] {
        var methods = [
            RegisteredMethod(RPCDiscover()),
            RegisteredMethod(KernelInfo(startedAt: startedAt, stats: stats, config: config, store: store)),
            RegisteredMethod(KernelSnapshot(store: store)),
        ]
        if config.enableTestMethods {
            methods += [
                RegisteredMethod(TestWrite(store: store, table: tables.test)),
                RegisteredMethod(TestDump(table: tables.test)),
            ]
        }
        return methods
    }

    /// A new connection (framing state plus output buffer) over this kernel.
    public func connection() -> Connection {
        Connection(dispatcher: dispatcher, maxLineBytes: config.maxLineBytes)
    }

    /// Runs `input` through a fresh connection as if it were a whole stdin stream, and returns stdout.
    public func run(input: [UInt8]) -> [UInt8] {
        var connection = connection()
        connection.receive(input)
        connection.finish()
        _ = connection.endBatch()
        return connection.output
    }

    /// Clean shutdown: makes everything durable (final snapshot) and releases the data dir.
    public func shutdown() {
        store.shutdown()
    }
}

/// The authenticator until accounts and tokens exist: methods that need a token cannot be called.
struct NoTokenIssuer: Authenticator {
    func authenticate(token: String?, requirement: AuthRequirement, now: Timestamp) throws(RPCError) -> Identity? {
        guard requirement != .none else { return nil }
        guard token != nil else { throw RPCError.unauthorized("missing_token", "This method needs params.auth") }
        throw RPCError.unauthorized("invalid_token", "The token is not valid")
    }
}
