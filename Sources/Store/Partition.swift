/// One user's rows of a table in key order: two parallel sorted arrays, searched by binary search. Keys
/// written in order (dates, counters, timestamps) are appended without a search; range scans need no
/// sorting. Keys compare as Swift strings, which for the ASCII keys the kernel makes is byte order.
///
/// A synced table's partition also keeps each row's feed `Stamp` in a third parallel array (`setStamped`);
/// other partitions leave it empty.
@usableFromInline
struct Partition<Row> {
    @usableFromInline var keys: [String] = []
    @usableFromInline var rows: [Row] = []
    @usableFromInline var stamps: [Stamp] = []

    @inlinable init() {}

    @inlinable var count: Int { keys.count }
    @inlinable var isEmpty: Bool { keys.isEmpty }

    /// The index of the first key not less than `key`.
    @inlinable
    func lowerBound(_ key: String) -> Int {
        guard let last = keys.last else { return 0 }
        if last < key { return keys.count }  // appends, the common case, skip the search
        var lo = 0, hi = keys.count
        while lo < hi {
            let mid = (lo + hi) >> 1
            if keys[mid] < key { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// The index of the first key greater than `key`.
    @inlinable
    func upperBound(_ key: String) -> Int {
        let i = lowerBound(key)
        return i < keys.count && keys[i] == key ? i + 1 : i
    }

    @inlinable
    subscript(key: String) -> Row? {
        let i = lowerBound(key)
        return i < keys.count && keys[i] == key ? rows[i] : nil
    }

    /// Sets `key` to `row`; returns the row it replaced.
    @inlinable
    @discardableResult
    mutating func set(_ key: String, _ row: Row) -> Row? {
        let i = lowerBound(key)
        if i < keys.count && keys[i] == key {
            let old = rows[i]
            rows[i] = row
            return old
        }
        if i == keys.count {
            keys.append(key)
            rows.append(row)
        } else {
            keys.insert(key, at: i)
            rows.insert(row, at: i)
        }
        return nil
    }

    /// Sets `key` to `row` stamped `stamp`; returns the row and stamp it replaced.
    @inlinable
    @discardableResult
    mutating func setStamped(_ key: String, _ row: Row, _ stamp: Stamp) -> (Row, Stamp)? {
        let i = lowerBound(key)
        if i < keys.count && keys[i] == key {
            let old = (rows[i], stamps[i])
            rows[i] = row
            stamps[i] = stamp
            return old
        }
        if i == keys.count {
            keys.append(key)
            rows.append(row)
            stamps.append(stamp)
        } else {
            keys.insert(key, at: i)
            rows.insert(row, at: i)
            stamps.insert(stamp, at: i)
        }
        return nil
    }

    /// Removes `key`; returns its row, and its stamp if the partition keeps stamps.
    @inlinable
    mutating func remove(_ key: String) -> (row: Row, stamp: Stamp?)? {
        let i = lowerBound(key)
        guard i < keys.count && keys[i] == key else { return nil }
        keys.remove(at: i)
        return (rows.remove(at: i), stamps.isEmpty ? nil : stamps.remove(at: i))
    }

    /// The positions of the keys in `from...to` (either end open) beyond `after` in the scan direction,
    /// in scan order, at most `limit`.
    @inlinable
    func positions(from: String?, to: String?, after: String?, reverse: Bool, limit: Int) -> [Int] {
        var lo = from.map(lowerBound) ?? 0
        var hi = to.map(upperBound) ?? keys.count
        if let after {
            if reverse { hi = min(hi, lowerBound(after)) } else { lo = max(lo, upperBound(after)) }
        }
        guard lo < hi, limit > 0 else { return [] }
        let n = min(limit, hi - lo)
        return reverse ? Array(((hi - n)..<hi).reversed()) : Array(lo..<(lo + n))
    }
}

extension Partition: Sendable where Row: Sendable {}

/// Where a synced row stands in its user's change feed: its feed position and commit time. Derived
/// from the log when it is replayed (a record's changes take positions `record seq << 20` upwards; the
/// record carries its commit time), and kept in snapshots.
@usableFromInline
struct Stamp: Sendable, Equatable {
    @usableFromInline var seq: UInt64
    /// Milliseconds since 1970.
    @usableFromInline var at: Int64

    @inlinable init(seq: UInt64, at: Int64) {
        self.seq = seq
        self.at = at
    }

    /// Bits of a feed position taken by the change's index within its record.
    static let positionBits = 20

    /// The position of change `index` of record `record`.
    @inlinable
    static func position(record: UInt64, index: Int) -> UInt64 { record << 20 | UInt64(index) }
}
