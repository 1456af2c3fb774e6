/// A second-order key as the store holds it: what the table's order function gave the row (the head),
/// then the row's key, packed. With a head of at most 15 bytes, which Swift keeps inline (health's are
/// 13 or 15), an entry has no heap string at all. A bound of a range scan is a head with an empty row.
///
/// Keys order exactly as the strings head + row key do, so ranges and cursors given as strings mean
/// what they meant.
@usableFromInline
struct OrderKey: Sendable {
    @usableFromInline let head: String
    @usableFromInline let row: RowKey

    @inlinable
    init(head: String, row: RowKey) {
        self.head = head
        self.row = row
    }

    /// A range scan's bound (or a cursor's position), given as a string.
    @inlinable
    init(bound: String) {
        head = bound
        row = .text("")
    }

    /// The order key as a string.
    @inlinable
    var string: String { head + row.string }
}

extension OrderKey: Comparable {
    @inlinable
    static func < (a: OrderKey, b: OrderKey) -> Bool {
        if a.head == b.head { return a.row < b.row }
        // Heads of one length differ before either ends, so they decide (health's always do).
        if a.head.utf8.count == b.head.utf8.count { return a.head < b.head }
        return a.string < b.string
    }

    /// Equal when the strings are: a cursor's position finds its entry.
    @inlinable
    static func == (a: OrderKey, b: OrderKey) -> Bool {
        !(a < b) && !(b < a)
    }
}
