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

    /// Retries a text that failed at a number jansson cannot hold, or at a `NaN`/`Infinity` token: one
    /// pass outside strings replaces every such token with a marker string, one more parse reads the
    /// text, and the markers become doubles. The work stays two parses and one scan of the line however
    /// many such numbers it holds. Any other failure is the first error, as it was; so is a text whose
    /// strings hold the marker's character (U+F8FF), where a marker could not be told from a string.
    private static func parseWithOddNumbers(_ original: [UInt8], _ first: JSONParseError, maxDepth: Int) throws(JSONParseError) -> JSON {
        guard first.kind == .numberOutOfRange || first.kind == .invalidJSON else { throw first }
        let n = original.count
        var text: [UInt8] = []
        var numbers: [Double] = []
        var copied = 0, i = 0
        while i < n {
            let c = original[i]
            if c == 0x22 {
                i += 1
                while i < n, original[i] != 0x22 {
                    if original[i] == 0x5C {
                        // \uF8FF, in any case, is the marker's character too.
                        if i + 5 < n, original[i + 1] == 0x75, original[i + 2] | 0x20 == 0x66, original[i + 3] == 0x38,
                           original[i + 4] | 0x20 == 0x66, original[i + 5] | 0x20 == 0x66 { throw first }
                        i += 2
                    } else {
                        if original[i] == 0xEF, i + 2 < n, original[i + 1] == 0xA3, original[i + 2] == 0xBF { throw first }
                        i += 1
                    }
                }
                i += 1
                continue
            }
            guard (c >= 0x30 && c <= 0x39) || c == 0x2D || c == 0x4E || c == 0x49 else { i += 1; continue }
            let start = i
            while i < n, isTokenByte(original[i]) { i += 1 }
            guard mayBeOdd(original[start..<i]), let value = oddNumber(original[start..<i]) else { continue }
            if text.isEmpty { text.reserveCapacity(n + 64) }
            text += original[copied..<start]
            text += markerBytes
            var digits = String(numbers.count).utf8.makeIterator()
            while let d = digits.next() { text.append(d) }
            text.append(0x22)
            numbers.append(value)
            copied = i
        }
        guard !numbers.isEmpty else { throw first }
        text += original[copied...]
        let attempt = text.withUnsafeBytes { raw in
            Result { () throws(JSONParseError) in try parseStrict(raw, maxDepth: maxDepth, numbers: numbers) }
        }
        guard case .success(let value) = attempt else { throw first }
        return value
    }

    /// The index a marker string holds, read from its bytes; nil for any other string.
    private static func markerIndex(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        let m = markerBytes.count - 1
        guard bytes.count > m, bytes.count <= m + 18 else { return nil }
        for k in 0..<m where bytes[k] != markerBytes[k + 1] { return nil }
        var i = 0
        for k in m..<bytes.count {
            guard bytes[k] >= 0x30, bytes[k] <= 0x39 else { return nil }
            i = i * 10 + Int(bytes[k] - 0x30)
        }
        return i
    }

    /// `"` and the marker, as bytes.
    private static let markerBytes: [UInt8] = [0x22] + Array(marker.utf8)

    /// Whether a token could be one jansson cannot hold, judged from its bytes alone (no string is made
    /// for the common case): a name, an integer of 19 digits or more, or a real with an exponent of three
    /// digits or more digits than a double's exponent range could need.
    private static func mayBeOdd(_ token: ArraySlice<UInt8>) -> Bool {
        var digits = 0, exponentDigits = -1, real = false
        for c in token {
            if c >= 0x30 && c <= 0x39 {
                if exponentDigits >= 0 { exponentDigits += 1 } else { digits += 1 }
            } else if c == 0x2E {
                real = true
            } else if c == 0x65 || c == 0x45 {
                real = true
                exponentDigits = 0
            } else if c != 0x2B && c != 0x2D {
                return true
            }
        }
        return real ? exponentDigits >= 3 || digits >= 300 : digits >= 19
    }

    private static func isTokenByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2B || c == 0x2D || c == 0x2E
    }

    /// The value of a token jansson cannot hold: `NaN`, `Infinity`, `-Infinity`, an integer outside
    /// Int64 or a real beyond a double's range; nil for any other token (jansson reads it, or refuses it).
    private static func oddNumber(_ token: ArraySlice<UInt8>) -> Double? {
        let text = String(decoding: token, as: UTF8.self)
        switch text {
        case "NaN": return .nan
        case "Infinity": return .infinity
        case "-Infinity": return -.infinity
        default:
            guard isJSONNumber(token), let value = Double(text) else { return nil }
            let integer = !token.contains(0x2E) && !token.contains(0x65) && !token.contains(0x45)
            if integer { return Int64(text) == nil ? value : nil }
            return value.isFinite ? nil : value
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
            return ptr.withMemoryRebound(to: UInt8.self, capacity: len) { p -> JSON in
                let bytes = UnsafeBufferPointer(start: p, count: len)
                if !numbers.isEmpty, let i = markerIndex(bytes), i < numbers.count { return .double(numbers[i]) }
                return .string(String(decoding: bytes, as: UTF8.self))
            }
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
