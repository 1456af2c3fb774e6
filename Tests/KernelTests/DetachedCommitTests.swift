import Chrono
import Foundation
import JSON
@testable import Postgres
import Storage
import Testing
import TestSupport

/// PostgreSQL's detached commits (#39): a slow request's big commit runs on a connection of its own,
/// and checks under the user's lock that the user's rows are still the version the request read.
@Suite struct DetachedCommitTests {
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
    func commitBig(_ store: PostgresStore, _ table: any StorageTable<Due>, count: Int, between: () -> Void = {}) throws -> UInt64 {
        _ = try store.version(of: "u")
        between()
        var tx = Transaction()
        for i in 0..<count { tx.put(table, user: "u", key: String(format: "k%05d", i), Due(at: String(i))) }
        store.prepare(&tx)  // on the worker, in the kernel
        store.mayFinishLater = true
        try store.commit(tx)
        store.mayFinishLater = false
        let id = store.lastCommitID
        #expect(!store.isApplied(id), "detached: the serving thread went on")
        store.endRequest()
        #expect(store.flushBatch().isEmpty)
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
        #expect(!store.takeFailure(of: id))
        #expect(try rows(store, table) == Transaction.bigUnit + 100)
        #expect(try store.version(of: "u") == 1)
        store.endRequest()
    }

    @Test func aDetachedCommitWhoseUserChangedSinceTheReadFailsAndWritesNothing() throws {
        let schema = TestPostgres.freshSchema()
        let (store, table) = try open(schema)
        defer { store.shutdown() }
        var seed = Transaction()
        seed.put(table, user: "u", key: "first", Due(at: "0"))
        try store.commit(seed)
        #expect(store.flushBatch().isEmpty)
        // Another writer changes the user after the request read its version.
        let id = try commitBig(store, table, count: Transaction.bigUnit) {
            let psql = Process()
            psql.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
            psql.arguments = [TestPostgres.url, "-q", "-X", "-v", "ON_ERROR_STOP=1", "-c",
                              "UPDATE \"\(schema)\".users SET version = version + 1 WHERE usr = 'u'"]
            try? psql.run()
            psql.waitUntilExit()
            #expect(psql.terminationStatus == 0)
        }
        #expect(store.takeFailure(of: id), "refused: the plan read an older version")
        #expect(!store.takeFailure(of: id), "told once")
        #expect(try rows(store, table) == 1)
    }

    @Test func smallCommitsAndCommitsWithoutAReadVersionStayInTheBatch() throws {
        let (store, table) = try open(TestPostgres.freshSchema())
        defer { store.shutdown() }
        var tx = Transaction()
        for i in 0..<Transaction.bigUnit { tx.put(table, user: "u", key: "k\(i)", Due(at: "1")) }
        store.mayFinishLater = true
        try store.commit(tx)  // no version was read: nothing to check it against
        store.mayFinishLater = false
        #expect(store.isApplied(store.lastCommitID), "in the batch, not detached")
        #expect(store.flushBatch().isEmpty)
        #expect(try rows(store, table) == Transaction.bigUnit)
    }
}
