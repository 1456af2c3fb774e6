#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import Storage
import JSON
import Threads
#if SIMULATION
import Mutants
#endif

/// Where and how the store keeps its files.
public struct StoreOptions: Sendable {
    /// The data dir; nil keeps everything in memory and writes no files.
    public var dataDir: String?
    public var fsync: FsyncMode = .standard
    /// Take a snapshot after this many log records...
    public var snapshotEveryRecords = 100_000
    /// Changes from which a unit of work is big (`Transaction.bigUnit`): planned on a worker, applied in slices.
    public var bigUnit = Transaction.bigUnit
    /// ...or this many seconds after a change, whichever comes first (0 turns the timer off)...
    public var snapshotEverySeconds = 300
    /// ...or once this many bytes of log have been written since the last one (0: never by size), so a
    /// few large records (a 256 KiB `raw` uploaded again and again) cannot grow the log without bound.
    public var snapshotEveryBytes = 64 << 20
    /// Tombstones kept per user and synced table; 0: no limit (see `Tombstones`).
    public var tombstonesPerUser = 0
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

/// The in-memory store: typed tables per user, each request's changes applied all together and handed
/// to the journal as one record, which is durable before the request is answered. Confined to the
/// thread that serves requests.
public final class Store: Storage, @unchecked Sendable {
    public let options: StoreOptions
    private var tables: [String: AnyTable] = [:]
    private var tableOrder: [String] = []
    /// Registered tables by their handle's slot.
    private var slots: [AnyTable] = []
    /// The slot the next registered table gets.
    @usableFromInline var nextSlot: Int { slots.count }
    private let log: @Sendable (String) -> Void
    let clock: Clock
    /// Where background snapshots run. Requests come first: the default thread runs at nice 10 (about a
    /// tenth of a normal thread's weight), so a snapshot slows down under load rather than the requests.
    public var background: any Executor = ThreadPerJob(nice: 10)
    private let journal: Journal
    private let uniqueKeys = UniqueKeys()
    /// Whether the journal keeps records (else no undo is needed: nothing can fail to be written).
    let keepsRecords: Bool

    /// Number of the last applied log record (feed positions are `record << 20 | index`).
    public private(set) var lastRecord: UInt64 = 0
    /// Id of the last commit (never reused, unlike record numbers after a failed write).
    public private(set) var lastCommitID: UInt64 = 0

    // Commits applied in memory whose records the journal has queued but not yet written.
    private var firstQueuedCommit: UInt64 = 0
    private var seqBeforeQueued: UInt64 = 0
    var undo: [Undo] = []
    private var failedCommits: [ClosedRange<UInt64>] = []
    private var refuseWrites: String?

    enum Undo {
        case row(table: AnyTable, user: String, key: String, previous: Previous)
        case user(user: String, rows: [(AnyTable, Any)])
    }

    /// Per user, the value of `changes` when a commit or an undo last changed the user's rows.
    private var versions: [String: UInt64] = [:]
    private var changes: UInt64 = 0

    /// Whether a host wants committed changes announced (`takeCommittedChanges`); off, nothing is kept.
    public var collectsChanges = false
    /// Changes of commits not yet flushed, with their commit ids; then those made durable, until
    /// `takeCommittedChanges` hands them over.
    private var unflushedChanges: [(commit: UInt64, user: String, change: FeedCandidate)] = []
    private var committedChanges: [(commit: UInt64, user: String, change: FeedCandidate)] = []

    /// Big units of work committed but still being applied to memory in slices (see `Backlog`).
    let backlog = Backlog()
    /// The unit of work now running: whether a commit of it may leave its changes to the backlog
    /// (`Backlog.user(ofSliceable:)`); off, every commit is applied at once.
    private var unit = UnitOfWork()
    public var mayFinishLater: Bool { unit.mayFinishLater }

    public func beginUnit(mayFinishLater: Bool) { unit.begin(mayFinishLater: mayFinishLater, lastCommit: lastCommitID) }

    public func endUnit() -> ClosedRange<UInt64>? { unit.end(lastCommit: lastCommitID) }

