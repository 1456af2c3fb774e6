#if canImport(Glibc)
import Glibc
#endif
import Chrono
import JSON
import Storage
import Threads
#if SIMULATION
import Mutants
#endif

/// Where and how to reach PostgreSQL.
public struct PostgresOptions: Sendable {
    /// A libpq connection URL (`postgres://user:password@host/db`).
    public var url: String
    /// The schema every object lives in.
    public var schema: String = "healthkernel"
    /// How long start-up retries an unreachable server.
    public var connectTimeoutSeconds: Int = 30
    /// Tombstones kept per user and synced table; 0: no limit (see `Tombstones`).
    public var tombstonesPerUser = 0
    /// Changes from which a unit of work is big (`Transaction.bigUnit`): planned on a worker, committed detached.
    public var bigUnit = Transaction.bigUnit
    /// Where connections come from: libpq at `url` unless given (the simulation's model of the server).
    public var database: (any Database)?
    /// `url` is a transaction-mode pooler (PgBouncer, Supavisor, RDS Proxy): nothing is kept in a
    /// session (`DatabaseConnection.pooled`), and change notifications are heard on `listenURL`.
    public var pooler = false
    /// A direct connection (not through the pooler) for `LISTEN`: without one, a kernel behind a pooler
    /// hears no other kernel's changes, and `events.subscribe` streams get this kernel's own only.
    public var listenURL: String?

    public init(url: String) { self.url = url }

    /// The database sessions are opened on.
    var server: any Database { database ?? LibPQDatabase(url: url, pooled: pooler) }
    /// Where the change listener connects, if anywhere.
    var listenServer: (any Database)? {
        if let database { return database }
        if let listenURL { return LibPQDatabase(url: listenURL) }
        return pooler ? nil : LibPQDatabase(url: url)
    }
}

/// Storage on PostgreSQL: the system of record when several kernels serve one user base.
///
/// A request's reads and its commit run on the serving thread's connection, in a transaction of its own,
/// or (`groupCommit`, as the kernel runs it) in a savepoint of the batch's transaction, which the
/// dispatcher's flush commits. The first statement that names a user takes that user's advisory lock in
/// the same pipeline, so every read a request makes of a user is covered by the lock its commit holds
/// too: two kernels serving one user take turns. Feed positions come from a per-user counter taken
/// under that lock, so a user's feed is in commit order across kernels. `endRequest()` ends a request
/// that committed nothing (it held only reads and locks).
public final class PostgresStore: Storage, @unchecked Sendable {
    public let options: PostgresOptions
    let clock: Clock
    let log: @Sendable (String) -> Void
    /// The serving thread's connection.
    let main: any DatabaseSession
    /// Connections for the worker threads that read through views, taken one per read.
    private let pool: Locked<[any DatabaseSession]>
    var slots: [PostgresTableBase] = []
    /// Whether the current request's scope is open (its transaction, or with `groupCommit` its
    /// savepoint), the users locked so far (in the batch's transaction), and those the current request
    /// locked (released if it rolls back).
    private var open = false
    private var locked: Set<String> = []
    private var requestLocks: [String] = []
    /// Whether the requests of one batch share one transaction, a savepoint each, committed when the
    /// dispatcher flushes (one commit, one WAL flush, for every write the batch answers). Off, every
    /// request commits on its own (tools, tests that drive the store directly).
    public var groupCommit = false
    /// The batch's transaction: whether open, the commits made in it, their changes for host events and
    /// announcement to await, and commits whose batch failed (reported by the next flush).
    private var batchOpen = false
    private var batchCommits: ClosedRange<UInt64>?
    private var batchChanges: [CommittedChange] = []
    /// The listener's epoch when every commit of the batch with changes ran its statements, or nil (not
    /// connected, or not the same for all). A commit's announcement is sent only if some listener was
    /// registered when its statement ran, so the epoch at COMMIT cannot tell whether it will be heard: a
    /// listener that registered in between waited 10 s for announcements never sent, while later
    /// changes of the user went ahead (found by the simulation with three kernels, seed 204154).
    private var batchEpoch: Int?
    /// Users the batch's transaction wrote (`viewedVersions(of:in:)` commits it before views of them).
    private var batchUsers: Set<String> = []
    private var failedCommits: [ClosedRange<UInt64>] = []
    /// Commits whose COMMIT's outcome could not be learnt (`outcome(of:on:backend:)`): they may have landed.
    private var unknownCommits: [ClosedRange<UInt64>] = []
    /// Statements sent ahead of the next pipeline instead of on their own (no round trip): the end of a
    /// request's savepoint, and writes that cannot be refused. How many led the last pipeline.
    private var deferred: [Statement] = []
    /// Synced deletes per table and user since this kernel last had old tombstones dropped.
    private var deletesSinceDrop: [TablePair: Int] = [:]
    private var ledBy = 0
    /// Commits made so far (the dispatcher's acknowledgement counter).
    public private(set) var lastCommitID: UInt64 = 0
    /// The unit of work now running: whether a big commit of it may run detached (`DetachedCommits`).
    private var unit = UnitOfWork()
    public var mayFinishLater: Bool { unit.mayFinishLater }

    public func beginUnit(mayFinishLater: Bool) { unit.begin(mayFinishLater: mayFinishLater, lastCommit: lastCommitID) }

    public func attachToUnit(_ tx: Transaction) { unit.attach(tx) }
    public var attachedToUnit: [Transaction.Entry] { unit.pending }

