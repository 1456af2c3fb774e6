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

/// What a put or delete replaced, so that undo can put it back.
@usableFromInline
struct Previous {
    @usableFromInline var row: (any StoredRow)?
    /// The replaced row's stamp (synced tables).
    @usableFromInline var stamp: Stamp?
    /// The tombstone the change replaced or removed (synced tables).
    @usableFromInline var tombstone: Stamp?

    @inlinable
    init(row: (any StoredRow)? = nil, stamp: Stamp? = nil, tombstone: Stamp? = nil) {
        self.row = row
        self.stamp = stamp
        self.tombstone = tombstone
    }
}

/// How the rows of a snapshot group get their feed stamps.
@usableFromInline
struct SnapshotStamps {
    /// The record lists a kind and a stamp with every entry (format 3, a synced table).
    @usableFromInline var inline: Bool
    /// For a synced table's rows from an older snapshot, which has no stamps: the next position to give
    /// (they take 1, 2, 3...: below every position of the records after the snapshot) and the time.
    @usableFromInline var nextLegacy: UInt64 = 1
    @usableFromInline var legacyAt: Int64 = 0

    init(inline: Bool, legacyAt: Int64) {
        self.inline = inline
        self.legacyAt = legacyAt
    }

    @inlinable
    mutating func legacy() -> Stamp {
        defer { nextLegacy += 1 }
        return Stamp(seq: nextLegacy, at: legacyAt)
    }
}

/// A snapshot entry of a synced table is a row or a tombstone (a deleted row's last feed entry).
@usableFromInline
enum SnapshotEntryKind: UInt8 {
    case tombstone = 0
    case row = 1
}

/// What the store's tables have in common, with the row type erased: applying changes, undoing them,
/// and freezing a consistent image for a snapshot. `stamp` is the feed position and time of the change;
/// tables that are not synced ignore it.
protocol AnyTable: AnyObject {
    var name: String { get }
    var rowCount: Int { get }
    /// The synced entity the rows are, if any.
    var entity: Entity? { get }
    /// Applies a put of a row a transaction made.
    func put(user: String, key: String, row: any StoredRow, stamp: Stamp) -> Previous
    /// Applies a put read from a format 1 record.
    func put(user: String, key: String, stored: JSON, stamp: Stamp) throws(StorageError)
    /// Applies a put whose value is read from a format 2 or 3 record.
    func putBinary(user: String, key: String, from reader: inout BinaryReader, stamp: Stamp) throws(StorageError)
    /// Applies `count` entries of `user` read from a binary snapshot: key (string body), then the value
    /// (and with inline stamps, a kind byte first and a stamp after), repeated.
    func putBinaryGroup(user: String, count: Int, from reader: inout BinaryReader, stamps: inout SnapshotStamps) throws(StorageError)
    /// Applies a delete (a synced table keeps a tombstone stamped `stamp`).
    func delete(user: String, key: String, stamp: Stamp) -> Previous
    /// Puts back what `put` or `delete` replaced.
    func restore(user: String, key: String, _ previous: Previous)
    /// Removes a user's rows; returns them (for undo).
    func removeUser(_ user: String) -> Any
    /// Puts back what `removeUser` returned.
    func restoreUser(_ user: String, _ rows: Any)
    /// A copy-on-write image of every row, safe to read on another thread.
    func freeze() -> FrozenTable
    /// One user's rows as (key, stored value).
    func storedRows(of user: String) -> [(String, JSON)]
    /// Appends `user`'s feed entries after position `after`: (stamp, row key, whether deleted).
    func feed(user: String, after: UInt64, into out: inout [FeedCandidate])
}

extension AnyTable {
    var entity: Entity? { nil }
    func feed(user: String, after: UInt64, into out: inout [FeedCandidate]) {}
}

/// A feed entry found in a table, before the page is chosen.
struct FeedCandidate {
    let stamp: Stamp
    let table: Int
    let key: String
    let deleted: Bool
}

/// A table's entries at one instant, as the snapshot writer reads them on its own thread.
struct FrozenTable: Sendable {
    let name: String
    /// Entries: rows, and the tombstones of a synced table.
    let rowCount: Int
    /// Whether entries carry a kind and a stamp (a synced table).
    let stamped: Bool
    /// Appends every entry to the buffer in groups of one user's entries: user (string body), count,
    /// then key (string body) and stored value (binary form) per row (stamped: key, kind, value of a
    /// row, stamp); calls `groupWritten` with the buffer and the group's count after each group.
    let writeRows: @Sendable (inout [UInt8], (inout [UInt8], Int) -> Void) -> Void
}