    public func attachToUnit(_ tx: Transaction) { unit.attach(tx) }
    public var attachedToUnit: [Transaction.Entry] { unit.pending }

    /// A store with `options`; register tables, then `open()`.
    public init(options: StoreOptions, clock: Clock, log: @escaping @Sendable (String) -> Void) {
        self.options = options
        self.clock = clock
        self.log = log
        journal = options.dataDir.map { FileJournal(options: options, dir: $0, clock: clock, log: log) } ?? MemoryJournal()
        keepsRecords = journal.keepsRecords
        tables[uniqueKeys.name] = uniqueKeys
        tableOrder.append(uniqueKeys.name)
        backlog.finish = { [unowned self] user in self.finishUnits(of: user) }
    }

    /// The user holding `key`, if anyone.
    public func holder(of key: UniqueKey) -> String? {
        uniqueKeys.holder(of: key.rowKey)
    }

    /// Whether the store writes no files.
    public var memoryOnly: Bool { options.dataDir == nil }

    /// Registers a table; every table must be registered before `open()`. Inlinable so that it is
    /// compiled where `Row` is known: the table's per-row operations are made there (`TableOps`).
    ///
    /// With `orderedBy`, the table also keeps each user's rows in a second order, for
    /// `Table.scanOrdered`: the string that function gives a row (say its start time), then the row's
    /// key. That order is derived from the rows in memory and never stored.
    ///
    /// With `entity`, the rows are synced entities: each keeps the feed stamp of its last change, and
    /// a deleted one a tombstone, from which `feed` reads.
    @inlinable
    public func table<Row: StoredRow>(_ name: String, of type: Row.Type,
                                      orderedBy orderKey: (@Sendable (Row) -> String)? = nil,
                                      entity: Entity? = nil) -> Table<Row> {
        let t = Table<Row>(name: name, slot: nextSlot, orderKey: orderKey, entity: entity)
        t.ops = TableOps(t)
        t.lookup = { [unowned t] user, key in t.rows[user]?[RowKey(key)] }
        register(t)
        return t
    }

    /// `Storage`'s view of `table(_:of:orderedBy:entity:)`.
    @inlinable
    public func table<Row: StoredRow>(_ name: String, of type: Row.Type, orderedBy orderKey: (@Sendable (Row) -> String)?,
                                      entity: Entity?) -> any StorageTable<Row> {
        let t: Table<Row> = table(name, of: type, orderedBy: orderKey, entity: entity)
        return t
    }

    @usableFromInline
    func register<Row: StoredRow>(_ table: Table<Row>) {
        let name = table.name
        precondition(tables[name] == nil, "table \(name) registered twice")
        precondition((1...100).contains(name.utf8.count), "table names are 1 to 100 bytes (snapshot records rely on it)")
        if let entity = table.entity {
            precondition(!slots.contains { $0.entity?.name == entity.name }, "entity \(entity.name) registered twice")
        }
        table.tombstoneLimit = options.tombstonesPerUser
        table.backlog = backlog
        tables[name] = table
        tableOrder.append(name)
        slots.append(table)
        storedAccess[name] = StoredAccess(table)
    }

    /// Every registered table's stored-form access, by name (`store import`).
    public internal(set) var storedAccess: [String: StoredAccess] = [:]

    // MARK: The change feed

    public func feed(user: String, after: UInt64?, limit: Int, entities: Set<String>?) -> FeedPage {
        backlog.settle(user)
        // Each synced table's index gives its first limit + 1 entries: O(tables × (log n + page)).
        var found: [FeedCandidate] = []
        var floor: UInt64 = 0
        let take = limit == .max ? limit : limit + 1
        for table in slots {
            guard let entity = table.entity, entities?.contains(entity.name) ?? true else { continue }
            floor = max(floor, table.feed(user: user, after: after ?? 0, limit: take, into: &found))
        }
        found.sort { $0.stamp.position < $1.stamp.position }
        return FeedPage(entries: found.prefix(limit).map(entry), hasMore: found.count > limit, forgottenThrough: floor)
    }