    public func endUnit() -> ClosedRange<UInt64>? {
        endRequest()
        return unit.end(lastCommit: lastCommitID)
    }
    /// Versions of users this request read (`version(of:)`): what a detached commit checks again.
    var versionsRead: [String: UInt64] = [:]
    /// Big commits running on connections of their own.
    let detached = DetachedCommits()
    /// Whether committed changes are kept for `takeCommittedChanges` and other kernels' changes heard
    /// (some host subscribed).
    public var collectsChanges = false {
        didSet {
            guard collectsChanges != oldValue else { return }
            if collectsChanges {
                listener?.start()
            } else {
                listener?.stop()
                (ownUnheard, ownUnheardCount, handedThrough) = ([:], 0, [:])
            }
        }
    }
    /// This kernel's committed changes to hand over at the next `takeCommittedChanges`: those no
    /// announcement will bring back (see `keep`).
    private var committedChanges: [CommittedChange] = []
    /// This kernel's committed changes waiting for their announcement to be heard back, per user in
    /// commit order, with the listener's epoch when they were committed and when (monotonic µs).
    private var ownUnheard: [String: [(change: CommittedChange, epoch: Int, at: UInt64)]] = [:]
    private var ownUnheardCount = 0
    /// Per user, the greatest feed position handed over while collecting (`handOver`).
    private var handedThrough: [String: UInt64] = [:]
    /// Hears every kernel's commits while some host subscribed.
    /// nil behind a transaction pooler without `listenURL`: no other kernel's changes are heard.
    let listener: ChangeListener?
    /// What this kernel's announcements carry as their origin: `k` and 16 random hex digits, drawn at
    /// start. Server process ids cannot serve: a process of another kernel may get the number of one
    /// of ours that ended, and its announcements would be taken for ours and never read. A random id
    /// of 64 bits is shared by two kernels of one database with odds of about n²/2⁶⁵.
    let kernelID: String
    /// Where the kernel id and a first shared secret are drawn from.
    let random: RandomSource
    /// How long an own change waits to be heard back before it is handed over anyway (a listener that
    /// far behind is not keeping order for anyone), and how many may wait.
    static let unheardWaitMicros: UInt64 = 10_000_000
    static let unheardLimit = 100_000
    /// Called on another thread when other kernels' changes arrive, to wake the serving thread.
    public var onRemoteChanges: @Sendable () -> Void {
        get {
            guard let listener else { return {} }
            return listener.onArrival
        }
        set { listener?.onArrival = newValue }
    }
    /// The schema, quoted for SQL.
    let schema: String
    /// Where detached commits and the change listener run: their own threads, or (given, as the simulation
    /// gives its executor) jobs of `executor` and `pollListener()`.
    public func runOff(on executor: any Executor) {
        detached.threads = executor
        listener?.ownThread = false
    }

    /// One round of the change listener, when it has no thread (`runOff(on:)`); what it hears is taken
    /// by the next `takeCommittedChanges`.
    public func pollListener() { listener?.poll(timeoutMilliseconds: 0) }
    /// Seeds the user locks' hash with the schema: advisory locks are per database, and deployments in
    /// other schemas of it must not wait for each other's users.
    let lockSeed: Int64
    /// The channel commits are announced on: one per schema, since channels are per database.
    let channel: String
    /// The schema's version before and after start-up (equal when it was current).
    public private(set) var migration = (from: 0, to: 0)

    /// Connects (retrying for `connectTimeoutSeconds`, a line in the log per attempt) and brings the
    /// schema to this binary's version.
    public init(options: PostgresOptions, clock: Clock, random: RandomSource = SystemRandom(),
                log: @escaping @Sendable (String) -> Void) throws(PostgresOpenError) {
        self.options = options
        self.clock = clock
        self.random = random
        let hex = String(random.next(), radix: 16)
        kernelID = "k" + String(repeating: "0", count: 16 - hex.count) + hex
        self.log = log
        schema = Schema.quote(options.schema)
        let deadline = clock.monotonicMicros() + UInt64(options.connectTimeoutSeconds) * 1_000_000
        var attempt = 0
        var connection: (any DatabaseSession)?
        while connection == nil {
            attempt += 1
            do {
                connection = try options.server.connect(setup: Self.session(Schema.quote(options.schema)), log: log)
            } catch {
                guard clock.monotonicMicros() < deadline else { throw .unreachable(error.description) }
                log("attempt \(attempt): \(error.description); retrying")
                clock.pause(micros: 1_000_000)
            }
        }
        main = connection!
        pool = Locked([])
        var seed: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a of the schema name
        for byte in options.schema.utf8 { seed = (seed ^ UInt64(byte)) &* 0x100_0000_01b3 }
        lockSeed = Int64(bitPattern: seed)
        // Channel names are identifiers: at most 63 bytes, cut on a character boundary.
        var channel = "hk_"
        for c in options.schema where channel.utf8.count + c.utf8.count <= 63 { channel.append(c) }
        self.channel = channel
        listener = options.listenServer.map {
            ChangeListener(database: $0, setup: Self.session(Schema.quote(options.schema)), channel: channel, log: { log($0) })
        }
        if !options.pooler { try Self.refuseTransactionPooler(main) }
        do {
            migration = try Schema.migrate(main, schema: options.schema)
        } catch {
            throw .schema(error)
        }
    }

    /// Session settings of every connection, run again after a reconnect. A search path naming a schema
    /// that does not exist yet is allowed: the migration creates it before any query uses it.
    ///
    /// A transaction left idle for `idleTransactionTimeout` is ended by the server. The kernel never
    /// leaves one idle but while its own thread works on the batch; but when the network between kernel
    /// and server fails silently (no reset reaches the server: a partition, a failover, a NAT that
    /// forgets), the server's backend goes on holding the transaction, and with it the advisory locks of
    /// its users, until TCP keepalive notices, two hours by default: every request of those users, on
    /// every kernel, waited that long (found by the simulation on its model of PostgreSQL).
    private static func session(_ schema: String) -> [Statement] {
        [Statement("SET application_name TO 'healthkernel'"), Statement("SET search_path TO \(schema)"),
         Statement("SET idle_in_transaction_session_timeout TO '\(idleTransactionTimeoutSeconds)s'")]
    }

    /// See `session`: far above any batch's work between two of its statements (milliseconds), far
    /// below the hours a silently lost connection otherwise holds its users' locks.
    static let idleTransactionTimeoutSeconds = 60

    /// A transaction-mode pooler hands each transaction to any server connection, so session settings
    /// (the search path) and prepared state would be lost between requests.
    private static func refuseTransactionPooler(_ connection: any DatabaseSession) throws(PostgresOpenError) {
        do {
            let results = try connection.run([Statement("SELECT pg_backend_pid()"), Statement("SELECT pg_backend_pid()")])
            if results.contains(where: { $0.error != nil }) || results[0].scalar != results[1].scalar {
                throw PostgresOpenError.pooler
            }
        } catch let error as PostgresOpenError {
            throw error
        } catch {
            throw .unreachable("\(error)")
        }
    }

    // MARK: Tables

    public func table<Row: StoredRow>(_ name: String, of type: Row.Type, orderedBy orderKey: (@Sendable (Row) -> String)?,
                                      entity: Entity?) -> any StorageTable<Row> {
        let t = PostgresTable<Row>(name: name, slot: slots.count, store: self, orderKey: orderKey, entity: entity)
        slots.append(t)
        storedAccess[name] = StoredAccess(t)
        return t
    }

    public func view<Row: StoredRow>(_ table: any StorageTable<Row>, user: String) -> any StorageTable<Row> {
        guard let table = slots[table.slot] as? PostgresTable<Row> else { preconditionFailure("\(table.name) is not a table of this store") }
        return table.onPool()
    }

