import JSON
import Storage

/// The stored form of a claim: the claim itself is the row (table `store.unique`, the holder's partition,
/// the key as row key), so logs and snapshots carry claims as ordinary rows and deleting a user removes
/// them with the rest of the user's rows.
struct ClaimRow: StoredRow {
    init() {}
    init(stored: JSON) throws(StorageError) {
        guard case .object = stored else { throw StorageError.corrupt("a unique key claim is not an object") }
    }
    var stored: JSON { .object(JSONObject()) }
}

/// Every claimed unique key and its holder. A table like the others to the log, snapshots and undo,
/// plus the global index from key to holder that lookups need; the index is rebuilt from the rows at
/// recovery and kept in step by every change.
final class UniqueKeys: AnyTable {
    static let tableName = "store.unique"
    let name = UniqueKeys.tableName
    private var holders: [String: String] = [:]
    private var held: [String: Set<String>] = [:]

    var rowCount: Int { holders.count }

    /// Who holds `key`, if anyone.
    func holder(of key: String) -> String? { holders[key] }

    private func claim(_ user: String, _ key: String) -> (any StoredRow)? {
        let previous = holders.updateValue(user, forKey: key)
        if let previous, previous != user { held[previous]?.remove(key) }
        held[user, default: []].insert(key)
        return previous == user ? ClaimRow() : nil
    }

    func put(user: String, key: String, row: any StoredRow, stamp: Stamp) -> Previous { Previous(row: claim(user, key)) }

    func put(user: String, key: String, stored: JSON, stamp: Stamp) throws(StorageError) {
        _ = try ClaimRow(stored: stored)
        _ = claim(user, key)
    }

    func putBinary(user: String, key: String, from reader: inout BinaryReader, stamp: Stamp) throws(StorageError) {
        _ = try ClaimRow(binaryStored: &reader)
        _ = claim(user, key)
    }

    func putBinaryGroup(user: String, count: Int, from reader: inout BinaryReader, stamps: inout SnapshotStamps) throws(StorageError) {
        for _ in 0..<count {
            let key = try reader.rowKey(of: name)
            _ = try ClaimRow(binaryStored: &reader)
            _ = claim(user, key)
        }
    }

    func delete(user: String, key: String, stamp: Stamp) -> Previous {
        guard holders[key] == user else { return Previous() }
        holders[key] = nil
        held[user]?.remove(key)
        if held[user]?.isEmpty == true { held[user] = nil }
        return Previous(row: ClaimRow())
    }

    func setTombstone(user: String, key: String, stamp: Stamp) {}

    /// Unique keys are read through `holder(of:)`, never through a view: nothing compares their versions.
    func version(of user: String) -> UInt64 { 0 }

    func markChanged(_ user: String, _ version: UInt64) {}

    func restore(user: String, key: String, _ previous: Previous) {
        if previous.row != nil { _ = claim(user, key) } else { _ = delete(user: user, key: key, stamp: Stamp(position: 0, at: 0)) }
    }

    func removeUser(_ user: String) -> Any {
        let keys = held.removeValue(forKey: user) ?? []
        for key in keys { holders[key] = nil }
        return keys
    }

    func restoreUser(_ user: String, _ removed: Any) {
        for key in removed as? Set<String> ?? [] { _ = claim(user, key) }
    }

    func storedRows(of user: String) -> [(String, JSON)] {
        (held[user] ?? []).sorted().map { ($0, ClaimRow().stored) }
    }

    func freeze() -> FrozenTable {
        let image = held
        return FrozenTable(name: name, rowCount: rowCount, stamped: false) { out, groupWritten in
            for (user, keys) in image where !keys.isEmpty {
                Binary.writeString(user, to: &out)
                Binary.writeVarint(UInt64(keys.count), to: &out)
                for key in keys.sorted() {
                    Binary.writeString(key, to: &out)
                    ClaimRow().writeStored(to: &out)
                }
                groupWritten(&out, keys.count)
            }
        }
    }
}