    public func view<Row: StoredRow>(_ table: any StorageTable<Row>, user: String) -> any StorageTable<Row> {
        guard let table = slots[table.slot] as? Table<Row> else { preconditionFailure("\(table.name) is not a table of this store") }
        return table.view(user: user)
    }

    public func version(of user: String) -> UInt64 {
        backlog.settle(user)
        return versions[user] ?? 0
    }

    /// Per table, from the table's partition of the user's rows: O(tables), and no memory beyond a
    /// number in each partition.
    public func versions(of user: String, in tables: [TableHandle]) -> [UInt64] {
        backlog.settle(user)
        return tables.map { slots[$0.slot].version(of: user) }
    }

    /// Notes that `user`'s rows changed (see `version(of:)`).
    func touch(_ user: String) {
        changes += 1
        versions[user] = changes
    }

    public var feedHorizon: UInt64 { Stamp.position(record: lastRecord, index: (1 << Stamp.positionBits) - 1) }

    /// Positions are kernel-wide here: the horizon holds for every user.
    public func lastFeedPosition(of user: String?) -> UInt64 { feedHorizon }

    /// Nothing to end: the serving thread is the only writer, so a request's reads cannot go stale.
    public func endRequest() {}

    private func entry(_ c: FeedCandidate) -> FeedEntry {
        let entity = slots[c.table].entity!
        return FeedEntry(position: c.stamp.position, entity: entity.name, id: entity.id(c.key.string), op: c.deleted ? .delete : .upsert, at: c.stamp.at)
    }

    /// Changes made durable since the last call, in commit order, with their users (while
    /// `collectsChanges`): for host events.
    public func takeCommittedChanges() -> [CommittedChange] {
        defer { committedChanges.removeAll(keepingCapacity: true) }
        return committedChanges.map { CommittedChange(user: $0.user, entry: entry($0.change), commit: $0.commit) }
    }

    /// Hands a commit's changes to synced rows over for `takeCommittedChanges`: at once when durable
    /// (or nothing is logged), else once its record is written.
    func handOver(_ changes: [(commit: UInt64, user: String, change: FeedCandidate)], durable: Bool) {
        guard !changes.isEmpty else { return }
        var durable = durable
        #if SIMULATION
        if Mutant.eventsBeforeDurable.isOn { durable = true }
        #endif
        if durable { committedChanges += changes } else { unflushedChanges += changes }
    }

    /// Notes that `user`'s rows of the table `handle` changed (see `versions(of:in:)`).
    func markChanged(_ handle: TableHandle, _ user: String) {
        slots[handle.slot].markChanged(user, changes)
    }

    /// Every row of `user` in every table as (table, key, stored value): for exports and isolation checks.
    public func rows(of user: String) -> [(String, String, JSON)] {
        backlog.settle(user)
        var out: [(String, String, JSON)] = []
        for name in tableOrder {
            for (key, value) in tables[name]!.storedRows(of: user) { out.append((name, key, value)) }
        }
        return out
    }

    /// A checksum of every entry of every table (rows, tombstones, their stamps), in the form snapshots
    /// write them: two stores hold the same data exactly when their fingerprints match (up to hash
    /// collisions). Users' groups are summed, so the order partitions are kept in does not count. Crash
    /// tests compare a recovered store with the states the writes went through.
    public func fingerprint() -> UInt64 {
        var sum: UInt64 = 0
        for frozen in freeze() {
            let name = Array(frozen.name.utf8)
            var buffer: [UInt8] = []
            frozen.writeRows(&buffer) { buffer, count in
                let crc = buffer.withUnsafeBytes { CRC32C.update(name.withUnsafeBytes { CRC32C.checksum($0) }, $0) }
                sum &+= (UInt64(crc) | UInt64(count) << 32) &* 0x9E37_79B9_7F4A_7C15
                buffer.removeAll(keepingCapacity: true)
            }
        }
        return sum
    }

