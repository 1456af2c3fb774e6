import Chrono
import JSON
@testable import Postgres
import Storage
import Testing
import TestSupport

/// The PostgreSQL store's promises to several kernels, checked on two stores over one schema.
@Suite(.oneStoreOnly) struct PostgresStoreTests {
    struct Due: StoredRow {
        let at: String
        init(at: String) { self.at = at }
        init(stored: JSON) throws(StorageError) {
            guard let at = stored["at"]?.stringValue else { throw StorageError.corrupt("no at") }
            self.at = at
        }
        var stored: JSON { ["at": .string(at)] }
    }

    func open(_ schema: String) throws -> (PostgresStore, any StorageTable<Due>) {
        var options = PostgresOptions(url: TestPostgres.url)
        options.schema = schema
        let store = try PostgresStore(options: options, clock: SystemClock(), log: { _ in })
        return (store, store.table("test.due", of: Due.self, orderedBy: { $0.at }))
    }

    @Test func aSchemaNameOfManyByteCharactersOpens() throws {
        // 63 bytes: "hk_" and the name make 66, and byte 63 falls inside an "ä": the channel name is cut before it.
        let (store, table) = try open("a" + String(repeating: "ä", count: 31))
        defer { store.shutdown() }
        var t = Transaction()
        t.put(table, user: "u", key: "k", Due(at: "1"))
        try store.commit(t)
        #expect(try table.get(user: "u", key: "k") == Due(at: "1"))
        store.endRequest()
    }

    /// #51 item 7: parameters go to libpq as C strings; a key or user id holding U+0000 was cut there, so
    /// `a\0b` and `a\0c` became one row `a`. Now refused before anything is sent, and the clean rows stay apart.
    @Test func aKeyOrUserHoldingNulIsRefusedNotCut() throws {
        let (store, table) = try open(TestPostgres.freshSchema())
        defer { store.shutdown() }
        for (user, key) in [("u", "a\u{0}b"), ("u\u{0}v", "k")] {
            var t = Transaction()
            t.put(table, user: user, key: key, Due(at: "1"))
            #expect(throws: StorageError.self) { try store.commit(t) }
            store.endRequest()
        }
        #expect(try table.get(user: "u", key: "a") == nil, "nothing was cut and stored")
        var t = Transaction()
        t.put(table, user: "u", key: "a", Due(at: "2"))
        try store.commit(t)
        #expect(try table.get(user: "u", key: "a") == Due(at: "2"))
        store.endRequest()
    }

    @Test func twoKernelsScanningDueRowsNeverGetTheSameRow() throws {
        let schema = TestPostgres.freshSchema()
        let (a, dueA) = try open(schema)
        let (b, dueB) = try open(schema)
        defer { a.shutdown(); b.shutdown() }
        var t = Transaction()
        for i in 0..<10 { t.put(dueA, user: "user\(i)", key: "m", Due(at: String(format: "%03d", i))) }
        try a.commit(t)

        let first = try dueA.scanAllOrdered(through: "~", limit: 4)
        let second = try dueB.scanAllOrdered(through: "~", limit: 4)
        #expect(first.rows.map(\.user) == ["user0", "user1", "user2", "user3"])
        #expect(second.rows.map(\.user) == ["user4", "user5", "user6", "user7"], "rows another request holds are skipped")
        #expect(first.total == 10 && second.total == 10)
        a.endRequest()
        b.endRequest()
        // Once the requests end, the rows are free again.
        #expect(try dueB.scanAllOrdered(through: "~", limit: 20).rows.count == 10)
        b.endRequest()
    }
}

/// The CI failure of the sign-up race (#37 item 1): a pipeline with an error forgot every statement it
/// had prepared, even those the server had prepared, and the next name (`hk` + the count, now smaller)
/// clashed with one still on the server. That Prepare failed without a word, the statement was skipped,
/// and the transaction was aborted behind an answer that said it had committed; the batch's COMMIT then
/// failed and every answer of the batch became -32050.
extension PostgresStoreTests {
    @Test func aPrepareThatFailsIsTheStatementsErrorAndNamesAreNeverReused() throws {
        let connection = try DatabaseConnection(url: TestPostgres.url)
        // A statement prepared and run, then one that prepares but fails when run.
        let first = try connection.run([Statement("SELECT $1::text", ["a"]), Statement("SELECT 1 / $1::int", ["0"])])
        #expect(first[0].scalar == "a" && first[1].error?.state == "22012")
        // A new statement after it: prepared under a name of its own, and it runs.
        let second = try connection.run([Statement("SELECT $1::text || 'b'", ["a"])])
        #expect(second[0].error == nil && second[0].scalar == "ab", "\(second)")
        // And the one forgotten as failed prepares again under a new name.
        let third = try connection.run([Statement("SELECT 1 / $1::int", ["1"]), Statement("SELECT $1::text", ["c"])])
        #expect(third[0].scalar == "1" && third[1].scalar == "c", "\(third)")
        // A Prepare that fails on its own (a statement that does not parse) is that statement's error.
        let bad = try connection.run([Statement("SELEKT $1::text", ["x"])])
        #expect(bad[0].error?.state == "42601", "\(bad)")
    }
}
