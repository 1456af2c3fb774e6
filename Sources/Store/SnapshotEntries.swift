import JSON
import Storage

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

extension BinaryReader {
    /// A row key in a snapshot group of `table`, packed as the store keeps it, with no string made for
    /// a UUID.
    @inlinable
    mutating func storeKey(of table: String) throws(StorageError) -> RowKey {
        let start = offset
        do {
            if let packed = RowKey.packed(try stringBytes()) { return packed }
        } catch {
            throw StorageError.corrupt("\(table): \(error)")
        }
        rewind(to: start)
        return RowKey(try rowKey(of: table))
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
        return Stamp(position: nextLegacy, at: legacyAt)
    }
}

/// A snapshot entry of a synced table is a row or a tombstone (a deleted row's last feed entry).
@usableFromInline
enum SnapshotEntryKind: UInt8 {
    case tombstone = 0
    case row = 1
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

extension Stamp {
    /// The binary form: position, then time (varints).
    func write(to out: inout [UInt8]) {
        Binary.writeVarint(position, to: &out)
        Binary.writeVarint(UInt64(bitPattern: at), to: &out)
    }
}

extension BinaryReader {
    @inlinable
    mutating func stamp(of table: String) throws(StorageError) -> Stamp {
        do {
            return Stamp(position: try varint(), at: Int64(bitPattern: try varint()))
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
