import Storage

/// One user's rows of a table and their second order, as values: what every read of a table goes
/// through, on the live table or on a view's copy.
@usableFromInline
struct UserRows<Row: StoredRow> {
    @usableFromInline let rows: Partition<Row>?
    @usableFromInline let ordered: SortedChunks<OrderKey, Void>?

    @inlinable
    init(rows: Partition<Row>?, ordered: SortedChunks<OrderKey, Void>?) {
        self.rows = rows
        self.ordered = ordered
    }

    @inlinable
    func get(_ key: String) -> Row? { rows?[RowKey(key)] }

    /// The rows among `keys` that exist, by key: O(keys × log n).
    @inlinable
    func get(_ keys: [String]) -> [String: Row] {
        guard let rows else { return [:] }
        var out: [String: Row] = [:]
        out.reserveCapacity(keys.count)
        for key in keys { if let row = rows[RowKey(key)] { out[key] = row } }
        return out
    }

    @inlinable
    func scan(from: String?, to: String?, after: String?, reverse: Bool, limit: Int) -> [(key: String, row: Row)] {
        guard let rows else { return [] }
        return rows.entries(from: from.map(RowKey.init), to: to.map(RowKey.init), after: after.map(RowKey.init), reverse: reverse,
                            limit: limit).map { ($0.key.string, $0.row) }
    }

    /// The rows in each of `ranges` of order keys, range after range.
    @inlinable
    func scanOrdered(_ ranges: [OrderRange]) -> [(key: String, row: Row)] {
        ranges.flatMap { scanOrdered(from: $0.from, to: $0.to, after: nil, reverse: false, limit: .max) }
    }

    @inlinable
    func scanOrdered(from: String?, to: String?, after: String?, reverse: Bool, limit: Int) -> [(key: String, row: Row)] {
        guard let ordered, let rows else { return [] }
        return ordered.entries(from: from.map(OrderKey.init(bound:)), to: to.map(OrderKey.init(bound:)), after: after.map(OrderKey.init(bound:)),
                               reverse: reverse, limit: limit).compactMap { entry in
            rows[entry.key.row].map { (entry.key.row.string, $0) }
        }
    }
}

/// A read-only copy of one user's rows of a table as they were when it was made (O(1): the
/// partitions are copy-on-write values), which a worker thread may read while the serving thread goes
/// on changing the table. It names the same table: a transaction written through it changes the table
/// itself. Other users' rows are not in it.
final class TableView<Row: StoredRow>: TableHandle, StorageTable, @unchecked Sendable {
    let user: String
    let mine: UserRows<Row>

    init(of table: Table<Row>, user: String) {
        self.user = user
        mine = table.userRows(user)
        super.init(name: table.name, slot: table.slot)
    }

    func get(user: String, key: String) -> Row? { user == self.user ? mine.get(key) : nil }

    func get(user: String, keys: [String]) -> [String: Row] { user == self.user ? mine.get(keys) : [:] }

    func scan(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int) -> [(key: String, row: Row)] {
        user == self.user ? mine.scan(from: from, to: to, after: after, reverse: reverse, limit: limit) : []
    }

    func scanOrdered(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int) -> [(key: String, row: Row)] {
        user == self.user ? mine.scanOrdered(from: from, to: to, after: after, reverse: reverse, limit: limit) : []
    }

    func scanOrdered(user: String, ranges: [OrderRange]) -> [(key: String, row: Row)] {
        user == self.user ? mine.scanOrdered(ranges) : []
    }

    func scanAllOrdered(through: String, limit: Int) -> (rows: [(user: String, key: String, row: Row)], total: Int) {
        let rows = mine.scanOrdered(from: nil, to: through, after: nil, reverse: false, limit: .max)
        return (rows.prefix(limit).map { (user, $0.key, $0.row) }, rows.count)
    }

    func userCount() -> Int { mine.rows == nil ? 0 : 1 }
}
