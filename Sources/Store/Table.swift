import JSON
import Storage

/// One change a transaction makes: the effect, never the input, so replay gives the same state whatever the clock says.
public enum Change: Sendable, Equatable {
    /// Sets row `key` of `user` in `table`.
    case put(table: String, user: String, key: String, value: JSON)
    /// Removes row `key` of `user` in `table` (nothing if absent).
    case delete(table: String, user: String, key: String)
    /// Removes every row of `user` in every table.
    case deleteUser(user: String)

    /// The text form (format 1 logs, `store export`): `["p", table, user, key, value]`, `["d", table, user, key]`, `["u", user]`.
    public var json: JSON {
        switch self {
        case .put(let t, let u, let k, let v): return ["p", .string(t), .string(u), .string(k), v]
        case .delete(let t, let u, let k): return ["d", .string(t), .string(u), .string(k)]
        case .deleteUser(let u): return ["u", .string(u)]
        }
    }

    /// Appends the binary log form (format 2): its `Head`, then the value of a put.
    public func writeBinary(to out: inout [UInt8]) {
        switch self {
        case .put(let t, let u, let k, let v):
            Head.put(table: t, user: u, key: k).write(to: &out)
            v.writeBinary(to: &out)
        case .delete(let t, let u, let k):
            Head.delete(table: t, user: u, key: k).write(to: &out)
        case .deleteUser(let u):
            Head.deleteUser(user: u).write(to: &out)
        }
    }

    /// Reads one change in the binary log form.
    public init(binary r: inout BinaryReader) throws(BinaryDecodeError) {
        switch try Head.read(&r) {
        case .put(let t, let u, let k): self = .put(table: t, user: u, key: k, value: try JSON.readBinary(&r))
        case .delete(let t, let u, let k): self = .delete(table: t, user: u, key: k)
        case .deleteUser(let u): self = .deleteUser(user: u)
        }
    }

    /// A binary change up to its value: an op byte `p`, `d` or `u`, then table, user and key (string
    /// bodies; only the user for `u`). A put's value follows in the binary form, written and read by
    /// whoever has it (a typed row when committing or replaying, a JSON value for `store export`).
    enum Head {
        case put(table: String, user: String, key: String)
        case delete(table: String, user: String, key: String)
        case deleteUser(user: String)

        func write(to out: inout [UInt8]) {
            switch self {
            case .put(let t, let u, let k):
                out.append(UInt8(ascii: "p"))
                Self.writeRow(t, u, k, &out)
            case .delete(let t, let u, let k):
                out.append(UInt8(ascii: "d"))
                Self.writeRow(t, u, k, &out)
            case .deleteUser(let u):
                out.append(UInt8(ascii: "u"))
                Binary.writeString(u, to: &out)
            }
        }

        private static func writeRow(_ table: String, _ user: String, _ key: String, _ out: inout [UInt8]) {
            Binary.writeString(table, to: &out)
            Binary.writeString(user, to: &out)
            Binary.writeString(key, to: &out)
        }

        static func read(_ r: inout BinaryReader) throws(BinaryDecodeError) -> Head {
            let offset = r.offset
            switch try r.byte() {
            case UInt8(ascii: "p"): return .put(table: try r.string(), user: try r.string(), key: try r.string())
            case UInt8(ascii: "d"): return .delete(table: try r.string(), user: try r.string(), key: try r.string())
            case UInt8(ascii: "u"): return .deleteUser(user: try r.string())
            default: throw BinaryDecodeError(offset: offset, "unknown change")
            }
        }
    }

    /// Reads the text log form (format 1).
    public init(json: JSON) throws(StorageError) {
        guard case .array(let a) = json, let op = a.first?.stringValue else { throw StorageError.corrupt("change is not an array") }
        func str(_ i: Int) throws(StorageError) -> String {
            guard i < a.count, let s = a[i].stringValue else { throw StorageError.corrupt("change field \(i) is not a string") }
            return s
        }
        switch (op, a.count) {
        case ("p", 5): self = .put(table: try str(1), user: try str(2), key: try str(3), value: a[4])
        case ("d", 4): self = .delete(table: try str(1), user: try str(2), key: try str(3))
        case ("u", 2): self = .deleteUser(user: try str(1))
        default: throw StorageError.corrupt("unknown change \(op)")
        }
    }
}

extension BinaryReader {
    /// A row key in a snapshot group of `table`; damage is reported as corrupt data of that table.
    @inlinable
    mutating func rowKey(of table: String) throws(StorageError) -> String {
        do {
            return try string()
        } catch {
            throw StorageError.corrupt("\(table): \(error)")
        }
    }
}

