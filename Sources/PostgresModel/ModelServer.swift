import Postgres
import Storage
import Threads

/// A model of one PostgreSQL database, as the kernel uses it: in memory, at read committed. Each
/// statement sees what was committed when it starts and its own transaction's writes; a writer of a
/// row another open transaction wrote waits for that transaction to end, then runs again; advisory
/// locks wait the same way; a cycle of waits fails one waiter with 40P01, as the server's deadlock
/// detector does. Pipelines behave as libpq's pipeline mode: statements without `BEGIN` form one
/// implicit transaction up to the sync, and after an error the rest of the pipeline is skipped.
/// NOTIFY is delivered at commit, in commit order, to every session listening on the channel.
///
/// It runs the SQL the kernel sends and nothing else (`ModelSQL`): a statement it does not know fails
/// with SQLSTATE 42601 naming it, so the model cannot silently drift from the store's SQL.
///
/// Cost: committed rows are grouped per table and user, so a statement costs O(rows of the users it
/// names); a savepoint copies its transaction's writes lazily (copy on write).
public final class ModelServer: Database, @unchecked Sendable {
    struct Transaction {
        var xid: Int64?
        var explicit: Bool
        var failed = false
        var schema: String
        var writes = Writes()
        var savepoints: [(name: String, writes: Writes)] = []
    }

    struct Session {
        var schema = "public"
        var tx: Transaction?
        var listening: Set<String> = []
        var inbox: [(pid: Int32, payload: String)] = []
        /// Notifications on their way (`notifyDelayMicros`), in commit order, each with when it arrives.
        var arriving: [(at: UInt64, pid: Int32, payload: String)] = []
        var sessionLocks: [String: Int] = [:]
        /// The client's side is gone (its connection was cut or closed) but the backend has not noticed:
        /// its transaction stays open, with its locks, until it is terminated.
        var orphaned = false
        /// Which client opened it (`client(_:)`): a simulated kernel, whose sessions go when it dies.
        var tag = 0
        /// `idle_in_transaction_session_timeout` (0: none), and since when (µs) the session is idle.
        var idleTimeoutMicros: UInt64 = 0
        /// When its last statement ended, or its client side went (µs).
        var idleSince: UInt64 = 0
    }

    public struct State {
        var schemas: [String: SchemaData] = [:]
        var sessions: [Int32: Session] = [:]
        var nextPID: Int32 = 1000
        var nextXID: Int64 = 700
        var finished: [Int64: Bool] = [:]
        /// Advisory locks: holder and how many times it took the lock.
        var advisory: [String: (pid: Int32, count: Int)] = [:]
        var rowLocks: [String: [RowLock: Int32]] = [:]
        var waitsFor: [Int32: Int32] = [:]
        /// Moves whenever something another session may wait for is released: waiters look again.
        public internal(set) var generation: UInt64 = 0
        /// An armed cut: the connection that next runs a statement breaks after this many more, and
        /// whether its backend goes on (orphaned) or ends at once.
        var cut: (after: Int, orphan: Bool, failover: UInt64?)?
        /// When a notification sent now arrives (`notifyDelayMicros`), never before the one sent before it.
        var notifyAt: (_ after: UInt64?) -> UInt64 = { $0 ?? 0 }
        /// Until when (µs) no connection is accepted: a standby being promoted (`failOver`).
        var downUntil: UInt64 = 0
        /// The server process's incarnation (`pg_postmaster_start_time()`): another once a standby took over.
        var incarnation = 1
    }

    let state = Locked(State())
    /// How a session waits for a lock: the default blocks its thread; the simulation hands control back
    /// to its scheduler instead.
    public let parking: any Parking

    /// How long each notification takes to reach a listener (µs; a listener falling behind). They still
    /// arrive in commit order, as PostgreSQL delivers them. Nil: at once.
    public var notifyDelayMicros: (@Sendable () -> UInt64)?

    /// Where each statement run and its outcome are told, when set (a failing seed's SQL).
    public var trace: (@Sendable (String) -> Void)?

    /// The monotonic time in µs (for `idle_in_transaction_session_timeout`).
    let now: @Sendable () -> UInt64

    public init(parking: any Parking = ThreadParking(), now: @escaping @Sendable () -> UInt64 = { 0 }) {
        self.parking = parking
        self.now = now
        state.withLock { s in
            s.notifyAt = { [unowned self] previous in
                let at = now() + (notifyDelayMicros?() ?? 0)
                return max(at, previous ?? 0)
            }
        }
    }