    /// Total rows in all tables.
    public var rowCount: Int { tables.values.reduce(0) { $0 + $1.rowCount } }

    private func table(named name: String) throws(StorageError) -> AnyTable {
        guard let table = tables[name] else { throw StorageError.corrupt("unknown table \(name)") }
        return table
    }

    // MARK: Opening and recovery

    /// Recovers every table from the journal (the newest snapshot, then the log after it) and readies it
    /// for appending. Memory-only stores just start empty.
    ///
    /// Files of older formats are rewritten in today's at once (a snapshot), so that the feed stamps
    /// recovery gave their rows are kept from then on.
    public func open() throws(StoreOpenError) {
        var older = false
        lastRecord = try journal.open { (scan) throws(StoreOpenError) in
            older = (scan.snapshot.map { $0.format != .stamped } ?? false) || scan.records.contains { $0.format != .stamped }
            try load(scan)
        }
        journal.startHelpers(on: background)
        guard older, lastRecord > 0 else { return }
        do {
            _ = try snapshot()
            log("data dir written by an older release: rewritten as a snapshot in today's format")
        } catch {
            log("could not rewrite the older data dir as a snapshot (\(error)); it is read again at the next start")
        }
    }

    private func load(_ scan: DataDirScan) throws(StoreOpenError) {
        do throws(StorageError) {
            // Rows and records from before the feed existed have no commit time: they take the snapshot's
            // time, or this recovery's.
            let now = clock.now()
            if let snapshot = scan.snapshot {
                let legacyAt = Timestamp(rfc3339: snapshot.createdAt) ?? now
                try snapshot.loadRows(legacyAt: legacyAt.milliseconds) { (name) throws(StorageError) in try table(named: name) }
            }
            for table in slots { table.buildIndexes() }
            for record in scan.records { try replay(record, legacyAt: now.milliseconds) }
        } catch {
            throw .damaged(StoreDamage(file: scan.records.last?.segment ?? scan.snapshotName ?? "the data dir", offset: 0,
                                       detail: error.description))
        }
    }

    /// Replays one change of a format 1 record.
    private func replay(_ change: Change, _ stamp: Stamp) throws(StorageError) {
        switch change {
        case .put(let name, let user, let key, let value):
            try table(named: name).put(user: user, key: key, stored: value, stamp: stamp)
        case .delete(let name, let user, let key):
            _ = try table(named: name).delete(user: user, key: key, stamp: stamp)
        case .deleteUser(let user):
            _ = removeUser(user)
        }
    }

    /// Replays a log record, decoding binary values straight into typed rows. Change `i` of record `n`
    /// gets the feed stamp it got when it was committed: position `n << 20 | i`, the record's time
    /// (records written before the feed existed carry no time: they get the time of this recovery).
    private func replay(_ log: LogRecord, legacyAt: Int64) throws(StorageError) {
        let record = log.record.seq
        guard log.format != .text else {
            for (i, change) in try DataDirScan.changes(of: log).enumerated() {
                try replay(change, Stamp(position: Stamp.position(record: record, index: i), at: legacyAt))
            }
            return
        }
        let failure = log.record.payload.withUnsafeBytes { raw -> StorageError? in
            var r = BinaryReader(raw)
            do {
                let at = log.format == .stamped ? Int64(bitPattern: try r.varint()) : legacyAt
                var i = 0
                repeat {
                    let stamp = Stamp(position: Stamp.position(record: record, index: i), at: at)
                    i += 1
                    switch try Change.Head.read(&r) {
                    case .put(let name, let user, let key):
                        try table(named: name).putBinary(user: user, key: key, from: &r, stamp: stamp)
                    case .delete(let name, let user, let key):
                        _ = try table(named: name).delete(user: user, key: key, stamp: stamp)
                    case .deleteUser(let user):
                        _ = removeUser(user)
                    }
                } while !r.isAtEnd
            } catch let error as StorageError {
                return error
            } catch {
                return .corrupt("record \(log.record.seq): \(error)")
            }
            return nil
        }
        if let failure { throw failure }
    }

