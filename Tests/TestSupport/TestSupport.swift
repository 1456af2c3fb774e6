import Chrono
import Foundation
#if canImport(Testing)
import Testing
#endif
import Postgres
import PostgresModel
import Store
import Storage

/// What the test targets share, kept once: a stopped clock, the user domain tests act as, date
/// shorthands, temp dirs and memory-only stores.

/// A clock stopped at `ms` milliseconds since 1970.
public struct FixedClock: Clock {
    public let ms: Int64
    public init(ms: Int64 = 1_700_000_000_000) { self.ms = ms }
    public func now() -> Timestamp { Timestamp(milliseconds: ms) }
    /// Durations still pass (time slices, deadlines), only the wall clock stands still.
    public func monotonicMicros() -> UInt64 { SystemClock().monotonicMicros() }
}

/// The user id domain tests act as.
public let testUser = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"

/// An RFC 3339 timestamp the test knows is valid.
public func at(_ text: String) -> Timestamp { Timestamp(rfc3339: text)! }

/// A `YYYY-MM-DD` date the test knows exists.
public func day(_ text: String) -> CalendarDate { CalendarDate(text)! }

/// A new, empty folder in the temp dir, its name starting with `hk-<tag>-`.
public func temporaryDirectory(_ tag: String) -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("hk-\(tag)-\(UUID().uuidString)").path
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// A memory-only store with the tables `register` adds, opened: what a domain's service tests run on.
public func memoryStore<Tables>(_ register: (Store) -> Tables) throws -> (Store, Tables) {
    let store = Store(options: StoreOptions(dataDir: nil), clock: SystemClock(), log: { _ in })
    let tables = register(store)
    try store.open()
    return (store, tables)
}

/// The store domain service tests run on: memory-only, or with `HEALTHKERNEL_TEST_STORE=postgres` a
/// fresh schema on the test PostgreSQL (the README's test command runs the domain suites both ways).
public func testStore<Tables>(_ register: (any Storage) -> Tables) throws -> (any Storage, Tables) {
    guard testStoreKind != "memory" else {
        let (store, tables) = try memoryStore { register($0) }
        return (store, tables)
    }
    var options = PostgresOptions(url: testDatabase == nil ? TestPostgres.url : "postgres://model")
    options.database = testDatabase
    if testDatabase == nil, let direct = TestPostgres.listenURL {
        options.pooler = true
        options.listenURL = direct
    }
    options.schema = TestPostgres.freshSchema()
    let store = try PostgresStore(options: options, clock: SystemClock(), log: { _ in })
    return (store, register(store))
}

/// `memory`, `postgres`, or `postgres-model` (the simulation's model of PostgreSQL in place of the
/// server, `PostgresModel`: the domain suites check that the model runs the kernel's SQL as PostgreSQL
/// does): the store `testStore` opens.
public let testStoreKind = ProcessInfo.processInfo.environment["HEALTHKERNEL_TEST_STORE"] ?? "memory"

/// The model server every test of a `postgres-model` run shares (a schema each, as on the real server).
public let testDatabase: (any Database)? = testStoreKind == "postgres-model" ? ModelServer() : nil

/// Suites run twice in the README's test command: in memory, then each test on a fresh PostgreSQL schema
/// (`HEALTHKERNEL_TEST_STORE=postgres`), so a new domain's suites run on both stores without being named
/// anywhere. A suite about one store's own machinery (the data dir's files, the binary, PostgreSQL
/// itself, the JSON and JSON-RPC layers) says so with this trait and runs once, in the first run.
#if canImport(Testing)
extension Trait where Self == ConditionTrait {
    public static var oneStoreOnly: Self {
        .disabled(if: testStoreKind != "memory", "about one store's own machinery: runs once, in the in-memory run")
    }
}
#endif

/// How many commits `store` has made: tests check that a refused request changed nothing.
public func commitCount(_ store: any Storage) -> UInt64 {
    if let store = store as? Store { return store.lastRecord }
    if let store = store as? PostgresStore { return store.lastCommitID }
    preconditionFailure("no commit counter for \(type(of: store))")
}

/// A folder of the public test material in `../shared/testdata` (`appstore`, `healthkit`; never copied
/// into the repository): `$HEALTHKERNEL_TESTDATA`, else beside the repository, else `/work/shared/testdata`.
public func testdataFolder(_ name: String, file: String = #filePath) -> URL? {
    var candidates: [URL] = []
    if let explicit = ProcessInfo.processInfo.environment["HEALTHKERNEL_TESTDATA"] { candidates.append(URL(fileURLWithPath: explicit)) }
    let root = URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    candidates.append(root.deletingLastPathComponent().appendingPathComponent("shared/testdata"))
    candidates.append(URL(fileURLWithPath: "/work/shared/testdata"))
    return candidates.map { $0.appendingPathComponent(name) }.first { FileManager.default.fileExists(atPath: $0.path) }
}
