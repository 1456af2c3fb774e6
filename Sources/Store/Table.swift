import JSON
import Storage

/// A table of typed rows, partitioned by user and in key order within a partition: reads are direct,
/// writes go through a `Transaction`. A synced table (one with an `entity`) also keeps each row's feed
/// stamp, and a tombstone for each deleted row, so that its user's change feed can be read from it.
public final class Table<Row: StoredRow>: TableHandle, StorageTable, AnyTable, @unchecked Sendable {
    @usableFromInline var rows: [String: Partition<Row>] = [:]
    @usableFromInline var storedCount = 0
    /// Set once by `Store.table`.
    @usableFromInline var ops: TableOps?
    /// `get`, made by `Store.table` where `Row` is known, so that the lookup runs code specialised for
    /// the row (generic code compares packed keys through witness tables).
    @usableFromInline var lookup: ((String, String) -> Row?)?
    /// The second order rows are also kept in, if the table has one: the order key of a row.
    /// The second order rows are also kept in, if the table has one: what precedes the row key in a
    /// row's order key.
    @usableFromInline let orderKey: (@Sendable (Row) -> String)?
    /// Per user, the rows' order keys (each with its row). Derived from the rows, never stored: rebuilt
    /// at recovery.
    @usableFromInline var ordered: [String: SortedChunks<OrderKey, Void>] = [:]
    /// The synced entity the rows are, if any.
    let entity: Entity?
    @usableFromInline let synced: Bool
    /// Per user, the stamps of deleted rows (synced tables): a delete's feed entry.
    @usableFromInline var deleted: [String: Partition<Stamp>] = [:]
    /// Per user, feed position -> the row or tombstone stamped with it (synced tables), so that a feed
    /// page is a range scan. Derived from the stamps, never stored: rebuilt at recovery.
    @usableFromInline var feedIndex: [String: SortedChunks<UInt64, FeedRef>] = [:]
    /// Users whose feed index is not built yet: after a snapshot load, each is built when first needed
    /// (O(the user's rows)), so a start-up pays for none and users who never sync cost no index.
    @usableFromInline var unindexed: Set<String> = []
    /// Tombstones kept per user (synced tables; 0: no limit). See `Tombstones`.
    var tombstoneLimit = 0
    /// The store's units still being applied: a read of a user with one finishes it first.
    var backlog: Backlog?

    /// Rows in the table.
    public var rowCount: Int { storedCount }

    @usableFromInline
    init(name: String, slot: Int, orderKey: (@Sendable (Row) -> String)? = nil, entity: Entity? = nil) {
        self.orderKey = orderKey
        self.entity = entity
        synced = entity != nil
        super.init(name: name, slot: slot)
    }

    /// What reads of `user` go through.
    @inlinable
    func userRows(_ user: String) -> UserRows<Row> { UserRows(rows: rows[user], ordered: ordered[user]) }

    /// Row `key` of `user`.
    public func get(user: String, key: String) -> Row? {
        backlog?.settle(user)
        if let lookup { return lookup(user, key) }
        return rows[user]?[RowKey(key)]
    }

    /// The rows of `user` among `keys` that exist, by key: O(keys × log n).
    public func get(user: String, keys: [String]) -> [String: Row] {
        backlog?.settle(user)
        return userRows(user).get(keys)
    }

    /// Rows of `user` in the second order within each of `ranges`, range after range.
    public func scanOrdered(user: String, ranges: [OrderRange]) -> [(key: String, row: Row)] {
        backlog?.settle(user)
        return userRows(user).scanOrdered(ranges)
    }

    /// Rows of `user` in key order, or reverse key order: keys from `from` through `to` (either end open),
    /// beyond `after` in the scan direction (where the previous page ended), at most `limit`.
    public func scan(user: String, from: String? = nil, to: String? = nil, after: String? = nil, reverse: Bool = false,
                     limit: Int = .max) -> [(key: String, row: Row)] {
        backlog?.settle(user)
        return userRows(user).scan(from: from, to: to, after: after, reverse: reverse, limit: limit)
    }

    /// Rows of `user` in the table's second order (see `Store.table(_:of:orderedBy:)`), with `from`,
    /// `to`, `after`, `reverse` and `limit` as in `scan` but over order keys.
    public func scanOrdered(user: String, from: String? = nil, to: String? = nil, after: String? = nil, reverse: Bool = false,
                            limit: Int = .max) -> [(key: String, row: Row)] {
        backlog?.settle(user)
        return userRows(user).scanOrdered(from: from, to: to, after: after, reverse: reverse, limit: limit)
    }

