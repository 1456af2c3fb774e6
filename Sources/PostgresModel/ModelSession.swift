import Postgres
import Storage

/// Why a statement failed: its SQLSTATE and message.
struct SQLError: Error {
    let state: String, message: String
    init(_ state: String, _ message: String) { (self.state, self.message) = (state, message) }
}

/// A statement must wait for session `holder` to release a lock, then run again from its start.
struct Blocked: Error {
    let holder: Int32
    /// The state's generation when the statement found it must wait.
    var generation: UInt64 = 0
}

/// One connection to the model: what `DatabaseConnection` is to a real server.
final class ModelSession: DatabaseSession, @unchecked Sendable {
    let server: ModelServer
    private(set) var pid: Int32
    private let log: @Sendable (String) -> Void
    private(set) var broken = false
    private(set) var received: [StatementResult] = []
    /// A test's or the simulation's cut: the next statement finds the connection gone.
    private var cut = false

    private let tag: Int
    /// Session settings run after every connect, as `DatabaseConnection` runs them.
    var setup: [Statement] = []

    init(server: ModelServer, tag: Int, log: @escaping @Sendable (String) -> Void) throws(StorageError) {
        self.server = server
        self.tag = tag
        self.log = log
        pid = try server.open(tag: tag)
    }

    deinit { server.close(pid) }

    var backendPID: Int32 { pid }
    var endpoint: (host: String, port: String, database: String) { ("model", "0", "model") }

    func cutForTest() { cut = true }

    private func reconnectIfBroken() throws(StorageError) {
        guard broken else { return }
        server.close(pid, orphan: true)
        pid = try server.open(tag: tag)
        broken = false
        cut = false
        if let failed = try run(setup).first(where: { $0.error != nil })?.error {
            try fail("setting up the session failed: \(failed.message)", orphan: false)
        }
    }

    private func fail(_ why: String, orphan: Bool = true) throws(StorageError) -> Never {
        broken = true
        server.close(pid, orphan: orphan)
        log("PostgreSQL connection failed: \(why)")
        throw StorageError.unavailable("the connection to PostgreSQL failed")
    }

    /// Runs at once (the server would, as soon as the pipeline arrives); the results are dropped.
    func send(_ statements: [Statement]) {
        guard !broken else { return }
        _ = try? run(statements)
    }

    func run(_ statements: [Statement]) throws(StorageError) -> [StatementResult] {
        try reconnectIfBroken()
        received.removeAll()
        var results: [StatementResult] = []
        var aborted = false
        for statement in statements {
            let (armed, orphan, failover) = server.cutNow(before: statement.sql)
            if armed {
                received = results
                if let failover { server.failOver(downMicros: failover) }
                try fail("cut (network failure)", orphan: orphan)
            }
            if cut { received = results; try fail("cut") }
            // A backend that was ended closed the connection: the client finds it broken.
            if !server.isAlive(pid) {
                received = results
                try fail("the server closed the connection", orphan: false)
            }
            if aborted {
                results.append(StatementResult())
                continue
            }
            let result = execute { run, s in try run.execute(statement.sql, statement.params, &s) }
            if let trace = server.trace {
                let text = ModelSQL.collapse(statement.sql)
                trace("sql \(pid): \(text.prefix(60)) \(statement.params.map { ($0 ?? "NULL").prefix(2000) })\(result.error.map { " -> \($0.state)" } ?? "")")
            }
            if result.error != nil { aborted = true }
            results.append(result)
        }
        if cut { received = results; try fail("cut") }
        sync()
        return results
    }

    /// The pipeline's sync: an implicit transaction ends (committed unless a statement failed).
    private func sync() {
        server.state.withLock { s in
            guard let tx = s.sessions[pid]?.tx, !tx.explicit else { return }
            ModelServer.end(&s, pid, commit: true)
        }
        server.parking.wake(server.state)
    }