    /// Every registered table's stored-form access, by name (`store import`).
    public private(set) var storedAccess: [String: StoredAccess] = [:]

    // MARK: Reading

    /// Runs `statements` on the serving connection inside the request's transaction, after taking the
    /// locks of `users` it does not hold yet: one round trip. Returns the statements' results.
    func read(users: [String], _ statements: [Statement]) throws(StorageError) -> [StatementResult] {
        let (results, first) = try pipeline(locking: users, statements)
        try checkDeferred(results)
        if let failed = results.first(where: { $0.error != nil })?.error {
            endRequest()
            if failed.state == Self.busy { commitBatch() }
            throw error(failed)
        }
        return Array(results[first...])
    }

    /// Fetches `rows` in one round trip and keeps them for the `get`s of the request, and of the batch's
    /// later requests (`PrefetchedRows`); rows held already cost nothing, so a request whose rows the
    /// batch read ahead makes no round trip here. While `readAhead` declares, only notes them.
    public func prefetch(_ rows: @autoclosure () -> [(table: TableHandle, user: String, key: String)]) throws(StorageError) {
        if declared != nil {
            declared! += rows()
            return
        }
        let rows = rows().filter { !((readInSnapshot || locked.contains($0.user)) && prefetched.contains(slot: $0.table.slot, user: $0.user, key: $0.key)) }
        guard !rows.isEmpty else { return }
        var users: [String] = []
        for row in rows where !users.contains(row.user) { users.append(row.user) }
        let results = try read(users: users, rows.map(Self.select))
        for (row, result) in zip(rows, results) {
            prefetched.fetched(slot: row.table.slot, user: row.user, key: row.key, body: result.scalar)
        }
    }

    private static func select(_ row: (table: TableHandle, user: String, key: String)) -> Statement {
        Statement("SELECT body FROM rows WHERE tbl = $1 AND usr = $2 AND key = $3", [row.table.name, row.user, row.key])
    }

    /// A prefetched row as the batch's transaction holds it; nil when not prefetched.
    func prefetchedRow(slot: Int, user: String, key: String) -> PrefetchedRows.Held? {
        prefetched[slot, user, key]
    }

    private var prefetched = PrefetchedRows()
    /// The rows and scans named so far while `readAhead` declares; nil otherwise.
    private var declared: [(table: TableHandle, user: String, key: String)]?
    private var declaredScans: [PrefetchedRows.Scan] = []
    /// The batch's reads were read ahead in a snapshot of their own, already ended (a batch of reads
    /// only, `readAhead`): what was read holds for the batch without its users' locks.
    private var readInSnapshot = false

    /// Notes a scan a request will make, while `readAhead` declares.
    func declareScan(user: String, _ statement: Statement) {
        guard declared != nil else { return }
        declaredScans.append(PrefetchedRows.Scan(user: user, sql: statement.sql, params: statement.params))
    }

    /// The rows of a scan read ahead, nil when it was not (or its user was written or let go since).
    func readAheadRows(of scan: PrefetchedRows.Scan) -> [[String?]]? {
        guard readInSnapshot || locked.contains(scan.user) else { return nil }
        return prefetched.rows(of: scan)
    }

    /// Runs `declare`, in which the batch's requests name the rows and scans they will read, then reads
    /// them all in one pipeline: the batch's requests then find them prefetched. A batch that may write
    /// opens its transaction there and locks the users first; only at the batch's
    /// start, holding no lock, so the users are locked in one order (their ids sorted): two kernels
    /// reading ahead never wait for each other in a cycle, and nothing of an earlier request can fail
    /// with it. A batch of reads that named everything they read (`declare` says so) reads in a snapshot that
    /// the same pipeline ends: one round trip for the whole batch, no lock, no transaction id. A failure
    /// costs nothing but the round trip: the requests read for themselves, and meet the failure there.
    /// O(rows and scans named) memory and statements.
    public func readAhead(_ declare: () -> Bool) {
        guard groupCommit, !batchOpen, !open, deferred.isEmpty, locked.isEmpty else { return }
        declared = []
        declaredScans = []
        let readOnly = declare()
        let named = declared!, scans = declaredScans
        declared = nil
        declaredScans = []
        var seen = Set<PrefetchedRows.Address>(), rows: [(table: TableHandle, user: String, key: String)] = []
        for row in named where seen.insert(PrefetchedRows.Address(slot: row.table.slot, user: row.user, key: row.key)).inserted {
            rows.append(row)
        }
        guard !rows.isEmpty || !scans.isEmpty else { return }
        let users = readOnly ? [] : Set(rows.map(\.user) + scans.map(\.user)).sorted()
        let opening = readOnly ? [Statement("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")]
            : [Statement("BEGIN")] + users.map { Statement("SELECT pg_advisory_xact_lock(hashtextextended($1, \(lockSeed)))", [$0]) }
        let statements = opening + rows.map(Self.select) + scans.map { Statement($0.sql, $0.params) }
            + (readOnly ? [Statement("COMMIT")] : [])
        let results: [StatementResult]
        do {
            results = try main.run(statements)
        } catch {
            log("reading a batch's rows ahead: \(error)")
            loseBatch()
            return
        }
        if let failed = results.first(where: { $0.error != nil })?.error {
            log("reading a batch's rows ahead: SQLSTATE \(failed.state): \(failed.message)")
            _ = try? main.run([Statement("ROLLBACK")])
            return
        }
        if readOnly {
            readInSnapshot = true
        } else {
            batchOpen = true
            locked.formUnion(users)
        }
        for (row, result) in zip(rows, results[opening.count...]) {
            prefetched.fetched(slot: row.table.slot, user: row.user, key: row.key, body: result.scalar)
        }
        for (scan, result) in zip(scans, results[(opening.count + rows.count)...]) {
            prefetched.scanned(scan, rows: result.rows)
        }
    }

    /// Fails the batch when a statement deferred from an earlier request failed (its writes were
    /// answered, to be confirmed by the batch's commit): every commit of the batch is reported failed,
    /// and the current request, which the failure skipped, runs again in a fresh batch.
    private func checkDeferred(_ results: [StatementResult]) throws(StorageError) {
        guard let index = results.firstIndex(where: { $0.error != nil }), index < ledBy else { return }
        log("a deferred write failed, the batch is rolled back: \(results[index].error!.message)")
        _ = try? main.run([Statement("ROLLBACK")])
        if let commits = batchCommits { failedCommits.append(commits) }
        resetBatch()
        deferred.removeAll()
        forget()
        throw StorageError.conflict("an earlier write of the batch failed")
    }

