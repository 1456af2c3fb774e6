/// One user's rows of a table in key order (or any other sorted map the store keeps: a second order, a
/// feed index by position), in chunks of at most `chunkMax` entries, each chunk a few
/// parallel sorted arrays, found by binary search over the chunks' last keys. An insert, a delete or a
/// lookup costs O(log n) comparisons and moves at most `chunkMax` entries, whatever the key order:
/// HealthKit's random UUIDs land in the middle as cheaply as dates and counters land at the end (those
/// append without a search). Range scans walk chunks in order and never sort. Keys compare as Swift
/// strings, which for the ASCII keys the kernel makes is byte order.
///
/// Why chunks and not a B-tree: two levels (a sorted array of chunks) give the same O(log n) search,
/// an insert that moves at most a chunk, and a scan that is a walk over plain arrays, in far less code;
/// with 512 entries a chunk, 5 million rows are about 10,000 chunks, whose last keys search in 14 steps.
/// swift-collections' `SortedDictionary` is an unstable, trait-gated prototype.
///
/// A synced table's partition also keeps each row's feed `Stamp` in a third parallel array
/// (`setStamped`); other partitions leave it empty.
@usableFromInline
struct SortedChunks<Key: Comparable, Row> {
    /// Entries per chunk at most; a fuller chunk splits in two.
    @usableFromInline static var chunkMax: Int { 512 }

    @usableFromInline
    struct Chunk {
        @usableFromInline var keys: [Key] = []
        @usableFromInline var rows: [Row] = []
        @usableFromInline var stamps: [Stamp] = []

        @inlinable init() {}
    }

    /// The chunks, in key order; none is empty.
    @usableFromInline var chunks: [Chunk] = []
    /// The last key of each chunk.
    @usableFromInline var lasts: [Key] = []
    @usableFromInline var count = 0
    /// The store's change count when these rows last changed (a table's partition of a user's rows):
    /// what `Store.versions(of:in:)` compares. 0 until then.
    @usableFromInline var version: UInt64 = 0

    @inlinable init() {}

    @inlinable var isEmpty: Bool { count == 0 }

    /// Where `key` is or would go: the first chunk whose last key is not less than `key` (the last chunk
    /// when every key is less), and the index of the first key not less than `key` in it.
    @inlinable
    func locate(_ key: Key) -> (chunk: Int, index: Int) {
        guard let last = lasts.last else { return (0, 0) }
        if last < key { return (chunks.count - 1, chunks[chunks.count - 1].keys.count) }  // appends skip the search
        var lo = 0, hi = lasts.count - 1
        while lo < hi {
            let mid = (lo + hi) >> 1
            if lasts[mid] < key { lo = mid + 1 } else { hi = mid }
        }
        let keys = chunks[lo].keys
        var a = 0, b = keys.count
        while a < b {
            let mid = (a + b) >> 1
            if keys[mid] < key { a = mid + 1 } else { b = mid }
        }
        return (lo, a)
    }

    @inlinable
    subscript(key: Key) -> Row? {
        let (c, i) = locate(key)
        guard c < chunks.count, i < chunks[c].keys.count, chunks[c].keys[i] == key else { return nil }
        return chunks[c].rows[i]
    }

    /// Moves an entry from `old` (if any) to `key`: a removal and an insert in one access.
    @inlinable
    mutating func reposition(_ old: Key?, to key: Key, _ row: Row) {
        if let old, old != key { _ = remove(old) }
        set(key, row)
    }

    /// The stamp of `key`, in a partition that keeps stamps.
    @inlinable
    func stamp(_ key: Key) -> Stamp? {
        let (c, i) = locate(key)
        guard c < chunks.count, i < chunks[c].keys.count, chunks[c].keys[i] == key, !chunks[c].stamps.isEmpty else { return nil }
        return chunks[c].stamps[i]
    }

    /// A partition of `entries`, which are in increasing key order: a bulk load in O(n), every chunk
    /// full but the last. An entry out of order (which sorted input never has) takes the general path.
    @inlinable
    init(sorted entries: some Sequence<(Key, Row)>) {
        for (key, row) in entries {
            if let last = lasts.last, !(last < key) {
                set(key, row)
            } else {
                insert(key, row, nil, chunk: max(chunks.count - 1, 0), at: chunks.last?.keys.count ?? 0)
            }
        }
    }

