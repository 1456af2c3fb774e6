/// Where compact JSON is written: a byte array, or a counter that only measures.
public protocol JSONOutput {
    mutating func append(_ byte: UInt8)
    mutating func append<Bytes: Collection>(contentsOf bytes: Bytes) where Bytes.Element == UInt8
}

extension Array: JSONOutput where Element == UInt8 {}

/// Counts the bytes a serialization would take, without keeping them.
public struct ByteCounter: JSONOutput {
    public private(set) var count = 0
    public init() {}
    public mutating func append(_ byte: UInt8) { count += 1 }
    public mutating func append<Bytes: Collection>(contentsOf bytes: Bytes) where Bytes.Element == UInt8 { count += bytes.count }
}

/// Compact JSON output: key order kept, strings escaped minimally, doubles in shortest round-trip form.
extension JSON {
    /// The length of the compact serialization, computed without building it (size limits).
    public var serializedCount: Int {
        var counter = ByteCounter()
        write(to: &counter)
        return counter.count
    }

    /// Appends the compact serialization of this value to `out`.
    public func write<Out: JSONOutput>(to out: inout Out) {
        switch self {
        case .null:
            out.append(contentsOf: "null".utf8)
        case .bool(let b):
            out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i):
            JSON.writeInteger(i, to: &out)
        case .double(let d):
            JSON.writeDouble(d, to: &out)
        case .string(let s):
            JSON.writeString(s, to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            var first = true
            for item in items {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                item.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            var first = true
            for (key, value) in object {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                JSON.writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// The compact serialization as bytes.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        write(to: &out)
        return out
    }

    /// The compact serialization as a string.
    public var serialized: String {
        String(decoding: bytes, as: UTF8.self)
    }

    /// Writes an integer in decimal without going through String.
    public static func writeInteger<Out: JSONOutput>(_ value: Int64, to out: inout Out) {
        if value == 0 {
            out.append(UInt8(ascii: "0"))
            return
        }
        var magnitude = value.magnitude
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // room for 20 digits plus slack
        let count = withUnsafeMutableBytes(of: &digits) { raw -> Int in
            var n = 0
            while magnitude > 0 {
                raw[n] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                n += 1
            }
            return n
        }
        withUnsafeBytes(of: &digits) { raw in
            for i in stride(from: count - 1, through: 0, by: -1) { out.append(raw[i]) }
        }
    }

    /// Writes a double in its shortest form that reads back to the same value (Swift's description
    /// is shortest round-trip). NaN and infinities have no JSON form and are written as null.
    public static func writeDouble<Out: JSONOutput>(_ value: Double, to out: inout Out) {
        guard value.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        out.append(contentsOf: value.description.utf8)
    }

    /// Writes a string literal, escaping quote, backslash and control characters; other UTF-8 passes through.
    public static func writeString<Out: JSONOutput>(_ value: String, to out: inout Out) {
        out.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var runStart = 0
            var i = 0
            let n = utf8.count
            while i < n {
                let byte = utf8[i]
                if byte >= 0x20 && byte != 0x22 && byte != 0x5C {
                    i += 1
                    continue
                }
                if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<i])) }
                switch byte {
                case 0x22: out.append(contentsOf: "\\\"".utf8)
                case 0x5C: out.append(contentsOf: "\\\\".utf8)
                case 0x0A: out.append(contentsOf: "\\n".utf8)
                case 0x0D: out.append(contentsOf: "\\r".utf8)
                case 0x09: out.append(contentsOf: "\\t".utf8)
                case 0x08: out.append(contentsOf: "\\b".utf8)
                case 0x0C: out.append(contentsOf: "\\f".utf8)
                default:
                    out.append(contentsOf: "\\u00".utf8)
                    out.append(hexDigits[Int(byte >> 4)])
                    out.append(hexDigits[Int(byte & 0xF)])
                }
                i += 1
                runStart = i
            }
            if runStart < n { out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<n])) }
        }
        out.append(UInt8(ascii: "\""))
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
}

extension JSON: CustomStringConvertible {
    /// The compact serialization.
    public var description: String { serialized }
}