    /// SQLSTATE of a user lock another kernel holds while this batch holds others (`lock_or_busy`).
    static let busy = "HK002"

    /// Sends the statements that open the scope and lock `users`, then `statements`, in one pipeline;
    /// returns every result and where those of `statements` begin. A broken connection ends the scope
    /// (the server rolls its transaction back).
    private func pipeline(locking users: [String], _ statements: [Statement]) throws(StorageError) -> (results: [StatementResult], first: Int) {
        let opening = scope(users)
        do {
            return (try main.run(opening + statements), opening.count)
        } catch {
            loseBatch()
            throw error
        }
    }

    /// Runs `statements` on a pooled connection, outside any request (a view's read on a worker).
    func readPooled(_ statements: [Statement]) throws(StorageError) -> [StatementResult] {
        let c = try pooledConnection()
        let results = try c.run(statements)
        returnPooled(c)
        if let failed = results.first(where: { $0.error != nil }) { throw error(failed.error!) }
        return results
    }

    /// A connection of the pool (a new one when none is free), for use on one thread at a time.
    func pooledConnection() throws(StorageError) -> any DatabaseSession {
        if let c = pool.withLock({ $0.popLast() }) { return c }
        return try options.server.connect(setup: Self.session(schema), log: log)
    }

    /// Gives a pooled connection back, unless it broke.
    func returnPooled(_ c: any DatabaseSession) {
        if !c.broken { pool.withLock { $0.append(c) } }
    }

    /// The statements that open the request's scope and lock `users` not yet locked, after any deferred
    /// end of the previous request's savepoint. While the batch holds locks of earlier requests, a lock
    /// another kernel holds is not waited for (`lock_or_busy`): two batches each holding a user the other
    /// wants would deadlock. The request then runs again in a fresh batch, where it waits.
    private func scope(_ users: [String]) -> [Statement] {
        var out = deferred
        ledBy = deferred.count
        deferred.removeAll()
        if groupCommit && !batchOpen {
            out.append(Statement("BEGIN"))
            batchOpen = true
        }
        if !open {
            out.append(Statement(groupCommit ? "SAVEPOINT request" : "BEGIN"))
            open = true
        }
        let holdsOthers = locked.count > requestLocks.count
        for user in users where !locked.contains(user) {
            locked.insert(user)
            requestLocks.append(user)
            let lock = holdsOthers ? "lock_or_busy" : "pg_advisory_xact_lock"
            out.append(Statement("SELECT \(lock)(hashtextextended($1, \(lockSeed)))", [user]))
        }
        return out
    }

    /// Ends the request's scope when it is still open (it made reads only, or failed): with
    /// `groupCommit` by rolling back to its savepoint ahead of the next pipeline, which also lets go of
    /// the users it locked; else by rolling its transaction back now.
    public func endRequest() {
        guard open else { return }
        guard groupCommit else {
            do {
                _ = try main.run(deferred + [Statement("ROLLBACK")])
            } catch {
                log("ending a read transaction: \(error)")
            }
            deferred.removeAll()
            forget()
            return
        }
        rollBackRequest()
    }

    /// Queues the end of a failed or read-only request's savepoint; its locks go with it.
    private func rollBackRequest() {
        prefetched.forget(users: requestLocks)
        open = false
        deferred += [Statement("ROLLBACK TO SAVEPOINT request"), Statement("RELEASE SAVEPOINT request")]
        for user in requestLocks { locked.remove(user) }
        requestLocks.removeAll(keepingCapacity: true)
        versionsRead.removeAll()
    }

    private func forget() {
        prefetched.removeAll()
        readInSnapshot = false
        versionsRead.removeAll()
        open = false
        locked.removeAll(keepingCapacity: true)
        requestLocks.removeAll(keepingCapacity: true)
    }

    /// Commits the batch (`groupCommit`) and returns the commits that failed since the last call, and
    /// those whose outcome is unknown: the dispatcher's flush at the end of every batch of requests.
    public func flushBatch() -> (failed: [ClosedRange<UInt64>], unknown: [ClosedRange<UInt64>]) {
        commitBatch()
        if readInSnapshot { forget() }
        defer {
            failedCommits.removeAll()
            unknownCommits.removeAll()
        }
        return (failedCommits, unknownCommits)
    }

    /// The connection broke: the server rolled the batch back, so its commits failed.
    private func loseBatch() {
        if let commits = batchCommits { failedCommits.append(commits) }
        resetBatch()
        deferred.removeAll()
        forget()
    }

    private func resetBatch() {
        batchOpen = false
        batchUsers.removeAll(keepingCapacity: true)
        batchCommits = nil
        batchChanges.removeAll(keepingCapacity: true)
        batchEpoch = nil
    }

    /// Commits the batch's transaction (`groupCommit`): every commit made in it becomes durable at once,
    /// or fails together (reported by `flushCommits`). A connection lost during the commit is asked
    /// again whether it happened (`pg_xact_status`).
    func commitBatch() {
        guard batchOpen else { return }
        guard batchCommits != nil else {
            // A batch that wrote nothing (reads only) has nothing to settle and no answer waits for its
            // COMMIT: sent without waiting (the next pipeline reads its result first), it costs no round
            // trip, and it asks for no transaction id (an id per read batch runs them out: an
            // anti-wraparound vacuum every couple of days at a thousand such batches a second).
            main.send(deferred + [Statement("COMMIT")])
            deferred.removeAll()
            resetBatch()
            forget()
            return
        }
        let statements = deferred + Self.commitEnding
        deferred.removeAll()
        var made: CommitOutcome
        let backend = main.backendPID
        // Still the epoch the batch's statements ran in: else its announcements may be lost with the
        // listener's connection that ended.
        let epoch = listener?.epoch == batchEpoch ? batchEpoch : nil
        do {
            let results = try main.run(statements)
            made = results.contains { $0.error != nil } ? .notCommitted : .committed
            if made == .notCommitted {
                log("committing a batch failed: \(results.first { $0.error != nil }!.error!.message)")
                _ = try? main.run([Statement("ROLLBACK")])
            }
        } catch {
            made = Self.transactionID(on: main, sent: statements.count).map { outcome(of: $0, on: main, backend: backend) } ?? .notCommitted
            log("the connection broke while committing a batch; \(made.said): \(error)")
        }
        switch made {
        case .committed:
            if collectsChanges { keep(batchChanges, epoch: epoch) }
        case .notCommitted:
            if let commits = batchCommits { failedCommits.append(commits) }
        case .unknown:
            if let commits = batchCommits { unknownCommits.append(commits) }
        }
        resetBatch()
        forget()
    }

