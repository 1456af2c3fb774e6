import JSON
import Storage

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
    /// Sets the feed entry of a deleted row of a synced table, as a store moved in had it (no-op elsewhere).
    func setTombstone(user: String, key: String, stamp: Stamp)
    /// The change count when `user`'s rows last changed (0: never, or no rows).
    func version(of user: String) -> UInt64
    /// Notes that `user`'s rows changed at change count `version`.
    func markChanged(_ user: String, _ version: UInt64)
    /// Removes a user's rows; returns them (for undo).
    func removeUser(_ user: String) -> Any
    /// Puts back what `removeUser` returned.
    func restoreUser(_ user: String, _ rows: Any)
    /// A copy-on-write image of every row, safe to read on another thread.
    func freeze() -> FrozenTable
    /// One user's rows as (key, stored value).
    func storedRows(of user: String) -> [(String, JSON)]
    /// Appends `user`'s first `limit` feed entries after position `after`, in position order; returns the
    /// table's floor for the user (see `Tombstones`).
    func feed(user: String, after: UInt64, limit: Int, into out: inout [FeedCandidate]) -> UInt64
    /// Builds what is derived from the rows (second order, feed index) after a snapshot loaded them.
    func buildIndexes()
}

extension AnyTable {
    var entity: Entity? { nil }
    func feed(user: String, after: UInt64, limit: Int, into out: inout [FeedCandidate]) -> UInt64 { 0 }
    func buildIndexes() {}
}

/// A feed entry found in a table, before the page is chosen.
struct FeedCandidate {
    let stamp: Stamp
    let table: Int
    let key: RowKey
    let deleted: Bool
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
        put = { [unowned table] user, key, row, stamp in table.set(user, RowKey(key), table.typed(row), stamp) }
        putBinary = { [unowned table] (user, key, reader, stamp) throws(StorageError) in
            table.set(user, RowKey(key), try Row(binaryStored: &reader), stamp)
        }
        putBinaryGroup = { [unowned table] (user, count, reader, stamps) throws(StorageError) in
            try table.setGroup(user, count, &reader, &stamps)
        }
    }
}
