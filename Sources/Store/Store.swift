#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import JSON
import Synchronization
import Threads

/// A value behind a mutex, shareable between the serving thread and the store's helper threads.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
}

/// How writes are made durable before they are acknowledged.
public enum FsyncMode: String, Sendable, CaseIterable {
    /// fsync before answering; all requests of one read share one fsync.
    case always
    /// fsync at most a second later: up to one second of acknowledged writes at risk on power loss.
    case everysec
    /// Leave it to the operating system (tests, benchmarks): a crash of the machine may lose recent writes.
    case never
}

/// Where and how the store keeps its files.
public struct StoreOptions: Sendable {
    /// The data dir; nil keeps everything in memory and writes no files.
    public var dataDir: String?
    public var fsync: FsyncMode = .always
    /// Take a snapshot after this many log records...
    public var snapshotEveryRecords = 100_000
    /// ...or this many seconds after a change, whichever comes first (0 turns the timer off).
    public var snapshotEverySeconds = 300
    /// Start a new log segment past this size.
    public var segmentBytes = 64 * 1024 * 1024
    /// Test hook: appends fail with ENOSPC once the log would pass this many bytes in total.
    public var failAppendsBeyondBytes: Int?
    /// Test hook: makes chosen file operations fail (a full disk at any step of any write).
    public var faults: FaultInjector?

    /// Options for `dataDir` (nil: memory only).
    public init(dataDir: String?) { self.dataDir = dataDir }
}

/// Why the store cannot open.
public enum StoreOpenError: Error, CustomStringConvertible {
    /// Another process holds the data dir.
    case locked(dir: String, pid: String)
    /// A file is damaged somewhere a crash cannot explain.
    case damaged(StoreDamage)
    /// The folder or a file cannot be created or read.
    case io(String)

    public var description: String {
        switch self {
        case .locked(let dir, let pid): return "data dir \(dir) is in use by another healthkernel (pid \(pid))"
        case .damaged(let d): return "\(d); refusing to start. `healthkernel store repair --data-dir DIR` moves the damaged part aside"
        case .io(let m): return m
        }
    }
}

/// What a flush did with the writes committed since the last one.
public struct FlushOutcome: Sendable {
    /// Commit ids whose writes failed and were undone (since the previous batch).
    public var failedCommits: [ClosedRange<UInt64>] = []
    /// Syncing failed: durability is unknown, the kernel must stop after answering.
    public var fatal = false
}

/// The result of a snapshot.
public struct SnapshotInfo: Sendable, Equatable {
    public let seq: UInt64
    public let bytes: Int
    public let durationMs: Int
}

/// The in-memory store: typed tables per user, every transaction logged to a write-ahead log before
/// it is acknowledged, snapshots written beside the log, and recovery from both at start-up.
/// Confined to the thread that serves requests; snapshot writing and `everysec` syncing run on
/// their own threads over copies.
public final class Store: @unchecked Sendable {
    public let options: StoreOptions
    private var tables: [String: AnyTable] = [:]
    private var tableOrder: [String] = []
    private let log: @Sendable (String) -> Void
    private let clock: Clock

    /// Sequence number of the last applied record.
    public private(set) var seq: UInt64 = 0
    /// Id of the last commit (never reused, unlike seq after a failed write).
    public private(set) var lastCommitID: UInt64 = 0

    // Writes committed in memory but not yet in the log.
    private var pending: [UInt8] = []
    private var pendingFirstCommit: UInt64 = 0
    private var seqBeforePending: UInt64 = 0
    private var undo: [Undo] = []
    private var failedCommits: [ClosedRange<UInt64>] = []
    private var refuseWrites: String?

    // Files (nil in memory-only mode).
    private var disk: Disk?
    private var lockFD: Int32 = -1
    private let segment = Locked(SegmentState())
    private var logBytesWritten = 0
    private var recordsSinceSnapshot = 0
    private var firstChangeSinceSnapshot: Timestamp?
    private let snapshotState = Locked(SnapshotState())
    private var syncerStop: Locked<Bool>?