    /// A statement's failure in the kernel's words. PostgreSQL's own text goes to the log only: it can
    /// quote data, names and settings, and no client should see it.
    func error(_ e: (state: String, message: String)) -> StorageError {
        switch e.state {
        case "40001", "40P01", Self.busy: return .conflict("lost a race with another kernel (SQLSTATE \(e.state))")
        default:
            log("PostgreSQL refused a statement: SQLSTATE \(e.state): \(e.message)")
            return .unavailable("PostgreSQL refused the request (SQLSTATE \(e.state))")
        }
    }

    /// Read under the key's own advisory lock, held to the request's commit as a user's is: a request
    /// that acts on "nobody holds it yet" (a notification applied once) is the only one that saw so, and
    /// another kernel's read of that key waits and then sees its claim. Claiming for the same holder is
    /// allowed, so without the lock two kernels both applied one App Store notification (#53, seed 3000251).
    public func holder(of key: UniqueKey) throws(StorageError) -> String? {
        try read(users: [Self.lockName(of: key)], [Statement("SELECT usr FROM unique_keys WHERE namespace = $1 AND value = $2", [key.namespace, key.value])])[0].scalar
    }

    /// The name a unique key's lock is taken under, beside users' ids (a user id equal to it would only
    /// share the lock: the same waits, nothing more).
    static func lockName(of key: UniqueKey) -> String { "unique key \(key.namespace) \(key.value)" }

    public func version(of user: String) throws(StorageError) -> UInt64 {
        let version = UInt64(try read(users: [user], [Statement("SELECT version FROM users WHERE usr = $1", [user])])[0].scalar ?? "0") ?? 0
        versionsRead[user] = version
        return version
    }

    public func viewedVersions(of user: String, in tables: [TableHandle]) throws(StorageError) -> [UInt64] {
        if batchUsers.contains(user) { commitBatch() }
        return try versions(of: user, in: tables)
    }

    public func lastFeedPosition(of user: String?) throws(StorageError) -> UInt64 {
        guard let user else {
            return UInt64(try read(users: [], [Statement("SELECT coalesce(max(feed_seq), 0) FROM users")])[0].scalar ?? "0") ?? 0
        }
        return UInt64(try read(users: [user], [Statement("SELECT feed_seq FROM users WHERE usr = $1", [user])])[0].scalar ?? "0") ?? 0
    }

    public func feed(user: String, after: UInt64?, limit: Int, entities: Set<String>?) throws(StorageError) -> FeedPage {
        try feedPage(user: user, after: after, limit: limit, entities: entities, pooled: false)
    }

    /// A feed page, read in the request's scope under the user's lock, or (`pooled`) on a pooled
    /// connection outside any request.
    private func feedPage(user: String, after: UInt64?, limit: Int, entities: Set<String>?, pooled: Bool) throws(StorageError) -> FeedPage {
        let synced = slots.filter { t in t.entity.map { entities?.contains($0.name) ?? true } ?? false }
        guard !synced.isEmpty else { return FeedPage(entries: [], hasMore: false) }
        let names = Self.array(synced.map(\.name))
        let take = limit == .max ? "ALL" : String(limit + 1)
        let sql = """
            (SELECT tbl, key, seq, at, false FROM rows WHERE usr = $1 AND seq > $2 AND tbl = ANY($3::text[]) ORDER BY seq LIMIT \(take))
            UNION ALL
            (SELECT tbl, key, seq, at, true FROM tombstones WHERE usr = $1 AND seq > $2 AND tbl = ANY($3::text[]) AND key <> ''
             ORDER BY seq LIMIT \(take))
            ORDER BY 3 LIMIT \(take)
            """
        let floor = "SELECT coalesce(max(seq), 0) FROM tombstones WHERE usr = $1 AND key = '' AND tbl = ANY($2::text[])"
        // Without sorts the page walks the (usr, seq) indexes from the cursor, O(log n + page). Left to
        // its statistics, PostgreSQL reads every row of the user and sorts them while a freshly loaded
        // table has none yet (43.5 ms against 0.47 ms at 130,000 rows). SET LOCAL lasts to the scope's end.
        let statements = [Statement("SET LOCAL enable_sort = off"), Statement(sql, [user, String(after ?? 0), names]),
                          Statement("SET LOCAL enable_sort = on"), Statement(floor, [user, names])]
        let results = try pooled ? Array(readPooled([Statement("BEGIN")] + statements + [Statement("COMMIT")]).dropFirst())
            : read(users: [user], statements)
        let rows = results[1].rows, forgotten = results[3].scalar.flatMap { UInt64($0) } ?? 0
        let byName = Dictionary(uniqueKeysWithValues: synced.map { ($0.name, $0.entity!) })
        var entries: [FeedEntry] = []
        for row in rows.prefix(limit) {
            guard let name = row[0], let entity = byName[name], let key = row[1], let seq = row[2].flatMap({ UInt64($0) }) else { continue }
            entries.append(FeedEntry(position: seq, entity: entity.name, id: entity.id(key), op: row[4] == "t" ? .delete : .upsert,
                                     at: row[3].flatMap { Int64($0) } ?? 0))
        }
        return FeedPage(entries: entries, hasMore: rows.count > limit, forgottenThrough: forgotten)
    }

    /// Changes committed since the last call, in commit order, with their users (while `collectsChanges`).
    ///
    /// Every kernel's commits are heard in commit order on the change channel, each announcement naming
    /// the kernel that made it (`kernelID`). Other kernels' changes are read from the feed (one query per
    /// heard commit, on a pooled connection; a row changed again since shows up at its later position
    /// only). This kernel's own changes go at once when nothing of their user can come before them
    /// unheard (their positions follow on from the last handed over, or start the user's feed), else
    /// when their announcement is heard back, at its place in that order. So each user's changes go out
    /// in `seq` order whichever kernel committed them, and nothing waits on the serving thread: a change
    /// still waiting goes with a later call (the listener wakes the serving thread when it hears). Own
    /// changes no announcement will bring (the listener was down at their commit, or has reconnected
    /// since, or they waited `unheardWaitMicros`) go at once, after the heard ones.
    public func takeCommittedChanges() -> [CommittedChange] {
        let heard = listener?.inbox.takeAll(wait: false) ?? []
        var out = committedChanges
        committedChanges.removeAll(keepingCapacity: true)
        // Own changes that stopped waiting go first, so that nothing heard in this call, which may come
        // after them, goes before them.
        out += ownChangesNoLongerWaiting(heard: heard)
        for a in heard {
            let after = max(a.last >= a.count ? a.last - a.count : 0, handedThrough[a.user] ?? 0)
            if a.origin == kernelID {
                // Handed over already when nothing could come before them; else waiting here.
                guard var waiting = ownUnheard[a.user] else { continue }
                let announced = waiting.prefix { $0.change.entry.position <= a.last }
                out += announced.lazy.filter { $0.change.entry.position > after }.map(\.change)
                if let last = announced.last { handOver(a.user, through: last.change.entry.position) }
                waiting.removeFirst(announced.count)
                ownUnheardCount -= announced.count
                ownUnheard[a.user] = waiting.isEmpty ? nil : waiting
            } else if a.last > after {
                // Positions handed over already (read from the feed when own changes stopped waiting) are not told twice.
                do {
                    let page = try feedPage(user: a.user, after: after, limit: Int(a.last - after), entities: nil, pooled: true)
                    out += page.entries.filter { $0.position <= a.last }.map { CommittedChange(user: a.user, entry: $0, commit: nil) }
                    handOver(a.user, through: a.last)
                } catch {
                    log("reading another kernel's changes of a user: \(error)")
                }
            }
        }
        return out
    }