    /// Sets `key` to `row`; returns the row it replaced.
    @inlinable
    @discardableResult
    mutating func set(_ key: Key, _ row: Row) -> Row? {
        let (c, i) = locate(key)
        if c < chunks.count, i < chunks[c].keys.count, chunks[c].keys[i] == key {
            let old = chunks[c].rows[i]
            chunks[c].rows[i] = row
            return old
        }
        insert(key, row, nil, chunk: c, at: i)
        return nil
    }

    /// Sets `key` to `row` stamped `stamp`; returns the row and stamp it replaced.
    @inlinable
    @discardableResult
    mutating func setStamped(_ key: Key, _ row: Row, _ stamp: Stamp) -> (Row, Stamp)? {
        let (c, i) = locate(key)
        if c < chunks.count, i < chunks[c].keys.count, chunks[c].keys[i] == key {
            let old = (chunks[c].rows[i], chunks[c].stamps[i])
            chunks[c].rows[i] = row
            chunks[c].stamps[i] = stamp
            return old
        }
        insert(key, row, stamp, chunk: c, at: i)
        return nil
    }

    @inlinable
    mutating func insert(_ key: Key, _ row: Row, _ stamp: Stamp?, chunk c: Int, at i: Int) {
        var (c, i) = (c, i)
        // A full chunk splits before it takes the entry, so no chunk's arrays ever grow past `chunkMax`
        // (growing to 513 would double their capacity, and the lower half would keep it).
        if c < chunks.count, chunks[c].keys.count == Self.chunkMax, !(c == chunks.count - 1 && i == Self.chunkMax) {
            let half = split(c)
            if i > half { (c, i) = (c + 1, i - half) }
        }
        count += 1
        guard c < chunks.count else {
            var first = Chunk()
            first.keys.append(key)
            first.rows.append(row)
            if let stamp { first.stamps.append(stamp) }
            chunks.append(first)
            lasts.append(key)
            return
        }
        if i == chunks[c].keys.count {
            // Appending past a full last chunk starts a new one, so keys that arrive in order (dates,
            // counters, feed positions, a bulk load) leave full chunks rather than halves.
            if c == chunks.count - 1, chunks[c].keys.count == Self.chunkMax {
                var next = Chunk()
                next.keys.reserveCapacity(Self.chunkMax)
                next.rows.reserveCapacity(Self.chunkMax)
                next.keys.append(key)
                next.rows.append(row)
                if let stamp {
                    next.stamps.reserveCapacity(Self.chunkMax)
                    next.stamps.append(stamp)
                }
                chunks.append(next)
                lasts.append(key)
                return
            }
            chunks[c].keys.append(key)
            chunks[c].rows.append(row)
            if let stamp { chunks[c].stamps.append(stamp) }
            lasts[c] = key
        } else {
            chunks[c].keys.insert(key, at: i)
            chunks[c].rows.insert(row, at: i)
            if let stamp { chunks[c].stamps.insert(stamp, at: i) }
        }
    }

    /// Splits chunk `c` in two halves; returns how many entries stay in `c`. O(chunkMax + chunks) (the
    /// chunk arrays shift by one).
    @inlinable
    @discardableResult
    mutating func split(_ c: Int) -> Int {
        let half = chunks[c].keys.count / 2
        var upper = Chunk()
        upper.keys = Array(chunks[c].keys[half...])
        upper.rows = Array(chunks[c].rows[half...])
        if !chunks[c].stamps.isEmpty { upper.stamps = Array(chunks[c].stamps[half...]) }
        chunks[c].keys.removeSubrange(half...)
        chunks[c].rows.removeSubrange(half...)
        if !chunks[c].stamps.isEmpty { chunks[c].stamps.removeSubrange(half...) }
        chunks.insert(upper, at: c + 1)
        lasts.insert(lasts[c], at: c + 1)
        lasts[c] = chunks[c].keys[half - 1]
        return half
    }