    /// Moves the notifications of session `pid` that have arrived by now into its inbox.
    func deliverArrived(_ pid: Int32) {
        let t = now()
        state.withLock { s in
            guard let arriving = s.sessions[pid]?.arriving, !arriving.isEmpty else { return }
            let due = arriving.prefix { $0.at <= t }
            s.sessions[pid]!.inbox += due.map { ($0.pid, $0.payload) }
            s.sessions[pid]!.arriving.removeFirst(due.count)
        }
    }

    /// Ends the sessions idle in a transaction for longer than their `idle_in_transaction_session_timeout`,
    /// as the server does (their transactions roll back; their clients find the connection closed).
    public func expireIdle() {
        let t = now()
        let ended = state.withLock { s in
            var ended = false
            for (pid, session) in s.sessions where session.tx != nil && session.idleTimeoutMicros > 0
                && t >= session.idleSince + session.idleTimeoutMicros {
                Self.terminate(&s, pid)
                ended = true
            }
            return ended
        }
        if ended { parking.wake(state) }
    }

    public func connect(setup: [Statement], log: @escaping @Sendable (String) -> Void) throws(StorageError) -> any DatabaseSession {
        try connect(tag: 0, setup: setup, log: log)
    }

    func connect(tag: Int, setup: [Statement], log: @escaping @Sendable (String) -> Void) throws(StorageError) -> any DatabaseSession {
        let session = try ModelSession(server: self, tag: tag, log: log)
        session.setup = setup
        if let failed = try session.run(setup).first(where: { $0.error != nil })?.error {
            throw StorageError.unavailable("setting up the session failed (SQLSTATE \(failed.state))")
        }
        return session
    }

    func open(tag: Int) throws(StorageError) -> Int32 {
        let t = now()
        return try state.withLock { s throws(StorageError) in
            guard t >= s.downUntil else { throw StorageError.unavailable("the connection to PostgreSQL failed: the database system is starting up") }
            s.nextPID += 1
            s.sessions[s.nextPID] = Session(tag: tag)
            return s.nextPID
        }
    }

    /// The database as client `tag` reaches it (a simulated kernel's process).
    public func client(_ tag: Int) -> any Database { Client(server: self, tag: tag) }

    struct Client: Database {
        let server: ModelServer
        let tag: Int
        func connect(setup: [Statement], log: @escaping @Sendable (String) -> Void) throws(StorageError) -> any DatabaseSession {
            try server.connect(tag: tag, setup: setup, log: log)
        }
    }

    /// Client `tag`'s process died: the server sees its connections close and rolls their transactions back.
    public func disconnect(tag: Int) {
        state.withLock { s in
            for (pid, session) in s.sessions where session.tag == tag { Self.terminate(&s, pid) }
        }
        parking.wake(state)
    }

    /// The primary fails and a synchronous standby takes over after `downMicros`: every connection
    /// breaks, transactions not committed are gone and notifications not yet delivered are lost with
    /// their listeners' sessions; every commit stays made, and `pg_xact_status` still answers for it.
    /// The standby never saw the ids of the transactions that were open: its next id is the one after
    /// the last it saw finish, so `pg_xact_status` fails for theirs as "in the future" until new
    /// transactions are given the same ids again (and then answers for those). Until then, connecting
    /// fails.
    public func failOver(downMicros: UInt64) {
        let t = now()
        state.withLock { s in
            let open = s.sessions.values.compactMap { $0.tx?.xid }
            for pid in Array(s.sessions.keys) { Self.terminate(&s, pid) }
            for xid in open { s.finished[xid] = nil }
            s.nextXID = s.finished.keys.max() ?? s.nextXID
            s.incarnation += 1
            s.cut = nil
            s.downUntil = t + downMicros
        }
        parking.wake(state)
    }

    /// Arms a network failure: the next connection to run a statement breaks after `statements` more
    /// have run (0: before the next). With `orphan`, its backend does not notice and keeps its
    /// transaction open, locks and all, until terminated; else it rolls back at once. A COMMIT that ran
    /// before the break stays made, though its client never hears so.
    /// `statements` -1 breaks it just before the next `COMMIT` runs (after the transaction's id was
    /// given). With `failover`, the primary fails at that point instead (`failOver(downMicros:)`), between two
    /// statements of one pipeline: after a commit's id was given and before its COMMIT ran, say.
    public func armCut(after statements: Int, orphan: Bool, failover: UInt64? = nil) {
        state.withLock { $0.cut = (statements, orphan, failover) }
    }

    /// Whether a session's client side must break now (an armed cut counted down to it), and whether
    /// the primary fails over with it (after how long down).
    func cutNow(before sql: String) -> (Bool, orphan: Bool, failover: UInt64?) {
        state.withLock { s in
            guard let cut = s.cut else { return (false, false, nil) }
            if cut.after < 0 {
                guard sql == "COMMIT" else { return (false, false, nil) }
                s.cut = nil
                return (true, cut.orphan, cut.failover)
            }
            if cut.after == 0 {
                s.cut = nil
                return (true, cut.orphan, cut.failover)
            }
            s.cut = (cut.after - 1, cut.orphan, cut.failover)
            return (false, false, nil)
        }
    }