    /// Own changes that wait no longer for their announcement: committed while the listener was down or
    /// in an earlier connection of it, or waiting past `unheardWaitMicros` (or too many waiting). Each
    /// user's go after the positions between the last handed over and them, read from the feed: those
    /// were taken by commits made before (each under the user's lock), so the user's changes stay in
    /// `seq` order whether the announcements come or not. (Once they went at once, after what was heard,
    /// and a user's changes could go out of order: found by the simulation with two kernels.)
    private func ownChangesNoLongerWaiting(heard: [ChangeAnnouncement]) -> [CommittedChange] {
        guard ownUnheardCount > 0 else { return [] }
        var heardFrom: [String: UInt64] = [:]  // O(heard)
        for a in heard where handedThrough[a.user] == nil && ownUnheard[a.user] != nil {
            let from = a.last >= a.count ? a.last - a.count : 0
            heardFrom[a.user] = min(heardFrom[a.user] ?? from, from)
        }
        let epoch = listener?.epoch, now = clock.monotonicMicros(), crowded = ownUnheardCount > Self.unheardLimit
        var lost: [CommittedChange] = []
        for (user, waiting) in ownUnheard {
            let gone = waiting.prefix { crowded || $0.epoch != epoch || now - $0.at > Self.unheardWaitMicros }
            guard let last = gone.last else { continue }
            // A user none of whose changes went yet (since collecting began, or since the map was
            // forgotten) has read what this call heard before them: those announcements come after them
            // here and would be passed over.
            let first = gone.first!.change.entry.position
            if let through = handedThrough[user] ?? heardFrom[user], first > through + 1 {
                do {
                    let page = try feedPage(user: user, after: through, limit: Int(first - through - 1), entities: nil, pooled: true)
                    lost += page.entries.filter { $0.position < first }.map { CommittedChange(user: user, entry: $0, commit: nil) }
                } catch {
                    log("reading other kernels' changes of a user before its own: \(error)")
                }
            }
            lost += gone.map(\.change)
            handOver(user, through: last.change.entry.position)
            ownUnheardCount -= gone.count
            ownUnheard[user] = gone.count == waiting.count ? nil : Array(waiting.dropFirst(gone.count))
        }
        return lost
    }


    // MARK: Writing

    public func commit(_ tx: Transaction) throws(StorageError) {
        guard !tx.isEmpty else { return }
        // A month planned on a worker stays planned: the attached changes join its plan.
        let tx = unit.merge(tx) { [slots] prepared, attached in
            guard var plan = (prepared as? PreparedPlan)?.plan else { return nil }
            for entry in attached { plan.add(entry, slots) }
            return PreparedPlan(plan: plan)
        }
        let at = clock.now().milliseconds
        var plan: CommitPlan
        if let prepared = tx.prepared as? PreparedPlan, prepared.plan.collects == collectsChanges {
            plan = prepared.plan
            plan.restamp(at)
        } else {
            plan = CommitPlan(at: at, collects: collectsChanges, channel: channel, origin: kernelID)
            for entry in tx.entries { plan.add(entry, slots) }
        }
        dropOldTombstones(tx, &plan)
        guard groupCommit else { return try commitAlone(plan) }
        if let (user, version) = detachable(tx, plan) {
            // Off the serving thread; the request's scope (its read of the version) ends as a read's.
            lastCommitID += 1
            let statements = plan.finish(copying: true)
            detach(plan, statements, user: user, version: version, commit: lastCommitID)
            return
        }
        let statements = plan.finish() + [Statement("RELEASE SAVEPOINT request")]
        let opening = scope(plan.users)
        if plan.claims.isEmpty && !collectsChanges {
            // Nothing in it can be refused (no unique key) and no result is needed (no host events):
            // the writes go ahead of the next pipeline, and the batch's commit confirms them.
            deferred = opening + statements
            joinBatch(plan.users, tx.entries)
            return
        }
        let results: [StatementResult]
        let epoch = listener?.epoch  // before the statements ask whether anyone listens
        do {
            results = try main.run(opening + statements)
        } catch {
            loseBatch()
            throw error
        }
        try checkDeferred(results)
        let first = opening.count
        if let index = results.firstIndex(where: { $0.error != nil }) {
            rollBackRequest()
            if results[index].error!.state == Self.busy { commitBatch() }
            throw commitError(results, at: index, first: first, plan)
        }
        joinBatch(plan.users, tx.entries)
        guard collectsChanges else { return }
        batchEpoch = batchChanges.isEmpty || batchEpoch == epoch ? epoch : nil
        batchChanges += plan.changes(results[first...], commit: lastCommitID)
    }

    /// Counts the unit of work's synced deletes per table and user, and has the plan drop old
    /// tombstones where a quarter of the limit has been deleted since this kernel last looked. Other
    /// kernels count their own deletes, so a user keeps at most about the limit plus a quarter of it per
    /// kernel. The counts are forgotten past 100,000 pairs (memory stays bounded; a drop comes later).
    private func dropOldTombstones(_ tx: Transaction, _ plan: inout CommitPlan) {
        let limit = options.tombstonesPerUser
        guard limit > 0 else { return }
        for entry in tx.entries {
            guard case .delete(let handle, let user, _) = entry, slots[handle.slot].entity != nil else { continue }
            let pair = TablePair(slot: handle.slot, user: user)
            let count = (deletesSinceDrop[pair] ?? 0) + 1
            if count >= max(1, limit / 4) {
                plan.dropOldTombstones(slots[handle.slot], user: user, limit: limit)
                deletesSinceDrop[pair] = nil
            } else {
                if deletesSinceDrop.count >= 100_000 { deletesSinceDrop.removeAll() }
                deletesSinceDrop[pair] = count
            }
        }
    }