    /// The log segment records are appended to. `fd` is -1 while there is none (a full disk kept the
    /// last one from being started): the next append starts it.
    struct SegmentState {
        var fd: Int32 = -1
        var name = ""
        var size = 0
        var dirty = false
        var syncFailed: String?
    }

    struct SnapshotState {
        var last: SnapshotInfo?
        var lastAt: Timestamp?
        var failure: String?
    }

    enum Undo {
        case row(table: AnyTable, user: String, key: String, old: (any StoredRow)?)
        case user(user: String, rows: [(AnyTable, Any)])
    }

    /// A store with `options`; register tables, then `open()`.
    public init(options: StoreOptions, clock: Clock, log: @escaping @Sendable (String) -> Void) {
        self.options = options
        self.clock = clock
        self.log = log
    }

    /// Whether the store writes no files.
    public var memoryOnly: Bool { options.dataDir == nil }

    /// Registers a table; every table must be registered before `open()`. Inlinable so that it is
    /// compiled where `Row` is known: the table's per-row operations are made there (`TableOps`).
    @inlinable
    public func table<Row: StoredRow>(_ name: String, of type: Row.Type) -> Table<Row> {
        let t = Table<Row>(name: name)
        t.ops = TableOps(t)
        register(t)
        return t
    }

    @usableFromInline
    func register<Row: StoredRow>(_ table: Table<Row>) {
        let name = table.name
        precondition(tables[name] == nil, "table \(name) registered twice")
        precondition((1...100).contains(name.utf8.count), "table names are 1 to 100 bytes (snapshot records rely on it)")
        tables[name] = table
        tableOrder.append(name)
    }

    /// Every row of `user` in every table as (table, key, stored value): for exports and isolation checks.
    public func rows(of user: String) -> [(String, String, JSON)] {
        var out: [(String, String, JSON)] = []
        for name in tableOrder {
            for (key, value) in tables[name]!.storedRows(of: user) { out.append((name, key, value)) }
        }
        return out
    }

    /// Total rows in all tables.
    public var rowCount: Int { tables.values.reduce(0) { $0 + $1.rowCount } }

    // MARK: Opening and recovery

    /// Locks the data dir, loads the newest snapshot, replays the log after it (cutting off a torn tail)
    /// and opens the log for appending. Memory-only stores just start empty.
    public func open() throws(StoreOpenError) {
        guard let dir = options.dataDir else { return }
        if let e = FileIO.makeDirectories(dir) { throw .io("cannot create data dir \(dir): \(FileIO.describe(e))") }
        lockFD = try DataDirLock.acquire(dir)
        do {
            try recover(dir)
        } catch {
            DataDirLock.release(lockFD)  // a refused start leaves the data dir free for `store repair`
            lockFD = -1
            throw error
        }
    }

    private func recover(_ dir: String) throws(StoreOpenError) {
        let disk = Disk(dir: dir, faults: options.faults)
        self.disk = disk
        let listing = StoreFiles.list(dir)
        for leftover in listing.leftovers { _ = disk.unlink(leftover) }
        let scan: DataDirScan
        switch DataDirScan.read(dir) {
        case .success(let s): scan = s
        case .failure(let d): throw .damaged(d)
        }
        do throws(StoreError) {
            if let snapshot = scan.snapshot {
                try snapshot.loadRows { (name) throws(StoreError) in try table(named: name) }
                snapshotState.withLock {
                    $0.lastAt = Timestamp(rfc3339: snapshot.createdAt)
                    $0.last = SnapshotInfo(seq: snapshot.seq, bytes: FileIO.size(dir + "/" + scan.snapshotName!) ?? 0, durationMs: 0)
                }
            }
            for record in scan.records { try replay(record) }
        } catch {
            throw .damaged(StoreDamage(file: scan.records.last?.segment ?? scan.snapshotName ?? dir, offset: 0,
                                       detail: error.description))
        }
        seq = scan.lastSeq
        recordsSinceSnapshot = scan.records.count
        if let torn = scan.tornTail {
            let path = dir + "/" + torn.segment
            log("log \(torn.segment) ends in a torn record at byte \(torn.offset); cutting it off (it was never acknowledged)")
            if truncate(path, off_t(max(torn.offset, 0))) != 0 {
                throw .io("cannot truncate \(path): \(FileIO.describe(errno))")
            }
        }
        // Whatever is left is harmless to the next start too (it is read by its records), so a removal
        // that fails is only logged.
        for name in scan.disposableSegments {
            if let e = disk.unlink(name) { log("\(e); it holds nothing recovery needs") }
        }
        if let name = scan.appendSegment {
            let fd: Int32
            switch disk.open(name, create: false) {
            case .success(let f): fd = f
            case .failure(let e): throw .io("\(e) in \(dir)")
            }
            install(fd: fd, name: name, size: disk.size(name) ?? 0)
        }
        // Without a segment to append to (an older format, or none yet), the first write starts one: a
        // full disk then refuses that write with -32050 instead of stopping start-up.
        logBytesWritten = StoreFiles.list(dir).segments.reduce(0) { $0 + (disk.size($1.name) ?? 0) }
        if options.fsync == .everysec { startSyncer() }
    }