    /// Removes `key`; returns its row, and its stamp if the partition keeps stamps.
    @inlinable
    mutating func remove(_ key: Key) -> (row: Row, stamp: Stamp?)? {
        let (c, i) = locate(key)
        guard c < chunks.count, i < chunks[c].keys.count, chunks[c].keys[i] == key else { return nil }
        count -= 1
        chunks[c].keys.remove(at: i)
        let row = chunks[c].rows.remove(at: i)
        let stamp = chunks[c].stamps.isEmpty ? nil : chunks[c].stamps.remove(at: i)
        if chunks[c].keys.isEmpty {
            chunks.remove(at: c)
            lasts.remove(at: c)
        } else {
            lasts[c] = chunks[c].keys[chunks[c].keys.count - 1]
            // A chunk left small joins its successor when both fit one, so deletes never leave many
            // near-empty chunks behind.
            if chunks[c].keys.count < Self.chunkMax / 8, c + 1 < chunks.count,
               chunks[c].keys.count + chunks[c + 1].keys.count <= Self.chunkMax {
                let next = chunks.remove(at: c + 1)
                lasts.remove(at: c + 1)
                chunks[c].keys.append(contentsOf: next.keys)
                chunks[c].rows.append(contentsOf: next.rows)
                chunks[c].stamps.append(contentsOf: next.stamps)
                lasts[c] = chunks[c].keys[chunks[c].keys.count - 1]
            }
        }
        return (row, stamp)
    }

    /// The position of the first key not less than `key` (`strictly`: greater than `key`), as (chunk,
    /// index); (chunks.count, 0) past the end.
    @inlinable
    func position(_ key: Key, strictly: Bool) -> (Int, Int) {
        var (c, i) = locate(key)
        guard c < chunks.count else { return (chunks.count, 0) }
        if strictly, i < chunks[c].keys.count, chunks[c].keys[i] == key { i += 1 }
        if i == chunks[c].keys.count { return (c + 1, 0) }
        return (c, i)
    }

    /// The entries with keys in `from...to` (either end open) beyond `after` in the scan direction, in
    /// scan order, at most `limit`: O(log n + page).
    @inlinable
    func entries(from: Key?, to: Key?, after: Key?, reverse: Bool, limit: Int) -> [(key: Key, row: Row)] {
        var lo = from.map { position($0, strictly: false) } ?? (0, 0)
        var hi = to.map { position($0, strictly: true) } ?? (chunks.count, 0)
        if let after {
            if reverse {
                let p = position(after, strictly: false)
                if p < hi { hi = p }
            } else {
                let p = position(after, strictly: true)
                if p > lo { lo = p }
            }
        }
        guard lo < hi, limit > 0 else { return [] }
        var out: [(key: Key, row: Row)] = []
        if reverse {
            var (c, i) = hi  // exclusive
            while out.count < limit {
                if i == 0 {
                    if c == 0 { break }
                    c -= 1
                    i = chunks[c].keys.count
                }
                i -= 1
                guard (c, i) >= lo else { break }
                out.append((chunks[c].keys[i], chunks[c].rows[i]))
            }
        } else {
            var (c, i) = lo
            while out.count < limit && (c, i) < hi {
                out.append((chunks[c].keys[i], chunks[c].rows[i]))
                i += 1
                if i == chunks[c].keys.count { (c, i) = (c + 1, 0) }
            }
        }
        return out
    }

    /// How many keys are not greater than `key`: O(log n + chunks).
    @inlinable
    func countThrough(_ key: Key) -> Int {
        let (c, i) = position(key, strictly: true)
        return chunks[..<c].reduce(0) { $0 + $1.keys.count } + i
    }

    /// Calls `body` with every entry in key order (its stamp when the partition keeps them).
    @inlinable
    func forEach(_ body: (Key, Row, Stamp?) -> Void) {
        for chunk in chunks {
            let stamped = !chunk.stamps.isEmpty
            for i in chunk.keys.indices { body(chunk.keys[i], chunk.rows[i], stamped ? chunk.stamps[i] : nil) }
        }
    }
}

extension SortedChunks: Sendable where Key: Sendable, Row: Sendable {}
extension SortedChunks.Chunk: Sendable where Key: Sendable, Row: Sendable {}

/// One user's rows of a table, by row key (UUIDs packed: see `RowKey`).
@usableFromInline
typealias Partition<Row> = SortedChunks<RowKey, Row>

/// Where a synced row stands in its user's change feed: its feed position and commit time. Derived
/// from the log when it is replayed (a record's changes take positions `record seq << 20` upwards; the
/// record carries its commit time), and kept in snapshots.
@usableFromInline
struct Stamp: Sendable, Equatable {
    /// The change's feed position (0: not in the feed).
    @usableFromInline var position: UInt64
    /// Milliseconds since 1970.
    @usableFromInline var at: Int64

    @inlinable init(position: UInt64, at: Int64) {
        self.position = position
        self.at = at
    }

    /// Bits of a feed position taken by the change's index within its record.
    static let positionBits = 20

    /// The position of change `index` of record `record`.
    @inlinable
    static func position(record: UInt64, index: Int) -> UInt64 { record << 20 | UInt64(index) }
}
