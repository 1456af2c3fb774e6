import Chrono
import Foundation
import JSON
@testable import Postgres
import Storage
import Testing
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
        _ = try store.version(of: "u")
        between()
        var tx = Transaction()
        for i in 0..<count { tx.put(table, user: "u", key: key(i), Due(at: value + String(i))) }
        store.prepare(&tx)  // on the worker, in the kernel
        store.mayFinishLater = true
        try store.commit(tx)
        store.mayFinishLater = false
        let id = store.lastCommitID
        #expect(!store.isApplied(id), "detached: the serving thread went on")
        store.endRequest()
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
        #expect(!store.takeFailure(of: id))
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
        #expect(!store.takeFailure(of: id))
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
        #expect(store.flushBatch().failed.isEmpty)
        #expect(try rows(store, table) == Transaction.bigUnit)
    }
}
