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
    /// The whole buffer (for extensions that slice it).
    var buffer: UnsafeRawBufferPointer { bytes }
    /// Moves past `n` bytes that `count()` has bounded.
    mutating func advance(_ n: Int) { offset += n }
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

    /// The bytes of a string body (length, then bytes), not checked as UTF-8: for a caller that parses
    /// them itself and otherwise reads the body again with `string()` after `rewind(to:)`.
    public mutating func stringBytes() throws(BinaryDecodeError) -> UnsafeBufferPointer<UInt8> {
        let n = try count()
        defer { offset += n }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + n)]).assumingMemoryBound(to: UInt8.self)
    }

    /// Reads an object in the binary form member by member without building it: `member` gets each
    /// key's bytes and reads the value when it knows the key (returning true), else the value is
    /// skipped. For rows decoded by the million at recovery.
    public mutating func readObjectMembers(_ member: (UnsafeBufferPointer<UInt8>, inout BinaryReader) throws(BinaryDecodeError) -> Bool)
        throws(BinaryDecodeError) {
        for _ in 0..<(try objectCount()) {
            let key = try stringBytes()
            if try !member(key, &self) { try skipValue() }
        }
    }

    /// A number value (int or double) in the binary form.
    public mutating func numberValue() throws(BinaryDecodeError) -> Double {
        let at = offset
        if try byte() == JSON.BinaryTag.double.rawValue { return Double(bitPattern: try fixed64()) }
        rewind(to: at)
        return Double(try int())
    }

    /// A string value in the binary form, or nil for null.
    public mutating func optionalStringValue() throws(BinaryDecodeError) -> String? {
        switch try byte() {
        case JSON.BinaryTag.null.rawValue: return nil
        case JSON.BinaryTag.string.rawValue: return try string()
        default: throw BinaryDecodeError(offset: offset - 1, "not a string")
        }
    }

    /// Moves back to an offset this reader was at.
    public mutating func rewind(to offset: Int) {
        precondition(offset <= self.offset, "rewind forwards")
        self.offset = offset
    }

    /// A string body (length, UTF-8); invalid UTF-8 is an error.
    public mutating func string() throws(BinaryDecodeError) -> String {
        let n = try count()
        let start = offset
        offset += n
        let utf8 = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + n)]).assumingMemoryBound(to: UInt8.self)
        // Ids and keys are ASCII: check that word by word and copy, which is much cheaper than general
        // validation; anything else is validated as UTF-8.
        if Self.isASCII(utf8) { return String(decoding: utf8, as: UTF8.self) }
        guard let s = String(validating: utf8, as: UTF8.self) else {
            throw BinaryDecodeError(offset: start, "string is not UTF-8")
        }
        return s
    }

    /// Whether every byte is below 0x80.
    static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let raw = UnsafeRawBufferPointer(bytes)
        var i = 0
        while i + 8 <= raw.count {
            if raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
            i += 8
        }
        while i < raw.count {
            if raw[i] >= 0x80 { return false }
            i += 1
        }
        return true
    }
}

extension Binary {
    /// Appends an object's tag and member count; the members follow as `writeString(key)` then a value.
    public static func writeObjectHeader(count: Int, to out: inout [UInt8]) {
        out.append(JSON.BinaryTag.object.rawValue)
        writeVarint(UInt64(count), to: &out)
    }

    /// Appends an integer value.
    public static func writeInt(_ value: Int64, to out: inout [UInt8]) {
        out.append(JSON.BinaryTag.int.rawValue)
        writeVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)), to: &out)
    }

    /// Appends an integer value, or null.
    public static func writeOptionalInt(_ value: Int64?, to out: inout [UInt8]) {
        if let value { writeInt(value, to: &out) } else { out.append(JSON.BinaryTag.null.rawValue) }
    }

    /// Appends a double value.
    public static func writeDouble(_ value: Double, to out: inout [UInt8]) {
        out.append(JSON.BinaryTag.double.rawValue)
        var bits = value.bitPattern.littleEndian
        withUnsafeBytes(of: &bits) { out.append(contentsOf: $0) }
    }

    /// Appends a boolean value.
    public static func writeBool(_ value: Bool, to out: inout [UInt8]) {
        out.append(value ? JSON.BinaryTag.true.rawValue : JSON.BinaryTag.false.rawValue)
    }

    /// Appends a string value (tag and body).
    public static func writeStringValue(_ value: String, to out: inout [UInt8]) {
        out.append(JSON.BinaryTag.string.rawValue)
        writeString(value, to: &out)
    }
}