    /// Makes `fd` (the segment `name`, `size` bytes long) the one records are appended to.
    private func install(fd: Int32, name: String, size: Int) {
        let old = segment.withLock { s -> Int32 in
            let old = s.fd
            s = SegmentState(fd: fd, name: name, size: size, dirty: false, syncFailed: s.syncFailed)
            return old
        }
        if old >= 0 { Glibc.close(old) }
    }

    /// Starts the segment whose first record is `firstSeq` and appends to it from now on. The segment
    /// appears under its name complete with its magic or not at all: it is written as a temp file, synced,
    /// renamed and the folder synced. On failure the folder is left as it was and the current segment stays.
    private func startSegment(firstSeq: UInt64) -> DiskError? {
        guard let disk else { return nil }
        let name = StoreFiles.segmentName(firstSeq: firstSeq)
        if segment.withLock({ $0.name }) == name { return nil }
        // Records always go to the newest segment, so a file with this name and records in it cannot be
        // ours to replace; an empty one (a failed rotation of an older version) can.
        if let size = disk.size(name), size > StoreFiles.walMagic.count { return DiskError("start", name, EEXIST) }
        let tmp = name + ".tmp"
        let fd: Int32
        switch disk.open(tmp, create: true, truncate: true) {
        case .success(let f): fd = f
        case .failure(let e): return e
        }
        var failure = StoreFiles.walMagic.withUnsafeBytes { disk.write(fd, tmp, $0) } ?? disk.sync(fd, tmp)
        var renamed = false
        if failure == nil {
            failure = disk.rename(tmp, to: name)
            renamed = failure == nil
        }
        if failure == nil { failure = disk.syncDirectory() }
        if let failure {
            Glibc.close(fd)
            _ = disk.unlink(renamed ? name : tmp)
            if renamed { _ = disk.syncDirectory() }
            return failure
        }
        install(fd: fd, name: name, size: StoreFiles.walMagic.count)
        return nil
    }

    // MARK: Writing

    /// Applies a transaction to memory and queues its log record; it becomes durable at the next
    /// `flush()`. All of its changes apply, or none.
    public func commit(_ tx: Transaction) throws(StoreError) {
        guard !tx.isEmpty else { return }
        if let refuseWrites { throw StoreError.unavailable(refuseWrites) }
        for entry in tx.entries {
            let entryUndo = apply(entry)
            if !memoryOnly { undo.append(entryUndo) }
        }
        lastCommitID += 1
        seq += 1
        guard !memoryOnly else { return }
        if pending.isEmpty {
            pendingFirstCommit = lastCommitID
            seqBeforePending = seq - 1
        }
        RecordFraming.appendRecord(seq: seq, to: &pending) { payload in
            for entry in tx.entries { entry.writeBinary(to: &payload) }
        }
    }

