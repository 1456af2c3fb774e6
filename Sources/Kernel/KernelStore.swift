import Chrono
import JSON
import JSONRPC
import DomainSupport
import Postgres
import Storage
import Store

/// The store as the composition root drives it: `Storage` for the domains, the dispatcher's commit
/// journal, and what the kernel's own methods report. The in-memory store with its data dir and the
/// PostgreSQL store each conform; nothing above the composition root sees which one runs.
protocol KernelStore: Storage, CommitTracker, Sendable {
    /// Whether committed changes are kept for host events (some stream subscribed).
    var collectsChanges: Bool { get set }
    /// Rows stored, for `kernel.info` (PostgreSQL's estimate there: an exact count reads every row).
    func recordCount() throws(StorageError) -> Int
    /// `kernel.info`'s `durability` block.
    var durabilityInfo: JSON { get }
    /// `kernel.info`'s `store` block: which store, and where (never a password).
    var storeInfo: JSON { get }
    /// A snapshot now (the in-memory store); elsewhere -32050 saying why there is none.
    func takeSnapshot() throws(StorageError) -> (seq: UInt64, bytes: Int, durationMs: Int)
    /// Makes everything durable and lets go of files and connections.
    func shutdown()
    /// Every table's stored-form access, by name (`store import`).
    var storedAccess: [String: StoredAccess] { get }
    /// Whether nothing is stored yet.
    func isEmpty() throws(StorageError) -> Bool
    /// Applies changes moved in from another store with the feed stamps they had (`store import`).
    func restore(_ changes: [RestoredChange]) throws(StorageError)
    /// Makes what `restore` applied durable (the data dir: one snapshot).
    func finishRestore() throws(StorageError)
}

extension Store: KernelStore {
    /// A log write either fails (and is undone) or is durable: the data dir always knows.
    public func flushCommits() -> (failed: [ClosedRange<UInt64>], unknown: [ClosedRange<UInt64>], fatal: Bool) {
        let outcome = flush()
        return (outcome.failedCommits, [], outcome.fatal)
    }

    public func takeChanges() -> [ChangeNotice] { Self.notices(takeCommittedChanges()) }

    /// A failed log write is reported by the flush of its own batch: nothing fails later here.
    public func takeFailure(of commit: UInt64) -> CommitFailure? { nil }

    func recordCount() -> Int { rowCount }

    func isEmpty() -> Bool { rowCount == 0 }

    var storeInfo: JSON { ["kind": options.dataDir == nil ? "memory" : "dataDir"] }

    var durabilityInfo: JSON {
        guard let dir = options.dataDir else {
            return ["dataDir": nil, "fsync": nil, "lastSnapshotAt": nil, "walBytes": 0]
        }
        let (walBytes, lastSnapshotAt) = durability
        return [
            "dataDir": .string(dir), "fsync": .string(options.fsync.rawValue),
            "lastSnapshotAt": .optional(lastSnapshotAt?.description), "walBytes": .int(Int64(walBytes)),
        ]
    }

    func takeSnapshot() throws(StorageError) -> (seq: UInt64, bytes: Int, durationMs: Int) {
        let info = try snapshot()
        return (info.seq, info.bytes, info.durationMs)
    }
}

extension PostgresStore: KernelStore {
    /// Commits the batch's transaction: a failed one fails its requests' answers, and the kernel goes on.
    public func flushCommits() -> (failed: [ClosedRange<UInt64>], unknown: [ClosedRange<UInt64>], fatal: Bool) {
        let (failed, unknown) = flushBatch()
        return (failed, unknown, false)
    }

    public func takeChanges() -> [ChangeNotice] { Self.notices(takeCommittedChanges()) }

    public func takeFailure(of commit: UInt64) -> CommitFailure? {
        guard let failure = detachedFailure(of: commit) else { return nil }
        if case .outcomeUnknown = failure { return .outcomeUnknown }
        return .notApplied
    }

    func recordCount() throws(StorageError) -> Int { try estimatedRowCount() }

    /// PostgreSQL keeps the data: no data dir, no log of the kernel's own.
    var durabilityInfo: JSON { ["dataDir": nil, "fsync": nil, "lastSnapshotAt": nil, "walBytes": 0] }

    var storeInfo: JSON {
        let e = endpoint
        return ["kind": "postgres", "host": .string(e.host), "port": .string(e.port), "database": .string(e.database),
                "schema": .string(options.schema)]
    }

    func takeSnapshot() throws(StorageError) -> (seq: UInt64, bytes: Int, durationMs: Int) {
        throw StorageError.unavailable("the store is PostgreSQL: back it up with pg_dump or the provider's backups")
    }
}

extension Storage {
    /// Host event notices for committed feed entries.
    static func notices(_ changes: [CommittedChange]) -> [ChangeNotice] {
        changes.map {
            ChangeNotice(userId: $0.user, entity: $0.entry.entity, id: $0.entry.id, op: $0.entry.op.rawValue, position: $0.entry.position,
                         at: Timestamp(milliseconds: $0.entry.at).description, commit: $0.commit)
        }
    }
}

extension KernelConfig {
    /// How to reach PostgreSQL, from the `store` settings; nil on a data dir.
    public var postgresOptions: PostgresOptions? {
        guard let storeURL else { return nil }
        var options = PostgresOptions(url: storeURL)
        options.schema = storeSchema
        options.connectTimeoutSeconds = storeConnectTimeoutSeconds
        options.pooler = storePooler
        options.listenURL = storeListenURL
        options.tombstonesPerUser = Int(limits.tombstonesPerUser)
        options.bigUnit = bigUnitEntries
        return options
    }
}
