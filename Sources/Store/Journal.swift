import Chrono
import Storage
import Threads

/// Where the store's committed changes go so that they outlive the process. The store applies each
/// request's changes to its tables and hands the journal one record for them; the tables never see
/// files, and the journal never sees rows, only their bytes.
///
/// Five verbs, in the order a kernel's life uses them:
/// - `open`: recover. Hands the newest checkpoint and every record after it to the store to load,
///   then gets ready to append.
/// - `append`: queues a record (the changes of one request) under the next sequence number.
/// - `flush`: writes what was queued and syncs it as the fsync policy says, or reports that it could
///   not (the store then undoes those records in memory: nothing half-written stays visible).
/// - `checkpoint`: writes a snapshot of every table, after which older records are dropped.
/// - `close`: releases the files, after a final sync or without one (a crash, in tests).
///
/// `FileJournal` is the write-ahead log and snapshots of a data dir; `MemoryJournal` keeps nothing
/// (`--memory-only`). A network-backed store would not need one: its database is its journal.
protocol Journal: AnyObject {
    /// Whether records are kept at all. When not, the store skips building them and its undo list.
    var keepsRecords: Bool { get }
    /// Recovers: calls `load` with what the data dir holds (the newest snapshot and the records after
    /// it), then readies the log for appending. Returns the last sequence number recovered.
    func open(_ load: (DataDirScan) throws(StoreOpenError) -> Void) throws(StoreOpenError) -> UInt64
    /// Starts the journal's periodic helpers (the `everysec` syncer) on `executor`, once it is open.
    func startHelpers(on executor: any Executor)
    /// Queues the record `seq` (one more than the last), its payload written by `payload`.
    func append(seq: UInt64, _ payload: (inout [UInt8]) -> Void)
    /// Makes `seq` the last record number, with nothing queued: the next record is `seq + 1` and the
    /// next snapshot is taken at `seq`. For rows moved in with the feed positions they had, which a
    /// snapshot then keeps (positions derive from record numbers, so later ones must be greater).
    func advance(to seq: UInt64)
    /// Whether records are queued.
    var hasQueued: Bool { get }
    /// Writes the queued records and syncs them as the fsync policy says. On failure nothing of them
    /// stays in the log, and the reason is returned.
    func flush() -> String?
    /// Set once syncing failed: what is on disk is unknown, and the kernel must stop.
    var syncFailure: String? { get }
    /// Records flushed since the last checkpoint.
    var recordsSinceCheckpoint: Int { get }
    /// Whether enough records or time have passed since the last checkpoint for another.
    func checkpointDue(now: Timestamp) -> Bool
    /// Whether a checkpoint is being written (on any thread). Readable from any thread.
    var isCheckpointing: Bool { get }
    /// Prepares a checkpoint of the tables `freeze` returns, as of the last flushed record, and returns
    /// the work that writes it (on this thread or another); nil when this journal keeps none.
    func checkpoint(_ freeze: () -> [FrozenTable]) -> (@Sendable () -> Result<SnapshotInfo, StorageError>)?
    /// Blocks until a running checkpoint is written.
    func waitForCheckpoint()
    /// Log size and last checkpoint time, for `kernel.info`.
    var durability: (walBytes: Int, lastSnapshotAt: Timestamp?) { get }
    /// Releases the files; `sync` first when the stop is clean.
    func close(sync: Bool)
}

/// The journal of a memory-only store: it keeps nothing, and a restart starts empty.
final class MemoryJournal: Journal {
    var keepsRecords: Bool { false }
    func open(_ load: (DataDirScan) throws(StoreOpenError) -> Void) throws(StoreOpenError) -> UInt64 { 0 }
    func startHelpers(on executor: any Executor) {}
    func append(seq: UInt64, _ payload: (inout [UInt8]) -> Void) {}
    func advance(to seq: UInt64) {}
    var hasQueued: Bool { false }
    func flush() -> String? { nil }
    var syncFailure: String? { nil }
    var recordsSinceCheckpoint: Int { 0 }
    func checkpointDue(now: Timestamp) -> Bool { false }
    var isCheckpointing: Bool { false }
    func checkpoint(_ freeze: () -> [FrozenTable]) -> (@Sendable () -> Result<SnapshotInfo, StorageError>)? { nil }
    func waitForCheckpoint() {}
    var durability: (walBytes: Int, lastSnapshotAt: Timestamp?) { (0, nil) }
    func close(sync: Bool) {}
}
