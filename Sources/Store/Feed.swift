import JSON
import Storage

/// A user's change feed, kept as one row per synced entity (table `sync.feed`, the user's partition,
/// row key: entity name, a NUL, the entity id), so the feed holds the latest change of each entity and
/// stays bounded. The table's second order by feed position gives `since`/`limit` paging. Feed rows are
/// written by the store in the same record as the changes they describe, so a restart replays them.
struct FeedRow: StoredRow {
    let seq: UInt64
    let op: FeedEntry.Op
    let at: Int64

    init(seq: UInt64, op: FeedEntry.Op, at: Int64) {
        self.seq = seq
        self.op = op
        self.at = at
    }

    init(stored: JSON) throws(StorageError) {
        guard let seq = stored["seq"]?.intValue, seq >= 0, let op = stored["op"]?.stringValue.flatMap(FeedEntry.Op.init),
              let at = stored["at"]?.intValue else { throw StorageError.corrupt("a feed row is not {seq, op, at}") }
        self.seq = UInt64(seq)
        self.op = op
        self.at = at
    }

    var stored: JSON { ["seq": .int(Int64(seq)), "op": .string(op.rawValue), "at": .int(at)] }

    static let tableName = "sync.feed"
    static let separator: Character = "\u{0}"

    /// The row key of an entity.
    static func key(entity: String, id: String) -> String { entity + "\u{0}" + id }

    /// The feed order: positions as 20 digits.
    static func order(_ seq: UInt64) -> String {
        let digits = String(seq)
        return String(repeating: "0", count: 20 - digits.count) + digits
    }

    /// Positions within a record: a record's changes take positions `record seq << 20` upwards, so a
    /// position grows with the log across restarts.
    static let positionBits: UInt64 = 20

    func entry(key: String) -> FeedEntry? {
        guard let split = key.firstIndex(of: Self.separator) else { return nil }
        return FeedEntry(seq: seq, entity: String(key[..<split]), id: String(key[key.index(after: split)...]), op: op, at: at)
    }
}