    /// Runs one statement to its end: again after each wait for a lock, as PostgreSQL re-checks a row
    /// another transaction held. Its writes are undone when it fails or must wait.
    private func execute(_ body: (inout ModelSQL, inout ModelServer.State) throws -> [[String?]]) -> StatementResult {
        var generation: UInt64?
        while true {
            if let g = generation, !server.parking.park(server.state, past: g) {
                server.state.withLock { s in
                    s.waitsFor[pid] = nil
                    s.sessions[pid]?.tx?.failed = true
                }
                return StatementResult(error: ("55P03", "canceling statement due to lock timeout"))
            }
            let outcome: Result<[[String?]], Error> = server.state.withLock { s in
                s.waitsFor[pid] = nil
                guard s.sessions[pid] != nil else { return .failure(SQLError("57P01", "terminating connection due to administrator command")) }
                if s.sessions[pid]!.tx == nil { s.sessions[pid]!.tx = .init(explicit: false, schema: s.sessions[pid]!.schema) }
                let before = s.sessions[pid]!.tx!
                do {
                    var run = ModelSQL(pid: pid)
                    return .success(try body(&run, &s))
                } catch let blocked as Blocked {
                    Self.undo(&s, pid, to: before)
                    if Self.closesCycle(s, from: pid, to: blocked.holder) {
                        s.sessions[pid]!.tx?.failed = true
                        return .failure(SQLError("40P01", "deadlock detected"))
                    }
                    s.waitsFor[pid] = blocked.holder
                    // The generation is read under the same lock as the decision to wait: read after it,
                    // a release in between was missed and the session waited for ever.
                    return .failure(Blocked(holder: blocked.holder, generation: s.generation))
                } catch {
                    if s.sessions[pid]?.tx != nil {
                        Self.undo(&s, pid, to: before)
                        s.sessions[pid]!.tx!.failed = true
                    }
                    return .failure(error)
                }
            }
            server.state.withLock { $0.sessions[pid]?.idleSince = server.now() }
            server.parking.wake(server.state)
            switch outcome {
            case .success(let rows): return StatementResult(rows: rows)
            case .failure(let error as SQLError): return StatementResult(error: (error.state, error.message))
            case .failure(let blocked as Blocked): generation = blocked.generation
            case .failure(let error): return StatementResult(error: ("XX000", "\(error)"))
            }
        }
    }

    /// Puts session `pid`'s transaction back as it was before a statement (a statement is atomic),
    /// releasing the row and advisory locks it took.
    static func undo(_ s: inout ModelServer.State, _ pid: Int32, to before: ModelServer.Transaction) {
        guard let now = s.sessions[pid]?.tx else { return }
        for lock in now.writes.locks.subtracting(before.writes.locks) { s.rowLocks[now.schema]?[lock] = nil }
        for name in now.writes.advisory.subtracting(before.writes.advisory) { s.advisory[name] = nil }
        s.sessions[pid]!.tx = before
    }

    /// Whether session `waiter` waiting for `holder` would close a cycle of waits.
    static func closesCycle(_ s: ModelServer.State, from waiter: Int32, to holder: Int32) -> Bool {
        var at = holder, steps = 0
        while let next = s.waitsFor[at], steps < s.sessions.count + 1 {
            if next == waiter { return true }
            at = next
            steps += 1
        }
        return holder == waiter
    }

    func copy(_ sql: String, _ data: [UInt8]) throws(StorageError) -> StatementResult {
        try reconnectIfBroken()
        if cut { try fail("cut") }
        let result = execute { run, s in try run.copy(sql, data, &s) }
        server.trace?("sql \(pid): COPY \(String(decoding: data.prefix(200), as: UTF8.self))\(result.error.map { " -> \($0.state)" } ?? "")")
        return result
    }

    func notifications(timeoutMilliseconds: Int32) throws(StorageError) -> [(pid: Int32, payload: String)] {
        try reconnectIfBroken()
        if cut || server.cutNow(before: "").0 { try fail("cut", orphan: false) }
        server.deliverArrived(pid)
        let out = server.state.withLock { s -> [(pid: Int32, payload: String)] in
            defer { s.sessions[pid]?.inbox.removeAll() }
            return s.sessions[pid]?.inbox ?? []
        }
        guard out.isEmpty else { return out }
        server.parking.awaitNotice(server.state, pid: pid, timeoutMilliseconds: timeoutMilliseconds)
        return server.state.withLock { s -> [(pid: Int32, payload: String)] in
            defer { s.sessions[pid]?.inbox.removeAll() }
            return s.sessions[pid]?.inbox ?? []
        }
    }
}