    func version(of user: String) -> UInt64 { rows[user]?.version ?? 0 }

    func markChanged(_ user: String, _ version: UInt64) { rows[user]?.version = version }

    /// A read-only copy of `user`'s rows for another thread (see `TableView`).
    func view(user: String) -> TableView<Row> {
        backlog?.settle(user)
        return TableView(of: self, user: user)
    }

    /// Rows of every user in the second order, order keys up to `through`: the first `limit`, and how
    /// many there are. A scan of every user's index (the in-memory store keeps no cross-user index): fine
    /// for a daily job, not for a request path.
    public func scanAllOrdered(through: String, limit: Int) -> (rows: [(user: String, key: String, row: Row)], total: Int) {
        backlog?.finishAll()
        var total = 0
        var candidates: [(order: String, user: String, key: RowKey)] = []
        for (user, index) in ordered {
            let bound = OrderKey(bound: through)
            total += index.countThrough(bound)
            for entry in index.entries(from: nil, to: bound, after: nil, reverse: false, limit: limit) {
                candidates.append((entry.key.string, user, entry.key.row))
            }
        }
        candidates.sort { ($0.order, $0.user) < ($1.order, $1.user) }
        let rows = candidates.prefix(limit).compactMap { c in self.rows[c.user]?[c.key].map { (c.user, c.key.string, $0) } }
        return (rows, total)
    }

    /// Keeps the second order in step with row `key` that changed from `old` to `new`.
    @inlinable
    func reorder(_ user: String, _ key: RowKey, old: Row?, new: Row?) {
        guard let orderKey else { return }
        if let old { _ = ordered[user]?.remove(OrderKey(head: orderKey(old), row: key)) }
        if let new { ordered[user, default: SortedChunks()].set(OrderKey(head: orderKey(new), row: key), ()) }
        if ordered[user]?.isEmpty == true { ordered[user] = nil }
    }

    /// How many users have rows.
    public func userCount() -> Int { rows.count }

    func put(user: String, key: String, row: any StoredRow, stamp: Stamp) -> Previous {
        if let ops { return ops.put(user, key, row, stamp) }
        return set(user, RowKey(key), typed(row), stamp)
    }

    /// `row` as this table's row type. A write entry's row comes from this table's typed handle
    /// (`TableHandle<Row>`), never from stored data or the wire, so another type is a bug of the store.
    @usableFromInline
    func typed(_ row: any StoredRow) -> Row {
        guard let typed = row as? Row else { preconditionFailure("table \(name) was handed a \(type(of: row)) to write") }
        return typed
    }

    func put(user: String, key: String, stored: JSON, stamp: Stamp) throws(StorageError) {
        set(user, RowKey(key), try Row(stored: stored), stamp)
    }

