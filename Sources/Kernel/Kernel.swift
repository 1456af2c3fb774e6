import Chrono
import JSON
import JSONRPC
import Logging

/// The composition root: builds every domain, registers every method in one list, and hands out connections.
public final class Kernel {
    /// The configuration in force.
    public let config: KernelConfig
    /// Every method served.
    public let registry: MethodRegistry
    /// The request dispatcher all connections share.
    public let dispatcher: Dispatcher
    /// When the kernel started.
    public let startedAt: Timestamp
    private let logger: Logger

    /// A kernel for `config`; throws when the method list is inconsistent.
    public init(config: KernelConfig, clock: Clock = SystemClock(), logger: Logger) throws {
        self.config = config
        self.logger = logger
        let stats = RequestStats()
        let startedAt = clock.now()
        self.startedAt = startedAt
        if !config.memoryOnly {
            logger.warning("the durable store is not built yet: data is kept in memory only and lost at exit")
        }
        let methods = Self.methods(
            info: KernelInfo(
                startedAt: startedAt, stats: stats,
                durability: { ["dataDir": nil, "fsync": nil, "lastSnapshotAt": nil, "walBytes": 0] },
                counts: { JSONObject([("users", 0)]) }  // no accounts exist until the auth domain lands
            )
        )
        registry = try MethodRegistry(methods, info: [
            "title": "healthkernel",
            "version": .string(KernelVersion.version),
            "description": "Embeddable backend kernel for health and wellbeing apps: line-delimited JSON-RPC 2.0 on stdio.",
        ])
        dispatcher = Dispatcher(
            registry: registry, authenticator: NoTokenIssuer(), clock: clock, stats: stats,
            onInternalError: { [logger] message in logger.error("internal error: \(message)") }
        )
    }

    /// Every method the kernel serves: the one list. A duplicate name stops start-up.
    static func methods(info: KernelInfo) -> [RegisteredMethod] {
        [
            RegisteredMethod(RPCDiscover()),
            RegisteredMethod(info),
        ]
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
        return connection.output
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