    /// The client closed or lost session `pid`: with `orphan`, its backend goes on holding its transaction
    /// (a cut the server has not noticed); else it ends and rolls its transaction back.
    func close(_ pid: Int32, orphan: Bool = false) {
        state.withLock { s in
            guard s.sessions[pid] != nil else { return }
            if orphan {
                s.sessions[pid]!.orphaned = true
                s.sessions[pid]!.idleSince = now()
            } else {
                Self.terminate(&s, pid)
            }
        }
        parking.wake(state)
    }

    static func terminate(_ s: inout State, _ pid: Int32) {
        guard s.sessions[pid] != nil else { return }
        end(&s, pid, commit: false)
        for (name, _) in s.sessions[pid]!.sessionLocks { s.advisory[name] = nil }
        s.sessions[pid] = nil
        s.waitsFor[pid] = nil
        s.generation += 1
    }

    /// Ends session `pid`'s transaction: applies its writes and sends its NOTIFYs (commit), or drops them.
    static func end(_ s: inout State, _ pid: Int32, commit: Bool) {
        guard let tx = s.sessions[pid]?.tx else { return }
        s.sessions[pid]!.tx = nil
        let made = commit && !tx.failed
        if made {
            tx.writes.apply(to: &s.schemas[tx.schema, default: SchemaData()])
            for n in tx.writes.notifies {
                for (other, session) in s.sessions where session.listening.contains(n.channel) {
                    s.sessions[other]!.arriving.append((s.notifyAt(session.arriving.last?.at), pid, n.payload))
                }
            }
        }
        if let xid = tx.xid { s.finished[xid] = made }
        for lock in tx.writes.locks { s.rowLocks[tx.schema]?[lock] = nil }
        for name in tx.writes.advisory { s.advisory[name] = nil }
        s.generation += 1
    }

    /// Whether session `pid` is still served (not ended by its client, by `pg_terminate_backend` or by a timeout).
    func isAlive(_ pid: Int32) -> Bool { state.withLock { $0.sessions[pid] != nil } }

    /// Sessions open now (orphaned ones too): what a test checks is left after a kernel stops.
    public var sessionCount: Int { state.withLock { $0.sessions.count } }

    /// A snapshot of every schema's committed contents, for checks: per schema, table, user and key, the body.
    public func committedRows(schema: String) -> [String: [String: [String: String]]] {
        state.withLock { s in
            var out: [String: [String: [String: String]]] = [:]
            for (pair, rows) in s.schemas[schema]?.rows ?? [:] {
                for (key, row) in rows { out[pair.tbl, default: [:]][pair.usr, default: [:]][key] = row.body }
            }
            return out
        }
    }

    /// Each user's feed counter and version, committed.
    public func committedUsers(schema: String) -> [String: (feedSeq: Int64, version: Int64)] {
        state.withLock { s in (s.schemas[schema]?.users ?? [:]).mapValues { ($0.feedSeq, $0.version) } }
    }
}

/// How a session of the model waits until another releases what it needs.
public protocol Parking: Sendable {
    /// Waits (not holding the lock) until `state`'s generation moves past `generation`; false when it gave
    /// up (the statement then fails as one past its `lock_timeout` does, 55P03).
    func park(_ state: Locked<ModelServer.State>, past generation: UInt64) -> Bool
    /// Wakes whoever waits on `state`.
    func wake(_ state: Locked<ModelServer.State>)
    /// Waits up to `timeoutMilliseconds` for a notification to session `pid` (a listener's poll).
    func awaitNotice(_ state: Locked<ModelServer.State>, pid: Int32, timeoutMilliseconds: Int32)
}

/// Waiting on the state's condition: sessions on threads of their own, as in tests.
public struct ThreadParking: Parking {
    public init() {}
    public func park(_ state: Locked<ModelServer.State>, past generation: UInt64) -> Bool {
        state.withLock(waitingUntil: { $0.generation != generation }) { _ in }
        return true
    }
    public func wake(_ state: Locked<ModelServer.State>) { state.wake(all: true) }
    public func awaitNotice(_ state: Locked<ModelServer.State>, pid: Int32, timeoutMilliseconds: Int32) {
        state.withLock(waitingUntil: { !($0.sessions[pid]?.inbox.isEmpty ?? true) }, timeoutMicroseconds: Int(timeoutMilliseconds) * 1000) { _ in }
    }
}
