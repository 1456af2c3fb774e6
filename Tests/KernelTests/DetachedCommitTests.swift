import Chrono
import Foundation
import JSON
import JSONRPC
@testable import Kernel
@testable import Postgres
import Storage
import Testing
import Threads
import TestSupport

/// PostgreSQL's detached commits (#39): a slow request's big commit runs on a connection of its own,
/// and checks under the user's lock that the user's rows are still the version the request read.
@Suite(.oneStoreOnly) struct DetachedCommitTests {
    typealias Due = PostgresStoreTests.Due

    func open(_ schema: String) throws -> (PostgresStore, any StorageTable<Due>) {
        var options = PostgresOptions(url: TestPostgres.url)
        options.schema = schema
        let store = try PostgresStore(options: options, clock: SystemClock(), log: { _ in })
        store.groupCommit = true
        return (store, store.table("test.due", of: Due.self, orderedBy: { $0.at }))
    }

    /// Reads the user's version (as `health.ingest` does before committing), then commits `count` rows
    /// the way the dispatcher has a slow request commit, and waits for the commit; returns its id. The
    /// commit is still running right after `commit` returns (thousands of rows take PostgreSQL tens of
    /// milliseconds at least; the check comes microseconds later).
    func commitBig(_ store: PostgresStore, _ table: any StorageTable<Due>, count: Int, key: (Int) -> String = { String(format: "k%05d", $0) },
                   value: String = "", between: () -> Void = {}) throws -> UInt64 {
        var tx = Transaction()
        for i in 0..<count { tx.put(table, user: "u", key: key(i), Due(at: value + String(i))) }
        store.prepare(&tx)  // on the worker, in the kernel
        // Applying the result, as the kernel does: the version read and the commit in one unit of work.
        store.beginUnit(mayFinishLater: true)
        _ = try store.version(of: "u")
        between()
        try store.commit(tx)
        let id = try #require(store.endUnit()).upperBound
        #expect(!store.isApplied(id), "detached: the serving thread went on")
        #expect(store.flushBatch().failed.isEmpty)
        _ = store.applyBacklog(budgetMicros: .max)
        #expect(store.isApplied(id))
        return id
    }

    func rows(_ store: PostgresStore, _ table: any StorageTable<Due>) throws -> Int {
        defer { store.endRequest() }
        return try table.scan(user: "u", from: nil, to: nil, after: nil, reverse: false, limit: .max).count
    }

    @Test func aBigCommitRunsDetachedAndIsDurableWhenDone() throws {
        let (store, table) = try open(TestPostgres.freshSchema())
        defer { store.shutdown() }
        let id = try commitBig(store, table, count: Transaction.bigUnit + 100)
        #expect(store.detachedFailure(of: id) == nil)
        #expect(try rows(store, table) == Transaction.bigUnit + 100)
        #expect(try store.version(of: "u") == 1)
        store.endRequest()
    }

    /// A synced table's big group goes in by COPY when none of its keys is stored, and by its INSERT when
    /// some are (a month sent again with changes): both give every row, its body exactly (keys and values
    /// with the characters COPY's text format escapes), and feed positions in order.
    @Test func bulksOfNewKeysAreCopiedAndBulksOverStoredKeysInserted() throws {
        let (store, _) = try open(TestPostgres.freshSchema())
        defer { store.shutdown() }
        let synced = store.table("test.synced", of: Due.self, entity: Entity("due", id: { $0 }))
        let count = Transaction.bigUnit + 10
        let key = { (i: Int) in String(format: "k\\%05d\t\n\r", i) }
        _ = try commitBig(store, synced, count: count, key: key, value: "a\\\"\t")
        var first = try store.feed(user: "u", after: nil, limit: count + 5, entities: nil)
        store.endRequest()
        // Compared whole, reported briefly (a failure would print 4,106 positions).
        let positions = first.entries.map(\.position) == Array(1...UInt64(count)), ids = first.entries.map(\.id) == (0..<count).map(key)
        #expect(positions && ids, "\(first.entries.count) entries, the first \(first.entries.first.map { "\($0.position) \($0.id)" } ?? "none")")
        let id = try commitBig(store, synced, count: count, key: key, value: "b\n")
        #expect(store.detachedFailure(of: id) == nil)
        first = try store.feed(user: "u", after: nil, limit: count + 5, entities: nil)
        let moved = first.entries.map(\.position) == Array(UInt64(count + 1)...UInt64(2 * count))
        #expect(moved, "each row's position moved past the first commit's")
        let stored = try synced.scan(user: "u", from: nil, to: nil, after: nil, reverse: false, limit: .max)
        store.endRequest()
        #expect(stored.count == count)
        let values = Set(stored.map(\.row.at)) == Set((0..<count).map { "b\n" + String($0) }), keys = Set(stored.map(\.key)) == Set((0..<count).map(key))
        #expect(values && keys, "the second commit's values under the first's keys")
    }

