#if canImport(Glibc)
import Glibc
#endif
import Storage
import Threads
#if SIMULATION
import Mutants
#endif

/// Big commits run on a connection of their own, on a thread of their own, instead of in the serving
/// thread's batch: a month of samples is 43,000 rows, seconds of PostgreSQL's time, during which the
/// serving thread answered nobody. The serving thread hands the commit over and goes on; the dispatcher
/// holds the request's answer (and the same stream's later requests of the user) until `isApplied`,
/// and answers -32050 instead when the commit failed.
///
/// The detached transaction takes the user's advisory lock like any request and checks first that the
/// user's version is still the one the request read, so nothing another request or kernel wrote
/// meanwhile is overwritten by a stale plan (the commit then fails and is answered -32050). Another
/// request of the same user, on this kernel or another, waits for the lock as it would for any commit.
final class DetachedCommits: @unchecked Sendable {
    /// Commits handed over and not yet finished, and those that failed or whose outcome is unknown, with
    /// why (until the dispatcher asks).
    private let state = Locked<(running: Set<UInt64>, failed: [UInt64: StorageError])>(([], [:]))
    /// One thread: big commits go one after another. Two (two backends writing months side by side) gave
    /// the same ingest rate on a 2-core machine and held other users' commits longer behind the WAL:
    /// many.py's light host p99 was 188-246 ms with two, 124-149 ms with one (INSERTs over arrays); with
    /// COPY, 36,339 samples/s and p99 249 ms with two against 37,292 and 119 ms with one. At the serving
    /// thread's priority, not the workers' nice 19: it holds a user's lock while it runs, and a thread
    /// starved on purpose while others wait for its lock is a priority inversion (#52 defect 8).
    /// Made on first use: a kernel given an executor (`PostgresStore.runOff(on:)`) starts no thread here
    /// (a pool's threads never end, and the simulation starts thousands of kernels).
    lazy var threads: any Executor = WorkerPool(threads: 1, priority: .serving)
    /// Wakes the serving thread when a commit finished (set by the kernel).
    let onFinished = Locked<@Sendable () -> Void>({})
    /// A fault point for tests: the connection a detached commit runs on, once it has one.
    let connectionForTest = Locked<(any DatabaseSession)?>(nil)

    func start(_ commit: UInt64) { state.withLock { _ = $0.running.insert(commit) } }

    func finish(_ commit: UInt64, failure: StorageError?) {
        state.withLock {
            $0.running.remove(commit)
            if let failure { $0.failed[commit] = failure }
        }
        onFinished.withLock { $0 }()
    }

    func isRunning(_ commit: UInt64) -> Bool { state.withLock { $0.running.contains(commit) } }

    var anyRunning: Bool { state.withLock { !$0.running.isEmpty } }

    func takeFailure(_ commit: UInt64) -> StorageError? { state.withLock { $0.failed.removeValue(forKey: commit) } }
}

extension PostgresStore {
    /// Whether the unit of work `plan` may commit detached: the dispatcher allows it for this commit,
    /// it is big, it claims no unique key (whose loser must be answered at once), it changes one user's
    /// rows whose version this request read, and no host waits for change events (their order rests on
    /// the batch's commits). Returns the user and the version read.
    func detachable(_ tx: Transaction, _ plan: CommitPlan) -> (user: String, version: UInt64)? {
        guard mayFinishLater, groupCommit, !collectsChanges, tx.entries.count >= options.bigUnit,
              plan.claims.isEmpty, plan.users.count == 1, let user = plan.users.first, let version = versionsRead[user] else { return nil }
        return (user, version)
    }

    /// Hands `plan`, finished as `statements`, to a detached thread as commit `commit`.
    func detach(_ plan: CommitPlan, _ statements: [Statement], user: String, version: UInt64, commit: UInt64) {
        detached.start(commit)
        let (detached, log, count) = (self.detached, self.log, statements.count)
        detached.threads.submit { [self] in
            var failure: StorageError?
            do throws(StorageError) {
                let c = try pooledConnection()
                detached.connectionForTest.withLock { $0 = c }
                if let bad = try runDetached(c, plan, statements, user: user, version: version) {
                    _ = try? c.run([Statement("ROLLBACK")])
                    log(bad.state == "22012"
                        ? "a detached commit of \(count) statements not made: the user's rows changed since they were read"
                        : "a detached commit failed: SQLSTATE \(bad.state): \(bad.message)")
                    failure = .unavailable("the detached commit was not made")
                }
                returnPooled(c)
            } catch {
                log("a detached commit failed: \(error)")
                failure = error
            }
            detached.finish(commit, failure: failure)
        }
    }

