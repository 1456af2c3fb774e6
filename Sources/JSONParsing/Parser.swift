import CJansson
import JSON

extension JSON {

    /// Parses one JSON text (any value at the top level) from raw bytes with jansson,
    /// rejecting duplicate keys, NUL characters, invalid UTF-8, integers beyond Int64 and deep nesting.
    public static func parse(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = JSON.maxDepth) throws(JSONParseError) -> JSON {
        var error = json_error_t()
        let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self)
        // jansson wants a non-null pointer even for an empty buffer.
        let root: UnsafeMutablePointer<json_t>? = withUnsafePointer(to: 0 as CChar) { empty in
            json_loadb(base ?? empty, bytes.count, hk_load_flags(), &error)
        }
        guard let root else { throw Self.translate(error) }
        defer { hk_json_decref(root) }
        return try convert(root, depth: 1, maxDepth: maxDepth)
    }

    /// Parses from a byte array.
    public static func parse(_ bytes: [UInt8], maxDepth: Int = JSON.maxDepth) throws(JSONParseError) -> JSON {
        do {
            return try bytes.withUnsafeBytes { raw in try parse(raw, maxDepth: maxDepth) }
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

    private static func convert(_ node: UnsafeMutablePointer<json_t>, depth: Int, maxDepth: Int) throws(JSONParseError) -> JSON {
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
                let value = try convert(json_object_iter_value(it)!, depth: depth + 1, maxDepth: maxDepth)
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
                items.append(try convert(json_array_get(node, i)!, depth: depth + 1, maxDepth: maxDepth))
            }
            return .array(items)
        case JSON_STRING:
            let len = json_string_length(node)
            guard let ptr = json_string_value(node) else { return .string("") }
            return .string(ptr.withMemoryRebound(to: UInt8.self, capacity: len) {
                String(decoding: UnsafeBufferPointer(start: $0, count: len), as: UTF8.self)
            })
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