    /// Applies one change of a transaction; returns how to undo it.
    private func apply(_ entry: Transaction.Entry) -> Undo {
        switch entry {
        case .put(let table, let user, let key, let row):
            return .row(table: table, user: user, key: key, old: table.put(user: user, key: key, row: row))
        case .delete(let table, let user, let key):
            return .row(table: table, user: user, key: key, old: table.delete(user: user, key: key))
        case .deleteUser(let user):
            return removeUser(user)
        }
    }

    private func removeUser(_ user: String) -> Undo {
        var removed: [(AnyTable, Any)] = []
        for name in tableOrder {
            let table = tables[name]!
            removed.append((table, table.removeUser(user)))
        }
        return .user(user: user, rows: removed)
    }

    private func table(named name: String) throws(StoreError) -> AnyTable {
        guard let table = tables[name] else { throw StoreError.corrupt("unknown table \(name)") }
        return table
    }

    /// Replays one change of a format 1 record.
    private func replay(_ change: Change) throws(StoreError) {
        switch change {
        case .put(let name, let user, let key, let value):
            try table(named: name).put(user: user, key: key, stored: value)
        case .delete(let name, let user, let key):
            _ = try table(named: name).delete(user: user, key: key)
        case .deleteUser(let user):
            _ = removeUser(user)
        }
    }

    /// Replays a log record, decoding format 2 values straight into typed rows.
    private func replay(_ log: LogRecord) throws(StoreError) {
        guard log.format == .binary else {
            for change in try DataDirScan.changes(of: log) { try replay(change) }
            return
        }
        let failure = log.record.payload.withUnsafeBytes { raw -> StoreError? in
            var r = BinaryReader(raw)
            do {
                repeat {
                    switch try Change.Head.read(&r) {
                    case .put(let name, let user, let key):
                        try table(named: name).putBinary(user: user, key: key, from: &r)
                    case .delete(let name, let user, let key):
                        _ = try table(named: name).delete(user: user, key: key)
                    case .deleteUser(let user):
                        _ = removeUser(user)
                    }
                } while !r.isAtEnd
            } catch let error as StoreError {
                return error
            } catch {
                return .corrupt("record \(log.record.seq): \(error)")
            }
            return nil
        }
        if let failure { throw failure }
    }

    private func rollBack(to mark: Int) {
        while undo.count > mark {
            switch undo.removeLast() {
            case .row(let table, let user, let key, let old):
                if let old { table.restore(user: user, key: key, old) } else { _ = table.delete(user: user, key: key) }
            case .user(let user, let rows):
                for (table, stored) in rows { table.restoreUser(user, stored) }
            }
        }
    }

    /// Writes queued records to the log and syncs them as `--fsync` says. A failed write undoes every
    /// queued transaction (memory is as before them) and reports their commit ids; a failed fsync is fatal.
    public func flush() -> FlushOutcome {
        defer { failedCommits.removeAll() }
        var outcome = FlushOutcome()
        if !pending.isEmpty { writePending() }
        outcome.failedCommits = failedCommits
        if let failure = segment.withLock({ $0.syncFailed }) {
            refuseWrites = "fsync failed: \(failure)"
            outcome.fatal = true
        }
        return outcome
    }