    // MARK: Writing

    /// Applies a transaction to memory and queues its log record; it becomes durable at the next
    /// `flush()`. All of its changes apply, or none.
    public func commit(_ tx: Transaction) throws(StorageError) {
        guard !tx.isEmpty else { return }
        // A month prepared on a worker stays prepared: the attached changes' bytes go in front of its own.
        let tx = unit.merge(tx) { prepared, attached in
            guard let bytes = prepared as? [UInt8] else { return nil }
            var front: [UInt8] = []
            for entry in attached { entry.writeBinary(to: &front) }
            return front + bytes
        }
        if let refuseWrites { throw StorageError.unavailable(refuseWrites) }
        // A user's units apply in commit order: one still in the backlog is finished first.
        if !backlog.isEmpty {
            var seen: String?
            for entry in tx.entries {
                if let user = entry.user, user != seen { backlog.settle(user); seen = user }
            }
        }
        // A key the unit of work releases first may be claimed by another user in it (a hand-over).
        var released: Set<String> = []
        for entry in tx.entries {
            switch entry {
            case .release(let key, let user) where uniqueKeys.holder(of: key.rowKey) == user:
                released.insert(key.rowKey)
            case .claim(let key, let user):
                if let holder = uniqueKeys.holder(of: key.rowKey), holder != user, !released.contains(key.rowKey) { throw StorageError.taken(key) }
            default:
                break
            }
        }
        // Change i of the record gets feed position `seq << 20 | i` (what replay derives again).
        precondition(tx.entries.count < 1 << Stamp.positionBits, "a unit of work of over a million changes")
        let record = lastRecord + 1
        let at = clock.now().milliseconds
        if mayFinishLater, let user = Backlog.user(ofSliceable: tx, bigUnit: options.bigUnit) {
            lastCommitID += 1
            lastRecord = record
            enqueue(tx, user: user, record: record, at: at)
        } else {
            var lastUser: String?
            var collected: [(commit: UInt64, user: String, change: FeedCandidate)] = []
            for (i, entry) in tx.entries.enumerated() {
                let entryUndo = apply(entry, Stamp(position: Stamp.position(record: record, index: i), at: at), commit: lastCommitID + 1,
                                      changes: &collected)
                if keepsRecords { undo.append(entryUndo) }
                if let user = entry.user, user != lastUser {
                    touch(user)
                    lastUser = user
                }
                switch entry {
                case .put(let handle, let user, _, _), .delete(let handle, let user, _): markChanged(handle, user)
                default: break
                }
            }
            lastCommitID += 1
            lastRecord = record
            handOver(collected, durable: !keepsRecords)
        }
        guard keepsRecords else { return }
        if !journal.hasQueued {
            firstQueuedCommit = lastCommitID
            seqBeforeQueued = lastRecord - 1
        }
        journal.append(seq: lastRecord) { payload in
            Binary.writeVarint(UInt64(bitPattern: at), to: &payload)
            if let prepared = tx.prepared as? [UInt8] { payload.append(contentsOf: prepared) } else { Self.writeEntries(tx, to: &payload) }
        }
    }

    /// The log record's changes; pure, so a worker may do it ahead of the commit.
    public func prepare(_ tx: inout Transaction) {
        guard keepsRecords, tx.entries.count >= options.bigUnit else { return }
        var bytes: [UInt8] = []
        Self.writeEntries(tx, to: &bytes)
        tx.prepared = bytes
    }

    private static func writeEntries(_ tx: Transaction, to out: inout [UInt8]) {
        for entry in tx.entries { entry.writeBinary(to: &out) }
    }

    // MARK: Moving a deployment in