/// A table's per-row write operations as closures made where its row type is known (see
/// `Store.table`), so the store's type-erased calls run code specialised for the row instead of generic
/// code that looks up type metadata at run time (which took a fifth of recovery).
@usableFromInline
struct TableOps {
    @usableFromInline let put: (String, String, any StoredRow, Stamp) -> Previous
    @usableFromInline let putBinary: (String, String, inout BinaryReader, Stamp) throws(StorageError) -> Void
    @usableFromInline let putBinaryGroup: (String, Int, inout BinaryReader, inout SnapshotStamps) throws(StorageError) -> Void

    @inlinable
    init<Row: StoredRow>(_ table: Table<Row>) {
        put = { [unowned table] user, key, row, stamp in table.set(user, key, row as! Row, stamp) }
        putBinary = { [unowned table] (user, key, reader, stamp) throws(StorageError) in
            table.set(user, key, try Row(binaryStored: &reader), stamp)
        }
        putBinaryGroup = { [unowned table] (user, count, reader, stamps) throws(StorageError) in
            try table.setGroup(user, count, &reader, &stamps)
        }
    }
}

/// A table of typed rows, partitioned by user and in key order within a partition: reads are direct,
/// writes go through a `Transaction`. A synced table (one with an `entity`) also keeps each row's feed
/// stamp, and a tombstone for each deleted row, so that its user's change feed can be read from it.
public final class Table<Row: StoredRow>: TableHandle, StorageTable, AnyTable, @unchecked Sendable {
    @usableFromInline var rows: [String: Partition<Row>] = [:]
    @usableFromInline var storedCount = 0
    /// Set once by `Store.table`.
    @usableFromInline var ops: TableOps?
    /// The second order rows are also kept in, if the table has one: the order key of a row.
    @usableFromInline let orderKey: (@Sendable (String, Row) -> String)?
    /// Per user, order key -> row key. Derived from the rows, never stored: rebuilt at recovery.
    @usableFromInline var ordered: [String: Partition<String>] = [:]
    /// The synced entity the rows are, if any.
    let entity: Entity?
    @usableFromInline let synced: Bool
    /// Per user, the stamps of deleted rows (synced tables): a delete's feed entry.
    @usableFromInline var deleted: [String: Partition<Stamp>] = [:]

    /// Rows in the table.
    public var rowCount: Int { storedCount }

    @usableFromInline
    init(name: String, slot: Int, orderKey: (@Sendable (String, Row) -> String)? = nil, entity: Entity? = nil) {
        self.orderKey = orderKey
        self.entity = entity
        synced = entity != nil
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
        return mine.entries(from: from, to: to, after: after, reverse: reverse, limit: limit)
    }

    /// Rows of `user` in the table's second order (see `Store.table(_:of:orderedBy:)`), with `from`,
    /// `to`, `after`, `reverse` and `limit` as in `scan` but over order keys.
    public func scanOrdered(user: String, from: String? = nil, to: String? = nil, after: String? = nil, reverse: Bool = false,
                            limit: Int = .max) -> [(key: String, row: Row)] {
        guard let index = ordered[user], let mine = rows[user] else { return [] }
        return index.entries(from: from, to: to, after: after, reverse: reverse, limit: limit).compactMap { entry in
            mine[entry.row].map { (entry.row, $0) }
        }
    }