    private func writePending() {
        let count = pending.count
        var failure: String?
        if segment.withLock({ $0.fd }) < 0, let e = startSegment(firstSeq: seqBeforePending + 1) {
            failure = e.description
        }
        if failure == nil, let disk {
            failure = segment.withLock { s in
                if let limit = options.failAppendsBeyondBytes, logBytesWritten + count > limit {
                    return FileIO.describe(ENOSPC)
                }
                if let error = pending.withUnsafeBytes({ disk.write(s.fd, s.name, $0) }) {
                    // Leave no partial record behind; if even that fails, what the segment holds is
                    // unknown and no later record may follow it: stop as after a failed fsync.
                    if let e = disk.truncate(s.fd, s.name, to: s.size) { s.syncFailed = e.description }
                    return error.description
                }
                s.size += count
                switch options.fsync {
                case .always:
                    if let e = disk.sync(s.fd, s.name) { s.syncFailed = e.description }
                case .everysec:
                    s.dirty = true
                case .never:
                    break
                }
                return nil
            }
        }
        if let failure {
            log("log write failed (\(failure)); \(lastCommitID - pendingFirstCommit + 1) write(s) undone and answered -32050")
            rollBack(to: 0)
            failedCommits.append(pendingFirstCommit...lastCommitID)
            seq = seqBeforePending
        } else {
            logBytesWritten += count
            recordsSinceSnapshot += Int(seq - seqBeforePending)
            if firstChangeSinceSnapshot == nil { firstChangeSinceSnapshot = clock.now() }
        }
        pending.removeAll(keepingCapacity: true)
        undo.removeAll(keepingCapacity: true)
        if failure == nil, segment.withLock({ $0.size }) >= options.segmentBytes { rotate() }
    }

    /// Starts a new segment at the next sequence number (syncing the old one first), unless the
    /// current one already starts there (it holds no records yet). A segment that cannot be started
    /// leaves the current one in use: rotation is never needed for correctness.
    private func rotate() {
        guard let disk else { return }
        let next = StoreFiles.segmentName(firstSeq: seq + 1)
        guard segment.withLock({ $0.name }) != next else { return }
        let synced = segment.withLock { s -> Bool in
            guard s.fd >= 0 else { return true }
            if s.dirty || options.fsync != .never {
                if let e = disk.sync(s.fd, s.name) { s.syncFailed = e.description; return false }
                s.dirty = false
            }
            return true
        }
        guard synced else { return }
        if let e = startSegment(firstSeq: seq + 1) {
            log("cannot start a new log segment (\(e)); records go on into the current one")
        }
    }

    private func startSyncer() {
        let stop = Locked(false)
        syncerStop = stop
        let segment = self.segment
        guard let disk else { return }
        spawnThread {
            while true {
                usleep(200_000)
                if stop.withLock({ $0 }) { return }
                segment.withLock { s in
                    guard s.dirty, s.syncFailed == nil, s.fd >= 0 else { return }
                    if let e = disk.sync(s.fd, s.name) { s.syncFailed = e.description }
                    s.dirty = false
                }
            }
        }
    }

    // MARK: Snapshots

    /// Whether a snapshot is being written (on any thread). Readable from any thread without locking.
    public var isSnapshotRunning: Bool { snapshotRunning.isSet }
    private let snapshotRunning = SharedFlag()

    /// Sizes and times for `kernel.info`.
    public var durability: (walBytes: Int, lastSnapshotAt: Timestamp?) {
        (logBytesWritten, snapshotState.withLock { $0.lastAt })
    }

    /// Takes a snapshot now and returns once it is durable (queued writes are flushed first).
    public func snapshot() throws(StoreError) -> SnapshotInfo {
        guard let disk else { throw StoreError.unavailable("a memory-only kernel keeps no snapshots") }
        if let refuseWrites { throw StoreError.unavailable(refuseWrites) }
        if !pending.isEmpty {
            let before = failedCommits.count
            writePending()
            if failedCommits.count > before { throw StoreError.unavailable("the log could not be written") }
        }
        waitForSnapshotWriter()
        let job = prepareSnapshot(disk: disk)
        let info = job()
        if let failure = snapshotState.withLock({ $0.failure }) { throw StoreError.unavailable(failure) }
        return info
    }

    /// Starts a background snapshot when enough records or time have passed since the last one.
    public func snapshotIfDue() {
        guard let disk, refuseWrites == nil, pending.isEmpty, recordsSinceSnapshot > 0 else { return }
        let byCount = recordsSinceSnapshot >= options.snapshotEveryRecords
        let byTime = options.snapshotEverySeconds > 0 && firstChangeSinceSnapshot.map {
            clock.now().milliseconds - $0.milliseconds >= Int64(options.snapshotEverySeconds) * 1000
        } ?? false
        guard byCount || byTime else { return }
        guard !snapshotRunning.isSet else { return }
        let job = prepareSnapshot(disk: disk)
        spawnThread {
            // Requests come first: a background snapshot yields the CPU to the serving threads (nice 10
            // weighs about a tenth of a normal thread), so it slows down under load rather than them.
            // On Linux a nice value belongs to a thread, and `who` 0 means the calling thread.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10)
            _ = job()
        }
    }