    /// Applies changes moved in from another store with the feed stamps they had there, in memory only
    /// (nothing is logged): `finishRestore()` makes them durable with one snapshot, so a move cut short
    /// leaves the data dir as empty as it was. A synced row that comes without a position (an export
    /// from before positions were carried) gets the user's next one.
    public func restore(_ changes: [RestoredChange]) {
        for change in changes {
            let user: String
            var position = change.position
            switch change.kind {
            case .change(let entry):
                guard let u = entry.user else { continue }
                user = u
                if position == 0, case .put(let handle, _, _, _) = entry, slots[handle.slot].entity != nil {
                    position = (restoredPositions[user] ?? 0) + 1
                }
                var ignored: [(commit: UInt64, user: String, change: FeedCandidate)] = []
                _ = apply(entry, Stamp(position: position, at: change.at), changes: &ignored)
            case .tombstone(let handle, let u, let key):
                user = u
                slots[handle.slot].setTombstone(user: user, key: key, stamp: Stamp(position: position, at: change.at))
            case .feedCounter(let u):
                user = u
            }
            touch(user)
            if position > restoredPositions[user] ?? 0 { restoredPositions[user] = position }
        }
    }

    /// Makes what `restore` applied durable: later records are numbered past every restored position
    /// (positions derive from record numbers), and a snapshot holds it all.
    public func finishRestore() throws(StorageError) {
        let top = restoredPositions.values.max() ?? 0
        lastRecord = max(lastRecord, top >> Stamp.positionBits)
        journal.advance(to: lastRecord)
        restoredPositions.removeAll()
        _ = try snapshot()
    }

    /// Per user, the greatest feed position restored so far.
    private var restoredPositions: [String: UInt64] = [:]

    /// Applies one change of commit `commit`; returns how to undo it. Changes to synced rows are added
    /// to `changes` for host events (while some host wants them).
    func apply(_ entry: Transaction.Entry, _ stamp: Stamp, commit: UInt64 = 0,
               changes: inout [(commit: UInt64, user: String, change: FeedCandidate)]) -> Undo {
        switch entry {
        case .put(let handle, let user, let key, let row):
            let table = slots[handle.slot]
            let previous = table.put(user: user, key: key, row: row, stamp: stamp)
            if collectsChanges, table.entity != nil {
                changes.append((commit, user, FeedCandidate(stamp: stamp, table: handle.slot, key: RowKey(key), deleted: false)))
            }
            return .row(table: table, user: user, key: key, previous: previous)
        case .delete(let handle, let user, let key):
            let table = slots[handle.slot]
            let previous = table.delete(user: user, key: key, stamp: stamp)
            if collectsChanges, table.entity != nil, previous.row != nil {
                changes.append((commit, user, FeedCandidate(stamp: stamp, table: handle.slot, key: RowKey(key), deleted: true)))
            }
            return .row(table: table, user: user, key: key, previous: previous)
        case .deleteUser(let user):
            changes.removeAll { $0.user == user }
            return removeUser(user)
        case .claim(let key, let user):
            return .row(table: uniqueKeys, user: user, key: key.rowKey,
                        previous: uniqueKeys.put(user: user, key: key.rowKey, row: ClaimRow(), stamp: stamp))
        case .release(let key, let user):
            return .row(table: uniqueKeys, user: user, key: key.rowKey, previous: uniqueKeys.delete(user: user, key: key.rowKey, stamp: stamp))
        }
    }

    /// Applies, right after `open()` and before serving, a change that recovery work recomputes at every
    /// start (an upgrade of what an older release stored). It is not logged: until a snapshot holds its
    /// result, the next start replays the older records and makes the same change again. It may not
    /// touch synced tables (it has no feed position to give).
    public func upgrade(_ tx: Transaction) {
        var ignored: [(commit: UInt64, user: String, change: FeedCandidate)] = []
        for entry in tx.entries { _ = apply(entry, Stamp(position: 0, at: 0), changes: &ignored) }
    }

    private func removeUser(_ user: String) -> Undo {
        var removed: [(AnyTable, Any)] = []
        for name in tableOrder {
            let table = tables[name]!
            removed.append((table, table.removeUser(user)))
        }
        return .user(user: user, rows: removed)
    }

    private func rollBack() {
        while let last = undo.popLast() {
            switch last {
            case .row(let table, let user, let key, let previous):
                table.restore(user: user, key: key, previous)
                touch(user)
                table.markChanged(user, changes)
            case .user(let user, let rows):
                for (table, stored) in rows { table.restoreUser(user, stored) }
                touch(user)
            }
        }
    }