/// What the store's tables have in common, with the row type erased: applying changes, undoing them,
/// and freezing a consistent image for a snapshot.
protocol AnyTable: AnyObject {
    var name: String { get }
    var rowCount: Int { get }
    /// Applies a put of a row a transaction made; returns the previous row (for undo).
    func put(user: String, key: String, row: any StoredRow) -> (any StoredRow)?
    /// Applies a put read from a format 1 record.
    func put(user: String, key: String, stored: JSON) throws(StorageError)
    /// Applies a put whose value is read from a format 2 record.
    func putBinary(user: String, key: String, from reader: inout BinaryReader) throws(StorageError)
    /// Applies `count` rows of `user` read from a format 2 snapshot: key (string body), value, repeated.
    func putBinaryGroup(user: String, count: Int, from reader: inout BinaryReader) throws(StorageError)
    /// Applies a delete; returns the previous row.
    func delete(user: String, key: String) -> (any StoredRow)?
    /// Puts back a row that `put` or `delete` returned.
    func restore(user: String, key: String, _ row: any StoredRow)
    /// Removes a user's rows; returns them (for undo).
    func removeUser(_ user: String) -> Any
    /// Puts back what `removeUser` returned.
    func restoreUser(_ user: String, _ rows: Any)
    /// A copy-on-write image of every row, safe to read on another thread.
    func freeze() -> FrozenTable
    /// One user's rows as (key, stored value).
    func storedRows(of user: String) -> [(String, JSON)]
}

/// A table's rows at one instant, as the snapshot writer reads them on its own thread.
struct FrozenTable: Sendable {
    let name: String
    let rowCount: Int
    /// Appends every row to the buffer in groups of one user's rows: user (string body), row count,
    /// then key (string body) and stored value (binary form) per row; calls `groupWritten` with the
    /// buffer and the group's row count after each group.
    let writeRows: @Sendable (inout [UInt8], (inout [UInt8], Int) -> Void) -> Void
}

/// A table's per-row write operations as closures made where its row type is known (see
/// `Store.table`), so the store's type-erased calls run code specialised for the row instead of generic
/// code that looks up type metadata at run time (which took a fifth of recovery).
@usableFromInline
struct TableOps {
    @usableFromInline let put: (String, String, any StoredRow) -> (any StoredRow)?
    @usableFromInline let putBinary: (String, String, inout BinaryReader) throws(StorageError) -> Void
    @usableFromInline let putBinaryGroup: (String, Int, inout BinaryReader) throws(StorageError) -> Void

    @inlinable
    init<Row: StoredRow>(_ table: Table<Row>) {
        put = { [unowned table] user, key, row in table.set(user, key, row as! Row) }
        putBinary = { [unowned table] (user, key, reader) throws(StorageError) in
            table.set(user, key, try Row(binaryStored: &reader))
        }
        putBinaryGroup = { [unowned table] (user, count, reader) throws(StorageError) in
            try table.setGroup(user, count, &reader)
        }
    }
}

/// A table of typed rows, partitioned by user and in key order within a partition: reads are direct,
/// writes go through a `Transaction`.
public final class Table<Row: StoredRow>: TableHandle, StorageTable, AnyTable, @unchecked Sendable {
    @usableFromInline var rows: [String: Partition<Row>] = [:]
    @usableFromInline var storedCount = 0
    /// Set once by `Store.table`.
    @usableFromInline var ops: TableOps?
    /// The second order rows are also kept in, if the table has one: the order key of a row.
    @usableFromInline let orderKey: (@Sendable (String, Row) -> String)?
    /// Per user, order key -> row key. Derived from the rows, never stored: rebuilt at recovery.
    @usableFromInline var ordered: [String: Partition<String>] = [:]

    /// Rows in the table.
    public var rowCount: Int { storedCount }

    @usableFromInline
    init(name: String, slot: Int, orderKey: (@Sendable (String, Row) -> String)? = nil) {
        self.orderKey = orderKey
        super.init(name: name, slot: slot)
    }

    /// Row `key` of `user`.
    public func get(user: String, key: String) -> Row? {
        rows[user]?[key]
    }


    /// Rows of `user` in key order, or reverse key order: keys from `from` through `to` (either end open),
    /// beyond `after` in the scan direction (where the previous page ended), at most `limit`.
    public func scan(user: String, from: String? = nil, to: String? = nil, after: String? = nil, reverse: Bool = false,
                     limit: Int = .max) -> [(key: String, row: Row)] {
        guard let mine = rows[user] else { return [] }
        return mine.positions(from: from, to: to, after: after, reverse: reverse, limit: limit).map { (mine.keys[$0], mine.rows[$0]) }
    }

    /// Rows of `user` in the table's second order (see `Store.table(_:of:orderedBy:)`), with `from`,
    /// `to`, `after`, `reverse` and `limit` as in `scan` but over order keys.
    public func scanOrdered(user: String, from: String? = nil, to: String? = nil, after: String? = nil, reverse: Bool = false,
                            limit: Int = .max) -> [(key: String, row: Row)] {
        guard let index = ordered[user], let mine = rows[user] else { return [] }
        return index.positions(from: from, to: to, after: after, reverse: reverse, limit: limit).compactMap { i in
            let key = index.rows[i]
            return mine[key].map { (key, $0) }
        }
    }

