import JSON

/// A row key as the store holds it. Most rows of the big tables are keyed by HealthKit UUIDs: a UUID in
/// its 36-character form (all upper or all lower case hex) is packed into its 16 bytes, which saves a
/// heap string of about 64 bytes a row and compares as two integers; any other key stays a string.
///
/// Keys order exactly as their strings do (the storage interface promises string order): two UUIDs of
/// the same case compare as numbers, which for fixed-width hex with dashes at fixed places is string
/// order; any other pair compares as strings.
@usableFromInline
enum RowKey: Hashable, Sendable {
    case upper(UInt64, UInt64)
    case lower(UInt64, UInt64)
    case text(String)

    @inlinable
    init(_ key: String) {
        var key = key
        self = key.withUTF8 { RowKey.packed($0) } ?? .text(key)
    }

    /// The packed form of a 36-byte UUID in one case, else nil.
    @usableFromInline
    static func packed(_ s: UnsafeBufferPointer<UInt8>) -> RowKey? {
        guard s.count == 36 else { return nil }
        var hi: UInt64 = 0, lo: UInt64 = 0
        var digits = 0
        var sawUpper = false, sawLower = false
        for i in 0..<36 {
            let c = s[i]
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard c == UInt8(ascii: "-") else { return nil }
                continue
            }
            let v: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c &- UInt8(ascii: "0")
            case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c &- UInt8(ascii: "A") &+ 10; sawUpper = true
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c &- UInt8(ascii: "a") &+ 10; sawLower = true
            default: return nil
            }
            if digits < 16 { hi = hi << 4 | UInt64(v) } else { lo = lo << 4 | UInt64(v) }
            digits += 1
        }
        // Digits only, or one case: a mixed-case UUID keeps its exact spelling as text.
        if sawUpper && sawLower { return nil }
        return sawLower ? .lower(hi, lo) : .upper(hi, lo)
    }

    /// The key as the storage interface spells it.
    @inlinable
    var string: String {
        switch self {
        case .text(let s): return s
        case .upper(let hi, let lo): return String(unsafeUninitializedCapacity: 36) { Self.format(hi, lo, upper: true, into: $0) }
        case .lower(let hi, let lo): return String(unsafeUninitializedCapacity: 36) { Self.format(hi, lo, upper: false, into: $0) }
        }
    }

    @usableFromInline
    static func format(_ hi: UInt64, _ lo: UInt64, upper: Bool, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let alphabet: StaticString = upper ? "0123456789ABCDEF" : "0123456789abcdef"
        var o = 0
        for d in 0..<32 {
            if d == 8 || d == 12 || d == 16 || d == 20 {
                out[o] = UInt8(ascii: "-")
                o += 1
            }
            let word = d < 16 ? hi : lo
            let shift = UInt64(60 - 4 * (d % 16))
            out[o] = alphabet.utf8Start[Int((word >> shift) & 0xF)]
            o += 1
        }
        return o
    }

    /// Writes the key's string body (length, then bytes), as `Binary.writeString` would.
    @inlinable
    func write(to out: inout [UInt8]) {
        switch self {
        case .text(let s):
            Binary.writeString(s, to: &out)
        case .upper(let hi, let lo), .lower(let hi, let lo):
            let upper: Bool
            if case .upper = self { upper = true } else { upper = false }
            out.append(36)
            let at = out.count
            out.append(contentsOf: repeatElement(0, count: 36))
            out.withUnsafeMutableBufferPointer { buffer in
                _ = Self.format(hi, lo, upper: upper, into: UnsafeMutableBufferPointer(rebasing: buffer[at...]))
            }
        }
    }
}

extension RowKey: Comparable {
    @inlinable
    static func < (a: RowKey, b: RowKey) -> Bool {
        switch (a, b) {
        case (.upper(let x, let y), .upper(let z, let w)), (.lower(let x, let y), .lower(let z, let w)):
            return x < z || (x == z && y < w)
        case (.text(let x), .text(let y)):
            return x < y
        default:
            return a.string < b.string
        }
    }
}