/// One JSON value kept in the binary form: a single allocation however deep the value, cheap to copy
/// into log records and snapshots, and turned back into a tree only when a response needs it. Rows
/// keep client-supplied documents (Screen Time `raw`, app `selection`) this way.
public struct BinaryJSON: Sendable, Equatable {
    /// The value's binary form.
    public let bytes: [UInt8]

    /// Encodes `value`.
    public init(_ value: JSON) {
        var out: [UInt8] = []
        value.writeBinary(to: &out)
        bytes = out
    }

    /// Wraps bytes that `BinaryReader.value()` has checked.
    init(checked bytes: [UInt8]) { self.bytes = bytes }

    /// null.
    public static let null = BinaryJSON(.null)

    /// The value as a tree. The bytes were checked when this was made, so decoding cannot fail.
    public var json: JSON {
        bytes.withUnsafeBytes { raw in
            var r = BinaryReader(raw)
            return (try? JSON.readBinary(&r)) ?? .null
        }
    }

    /// Appends the binary form (as a member value of a larger binary document).
    public func write(to out: inout [UInt8]) {
        out.append(contentsOf: bytes)
    }
}

extension BinaryReader {
    /// Skips one value, checking its structure and that its strings are UTF-8.
    public mutating func skipValue(maxDepth: Int = JSON.maxDepth) throws(BinaryDecodeError) {
        try skipValue(depth: 1, maxDepth: maxDepth)
    }

    private mutating func skipValue(depth: Int, maxDepth: Int) throws(BinaryDecodeError) {
        let at = offset
        guard let tag = JSON.BinaryTag(rawValue: try byte()) else { throw BinaryDecodeError(offset: at, "unknown value tag") }
        switch tag {
        case .null, .false, .true: return
        case .int: _ = try varint()
        case .double: _ = try fixed64()
        case .string: try skipString()
        case .array, .object:
            guard depth <= maxDepth else { throw BinaryDecodeError(offset: offset, "nesting too deep") }
            let n = try count()
            for _ in 0..<n {
                if tag == .object { try skipString() }
                try skipValue(depth: depth + 1, maxDepth: maxDepth)
            }
        }
    }

    private mutating func skipString() throws(BinaryDecodeError) {
        let start = offset
        let n = try count()
        let body = start + (offset - start)
        let slice = UnsafeRawBufferPointer(rebasing: buffer[body..<(body + n)])
        // ASCII needs no further check; anything else is validated as UTF-8.
        let utf8 = slice.assumingMemoryBound(to: UInt8.self)
        if !Self.isASCII(utf8), String(validating: utf8, as: UTF8.self) == nil {
            throw BinaryDecodeError(offset: body, "string is not UTF-8")
        }
        advance(n)
    }

    /// The next value, checked, as a `BinaryJSON` (no tree is built).
    public mutating func value() throws(BinaryDecodeError) -> BinaryJSON {
        let start = offset
        try skipValue()
        return BinaryJSON(checked: Array(UnsafeRawBufferPointer(rebasing: buffer[start..<offset])))
    }

    /// An object's member count (the value must be an object); the members follow as `string()` and a value.
    public mutating func objectCount() throws(BinaryDecodeError) -> Int {
        let at = offset
        guard try byte() == JSON.BinaryTag.object.rawValue else { throw BinaryDecodeError(offset: at, "expected an object") }
        return try count()
    }

    /// An integer value, or nil for null.
    public mutating func optionalInt() throws(BinaryDecodeError) -> Int64? {
        let at = offset
        switch try byte() {
        case JSON.BinaryTag.null.rawValue: return nil
        case JSON.BinaryTag.int.rawValue:
            let z = try varint()
            return Int64(bitPattern: z >> 1) ^ -Int64(bitPattern: z & 1)
        default: throw BinaryDecodeError(offset: at, "expected an integer or null")
        }
    }

    /// An integer value.
    public mutating func int() throws(BinaryDecodeError) -> Int64 {
        let at = offset
        guard let v = try optionalInt() else { throw BinaryDecodeError(offset: at, "expected an integer") }
        return v
    }

    /// A boolean value.
    public mutating func bool() throws(BinaryDecodeError) -> Bool {
        let at = offset
        switch try byte() {
        case JSON.BinaryTag.true.rawValue: return true
        case JSON.BinaryTag.false.rawValue: return false
        default: throw BinaryDecodeError(offset: at, "expected a boolean")
        }
    }

    /// A string value (tag and body).
    public mutating func stringValue() throws(BinaryDecodeError) -> String {
        let at = offset
        guard try byte() == JSON.BinaryTag.string.rawValue else { throw BinaryDecodeError(offset: at, "expected a string") }
        return try string()
    }
}