    /// Keeps the second order in step with a row that changed from `old` to `new`.
    @inlinable
    func reorder(_ user: String, _ key: String, old: Row?, new: Row?) {
        guard let orderKey else { return }
        if let old { _ = ordered[user]?.remove(orderKey(key, old)) }
        if let new { ordered[user, default: Partition()].set(orderKey(key, new), key) }
        if ordered[user]?.isEmpty == true { ordered[user] = nil }
    }

    /// How many users have rows.
    public var userCount: Int { rows.count }

    func put(user: String, key: String, row: any StoredRow) -> (any StoredRow)? {
        if let ops { return ops.put(user, key, row) }
        return set(user, key, row as! Row)
    }

    func put(user: String, key: String, stored: JSON) throws(StorageError) {
        set(user, key, try Row(stored: stored))
    }

    func putBinary(user: String, key: String, from reader: inout BinaryReader) throws(StorageError) {
        if let ops { return try ops.putBinary(user, key, &reader) }
        set(user, key, try Row(binaryStored: &reader))
    }

    func putBinaryGroup(user: String, count: Int, from reader: inout BinaryReader) throws(StorageError) {
        if let ops { return try ops.putBinaryGroup(user, count, &reader) }
        try setGroup(user, count, &reader)
    }

    /// Puts `count` rows of `user` (key, value, repeated) with one outer lookup.
    @inlinable
    func setGroup(_ user: String, _ count: Int, _ reader: inout BinaryReader) throws(StorageError) {
        var mine = rows.removeValue(forKey: user) ?? Partition()
        mine.keys.reserveCapacity(mine.count + count)
        mine.rows.reserveCapacity(mine.count + count)
        for _ in 0..<count {
            let key = try reader.rowKey(of: name)
            // Snapshots list a partition's rows in key order, so this appends.
            let row = try Row(binaryStored: &reader)
            let old = mine.set(key, row)
            if old == nil { storedCount += 1 }
            reorder(user, key, old: old, new: row)
        }
        rows[user] = mine
    }

    @inlinable
    @discardableResult
    func set(_ user: String, _ key: String, _ row: Row) -> Row? {
        let old = rows[user, default: Partition()].set(key, row)
        if old == nil { storedCount += 1 }
        reorder(user, key, old: old, new: row)
        return old
    }

    func delete(user: String, key: String) -> (any StoredRow)? {
        guard let old = rows[user]?.remove(key) else { return nil }
        storedCount -= 1
        if rows[user]?.isEmpty == true { rows[user] = nil }
        reorder(user, key, old: old, new: nil)
        return old
    }

    func restore(user: String, key: String, _ row: any StoredRow) {
        guard let row = row as? Row else { return }
        set(user, key, row)
    }

    func removeUser(_ user: String) -> Any {
        guard let mine = rows.removeValue(forKey: user) else { return (Partition<Row>(), Partition<String>?.none) }
        storedCount -= mine.count
        return (mine, ordered.removeValue(forKey: user))
    }

    func restoreUser(_ user: String, _ removed: Any) {
        guard let (mine, index) = removed as? (Partition<Row>, Partition<String>?), !mine.isEmpty else { return }
        rows[user] = mine
        ordered[user] = index
        storedCount += mine.count
    }

    func storedRows(of user: String) -> [(String, JSON)] {
        scan(user: user).map { ($0.key, $0.row.stored) }
    }

    func freeze() -> FrozenTable {
        let image = rows
        return FrozenTable(name: name, rowCount: rowCount) { out, groupWritten in
            var group: [UInt8] = []
            for (user, mine) in image {
                var count = 0
                func emit() {
                    guard count > 0 else { return }
                    Binary.writeString(user, to: &out)
                    Binary.writeVarint(UInt64(count), to: &out)
                    out.append(contentsOf: group)
                    group.removeAll(keepingCapacity: true)
                    groupWritten(&out, count)
                    count = 0
                }
                for i in mine.keys.indices {
                    Binary.writeString(mine.keys[i], to: &group)
                    mine.rows[i].writeStored(to: &group)
                    count += 1
                    if group.count >= StoreFiles.snapshotRecordBytes { emit() }
                }
                emit()
            }
        }
    }
}


extension Transaction.Entry {
    /// The binary log form; the same bytes as `Change.writeBinary` of the equivalent change.
    func writeBinary(to out: inout [UInt8]) {
        switch self {
        case .put(let table, let user, let key, let row):
            Change.Head.put(table: table.name, user: user, key: key).write(to: &out)
            row.writeStored(to: &out)
        case .delete(let table, let user, let key):
            Change.Head.delete(table: table.name, user: user, key: key).write(to: &out)
        case .deleteUser(let user):
            Change.Head.deleteUser(user: user).write(to: &out)
        case .claim(let key, let user):
            Change.Head.put(table: UniqueKeys.tableName, user: user, key: key.rowKey).write(to: &out)
            ClaimRow().writeStored(to: &out)
        case .release(let key, let user):
            Change.Head.delete(table: UniqueKeys.tableName, user: user, key: key.rowKey).write(to: &out)
        }
    }
}
