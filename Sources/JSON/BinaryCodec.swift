/// A compact binary form of JSON values, for what the kernel writes to its own files (log records,
/// snapshots): writing needs no escaping and reading needs no text parser, which makes snapshots and
/// recovery several times faster than JSON text. Never used on the wire.
///
/// Each value is a tag byte and its body: null, false, true (no body); integer (zigzag LEB128); double
/// (8 bytes, IEEE 754 bits, little-endian); string (LEB128 byte length, UTF-8); array (LEB128 count,
/// items); object (LEB128 count, then key as a string body and value, in order).
extension JSON {
    enum BinaryTag: UInt8 {
        case null = 0, `false`, `true`, int, double, string, array, object
    }

    /// Appends the binary form of this value to `out`.
    public func writeBinary(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(BinaryTag.null.rawValue)
        case .bool(let b): out.append(b ? BinaryTag.true.rawValue : BinaryTag.false.rawValue)
        case .int(let i):
            out.append(BinaryTag.int.rawValue)
            Binary.writeVarint(UInt64(bitPattern: (i << 1) ^ (i >> 63)), to: &out)
        case .double(let d):
            out.append(BinaryTag.double.rawValue)
            var bits = d.bitPattern.littleEndian
            withUnsafeBytes(of: &bits) { out.append(contentsOf: $0) }
        case .string(let s):
            out.append(BinaryTag.string.rawValue)
            Binary.writeString(s, to: &out)
        case .array(let items):
            out.append(BinaryTag.array.rawValue)
            Binary.writeVarint(UInt64(items.count), to: &out)
            for item in items { item.writeBinary(to: &out) }
        case .object(let object):
            out.append(BinaryTag.object.rawValue)
            Binary.writeVarint(UInt64(object.count), to: &out)
            for (key, value) in object {
                Binary.writeString(key, to: &out)
                value.writeBinary(to: &out)
            }
        }
    }

    /// Reads one value in binary form; `maxDepth` bounds nesting as the text parser does.
    public static func readBinary(_ reader: inout BinaryReader, maxDepth: Int = JSON.maxDepth) throws(BinaryDecodeError) -> JSON {
        try readBinary(&reader, depth: 1, maxDepth: maxDepth)
    }

    private static func readBinary(_ r: inout BinaryReader, depth: Int, maxDepth: Int) throws(BinaryDecodeError) -> JSON {
        guard let tag = BinaryTag(rawValue: try r.byte()) else { throw BinaryDecodeError(offset: r.offset - 1, "unknown value tag") }
        switch tag {
        case .null: return .null
        case .false: return .bool(false)
        case .true: return .bool(true)
        case .int:
            let z = try r.varint()
            return .int(Int64(bitPattern: z >> 1) ^ -Int64(bitPattern: z & 1))
        case .double:
            return .double(Double(bitPattern: try r.fixed64()))
        case .string:
            return .string(try r.string())
        case .array:
            guard depth <= maxDepth else { throw BinaryDecodeError(offset: r.offset, "nesting too deep") }
            let n = try r.count()
            var items: [JSON] = []
            items.reserveCapacity(n)
            for _ in 0..<n { items.append(try readBinary(&r, depth: depth + 1, maxDepth: maxDepth)) }
            return .array(items)
        case .object:
            guard depth <= maxDepth else { throw BinaryDecodeError(offset: r.offset, "nesting too deep") }
            let n = try r.count()
            var object = JSONObject()
            object.reserve(n)
            for _ in 0..<n {
                let key = try r.string()
                object.appendUnchecked(key, try readBinary(&r, depth: depth + 1, maxDepth: maxDepth))
            }
            return .object(object)
        }
    }
}

/// Writing the primitives of the binary form.
public enum Binary {
    /// Appends `value` as unsigned LEB128.
    @inline(__always)
    public static func writeVarint(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    /// Appends a string body: LEB128 byte length, then its UTF-8.
    @inline(__always)
    public static func writeString(_ value: String, to out: inout [UInt8]) {
        var value = value
        value.withUTF8 { utf8 in
            writeVarint(UInt64(utf8.count), to: &out)
            out.append(contentsOf: utf8)
        }
    }
}

/// Why binary data does not decode; `offset` is relative to the start of the buffer read.
public struct BinaryDecodeError: Error, Sendable, Equatable, CustomStringConvertible {
    public let offset: Int
    public let detail: String
    public init(offset: Int, _ detail: String) {
        self.offset = offset
        self.detail = detail
    }
    public var description: String { "\(detail) at byte \(offset)" }
}

/// A bounds-checked cursor over bytes in the binary form: every read checks what is left, so damaged
/// input gives an error, never a crash or an oversized allocation.
public struct BinaryReader {
    private let bytes: UnsafeRawBufferPointer
    /// Where the next read starts.
    public private(set) var offset: Int

    /// A reader over `bytes`, which must outlive it, from `offset`.
    public init(_ bytes: UnsafeRawBufferPointer, offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    /// Whether every byte has been read.
    public var isAtEnd: Bool { offset >= bytes.count }

    /// One byte.
    @inline(__always)
    public mutating func byte() throws(BinaryDecodeError) -> UInt8 {
        guard offset < bytes.count else { throw BinaryDecodeError(offset: offset, "unexpected end") }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// An unsigned LEB128 number of at most 10 bytes.
    @inline(__always)
    public mutating func varint() throws(BinaryDecodeError) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let b = try byte()
            guard shift < 64 else { throw BinaryDecodeError(offset: offset - 1, "number too long") }
            result |= UInt64(b & 0x7F) << shift
            if b < 0x80 { return result }
            shift += 7
        }
    }

    /// A count or length, which cannot exceed the bytes left (each element takes at least one byte).
    public mutating func count() throws(BinaryDecodeError) -> Int {
        let n = try varint()
        guard n <= UInt64(bytes.count - offset) else { throw BinaryDecodeError(offset: offset, "count beyond the data") }
        return Int(n)
    }

    /// Eight bytes, little-endian.
    public mutating func fixed64() throws(BinaryDecodeError) -> UInt64 {
        guard offset + 8 <= bytes.count else { throw BinaryDecodeError(offset: offset, "unexpected end") }
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(bytes[offset + i]) << (8 * UInt64(i)) }
        offset += 8
        return v
    }

    /// A string body (length, UTF-8); invalid UTF-8 is an error.
    public mutating func string() throws(BinaryDecodeError) -> String {
        let n = try count()
        let start = offset
        offset += n
        let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + n)])
        guard let s = String(validating: slice.assumingMemoryBound(to: UInt8.self), as: UTF8.self) else {
            throw BinaryDecodeError(offset: start, "string is not UTF-8")
        }
        return s
    }
}
