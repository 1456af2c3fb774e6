import JSON
import Storage

/// What a put or delete replaced, so that undo can put it back.
@usableFromInline
struct Previous {
    @usableFromInline var row: (any StoredRow)?
    /// The replaced row's stamp (synced tables).
    @usableFromInline var stamp: Stamp?
    /// The tombstone the change replaced or removed (synced tables).
    @usableFromInline var tombstone: Stamp?
    /// Tombstones a delete dropped past the limit, the floor's former one among them (see `Tombstones`).
    @usableFromInline var dropped: [(RowKey, Stamp)] = []

    @inlinable
    init(row: (any StoredRow)? = nil, stamp: Stamp? = nil, tombstone: Stamp? = nil) {
        self.row = row
        self.stamp = stamp
        self.tombstone = tombstone
    }
}
