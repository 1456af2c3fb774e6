import Chrono
import JSON
import JSONRPC
import Storage

/// A domain as the kernel composes it: its configuration sections, its tables, and, once storage has
/// recovered, its methods and the entities it shows in the change feed. Adding a domain takes its own
/// folder, a target in `Package.swift` and one line in the kernel's list of domains.
public protocol Domain: SendableMetatype {
    /// What the domain is configured with (its sections of the config file).
    associatedtype Config: DomainConfig
    /// Its tables.
    associatedtype Tables

    /// Registers the tables with `store`, before it recovers. Inlinable in the domain, so that each
    /// table's row operations are compiled for their row type.
    static func tables(_ store: some Storage) -> Tables

    /// Builds the domain over recovered storage.
    init(config: Config, tables: Tables, context: DomainContext)

    /// Its methods, in the order the OpenRPC document lists them.
    var methods: [RegisteredMethod] { get }
}

/// A domain's configuration: read from its own sections of the config file, defaults otherwise.
public protocol DomainConfig: Sendable, Equatable {
    /// The defaults.
    init()
    /// The top-level sections of the config file it reads (say `screentime` and `rewards`).
    static var sections: [String] { get }
    /// Reads section `name`; unknown keys and bad values are errors naming the key. Files the section
    /// names are read through `files`.
    mutating func read(section name: String, _ reader: inout ObjectReader, files: ConfigFiles) throws(FieldError)
    /// Reads the `HEALTHKERNEL_*` variables it takes, after the file; errors name the variable or key.
    /// Runs whether or not a config file was read, so it also checks what the file left missing.
    mutating func read(environment: [String: String], readFile: (String) -> [UInt8]?) throws(FieldError)
}

extension DomainConfig {
    public mutating func read(environment: [String: String], readFile: (String) -> [UInt8]?) throws(FieldError) {}
}

/// The files a config file names: paths relative to the config file's folder, read at start-up so that
/// a missing or bad file stops the kernel with a message naming its key.
public struct ConfigFiles {
    /// The config file's path.
    let configPath: String
    let readFile: (String) -> [UInt8]?

    public init(configPath: String, readFile: @escaping (String) -> [UInt8]?) {
        self.configPath = configPath
        self.readFile = readFile
    }

    /// `path` as the kernel opens it: absolute, or relative to the config file's folder.
    public func resolve(_ path: String) -> String {
        guard !path.hasPrefix("/"), let slash = configPath.lastIndex(of: "/") else { return path }
        return String(configPath[...slash]) + path
    }

    /// The bytes of the file at `path` (resolved), or nil if it cannot be read.
    public func read(_ path: String) -> [UInt8]? { readFile(resolve(path)) }
}

/// The configuration of a domain that has none.
public struct NoConfig: DomainConfig {
    public init() {}
    public static var sections: [String] { [] }
    public mutating func read(section name: String, _ reader: inout ObjectReader, files: ConfigFiles) throws(FieldError) {}
}

/// What the kernel hands every domain it builds.
public struct DomainContext {
    /// The storage the domain's tables were registered with.
    public let store: any Storage
    /// This kernel's secrets for sealing opaque cursors, so that a cursor made by hand does not open: the
    /// first seals, every one opens (earlier secrets during a rotation, `auth.previousJwtSecrets`).
    public let cursorSecrets: [[UInt8]]
    /// Where domains say how `sync.changes` shows their synced entities.
    public let entities: EntityRenderers
    /// What one user may keep (quotas checked before anything is stored).
    public let limits: UserLimits
    /// The most bytes one answer may take (the line limit): methods that could answer more page by bytes
    /// or ask to narrow the request.
    public let maxAnswerBytes: Int
    /// Where domains add their members of `kernel.info`.
    public let info: InfoSections
    /// The kernel's clock (wall and monotonic time).
    public let clock: Clock
    /// Where domains draw ids from.
    public let random: RandomSource

    public init(store: any Storage, cursorSecrets: [[UInt8]], entities: EntityRenderers, limits: UserLimits = UserLimits(),
                maxAnswerBytes: Int = 16 << 20, info: InfoSections = InfoSections(), clock: Clock = SystemClock(),
                random: RandomSource = SystemRandom()) {
        self.clock = clock
        self.random = random
        self.info = info
        self.store = store
        self.cursorSecrets = cursorSecrets
        self.entities = entities
        self.limits = limits
        self.maxAnswerBytes = maxAnswerBytes
    }
}

/// Members of `kernel.info` that domains add (`appStore`: the App Store Server API's state), by name;
/// each is rendered when `kernel.info` is called, on the serving thread.
public final class InfoSections: @unchecked Sendable {
    public private(set) var byName: [(name: String, render: () -> JSON)] = []

    public init() {}

    /// Adds member `name`.
    public func add(_ name: String, _ render: @escaping () -> JSON) {
        precondition(!byName.contains { $0.name == name }, "a kernel.info member is added twice")
        byName.append((name, render))
    }
}

/// How each synced entity is shown with `includeData`, by entity name; filled in as domains are built.
public final class EntityRenderers: @unchecked Sendable {
    public private(set) var byName: [String: EntityRenderer] = [:]

    public init() {}

    /// Adds `renderers`; an entity shown twice is a programming error.
    public func add(_ renderers: [String: EntityRenderer]) {
        byName.merge(renderers) { _, _ in preconditionFailure("an entity is rendered by two domains") }
    }
}