    @Test func aDetachedCommitWhoseUserChangedSinceTheReadFailsAndWritesNothing() throws {
        let schema = TestPostgres.freshSchema()
        let (store, table) = try open(schema)
        defer { store.shutdown() }
        var seed = Transaction()
        seed.put(table, user: "u", key: "first", Due(at: "0"))
        try store.commit(seed)
        #expect(store.flushBatch().failed.isEmpty)
        // Another writer changes the user after the request read its version.
        let id = try commitBig(store, table, count: Transaction.bigUnit, between: {
            let psql = Process()
            psql.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
            psql.arguments = [TestPostgres.url, "-q", "-X", "-v", "ON_ERROR_STOP=1", "-c",
                              "UPDATE \"\(schema)\".users SET version = version + 1 WHERE usr = 'u'"]
            try? psql.run()
            psql.waitUntilExit()
            #expect(psql.terminationStatus == 0)
        })
        #expect(store.detachedFailure(of: id) != nil, "refused: the plan read an older version")
        #expect(store.detachedFailure(of: id) == nil, "told once")
        #expect(try rows(store, table) == 1)
    }

    @Test func smallCommitsAndCommitsWithoutAReadVersionStayInTheBatch() throws {
        let (store, table) = try open(TestPostgres.freshSchema())
        defer { store.shutdown() }
        var tx = Transaction()
        for i in 0..<Transaction.bigUnit { tx.put(table, user: "u", key: "k\(i)", Due(at: "1")) }
        store.beginUnit(mayFinishLater: true)
        try store.commit(tx)  // no version was read: nothing to check it against
        #expect(store.endUnit() == store.lastCommitID...store.lastCommitID)
        #expect(store.isApplied(store.lastCommitID), "in the batch, not detached")
        #expect(store.flushBatch().failed.isEmpty)
        #expect(try rows(store, table) == Transaction.bigUnit)
    }

    /// A kernel on a fresh schema of the test server, with the test methods; and a connection of the test's
    /// own to that schema.
    func kernel() throws -> (Kernel, DatabaseConnection, String) {
        let schema = TestPostgres.freshSchema()
        let kernel = try makeKernel { config in
            config.memoryOnly = false
            config.storeURL = TestPostgres.url
            config.storeSchema = schema
            config.enableTestMethods = true
            config.limits.requestsPerSecond = 0
        }
        return (kernel, try DatabaseConnection(url: TestPostgres.url), "\"\(schema)\"")
    }

    /// Answers in `output`, by id.
    func answers(_ output: [UInt8]) throws -> [String: JSON] {
        var out: [String: JSON] = [:]
        for line in output.split(separator: 10) {
            let answer = try JSON.parse(Array(line))
            if let id = answer["id"] { out[id.stringValue ?? String(id.intValue ?? -1)] = answer }
        }
        return out
    }