    /// Freezes the tables and starts a new segment, so the snapshot covers exactly the older segments;
    /// returns the work that writes the file, which may run on another thread.
    private func prepareSnapshot(disk: Disk) -> @Sendable () -> SnapshotInfo {
        snapshotRunning.set(true)
        snapshotState.withLock { $0.failure = nil }
        rotate()
        let snapSeq = seq
        let frozen = tableOrder.map { tables[$0]!.freeze() }
        // The snapshot covers the segments before the one records go to now: every record in them is at
        // most `snapSeq`. The current segment is never among them, whether the rotation above worked
        // (it then starts at snapSeq + 1) or failed (it then holds records on both sides of snapSeq).
        let current = segment.withLock { $0.fd >= 0 ? $0.name : nil }
        let segments = StoreFiles.list(disk.dir).segments
        let covered = segments.prefix { $0.name != current }.map(\.name)
        recordsSinceSnapshot = 0
        firstChangeSinceSnapshot = nil
        let createdAt = clock.now()
        let state = snapshotState
        let running = snapshotRunning
        let segment = self.segment
        let log = self.log
        return {
            let started = monotonicMicros()
            let name = StoreFiles.snapshotName(seq: snapSeq)
            var size = 0
            let failure = disk.writeDurably(name) { write in
                StoreFiles.encodeSnapshot(seq: snapSeq, createdAt: createdAt.description, tables: frozen) { chunk in
                    size += chunk.count
                    write(chunk)
                }
            }
            let info = SnapshotInfo(seq: snapSeq, bytes: size, durationMs: Int((monotonicMicros() - started) / 1000))
            if let failure {
                log("snapshot failed: \(failure); the log still holds everything")
            } else {
                // Only now that the new snapshot is durable do older snapshots and covered segments go. A
                // removal that fails leaves a file the next start reads by its records and removes then.
                for old in StoreFiles.list(disk.dir).snapshots where old.seq < snapSeq { _ = disk.unlink(old.name) }
                for old in covered where old != segment.withLock({ $0.name }) { _ = disk.unlink(old) }
                _ = disk.syncDirectory()
            }
            state.withLock {
                $0.failure = failure?.description
                if failure == nil {
                    $0.last = info
                    $0.lastAt = createdAt
                }
            }
            running.set(false)  // after the outcome is recorded: a waiter reads it next
            return info
        }
    }

    private func waitForSnapshotWriter() {
        while snapshotRunning.isSet { usleep(1000) }
    }

    /// Stops the way a crash would, without flushing or a final snapshot: closes the log and releases
    /// the lock. For tests of recovery.
    public func abandon() {
        release(syncFirst: false)
    }

    /// Clean shutdown: flush, wait for a running snapshot, take a final one, release the lock.
    public func shutdown() {
        guard options.dataDir != nil else { return }
        let outcome = flush()
        waitForSnapshotWriter()
        if !outcome.fatal, refuseWrites == nil, recordsSinceSnapshot > 0 {
            do {
                _ = try snapshot()
            } catch {
                log("final snapshot failed: \(error); the log still holds everything")
            }
        }
        release(syncFirst: true)
    }

    /// Stops the syncer, closes the log segment and releases the data dir.
    private func release(syncFirst: Bool) {
        syncerStop?.withLock { $0 = true }
        let fd = segment.withLock { s -> Int32 in
            if syncFirst && s.dirty && s.fd >= 0 { _ = fdatasync(s.fd) }
            let fd = s.fd
            s.fd = -1
            return fd
        }
        if fd >= 0 { Glibc.close(fd) }
        DataDirLock.release(lockFD)
        lockFD = -1
    }
}