    /// Makes queued records durable as `--fsync` says. A failed write undoes every queued transaction
    /// (memory is as before them) and reports their commit ids; a failed fsync is fatal.
    public func flush() -> FlushOutcome {
        defer { failedCommits.removeAll() }
        var outcome = FlushOutcome()
        if journal.hasQueued { writeQueued() }
        outcome.failedCommits = failedCommits
        if let failure = journal.syncFailure {
            refuseWrites = "fsync failed: \(failure)"
            outcome.fatal = true
        }
        return outcome
    }

    private func writeQueued() {
        if let failure = journal.flush() {
            log("log write failed (\(failure)); \(lastCommitID - firstQueuedCommit + 1) write(s) undone and answered -32050")
            rollBack()
            failedCommits.append(firstQueuedCommit...lastCommitID)
            lastRecord = seqBeforeQueued
            backlogWritten(false)
        } else {
            // Announced only once durable: after a failed fsync nobody knows whether they are (a power
            // loss may take them, and their feed positions go to other changes), and the kernel stops.
            if !unflushedChanges.isEmpty, journal.syncFailure == nil { committedChanges += unflushedChanges }
            backlogWritten(true)
        }
        unflushedChanges.removeAll(keepingCapacity: true)
        undo.removeAll(keepingCapacity: true)
    }

    // MARK: Snapshots

    /// Whether a snapshot is being written (on any thread). Readable from any thread without locking.
    public var isSnapshotRunning: Bool { journal.isCheckpointing }

    /// Sizes and times for `kernel.info`.
    public var durability: (walBytes: Int, lastSnapshotAt: Timestamp?) { journal.durability }

    /// Every table as of now, the backlog applied first (a snapshot holds whole units only).
    private func freeze() -> [FrozenTable] {
        finishUnits(of: nil)
        return tableOrder.map { tables[$0]!.freeze() }
    }

    /// Takes a snapshot now and returns once it is durable (queued writes are flushed first).
    public func snapshot() throws(StorageError) -> SnapshotInfo {
        guard !memoryOnly else { throw StorageError.unavailable("a memory-only kernel keeps no snapshots") }
        if let refuseWrites { throw StorageError.unavailable(refuseWrites) }
        if journal.hasQueued {
            let before = failedCommits.count
            writeQueued()
            if failedCommits.count > before { throw StorageError.unavailable("the log could not be written") }
        }
        journal.waitForCheckpoint()
        guard let job = journal.checkpoint(freeze) else { throw StorageError.unavailable("this journal keeps no snapshots") }
        return try job().get()
    }

    /// Starts a background snapshot when enough records or time have passed since the last one.
    public func snapshotIfDue() {
        // Not while a unit is being applied: the snapshot would have to finish it on this thread.
        var queued = journal.hasQueued
        #if SIMULATION
        if Mutant.snapshotAheadOfLog.isOn { queued = false }
        #endif
        guard refuseWrites == nil, !queued, backlog.isEmpty, journal.checkpointDue(now: clock.now()),
              let job = journal.checkpoint(freeze) else { return }
        background.submit { _ = job() }
    }

    /// Stops the way a crash would, without flushing or a final snapshot: closes the log and releases
    /// the lock. For tests of recovery.
    public func abandon() {
        journal.close(sync: false)
    }

    /// Clean shutdown: flush, wait for a running snapshot, take a final one, release the lock.
    public func shutdown() {
        guard !memoryOnly else { return }
        let outcome = flush()
        if journal.isCheckpointing { log("stopping: finishing the snapshot being written first") }
        journal.waitForCheckpoint()
        if !outcome.fatal, refuseWrites == nil, journal.recordsSinceCheckpoint > 0 {
            do {
                _ = try snapshot()
            } catch {
                log("final snapshot failed: \(error); the log still holds everything")
            }
        }
        journal.close(sync: true)
    }
}
