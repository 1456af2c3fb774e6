import CJansson
import JanssonArena
import JSON

extension JSON {

    /// Parses one JSON text (any value at the top level) from raw bytes with jansson,
    /// rejecting duplicate keys, NUL characters, invalid UTF-8 and deep nesting.
    ///
    /// A number JSON allows but a double or Int64 cannot hold (`1e400`, `18446744073709551616`), and the
    /// `NaN`, `Infinity` and `-Infinity` that some encoders write (Python's `json.dumps`), are read as
    /// doubles (infinite, NaN, or rounded) instead of failing the whole text: the field that holds one
    /// can then be refused by name. Every reader of numbers refuses non-finite ones.
    public static func parse(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = JSON.maxDepth) throws(JSONParseError) -> JSON {
        do {
            return try parseStrict(bytes, maxDepth: maxDepth, numbers: [])
        } catch {
            return try parseWithOddNumbers(Array(bytes), error, maxDepth: maxDepth)
        }
    }

    private static func parseStrict(_ bytes: UnsafeRawBufferPointer, maxDepth: Int, numbers: [Double],
                                    allowingNul: Bool = false) throws(JSONParseError) -> JSON {
        var error = json_error_t()
        // jansson's tree lives in this thread's arena until it is converted and freed, below.
        hk_arena_begin()
        defer { hk_arena_end() }
        let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self)
        // jansson wants a non-null pointer even for an empty buffer.
        let root: UnsafeMutablePointer<json_t>? = withUnsafePointer(to: 0 as CChar) { empty in
            json_loadb(base ?? empty, bytes.count, allowingNul ? hk_load_flags_allowing_nul() : hk_load_flags(), &error)
        }
        guard let root else { throw Self.translate(error) }
        defer { hk_json_decref(root) }
        return try convert(root, depth: 1, maxDepth: maxDepth, numbers: numbers)
    }

    /// The marker an odd number is replaced with before parsing again: two private-use characters and
    /// the number's index.
    private static let marker = "\u{F8FF}\u{F8FF}"

    /// Retries a text that failed at a number jansson cannot hold, or at a `NaN`/`Infinity` token:
    /// each such token becomes a marker string, and the markers become doubles. Any other failure is
    /// the first error, as it was.
    private static func parseWithOddNumbers(_ original: [UInt8], _ first: JSONParseError, maxDepth: Int) throws(JSONParseError) -> JSON {
        var text = original
        var numbers: [Double] = []
        var error = first
        while numbers.count < 64, error.kind == .numberOutOfRange || error.kind == .invalidJSON, let position = error.position,
              let (range, value) = oddNumber(in: text, endingAt: position) {
            text.replaceSubrange(range, with: Array("\"\(marker)\(numbers.count)\"".utf8))
            numbers.append(value)
            let attempt = text.withUnsafeBytes { raw in
                Result { () throws(JSONParseError) in try parseStrict(raw, maxDepth: maxDepth, numbers: numbers) }
            }
            switch attempt {
            case .success(let value): return value
            case .failure(let next): error = next
            }
        }
        throw first
    }

    /// The number token around byte `position` (where jansson stopped), if it is a JSON number or one of
    /// `NaN`, `Infinity`, `-Infinity`.
    private static func oddNumber(in text: [UInt8], endingAt position: Int) -> (Range<Int>, Double)? {
        func isTokenByte(_ c: UInt8) -> Bool {
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2B || c == 0x2D || c == 0x2E
        }
        var start = min(position, text.count)
        while start > 0, isTokenByte(text[start - 1]) { start -= 1 }
        var end = min(position, text.count)
        while end < text.count, isTokenByte(text[end]) { end += 1 }
        guard start < end else { return nil }
        let token = String(decoding: text[start..<end], as: UTF8.self)
        switch token {
        case "NaN": return (start..<end, .nan)
        case "Infinity": return (start..<end, .infinity)
        case "-Infinity": return (start..<end, -.infinity)
        default:
            guard isJSONNumber(text[start..<end]), let value = Double(token) else { return nil }
            return (start..<end, value)
        }
    }

    /// Whether `bytes` is a number as JSON writes it: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    private static func isJSONNumber(_ bytes: ArraySlice<UInt8>) -> Bool {
        var i = bytes.startIndex
        func digits() -> Int {
            let from = i
            while i < bytes.endIndex, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1 }
            return i - from
        }
        if i < bytes.endIndex, bytes[i] == 0x2D { i += 1 }
        guard i < bytes.endIndex else { return false }
        if bytes[i] == 0x30 { i += 1 } else if digits() == 0 { return false }
        if i < bytes.endIndex, bytes[i] == 0x2E {
            i += 1
            if digits() == 0 { return false }
        }
        if i < bytes.endIndex, bytes[i] == 0x65 || bytes[i] == 0x45 {
            i += 1
            if i < bytes.endIndex, bytes[i] == 0x2B || bytes[i] == 0x2D { i += 1 }
            if digits() == 0 { return false }
        }
        return i == bytes.endIndex
    }

    /// Parses from a byte array.
    public static func parse(_ bytes: [UInt8], maxDepth: Int = JSON.maxDepth) throws(JSONParseError) -> JSON {
        try withBytes(bytes) { raw throws(JSONParseError) in try parse(raw, maxDepth: maxDepth) }
    }

    /// Parses a line the kernel itself wrote, which may hold U+0000 in a string (`store export` names a
    /// unique key `namespace NUL value`); everything a client sends goes through `parse`, which refuses it.
    public static func parseAllowingNul(_ bytes: [UInt8]) throws(JSONParseError) -> JSON {
        try withBytes(bytes) { raw throws(JSONParseError) in try parseStrict(raw, maxDepth: JSON.maxDepth, numbers: [], allowingNul: true) }
    }

    /// `body` over the array's bytes (withUnsafeBytes rethrows untyped: the error is put back in its type).
    private static func withBytes(_ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(JSONParseError) -> JSON) throws(JSONParseError) -> JSON {
        do {
            return try bytes.withUnsafeBytes { raw in try body(raw) }
        } catch let e as JSONParseError {
            throw e
        } catch {
            fatalError("unreachable: parse throws only JSONParseError")
        }
    }

    /// Parses a Swift string (always valid UTF-8).
    public static func parse(_ text: String, maxDepth: Int = JSON.maxDepth) throws(JSONParseError) -> JSON {
        try parse(Array(text.utf8), maxDepth: maxDepth)
    }

    private static func translate(_ error: json_error_t) -> JSONParseError {
        var copy = error
        let code = hk_json_error_code(&copy)
        var text = withUnsafeBytes(of: &copy.text) { raw -> String in
            let bytes = raw.bindMemory(to: UInt8.self)
            let end = bytes.firstIndex(of: 0) ?? bytes.count
            return String(decoding: bytes[..<end], as: UTF8.self)
        }
        // jansson quotes the input near the error ("... near 'secret'"): never echo what a client sent.
        if let near = text.firstRange(of: " near ") { text = String(text[..<near.lowerBound]) }
        if error.position >= 0 { text += " at byte \(error.position)" }
        let kind: JSONParseError.Kind
        switch UInt32(code) {
        case json_error_invalid_utf8.rawValue: kind = .invalidUTF8
        case json_error_duplicate_key.rawValue: kind = .duplicateKey
        case json_error_stack_overflow.rawValue: kind = .nestingTooDeep
        case json_error_numeric_overflow.rawValue: kind = .numberOutOfRange
        case json_error_null_character.rawValue, json_error_null_byte_in_key.rawValue: kind = .nulCharacter
        default: kind = .invalidJSON
        }
        return JSONParseError(kind: kind, message: text, position: error.position >= 0 ? Int(error.position) : nil)
    }

    private static func tooDeep(_ maxDepth: Int) -> JSONParseError {
        JSONParseError(kind: .nestingTooDeep, message: "nesting deeper than \(maxDepth) levels", position: nil)
    }

    private static func convert(_ node: UnsafeMutablePointer<json_t>, depth: Int, maxDepth: Int, numbers: [Double]) throws(JSONParseError) -> JSON {
        switch hk_json_typeof(node) {
        case JSON_OBJECT:
            guard depth <= maxDepth else { throw tooDeep(maxDepth) }
            var object = JSONObject()
            object.reserve(json_object_size(node))
            var iter = json_object_iter(node)
            while let it = iter {
                let keyPtr = json_object_iter_key(it)!
                let keyLen = json_object_iter_key_len(it)
                let key = keyPtr.withMemoryRebound(to: UInt8.self, capacity: keyLen) {
                    String(decoding: UnsafeBufferPointer(start: $0, count: keyLen), as: UTF8.self)
                }
                let value = try convert(json_object_iter_value(it)!, depth: depth + 1, maxDepth: maxDepth, numbers: numbers)
                object.appendUnchecked(key, value)
                iter = json_object_iter_next(node, it)
            }
            return .object(object)
        case JSON_ARRAY:
            guard depth <= maxDepth else { throw tooDeep(maxDepth) }
            let n = json_array_size(node)
            var items: [JSON] = []
            items.reserveCapacity(n)
            for i in 0..<n {
                items.append(try convert(json_array_get(node, i)!, depth: depth + 1, maxDepth: maxDepth, numbers: numbers))
            }
            return .array(items)
        case JSON_STRING:
            let len = json_string_length(node)
            guard let ptr = json_string_value(node) else { return .string("") }
            let text = ptr.withMemoryRebound(to: UInt8.self, capacity: len) {
                String(decoding: UnsafeBufferPointer(start: $0, count: len), as: UTF8.self)
            }
            if !numbers.isEmpty, text.hasPrefix(marker), let i = Int(text.dropFirst(2)), numbers.indices.contains(i) {
                return .double(numbers[i])
            }
            return .string(text)
        case JSON_INTEGER:
            return .int(Int64(json_integer_value(node)))
        case JSON_REAL:
            return .double(json_real_value(node))
        case JSON_TRUE:
            return .bool(true)
        case JSON_FALSE:
            return .bool(false)
        default:
            return .null
        }
    }
}
