import JSON
import JSONParsing
import Storage

/// What the store needs of a table whatever its rows: its name, entity, and how a row is stored.
class PostgresTableBase: TableHandle, @unchecked Sendable {
    let entity: Entity?
    /// The second order's key of a row (head and key), when the table has a second order.
    let ordered: Bool
    /// The order head of a row of this table, made where the row type is known (`PostgresTable`).
    private let orderHead: (@Sendable (any StoredRow) -> String)?

    init(name: String, slot: Int, entity: Entity?, orderHead: (@Sendable (any StoredRow) -> String)?) {
        self.entity = entity
        self.ordered = orderHead != nil
        self.orderHead = orderHead
        super.init(name: name, slot: slot)
    }

    /// The row's stored JSON as text, and its order key.
    func stored(_ row: any StoredRow, key: String) -> (body: String, order: String?) {
        (String(decoding: row.stored.bytes, as: UTF8.self), orderHead.map { $0(row) + key })
    }
}

/// A table on PostgreSQL: rows of the generic `rows` table under the table's name, one partition per
/// user, keys in byte order (`COLLATE "C"`), and the second order in an index over `ord` (the order
/// function's head, then the key: the string the in-memory store orders by).
final class PostgresTable<Row: StoredRow>: PostgresTableBase, StorageTable, @unchecked Sendable {
    unowned let store: PostgresStore
    let orderKey: (@Sendable (Row) -> String)?
    /// Whether reads go to a pooled connection without locks (a view, read on a worker thread).
    let pooled: Bool

    init(name: String, slot: Int, store: PostgresStore, orderKey: (@Sendable (Row) -> String)?, entity: Entity?, pooled: Bool = false) {
        self.store = store
        self.orderKey = orderKey
        self.pooled = pooled
        // A transaction puts a table's own rows in it (`Transaction.put` takes the table's row type), so
        // the cast holds; a row of another type would be ordered first rather than stop the kernel.
        var head: (@Sendable (any StoredRow) -> String)?
        if let orderKey {
            head = { (row: any StoredRow) -> String in
                guard let row = row as? Row else { return "" }
                return orderKey(row)
            }
        }
        super.init(name: name, slot: slot, entity: entity, orderHead: head)
    }

    /// The same table, read from a pooled connection: for a worker thread (`Storage.view`). Its reads
    /// take no lock; the request validates them at commit through `version(of:)`.
    func onPool() -> PostgresTable<Row> {
        PostgresTable(name: name, slot: slot, store: store, orderKey: orderKey, entity: entity, pooled: true)
    }

    private func run(_ user: String?, _ statement: Statement) throws(StorageError) -> [[String?]] {
        if pooled { return try store.readPooled([statement])[0].rows }
        if let user, let rows = store.readAheadRows(of: PrefetchedRows.Scan(user: user, sql: statement.sql, params: statement.params)) { return rows }
        return try store.read(users: user.map { [$0] } ?? [], [statement])[0].rows
    }

    /// A row from its stored body; a body that is not such a row is `corrupt`, naming the table and key
    /// (escaped as a JSON string: keys are data).
    private func decode(_ body: String?, key: String?) throws(StorageError) -> Row {
        let at = "\(name) key \(JSON.string(key ?? "").serialized)"
        guard let body else { throw StorageError.corrupt("\(at): a row without a body") }
        do throws(StorageError) {
            guard Row.isValidKey(key ?? "") else { throw StorageError.corrupt("not a key of this table") }
            let value: JSON
            do { value = try JSON.parse(body) } catch { throw StorageError.corrupt("\(error)") }
            return try Row(stored: value)
        } catch {
            if case .corrupt(let m) = error { throw .corrupt("\(at): \(m)") }
            throw error
        }
    }

    private func pairs(_ rows: [[String?]]) throws(StorageError) -> [(key: String, row: Row)] {
        var out: [(key: String, row: Row)] = []
        out.reserveCapacity(rows.count)
        for r in rows { out.append((r[0] ?? "", try decode(r[1], key: r[0]))) }
        return out
    }

    func get(user: String, key: String) throws(StorageError) -> Row? {
        if !pooled, let held = store.prefetchedRow(slot: slot, user: user, key: key) {
            switch held {
            case .stored(let body): return try body.map { (b) throws(StorageError) in try decode(b, key: key) }
            case .written(nil): return nil
            case .written(let row?): if let row = row as? Row { return row }
            }
        }
        let rows = try run(user, Statement("SELECT body FROM rows WHERE tbl = $1 AND usr = $2 AND key = $3", [name, user, key]))
        guard let first = rows.first else { return nil }
        return try decode(first[0], key: key)
    }

