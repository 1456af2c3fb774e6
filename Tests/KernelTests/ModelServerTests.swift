import Postgres
@testable import PostgresModel
import Storage
import Testing
import TestSupport
import Threads

/// The model of PostgreSQL waits, refuses and shows what the server would, with the interleaving forced:
/// a second session runs on a thread of its own, and the test goes on once the model says it waits.
@Suite(.oneStoreOnly) struct ModelServerTests {
    let server = ModelServer()

    func session() throws -> any DatabaseSession {
        let s = try server.connect(setup: [Statement("SET search_path TO m")], log: { _ in })
        return s
    }

    /// Migrates schema `m` with the kernel's own migrations, through a store that is closed again.
    func migrated() throws {
        var options = PostgresOptions(url: "postgres://model")
        options.database = server
        options.schema = "m"
        let store = try PostgresStore(options: options, clock: FixedClock(), log: { _ in })
        store.shutdown()
    }

    /// Runs `body` on a thread of its own; returns a wait for its result.
    func background<T: Sendable>(_ body: @escaping @Sendable () -> T) -> () -> T {
        let inbox = Inbox<T>()
        spawnThread { inbox.put(body()) }
        return { inbox.takeAll(wait: true)[0] }
    }

    /// Until session `pid` waits for a lock (the model's own word, not a sleep).
    func untilWaiting(_ pid: Int32) {
        server.state.withLock(waitingUntil: { $0.waitsFor[pid] != nil }) { _ in }
    }

    @Test func aSecondWriterWaitsForTheFirstsTransactionAndThenSeesItsCommit() throws {
        try migrated()
        let a = try session(), b = try session()
        let upsert = """
            INSERT INTO users (usr, feed_seq, version) VALUES ($1, $2, 1)
            ON CONFLICT (usr) DO UPDATE SET feed_seq = users.feed_seq + $2, version = users.version + 1 RETURNING feed_seq
            """
        #expect(try a.run([Statement("BEGIN"), Statement(upsert, ["u", "5"])])[1].scalar == "5")
        // Not committed: another session does not see it.
        #expect(try b.run([Statement("SELECT feed_seq FROM users WHERE usr = $1", ["u"])])[0].rows.isEmpty)
        nonisolated(unsafe) let writer = b
        let done = background { (try? writer.run([Statement(upsert, ["u", "2"])]))?.first?.scalar ?? nil }
        untilWaiting(b.backendPID)
        _ = try a.run([Statement("COMMIT")])
        #expect(done() == "7", "the second writer ran again on the committed row")
    }

    @Test func aCycleOfAdvisoryLockWaitsFailsOneWaiterWith40P01() throws {
        try migrated()
        let a = try session(), b = try session()
        let lock = "SELECT pg_advisory_xact_lock(hashtextextended($1, 1))"
        _ = try a.run([Statement("BEGIN"), Statement(lock, ["x"])])
        _ = try b.run([Statement("BEGIN"), Statement(lock, ["y"])])
        nonisolated(unsafe) let waiter = b
        let blocked = background { (try? waiter.run([Statement(lock, ["x"])]))?.first?.error?.state }
        untilWaiting(b.backendPID)
        let closing = try a.run([Statement(lock, ["y"])])
        #expect(closing[0].error?.state == "40P01", "the wait that closes the cycle is refused")
        _ = try a.run([Statement("ROLLBACK")])
        #expect(blocked() == nil, "the other waiter gets its lock once the first rolls back")
        _ = try b.run([Statement("COMMIT")])
    }

    @Test func afterAnErrorThePipelineSkipsTheRestAndTheTransactionRefusesUntilRolledBack() throws {
        try migrated()
        let a = try session()
        let results = try a.run([Statement("BEGIN"), Statement("SELECT 1 / (coalesce((SELECT version FROM users WHERE usr = $1), 0) = $2::bigint)::int", ["u", "3"]),
                                 Statement("SELECT feed_seq FROM users WHERE usr = $1", ["u"])])
        #expect(results[1].error?.state == "22012")
        #expect(results[2].error == nil && results[2].rows.isEmpty, "skipped, as in pipeline mode")
        #expect(try a.run([Statement("SELECT feed_seq FROM users WHERE usr = $1", ["u"])])[0].error?.state == "25P02")
        _ = try a.run([Statement("ROLLBACK")])
        #expect(try a.run([Statement("SELECT feed_seq FROM users WHERE usr = $1", ["u"])])[0].error == nil)
        #expect(try a.run([Statement("SELECT no_such_thing()")])[0].error?.state == "42601", "an unknown statement names itself")
    }
}