    /// Runs a detached commit on `c`: its transaction takes the user's lock and checks the version read,
    /// then runs `statements`, writing each bulk with `COPY` in a savepoint. A COPY that meets a stored key
    /// (a month sent again with changes) fails with 23505; the savepoint is rolled back and the bulk's INSERT,
    /// which updates stored rows, runs instead. Asking first which keys are stored cost 0.1-0.3 s a month.
    /// Returns the first error.
    private func runDetached(_ c: any DatabaseSession, _ plan: CommitPlan, _ statements: [Statement], user: String,
                             version: UInt64) throws(StorageError) -> (state: String, message: String)? {
        var pending = [
            Statement("BEGIN"),
            Statement("SELECT pg_advisory_xact_lock(hashtextextended($1, \(lockSeed)))", [user]),
            Statement("SELECT 1 / (coalesce((SELECT version FROM users WHERE usr = $1), 0) = $2::bigint)::int", [user, String(version)]),
        ]
        #if SIMULATION
        if Mutant.detachedVersionUnchecked.isOn { pending.removeLast() }
        #endif
        // Where `statements` begin in the first run's results, and the user's feed position after the commit
        // (from the user's `users` statement, which comes before any bulk).
        var offset: Int? = pending.count
        var last: UInt64?
        for (index, statement) in statements.enumerated() {
            guard let bulk = plan.bulks[index] else {
                pending.append(statement)
                continue
            }
            let results = try c.run(pending + [Statement("SAVEPOINT bulk")])
            if let bad = results.first(where: { $0.error != nil })?.error { return bad }
            if let first = offset, let u = plan.userStatement(of: user), first + u < results.count {
                last = results[first + u].scalar.flatMap { UInt64($0) }
            }
            offset = nil
            guard let last else { return ("?????", "the user's feed position was not returned") }
            let copied = try c.copy("COPY rows (tbl, usr, key, ord, body, seq, at) FROM STDIN", plan.copyData(bulk, last: last))
            switch copied.error?.state {
            case nil: pending = [Statement("RELEASE SAVEPOINT bulk")]
            case "23505": pending = [Statement("ROLLBACK TO SAVEPOINT bulk"), Statement("RELEASE SAVEPOINT bulk"), CommitPlan.inserting(bulk, statement)]
            case _: return copied.error
            }
        }
        // A connection lost during COMMIT is settled with the server, as the batch's commit is.
        let ending = pending + Self.commitEnding
        let backend = c.backendPID
        do {
            return try c.run(ending).first(where: { $0.error != nil })?.error
        } catch {
            guard let xid = Self.transactionID(on: c, sent: ending.count) else { throw error }
            let asking: any DatabaseSession
            do { asking = try pooledConnection() } catch { throw StorageError.outcomeUnknown("the server cannot be reached to ask (\(error))") }
            defer { returnPooled(asking) }
            try outcome(of: xid, on: asking, backend: backend).orThrow(error)
            log("the connection broke during a detached commit that the server made (transaction \(xid))")
            return nil
        }
    }

    /// Makes a big unit's statements on the worker that planned it (their array literals are 12 MB of text
    /// for a month of samples, half a second of the serving thread's time); the commit sets their time.
    public func prepare(_ tx: inout Transaction) {
        guard tx.entries.count >= options.bigUnit else { return }
        // Without the changes for host events (`collectsChanges` belongs to the serving thread): a commit
        // made while a host listens makes its plan again.
        var plan = CommitPlan(at: 0, collects: false, channel: channel, origin: kernelID)
        for entry in tx.entries { plan.add(entry, slots) }
        tx.prepared = PreparedPlan(plan: plan)
    }

    /// Whether commit `id` is done (made, or failed): false while a detached thread runs it.
    public func isApplied(_ commit: UInt64) -> Bool { !detached.isRunning(commit) }

    /// Why commit `id`, detached, was not made or may not have been (told once); nil when it was made.
    public func detachedFailure(of commit: UInt64) -> StorageError? { detached.takeFailure(commit) }

    /// Nothing to apply on the serving thread: detached commits wake it when done. With an unbounded
    /// budget (shutdown, the in-process harness), waits for them.
    public func applyBacklog(budgetMicros: UInt64) -> Bool {
        guard budgetMicros == .max else { return false }
        while detached.anyRunning { usleep(1000) }
        return false
    }

    /// Called on another thread when a detached commit finished, to wake the serving thread.
    public var onCommitFinished: @Sendable () -> Void {
        get { detached.onFinished.withLock { $0 } }
        set { detached.onFinished.withLock { $0 = newValue } }
    }
}

/// A commit plan made ahead of its commit, handed from the worker to the serving thread once.
struct PreparedPlan: @unchecked Sendable {
    let plan: CommitPlan
}