    func get(user: String, keys: [String]) throws(StorageError) -> [String: Row] {
        guard !keys.isEmpty else { return [:] }
        // A join with the keys, never `key = ANY($3)`: with a parameter array PostgreSQL tests each row
        // against the whole array, and once the user's rows outgrow the index plan (a third month of
        // samples) 43,200 keys against 86,400 rows took 142 s instead of a fraction of one.
        let rows = try run(user, Statement("""
            SELECT r.key, r.body FROM unnest($3::text[]) AS k(key) JOIN rows r ON r.tbl = $1 AND r.usr = $2 AND r.key = k.key
            """, [name, user, PostgresStore.array(keys)]))
        var out: [String: Row] = [:]
        out.reserveCapacity(rows.count)
        for r in rows { out[r[0] ?? ""] = try decode(r[1], key: r[0]) }
        return out
    }

    func scan(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int) throws(StorageError) -> [(key: String, row: Row)] {
        try pairs(run(user, range(column: "key", user: user, from: from, to: to, after: after, reverse: reverse, limit: limit)))
    }

    func scanOrdered(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int) throws(StorageError) -> [(key: String, row: Row)] {
        try pairs(run(user, range(column: "ord", user: user, from: from, to: to, after: after, reverse: reverse, limit: limit)))
    }

    func prefetchScanOrdered(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int) {
        guard !pooled else { return }
        store.declareScan(user: user, range(column: "ord", user: user, from: from, to: to, after: after, reverse: reverse, limit: limit))
    }

    /// A range scan over `column` (`key`, or `ord` for the second order), either direction.
    private func range(column: String, user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int) -> Statement {
        var sql = "SELECT key, body FROM rows WHERE tbl = $1 AND usr = $2"
        var params: [String?] = [name, user]
        func bound(_ op: String, _ value: String?) {
            guard let value else { return }
            params.append(value)
            sql += " AND \(column) \(op) $\(params.count)"
        }
        if column == "ord" { sql += " AND ord IS NOT NULL" }
        bound(">=", from)
        bound("<=", to)
        bound(reverse ? "<" : ">", after)
        sql += " ORDER BY \(column)" + (reverse ? " DESC" : "")
        if limit != .max { sql += " LIMIT \(limit)" }
        return Statement(sql, params)
    }

    func scanOrdered(user: String, ranges: [OrderRange]) throws(StorageError) -> [(key: String, row: Row)] {
        guard !ranges.isEmpty else { return [] }
        let statements = ranges.map {
            Statement("SELECT key, body FROM rows WHERE tbl = $1 AND usr = $2 AND ord >= $3 AND ord <= $4 ORDER BY ord", [name, user, $0.from, $0.to])
        }
        let results = pooled ? try store.readPooled(statements) : try store.read(users: [user], statements)
        var out: [(key: String, row: Row)] = []
        for result in results { out += try pairs(result.rows) }
        return out
    }

    func scanAllOrdered(through: String, limit: Int) throws(StorageError) -> (rows: [(user: String, key: String, row: Row)], total: Int) {
        let statements = [
            // Claimed for the request (rows another kernel's request claimed are skipped), so that two
            // kernels' daily re-checks never work on the same rows.
            Statement("""
                SELECT usr, key, body FROM rows WHERE tbl = $1 AND ord IS NOT NULL AND ord <= $2 ORDER BY ord, usr LIMIT \(limit)
                \(pooled ? "" : "FOR UPDATE SKIP LOCKED")
                """, [name, through]),
            Statement("SELECT count(*) FROM rows WHERE tbl = $1 AND ord IS NOT NULL AND ord <= $2", [name, through]),
        ]
        let results = pooled ? try store.readPooled(statements) : try store.read(users: [], statements)
        var rows: [(user: String, key: String, row: Row)] = []
        for r in results[0].rows { rows.append((r[0] ?? "", r[1] ?? "", try decode(r[2], key: r[1]))) }
        return (rows, Int(results[1].scalar ?? "0") ?? 0)
    }

    func userCount() throws(StorageError) -> Int {
        Int(try run(nil, Statement("SELECT count(DISTINCT usr) FROM rows WHERE tbl = $1", [name])).first?[0] ?? "0") ?? 0
    }
}