    /// A synced table and a user, for `deletesSinceDrop`.
    struct TablePair: Hashable {
        let slot: Int
        let user: String
    }

    /// Closes the request's scope after its commit (`entries`) joined the batch: the rows held for the
    /// batch's later requests take its writes.
    private func joinBatch(_ users: [String], _ entries: [Transaction.Entry]) {
        batchUsers.formUnion(users)
        open = false
        #if SIMULATION
        if !Mutant.readAheadStale.isOn { prefetched.apply(entries) }
        #else
        prefetched.apply(entries)
        #endif
        versionsRead.removeAll()
        requestLocks.removeAll(keepingCapacity: true)
        lastCommitID += 1
        batchCommits = (batchCommits?.lowerBound ?? lastCommitID)...lastCommitID
    }

    /// What the failed statement `index` of a commit's pipeline means for the request.
    private func commitError(_ results: [StatementResult], at index: Int, first: Int, _ plan: CommitPlan) -> StorageError {
        let failed = results[index].error!
        if failed.state == "HK001", index >= first, let key = plan.claims[index - first] { return .taken(key) }
        if failed.state == "23505" { return .conflict("a unique constraint (SQLSTATE 23505)") }
        return error(failed)
    }

    /// Keeps committed changes of this kernel for `takeCommittedChanges`: those whose announcement the
    /// listener will hear (it was connected in `epoch` when they were committed, and they were announced)
    /// wait for it, so that they take their place among other kernels' changes; the rest go at the next
    /// call. O(changes).
    private func keep(_ changes: [CommittedChange], epoch: Int?) {
        let now = clock.monotonicMicros()
        var i = 0
        while i < changes.count {
            // One commit's changes of one user come together, their positions in order.
            let user = changes[i].user
            var end = i + 1
            while end < changes.count && changes[end].user == user { end += 1 }
            let group = changes[i..<end]
            i = end
            // Handed over at once when nothing of the user can come before them unheard: no change of
            // theirs waits, and the positions follow on from the last one handed over (or start the
            // feed). Else they wait for their announcement.
            let follows = group.first!.entry.position == (handedThrough[user] ?? 0) + 1
            guard ownUnheard[user] != nil || !follows else {
                committedChanges += group
                handOver(user, through: group.last!.entry.position)
                continue
            }
            // Changes no announcement will bring (the listener is down, or the payload too long) wait too,
            // behind the user's earlier ones, in an epoch no listener has (-1): the next call sends them,
            // after the positions before them read from the feed. (Sent at once, they once went ahead of
            // the user's earlier changes still waiting: found by the simulation with two kernels.)
            let heardIn = CommitPlan.announcesChanges(of: user) ? epoch ?? -1 : -1
            ownUnheard[user, default: []] += group.map { ($0, heardIn, now) }
            ownUnheardCount += group.count
        }
    }

    /// Notes that `user`'s changes through `position` were handed over. Forgets every user past 100,000
    /// (their next changes then wait for their announcement once), so the map stays bounded.
    private func handOver(_ user: String, through position: UInt64) {
        if handedThrough.count >= 100_000 && handedThrough[user] == nil { handedThrough.removeAll() }
        handedThrough[user] = max(handedThrough[user] ?? 0, position)
    }

    /// A commit in a transaction of its own (without `groupCommit`). The transaction's id comes back
    /// before COMMIT runs (the flush request), so that a connection lost during the commit can ask the
    /// server whether it happened.
    private func commitAlone(_ plan: CommitPlan) throws(StorageError) {
        var plan = plan
        let statements = plan.finish() + Self.commitEnding
        let opening = scope(plan.users)
        let results: [StatementResult]
        let backend = main.backendPID
        let epoch = listener?.epoch  // before COMMIT sends the announcements
        do {
            results = try main.run(opening + statements)
        } catch {
            forget()
            guard let xid = Self.transactionID(on: main, sent: opening.count + statements.count) else { throw error }
            try outcome(of: xid, on: main, backend: backend).orThrow(error)
            log("the connection broke during a commit that the server made (transaction \(xid))")
            lastCommitID += 1
            return
        }
        forget()
        let first = opening.count
        if let index = results.firstIndex(where: { $0.error != nil }) {
            _ = try? main.run([Statement("ROLLBACK")])
            throw commitError(results, at: index, first: first, plan)
        }
        lastCommitID += 1
        guard collectsChanges else { return }
        keep(plan.changes(results[first...], commit: lastCommitID), epoch: epoch)
    }

    /// The statements that end every commit: the transaction's id, and the server process's start time,
    /// come back before `COMMIT` runs (the flush request), so that a connection lost during the commit
    /// can ask the server what became of it.
    static let commitEnding = [Statement("SELECT pg_current_xact_id()::text, pg_postmaster_start_time()::text", flushAfter: true),
                               Statement("COMMIT")]

    /// A commit's transaction id, and the server that gave it (its postmaster's start time). An id's
    /// status says something only on that server: once a standby takes over, or a crashed server
    /// recovers, ids the old one gave to transactions whose records were lost are given out again.
    struct CommitTicket: Equatable, CustomStringConvertible {
        let xid: String
        let server: String
        var description: String { xid }
    }

    /// The ticket a commit's pipeline of `sent` statements (ending with `commitEnding`) got back on `c`
    /// before it broke; nil when it broke before that, so its `COMMIT` never ran.
    static func transactionID(on c: any DatabaseSession, sent: Int) -> CommitTicket? {
        let index = sent - commitEnding.count
        guard c.received.count > index, let row = c.received[index].rows.first, row.count == 2, let xid = row[0], let server = row[1] else { return nil }
        return CommitTicket(xid: xid, server: server)
    }

    /// What became of a commit whose connection broke.
    enum CommitOutcome: Equatable {
        case committed, notCommitted
        /// The server could not say in time (it is down, or the transaction is still in progress).
        case unknown(String)

        /// Returns when the server made the commit; else throws what its answer must say: `error`, the
        /// connection's own, when it was not made, `outcomeUnknown` when nobody can tell.
        func orThrow(_ error: StorageError) throws(StorageError) {
            switch self {
            case .committed: return
            case .notCommitted: throw error
            case .unknown(let why): throw StorageError.outcomeUnknown(why)
            }
        }

        var said: String {
            switch self {
            case .committed: return "the server made the commit"
            case .notCommitted: return "it is lost"
            case .unknown(let why): return "its outcome is unknown (\(why))"
            }
        }
    }

    /// What `ask` answers when the server is not the one that gave the transaction its id.
    static let anotherServer = "another server"