    func putBinary(user: String, key: String, from reader: inout BinaryReader, stamp: Stamp) throws(StorageError) {
        if let ops { return try ops.putBinary(user, key, &reader, stamp) }
        set(user, RowKey(key), try Row(binaryStored: &reader), stamp)
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
            let key = try reader.storeKey(of: name)
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
        }
        if !mine.isEmpty { rows[user] = mine }
    }

    /// Builds the second order and the feed index from the rows and tombstones, after a snapshot has
    /// loaded them (`setGroup` leaves both alone): per user, one sort of the entries and a bulk load,
    /// O(n log n) comparisons of fixed-size or short keys instead of n inserts at random places.
    func buildIndexes() {
        if let orderKey {
            ordered = [:]
            for (user, mine) in rows {
                var keys: [(OrderKey, Void)] = []
                keys.reserveCapacity(mine.count)
                mine.forEach { key, row, _ in keys.append((OrderKey(head: orderKey(row), row: key), ())) }
                keys.sort { $0.0 < $1.0 }
                ordered[user] = SortedChunks(sorted: keys)
            }
        }
        guard synced else { return }
        feedIndex = [:]
        unindexed = Set(rows.keys).union(deleted.keys)
    }

    /// Builds `user`'s feed index if it is not built yet.
    @inlinable
    func feedIndexReady(_ user: String) {
        if !unindexed.isEmpty, unindexed.remove(user) != nil { buildFeedIndex(user) }
    }

    /// `user`'s feed index from the stamps of the user's rows and tombstones: one sort, or none when
    /// they were written in key order (days, counters), then a bulk load.
    @usableFromInline
    func buildFeedIndex(_ user: String) {
        var refs: [(UInt64, FeedRef)] = []
        refs.reserveCapacity((rows[user]?.count ?? 0) + (deleted[user]?.count ?? 0))
        var inOrder = true
        func add(_ seq: UInt64, _ ref: FeedRef) {
            if let last = refs.last, last.0 > seq { inOrder = false }
            refs.append((seq, ref))
        }
        rows[user]?.forEach { key, _, stamp in
            if let stamp, stamp.position > 0 { add(stamp.position, FeedRef(key: key, deleted: false)) }
        }
        deleted[user]?.forEach { key, stamp, _ in
            if stamp.position > 0 { add(stamp.position, FeedRef(key: key, deleted: true)) }
        }
        if !inOrder { refs.sort { $0.0 < $1.0 } }
        if !refs.isEmpty { feedIndex[user] = SortedChunks(sorted: refs) }
    }

    /// Files a feed position under `user` (position 0, given by upgrades, never shows in a feed).
    @inlinable
    func indexFeed(_ user: String, _ stamp: Stamp, _ key: RowKey, deleted: Bool, replacing old: Stamp? = nil) {
        guard stamp.position > 0 else { return unindexFeed(user, old) }
        feedIndexReady(user)
        // One access to the user's index for both: a put replaces its row's previous position.
        feedIndex[user, default: SortedChunks()].reposition(old.map(\.position), to: stamp.position, FeedRef(key: key, deleted: deleted))
    }

    /// Drops a feed position of `user` that a change replaced.
    @inlinable
    func unindexFeed(_ user: String, _ stamp: Stamp?) {
        guard let stamp, stamp.position > 0 else { return }
        feedIndexReady(user)
        _ = feedIndex[user]?.remove(stamp.position)
        if feedIndex[user]?.isEmpty == true { feedIndex[user] = nil }
    }

    /// Leaves a tombstone for a deleted row of a synced table.
    @inlinable
    func setTombstone(_ user: String, _ key: RowKey, _ stamp: Stamp) {
        indexFeed(user, stamp, key, deleted: true, replacing: deleted[user, default: Partition()].set(key, stamp))
    }

    /// Sets a row (stamped, in a synced table, which also drops the key's tombstone).
    @inlinable
    @discardableResult
    func set(_ user: String, _ key: RowKey, _ row: Row, _ stamp: Stamp) -> Previous {
        guard synced else {
            let old = rows[user, default: Partition()].set(key, row)
            if old == nil { storedCount += 1 }
            reorder(user, key, old: old, new: row)
            return Previous(row: old)
        }
        let old = rows[user, default: Partition()].setStamped(key, row, stamp)
        if old == nil { storedCount += 1 }
        reorder(user, key, old: old?.0, new: row)
        indexFeed(user, stamp, key, deleted: false, replacing: old?.1)
        var tombstone: Stamp?
        if !deleted.isEmpty { tombstone = dropTombstone(user, key) }
        return Previous(row: old?.0, stamp: old?.1, tombstone: tombstone)
    }

    @usableFromInline
    func dropTombstone(_ user: String, _ key: RowKey) -> Stamp? {
        guard let stamp = deleted[user]?.remove(key)?.row else { return nil }
        if deleted[user]?.isEmpty == true { deleted[user] = nil }
        unindexFeed(user, stamp)
        return stamp
    }

    /// Removes a row, without leaving a tombstone.
    private func unset(_ user: String, _ key: RowKey) -> (row: Row, stamp: Stamp?)? {
        guard let old = rows[user]?.remove(key) else { return nil }
        storedCount -= 1
        if rows[user]?.isEmpty == true { rows[user] = nil }
        reorder(user, key, old: old.row, new: nil)
        unindexFeed(user, old.stamp)
        return old
    }

    func delete(user: String, key name: String, stamp: Stamp) -> Previous {
        let key = RowKey(name)
        guard let old = unset(user, key) else { return Previous() }
        var previous = Previous(row: old.row, stamp: old.stamp)
        if synced {
            setTombstone(user, key, stamp)
            if tombstoneLimit > 0, let count = deleted[user]?.count, count > tombstoneLimit + 1 {
                previous.dropped = dropOldTombstones(user, at: stamp.at)
            }
        }
        return previous
    }

    /// Drops `user`'s oldest tombstones down to `Tombstones.kept(of:)` the limit and raises the floor to
    /// the newest one dropped; returns what it removed (the former floor included), for undo. Runs
    /// deterministically inside the delete that passed the limit, so replaying the log drops the same
    /// ones. O(t log t) for t tombstones, once per quarter of the limit of deletes.
    private func dropOldTombstones(_ user: String, at: Int64) -> [(RowKey, Stamp)] {
        let floorKey = RowKey(Tombstones.floorKey)
        var all: [(RowKey, Stamp)] = []
        deleted[user]?.forEach { key, stamp, _ in if key != floorKey { all.append((key, stamp)) } }
        all.sort { $0.1.position < $1.1.position }
        let doomed = all.prefix(all.count - Tombstones.kept(of: tombstoneLimit))
        guard let newest = doomed.last?.1 else { return [] }
        var removed: [(RowKey, Stamp)] = []
        if let floor = dropTombstone(user, floorKey) { removed.append((floorKey, floor)) }
        for (key, stamp) in doomed {
            _ = dropTombstone(user, key)
            removed.append((key, stamp))
        }
        setTombstone(user, floorKey, Stamp(position: max(newest.position, removed.first?.1.position ?? 0), at: at))
        return removed
    }

    func setTombstone(user: String, key name: String, stamp: Stamp) {
        guard synced, stamp.position > 0 else { return }
        let key = RowKey(name)
        _ = unset(user, key)
        _ = dropTombstone(user, key)
        setTombstone(user, key, stamp)
    }

    func restore(user: String, key name: String, _ previous: Previous) {
        let key = RowKey(name)
        if let row = previous.row as? Row {
            if synced, let stamp = previous.stamp {
                let old = rows[user, default: Partition()].setStamped(key, row, stamp)
                if old == nil { storedCount += 1 }
                reorder(user, key, old: old?.0, new: row)
                unindexFeed(user, old?.1)
                indexFeed(user, stamp, key, deleted: false)
            } else {
                set(user, key, row, Stamp(position: 0, at: 0))
            }
        } else {
            _ = unset(user, key)
        }
        guard synced else { return }
        _ = dropTombstone(user, key)
        if let tombstone = previous.tombstone { setTombstone(user, key, tombstone) }
        if !previous.dropped.isEmpty {
            _ = dropTombstone(user, RowKey(Tombstones.floorKey))
            for (key, stamp) in previous.dropped { setTombstone(user, key, stamp) }
        }
    }

    /// What `removeUser` takes away: the rows, their second order, their tombstones and feed index.
    private struct Removed {
        let rows: Partition<Row>?
        let ordered: SortedChunks<OrderKey, Void>?
        let deleted: Partition<Stamp>?
        let feed: SortedChunks<UInt64, FeedRef>?
    }

    func removeUser(_ user: String) -> Any {
        feedIndexReady(user)
        let removed = Removed(rows: rows.removeValue(forKey: user), ordered: ordered.removeValue(forKey: user),
                              deleted: deleted.removeValue(forKey: user), feed: feedIndex.removeValue(forKey: user))
        storedCount -= removed.rows?.count ?? 0
        return removed
    }

    func restoreUser(_ user: String, _ removed: Any) {
        guard let removed = removed as? Removed else { return }
        rows[user] = removed.rows
        ordered[user] = removed.ordered
        deleted[user] = removed.deleted
        feedIndex[user] = removed.feed
        storedCount += removed.rows?.count ?? 0
    }

    func storedRows(of user: String) -> [(String, JSON)] {
        scan(user: user).map { ($0.key, $0.row.stored) }
    }

    func feed(user: String, after: UInt64, limit: Int, into out: inout [FeedCandidate]) -> UInt64 {
        feedIndexReady(user)
        guard let index = feedIndex[user] else { return 0 }
        let mine = rows[user], gone = deleted[user]
        let floorKey = RowKey(Tombstones.floorKey), floor = gone?[floorKey]?.position ?? 0
        // The floor's tombstone is no feed entry: one more is read in case it is among them.
        let take = floor > after && limit < .max ? limit + 1 : limit
        for (seq, ref) in index.entries(from: nil, to: nil, after: after, reverse: false, limit: take) where ref.key != floorKey {
            let at = (ref.deleted ? gone?[ref.key] : mine?.stamp(ref.key))?.at ?? 0
            out.append(FeedCandidate(stamp: Stamp(position: seq, at: at), table: slot, key: ref.key, deleted: ref.deleted))
        }
        return floor
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
                        chunk.keys[i].write(to: &group)
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
                    (stamp ?? Stamp(position: 0, at: 0)).write(to: &group)
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

/// Where a feed position of a synced table points: a row, or a deleted row's tombstone.
@usableFromInline
struct FeedRef: Sendable {
    @usableFromInline let key: RowKey
    @usableFromInline let deleted: Bool

    @inlinable init(key: RowKey, deleted: Bool) {
        self.key = key
        self.deleted = deleted
    }
}
