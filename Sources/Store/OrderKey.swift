/// A second-order key as the store holds it, with the row it orders. An order function that ends its
/// key with the row key (health's do: `type, day, start`, then the UUID) has the key kept as the part
/// before the row key plus the packed row key: with a head of at most 15 bytes, which Swift keeps
/// inline, an entry has no heap string at all. Any other order key is kept whole, with its row beside
/// it. A bound of a range scan is a key with an empty row.
///
/// Keys order exactly as their strings do (ties between whole keys of different rows by row key), so
/// ranges and cursors given as strings mean what they meant.
@usableFromInline
struct OrderKey: Sendable {
    /// The order key's text before `row` when `split`, else all of it.
    @usableFromInline let head: String
    @usableFromInline let row: RowKey
    /// Whether the order key is `head` followed by the row key's string.
    @usableFromInline let split: Bool

    /// The key `order` that the order function gave row `name` (packed as `row`).
    @inlinable
    init(_ order: String, row: RowKey, name: String) {
        self.row = row
        if order.utf8.count > name.utf8.count, order.hasSuffix(name) {
            head = String(order.utf8.dropLast(name.utf8.count))!
            split = true
        } else {
            head = order
            split = false
        }
    }

    /// A range scan's bound (or a cursor's position), given as a string.
    @inlinable
    init(bound: String) {
        head = bound
        row = .text("")
        split = true
    }

    /// The order key as the order function gave it.
    @inlinable
    var string: String { split ? head + row.string : head }
}

extension OrderKey: Comparable {
    @inlinable
    static func < (a: OrderKey, b: OrderKey) -> Bool {
        if a.split && b.split {
            if a.head == b.head { return a.row < b.row }
            // Heads of one width differ before either ends, so they decide (health's always do).
            if a.head.utf8.count == b.head.utf8.count { return a.head < b.head }
        }
        let (x, y) = (a.string, b.string)
        return x < y || (x == y && !a.split && !b.split && a.row < b.row)
    }

    /// Equal when the strings are (and, for whole keys, the rows): a cursor's position finds its entry.
    @inlinable
    static func == (a: OrderKey, b: OrderKey) -> Bool {
        !(a < b) && !(b < a)
    }
}