    /// How long a commit's fate is asked after its connection broke, before it is answered as unknown.
    static let outcomeWaitMicros: UInt64 = 5_000_000

    /// What became of the ticket's transaction, asked on `connection` (the serving connection, which
    /// reconnects, or a pooled one) after the connection of server process `backend` broke. A
    /// transaction still `in progress` is a COMMIT still running on the old backend (waiting for a
    /// synchronous standby, say) that may land after we ask: that backend is ended (a commit already
    /// made locally stays made; one not yet made is rolled back), and the status asked again until it is
    /// final, for at most `outcomeWaitMicros`. Never "not committed" unless the server says so, and only
    /// the server that gave the id is asked: after a failover or a crash recovery the answer is unknown
    /// (the id may be another transaction's by then, found by the simulation with three kernels).
    func outcome(of ticket: CommitTicket, on connection: any DatabaseSession, backend: Int32) -> CommitOutcome {
        Self.outcome(of: ticket.xid, waitingMicros: Self.outcomeWaitMicros, clock: clock, ask: { () throws(StorageError) -> String? in
            let answer = try connection.run([Statement("SELECT pg_xact_status($1::xid8), pg_postmaster_start_time()::text", [ticket.xid])])
            if let failed = answer[0].error { throw StorageError.unavailable("pg_xact_status failed: SQLSTATE \(failed.state)") }
            let server = answer[0].rows.first?.dropFirst().first ?? nil
            #if SIMULATION
            if Mutant.outcomeAcrossFailover.isOn { return answer[0].scalar }
            #endif
            return server == ticket.server ? answer[0].scalar : Self.anotherServer
        }, endBackend: {
            // Behind a pooler the process id is the pooler's to give, not the server's: nothing is ended,
            // and a commit still in progress when the wait is over is unknown.
            guard backend > 0, !options.pooler else { return }
            _ = try? connection.run([Statement("SELECT pg_terminate_backend($1::int)", [String(backend)])])
        })
    }

    /// The rule of `outcome(of:on:backend:)`, apart from the database: `ask` answers `pg_xact_status`
    /// (`committed`, `aborted`, `in progress`, or nil when the server no longer knows; `anotherServer`
    /// when the server is not the one that gave the id), or throws when it
    /// cannot be reached; `endBackend` ends the old server process once.
    static func outcome(of xid: String, waitingMicros: UInt64, clock: Clock = SystemClock(), ask: () throws(StorageError) -> String?,
                        endBackend: () -> Void, pause: ((UInt32) -> Void)? = nil) -> CommitOutcome {
        let pause = pause ?? { clock.pause(micros: UInt64($0)) }
        let deadline = clock.monotonicMicros() + waitingMicros
        var ended = false
        while true {
            let status: String?
            do {
                status = try ask()
            } catch {
                guard clock.monotonicMicros() < deadline else { return .unknown("the server cannot be reached to ask (\(error))") }
                pause(100_000)
                continue
            }
            switch status {
            case "committed": return .committed
            case "aborted": return .notCommitted
            case anotherServer:
                // Its records may be gone with the old server, and its id another transaction's now.
                return .unknown("the server restarted or a standby took over since transaction \(xid) was sent")
            case "in progress":
                if !ended {
                    ended = true
                    endBackend()
                    continue
                }
                guard clock.monotonicMicros() < deadline else { return .unknown("transaction \(xid) is still in progress") }
                pause(50_000)
            default:
                // NULL: too old for the server to remember, which a commit of a moment ago never is.
                return .unknown("the server no longer knows transaction \(xid)")
            }
        }
    }

    public func upgrade(_ tx: Transaction) {
        do {
            try commit(tx)
        } catch {
            log("upgrade of stored data failed: \(error)")
        }
    }

    /// A PostgreSQL array literal of `values` (text).
    static func array(_ values: [String?]) -> String {
        var out = "{"
        for (i, v) in values.enumerated() {
            if i > 0 { out += "," }
            guard let v else {
                out += "NULL"
                continue
            }
            out += "\""
            for c in v.unicodeScalars {
                if c == "\"" || c == "\\" { out += "\\" }
                out.unicodeScalars.append(c)
            }
            out += "\""
        }
        return out + "}"
    }

    /// Where the data lives, for `kernel.info` and logs: host, database and schema, never the password.
    public var description: String {
        let e = endpoint
        return "postgresql host \(e.host) port \(e.port) database \(e.database) schema \(options.schema)"
    }

    /// Host (or socket folder), port and database of the connection.
    public var endpoint: (host: String, port: String, database: String) { main.endpoint }

    /// Per user, the greatest feed position `restore` gave so far.
    var restoredPositions: [String: UInt64] = [:]

    /// Rows in every table, as PostgreSQL estimates them.
    public func estimatedRowCount() throws(StorageError) -> Int {
        // The schema's name is data: a parameter, never part of the SQL text (it once was, inside a literal).
        let sql = "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass($1)"
        return Int(try read(users: [], [Statement(sql, [schema + ".rows"])])[0].scalar ?? "0") ?? 0
    }

    /// A secret every kernel on the database shares (made by the first that needs it): the signing
    /// secret of tokens when none is configured, so kernels accept each other's tokens and cursors.
    public func sharedSecret(named name: String) throws(StorageError) -> [UInt8] {
        let bytes = random.bytes(48)
        let fresh = bytes.map { String($0, radix: 16) }.joined()
        let results = try main.run([
            Statement("INSERT INTO shared (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", [name, fresh]),
            Statement("SELECT value FROM shared WHERE name = $1", [name]),
        ])
        try Schema.check(results)
        guard let value = results[1].scalar, value.utf8.count >= 32 else { throw StorageError.corrupt("shared \(name) is too short") }
        return Array(value.utf8)
    }

    /// Closes the connections.
    public func shutdown() {
        _ = applyBacklog(budgetMicros: .max)  // detached commits finish first
        listener?.stop(wait: true)
        endRequest()
        commitBatch()
        pool.withLock { $0.removeAll() }
    }
}

/// Why the PostgreSQL store could not open.
public enum PostgresOpenError: Error, CustomStringConvertible {
    case unreachable(String)
    case schema(MigrationError)
    case pooler

    public var description: String {
        switch self {
        case .unreachable(let m): return m
        case .schema(let e): return e.description
        case .pooler:
            return "the connection goes through a transaction-mode pooler (consecutive statements ran on different server "
                + "connections): set store.pooler to true (and store.listenUrl to a direct URL, for other kernels' events), "
                + "or use a direct connection or a session-mode pooler"
        }
    }
}