    /// #52 defect 6: a detached commit has its own fate. An earlier write of its batch fails (a deferred
    /// trigger refuses the batch's COMMIT), the detached commit lands, and it is answered as landed;
    /// before, every write since the last flush shared the batch's failure, and a month of samples that
    /// was stored was answered -32050.
    @Test func aDetachedCommitThatLandedIsAnsweredOkWhateverBecameOfItsBatch() throws {
        let (kernel, admin, q) = try kernel()
        defer { kernel.shutdown() }
        _ = try admin.run([
            Statement("CREATE FUNCTION \(q).doom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.key = 'a/doomed' THEN RAISE EXCEPTION 'doomed'; END IF; RETURN NULL; END $$"),
            Statement("CREATE CONSTRAINT TRIGGER doom AFTER INSERT ON \(q).rows DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \(q).doom()"),
        ])
        let count = Transaction.bigUnit + 10
        var connection = kernel.connection()
        connection.receive(Array(#"{"jsonrpc":"2.0","id":"doomed","method":"test.write","params":{"key":"doomed","value":"v"}}"#.utf8) + [10]
            + EveryUserTests.ingest(2, count: count))
        _ = connection.endBatch(waitAbove: 0)
        let answers = try answers(connection.output)
        #expect(answers["doomed"]?["error"]?["code"] == -32050, "the refused batch: \(answers["doomed"] ?? .null)")
        #expect(answers["2"]?["result"]?["accepted"]?["samples"] == .int(Int64(count)), "the detached commit landed: \(answers["2"] ?? .null)")
        let stored = try admin.run([Statement("SELECT count(*) FROM \(q).rows WHERE tbl = 'health.samples'")])[0].scalar
        #expect(stored == String(count), "and it is stored")
    }

    /// Sends a month's `health.ingest` on `big` and returns once its detached commit waits at COMMIT: a
    /// deferred trigger on the samples' rows takes an advisory lock the test holds (`key`: advisory
    /// locks are per database, so each test has a key of its own). Polled, not slept on. Returns what
    /// lets the COMMIT go on.
    func holdAtCommit(_ big: inout Connection, _ admin: DatabaseConnection, _ q: String, key: Int) throws -> () -> Void {
        _ = try admin.run([
            Statement("CREATE FUNCTION \(q).hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.tbl = 'health.samples' THEN PERFORM pg_advisory_xact_lock(\(key)); END IF; RETURN NULL; END $$"),
            Statement("CREATE CONSTRAINT TRIGGER hold AFTER INSERT ON \(q).rows DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \(q).hold()"),
            Statement("SELECT pg_advisory_lock(\(key))"),
        ])
        let release = { _ = try? admin.run([Statement("SELECT pg_advisory_unlock(\(key))")]) }
        big.receive(EveryUserTests.ingest(1, count: Transaction.bigUnit + 10))
        for _ in 0..<4000 {
            _ = big.endBatch(waitAbove: nil)
            let waiting = try admin.run([Statement("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = \(key) AND NOT granted")])
            if waiting[0].scalar == "1" { return release }
            usleep(5_000)
        }
        release()
        throw HoldError()
    }

    struct HoldError: Error, CustomStringConvertible {
        var description: String { "the detached commit never reached its COMMIT" }
    }

    /// #52 defect 8: while a user's big commit runs detached (its COMMIT held here by a deferred trigger
    /// waiting on a lock the test holds), a request of that user on another stream is held off the
    /// serving thread, and other requests are answered meanwhile; once the commit is made, the held
    /// request runs and sees it. Before, the request waited for the user's lock on the serving thread,
    /// and every other user with it.
    @Test func aRequestOfAUserWhoseCommitRunsDetachedWaitsOffTheServingThread() throws {
        let (kernel, admin, q) = try kernel()
        defer { kernel.shutdown() }
        var big = kernel.connection()
        let release = try holdAtCommit(&big, admin, q, key: 424243)
        var released = false
        defer { if !released { release() } }
        // The same user on another stream: handed to the kernel on a thread, so that a serving thread stuck
        // on the user's lock shows as a timeout instead of hanging the test.
        nonisolated(unsafe) var same = kernel.connection()
        let returned = Locked(false)
        spawnThread {
            same.receive(Array(#"{"jsonrpc":"2.0","id":"same","method":"health.summary","params":{"auth":"\#(LimitsTests.userToken)","from":"2025-03-01","to":"2025-03-05"}}"#.utf8) + [10])
            _ = same.endBatch(waitAbove: nil)
            returned.withLock { $0 = true }
            returned.wake()
        }
        let offTheThread = returned.withLock(waitingUntil: { $0 }, timeoutMicroseconds: 20_000_000) { $0 }
        #expect(offTheThread, "the request of the user whose commit runs was held, not waited for on the serving thread")
        if offTheThread {
            #expect(same.output.isEmpty, "not answered before the commit is made")
            let other = InProcessClient(kernel).call("kernel.info", ["auth": .string(testServiceToken)])
            #expect(other["result"] != nil, "another request is answered meanwhile: \(other)")
        }
        release()
        released = true
        _ = returned.withLock(waitingUntil: { $0 }) { $0 }
        _ = big.endBatch(waitAbove: 0)
        #expect(try answers(big.output)["1"]?["result"]?["accepted"]?["samples"] == .int(Int64(Transaction.bigUnit + 10)))
        _ = same.endBatch(waitAbove: 0)
        let days = try answers(same.output)["same"]?["result"]?["days"]?.arrayValue
        #expect(days?.count == 3, "the held request ran after the commit and sees it: \(days?.count ?? -1) days")
    }

    /// #52 item 3 for detached commits: the connection of a month's detached commit is cut while its
    /// COMMIT is held (a deferred trigger waiting on a lock the test holds). The kernel settles it with
    /// the server as it does the batch's commit: the transaction is still in progress, its old server
    /// process is ended, the server says it was rolled back, so "not applied" is the truth: nothing of
    /// the month is stored. Before, any error there was answered -32050 "not applied" unasked, which a
    /// COMMIT that landed afterwards made false.
    @Test func aDetachedCommitCutAtItsCommitIsSettledWithTheServer() throws {
        let (kernel, admin, q) = try kernel()
        defer { kernel.shutdown() }
        var big = kernel.connection()
        let release = try holdAtCommit(&big, admin, q, key: 424244)
        var released = false
        defer { if !released { release() } }
        let store = try #require(kernel.storage as? PostgresStore)
        let connection = try #require(store.detached.connectionForTest.withLock { $0 })
        let backend = connection.backendPID
        connection.cutForTest()
        _ = big.endBatch(waitAbove: 0)
        release()
        released = true
        // Whatever the old server process still does (a COMMIT left running would land now), it is done
        // once it has exited: a condition polled, not a sleep.
        for _ in 0..<2000 {
            let alive = try admin.run([Statement("SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", [String(backend)])])[0].scalar
            if alive == "0" { break }
            usleep(5_000)
        }
        let answer = try answers(big.output)["1"]
        #expect(answer?["error"]?["code"] == -32050 && answer?["error"]?["data"]?["reason"] == "storage_unavailable",
                "not applied, as the server said: \(answer ?? .null)")
        let stored = try admin.run([Statement("SELECT count(*) FROM \(q).rows WHERE tbl = 'health.samples'")])[0].scalar
        #expect(stored == "0", "and nothing of it is stored")
    }

    /// #52 defect 8: the detached-commit thread holds a user's lock while it runs, so it runs at the serving
    /// thread's priority, not at the workers' nice 19.
    @Test func theDetachedCommitThreadIsNotStarvedOnPurpose() throws {
        let (store, _) = try open(TestPostgres.freshSchema())
        defer { store.shutdown() }
        let nice = Locked<Int32?>(nil)
        let mine = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        store.detached.threads.submit {
            let theirs = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
            nice.withLock { $0 = theirs }
            nice.wake()
        }
        let theirs = nice.withLock(waitingUntil: { $0 != nil }) { $0 }
        #expect(theirs == mine, "as the thread that serves requests")
        let worker = Locked<Int32?>(nil)
        WorkerPool(threads: 1).submit {
            let n = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
            worker.withLock { $0 = n }
            worker.wake()
        }
        #expect(worker.withLock(waitingUntil: { $0 != nil }) { $0 } == 19, "while slow work holding nothing stays at nice 19")
    }
}
