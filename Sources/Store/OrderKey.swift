/// A second-order key as the store holds it, with the row it orders. An order function that ends its
/// key with the row key (health's do: `type, day, start`, then the UUID) has the key kept as the part
/// before the row key (the head) plus the packed row key; any other order key is kept whole, with its
/// row beside it. A bound of a range scan is a key with an empty row.
///
/// A head of at most 16 ASCII bytes (health's are 13 or 15) is packed big-endian into two integers,
/// zero-padded, which compare as the string does: an entry then has no string at all, and sorting or
/// inserting compares integers. Keys order exactly as their strings do (ties between whole keys of
/// different rows by row key), so ranges and cursors given as strings mean what they meant.
@usableFromInline
struct OrderKey: Sendable {
    @usableFromInline
    enum Head: Sendable, Equatable {
        /// The bytes, big-endian from the first, zero-padded; none is zero.
        case packed(UInt64, UInt64)
        case text(String)

        @inlinable
        init(_ s: String) {
            var s = s
            self = s.withUTF8 { Head.pack($0) } ?? .text(s)
        }

        @inlinable
        init(_ bytes: some Collection<UInt8>) {
            self = Head.pack(bytes) ?? .text(String(decoding: bytes, as: UTF8.self))
        }

        @usableFromInline
        static func pack(_ bytes: some Collection<UInt8>) -> Head? {
            guard bytes.count <= 16 else { return nil }
            var hi: UInt64 = 0, lo: UInt64 = 0
            var i = 0
            for b in bytes {
                guard b != 0, b < 0x80 else { return nil }
                if i < 8 { hi |= UInt64(b) << (56 - 8 * UInt64(i)) } else { lo |= UInt64(b) << (56 - 8 * UInt64(i - 8)) }
                i += 1
            }
            return .packed(hi, lo)
        }

        /// How many bytes: a packed head has no zero byte, so its length is where the padding starts.
        @inlinable
        var count: Int {
            switch self {
            case .text(let s): return s.utf8.count
            case .packed(let hi, let lo):
                return lo != 0 ? 16 - lo.trailingZeroBitCount / 8 : (hi != 0 ? 8 - hi.trailingZeroBitCount / 8 : 0)
            }
        }

        @inlinable
        var string: String {
            switch self {
            case .text(let s): return s
            case .packed(let hi, let lo):
                return String(unsafeUninitializedCapacity: 16) { out in
                    var n = 0
                    for word in [hi, lo] {
                        for shift in stride(from: 56, through: 0, by: -8) {
                            let b = UInt8(truncatingIfNeeded: word >> UInt64(shift))
                            if b == 0 { return n }
                            out[n] = b
                            n += 1
                        }
                    }
                    return n
                }
            }
        }

        @inlinable
        static func < (a: Head, b: Head) -> Bool {
            if case .packed(let x, let y) = a, case .packed(let z, let w) = b { return x < z || (x == z && y < w) }
            return a.string < b.string
        }
    }

    /// The order key's text before `row` when `split`, else all of it.
    @usableFromInline let head: Head
    @usableFromInline let row: RowKey
    /// Whether the order key is `head` followed by the row key's string.
    @usableFromInline let split: Bool

    /// The key `order` that the order function gave row `name` (packed as `row`).
    @inlinable
    init(_ order: String, row: RowKey, name: String) {
        self.row = row
        if order.utf8.count > name.utf8.count, order.hasSuffix(name) {
            head = Head(order.utf8.dropLast(name.utf8.count))
            split = true
        } else {
            head = Head(order)
            split = false
        }
    }

    /// A range scan's bound (or a cursor's position), given as a string.
    @inlinable
    init(bound: String) {
        head = Head(bound)
        row = .text("")
        split = true
    }

    /// The order key as the order function gave it.
    @inlinable
    var string: String { split ? head.string + row.string : head.string }
}

extension OrderKey: Comparable {
    @inlinable
    static func < (a: OrderKey, b: OrderKey) -> Bool {
        if a.split && b.split {
            if a.head == b.head { return a.row < b.row }
            // Heads of one length differ before either ends, so they decide (health's always do).
            if a.head.count == b.head.count { return a.head < b.head }
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