    /// Rows of every user in the second order, order keys up to `through`: the first `limit`, and how
    /// many there are. A scan of every user's index (the in-memory store keeps no cross-user index): fine
    /// for a daily job, not for a request path.
    public func scanAllOrdered(through: String, limit: Int) -> (rows: [(user: String, key: String, row: Row)], total: Int) {
        var total = 0
        var candidates: [(order: String, user: String, key: String)] = []
        for (user, index) in ordered {
            total += index.countThrough(through)
            for entry in index.entries(from: nil, to: through, after: nil, reverse: false, limit: limit) {
                candidates.append((entry.key, user, entry.row))
            }
        }
        candidates.sort { ($0.order, $0.user) < ($1.order, $1.user) }
        let rows = candidates.prefix(limit).compactMap { c in self.rows[c.user]?[c.key].map { (c.user, c.key, $0) } }
        return (rows, total)
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

    func put(user: String, key: String, row: any StoredRow, stamp: Stamp) -> Previous {
        if let ops { return ops.put(user, key, row, stamp) }
        return set(user, key, row as! Row, stamp)
    }

    func put(user: String, key: String, stored: JSON, stamp: Stamp) throws(StorageError) {
        set(user, key, try Row(stored: stored), stamp)
    }

    func putBinary(user: String, key: String, from reader: inout BinaryReader, stamp: Stamp) throws(StorageError) {
        if let ops { return try ops.putBinary(user, key, &reader, stamp) }
        set(user, key, try Row(binaryStored: &reader), stamp)
    }

    func putBinaryGroup(user: String, count: Int, from reader: inout BinaryReader, stamps: inout SnapshotStamps) throws(StorageError) {
        if let ops { return try ops.putBinaryGroup(user, count, &reader, &stamps) }
        try setGroup(user, count, &reader, &stamps)
    }

    /// Puts `count` entries of `user` (key, value, repeated; see `putBinaryGroup`) with one outer lookup.
    @inlinable
    func setGroup(_ user: String, _ count: Int, _ reader: inout BinaryReader, _ stamps: inout SnapshotStamps) throws(StorageError) {
        var mine = rows.removeValue(forKey: user) ?? Partition()
        for _ in 0..<count {
            let key = try reader.rowKey(of: name)
            // Snapshots list a partition's entries in key order, so these append. A table that stopped
            // being synced drops the stamps it finds; one that became synced gives its rows new ones.
            let stamp: Stamp?
            let row: Row
            if stamps.inline {
                let kind = try reader.entryKind(of: name)
                guard kind == .row else {
                    let stamp = try reader.stamp(of: name)
                    if synced { deleted[user, default: Partition()].set(key, stamp) }
                    continue
                }
                row = try Row(binaryStored: &reader)
                stamp = try reader.stamp(of: name)
            } else {
                row = try Row(binaryStored: &reader)
                stamp = nil
            }
            let old = synced ? mine.setStamped(key, row, stamp ?? stamps.legacy())?.0 : mine.set(key, row)
            if old == nil { storedCount += 1 }
            reorder(user, key, old: old, new: row)
        }
        if !mine.isEmpty { rows[user] = mine }
    }

    /// Sets a row (stamped, in a synced table, which also drops the key's tombstone).
    @inlinable
    @discardableResult
    func set(_ user: String, _ key: String, _ row: Row, _ stamp: Stamp) -> Previous {
        guard synced else {
            let old = rows[user, default: Partition()].set(key, row)
            if old == nil { storedCount += 1 }
            reorder(user, key, old: old, new: row)
            return Previous(row: old)
        }
        let old = rows[user, default: Partition()].setStamped(key, row, stamp)
        if old == nil { storedCount += 1 }
        reorder(user, key, old: old?.0, new: row)
        var tombstone: Stamp?
        if !deleted.isEmpty { tombstone = dropTombstone(user, key) }
        return Previous(row: old?.0, stamp: old?.1, tombstone: tombstone)
    }

    @usableFromInline
    func dropTombstone(_ user: String, _ key: String) -> Stamp? {
        guard let stamp = deleted[user]?.remove(key)?.row else { return nil }
        if deleted[user]?.isEmpty == true { deleted[user] = nil }
        return stamp
    }

    /// Removes a row, without leaving a tombstone.
    private func unset(_ user: String, _ key: String) -> (row: Row, stamp: Stamp?)? {
        guard let old = rows[user]?.remove(key) else { return nil }
        storedCount -= 1
        if rows[user]?.isEmpty == true { rows[user] = nil }
        reorder(user, key, old: old.row, new: nil)
        return old
    }

    func delete(user: String, key: String, stamp: Stamp) -> Previous {
        guard let old = unset(user, key) else { return Previous() }
        if synced { deleted[user, default: Partition()].set(key, stamp) }
        return Previous(row: old.row, stamp: old.stamp)
    }

    func restore(user: String, key: String, _ previous: Previous) {
        if let row = previous.row as? Row {
            if synced, let stamp = previous.stamp {
                let old = rows[user, default: Partition()].setStamped(key, row, stamp)
                if old == nil { storedCount += 1 }
                reorder(user, key, old: old?.0, new: row)
            } else {
                set(user, key, row, Stamp(seq: 0, at: 0))
            }
        } else {
            _ = unset(user, key)
        }
        guard synced else { return }
        _ = dropTombstone(user, key)
        if let tombstone = previous.tombstone { deleted[user, default: Partition()].set(key, tombstone) }
    }

    /// What `removeUser` takes away: the rows, their second order and their tombstones.
    private struct Removed {
        let rows: Partition<Row>?
        let ordered: Partition<String>?
        let deleted: Partition<Stamp>?
    }

    func removeUser(_ user: String) -> Any {
        let removed = Removed(rows: rows.removeValue(forKey: user), ordered: ordered.removeValue(forKey: user),
                              deleted: deleted.removeValue(forKey: user))
        storedCount -= removed.rows?.count ?? 0
        return removed
    }

    func restoreUser(_ user: String, _ removed: Any) {
        guard let removed = removed as? Removed else { return }
        rows[user] = removed.rows
        ordered[user] = removed.ordered
        deleted[user] = removed.deleted
        storedCount += removed.rows?.count ?? 0
    }

    func storedRows(of user: String) -> [(String, JSON)] {
        scan(user: user).map { ($0.key, $0.row.stored) }
    }

    func feed(user: String, after: UInt64, into out: inout [FeedCandidate]) {
        rows[user]?.forEach { key, _, stamp in
            if let stamp, stamp.seq > after { out.append(FeedCandidate(stamp: stamp, table: slot, key: key, deleted: false)) }
        }
        deleted[user]?.forEach { key, stamp, _ in
            if stamp.seq > after { out.append(FeedCandidate(stamp: stamp, table: slot, key: key, deleted: true)) }
        }
    }

    func freeze() -> FrozenTable {
        let image = rows
        let tombstones = deleted
        let synced = self.synced
        let count = storedCount + tombstones.values.reduce(0) { $0 + $1.count }
        return FrozenTable(name: name, rowCount: count, stamped: synced) { out, groupWritten in
            var group: [UInt8] = []
            func write<R>(_ user: String, _ partition: Partition<R>, _ entry: (R, Stamp?, inout [UInt8]) -> Void) {
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
                for chunk in partition.chunks {
                    let stamped = !chunk.stamps.isEmpty
                    for i in chunk.keys.indices {
                        Binary.writeString(chunk.keys[i], to: &group)
                        entry(chunk.rows[i], stamped ? chunk.stamps[i] : nil, &group)
                        count += 1
                        if group.count >= StoreFiles.snapshotRecordBytes { emit() }
                    }
                }
                emit()
            }
            for (user, mine) in image {
                guard synced else {
                    write(user, mine) { row, _, group in row.writeStored(to: &group) }
                    continue
                }
                write(user, mine) { row, stamp, group in
                    group.append(SnapshotEntryKind.row.rawValue)
                    row.writeStored(to: &group)
                    (stamp ?? Stamp(seq: 0, at: 0)).write(to: &group)
                }
            }
            for (user, gone) in tombstones {
                write(user, gone) { stamp, _, group in
                    group.append(SnapshotEntryKind.tombstone.rawValue)
                    stamp.write(to: &group)
                }
            }
        }
    }
}

extension Stamp {
    /// The binary form: position, then time (varints).
    func write(to out: inout [UInt8]) {
        Binary.writeVarint(seq, to: &out)
        Binary.writeVarint(UInt64(bitPattern: at), to: &out)
    }
}

extension BinaryReader {
    @inlinable
    mutating func stamp(of table: String) throws(StorageError) -> Stamp {
        do {
            return Stamp(seq: try varint(), at: Int64(bitPattern: try varint()))
        } catch {
            throw StorageError.corrupt("\(table): \(error)")
        }
    }

    @inlinable
    mutating func entryKind(of table: String) throws(StorageError) -> SnapshotEntryKind {
        let offset = self.offset
        do {
            if let kind = SnapshotEntryKind(rawValue: try byte()) { return kind }
        } catch {
            throw StorageError.corrupt("\(table): \(error)")
        }
        throw StorageError.corrupt("\(table): unknown entry kind at byte \(offset)")
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
