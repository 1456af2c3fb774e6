import JSON

/// A type a param can have, with the JSON Schema that describes it in the OpenRPC document.
public protocol ParamType: FieldDecodable, SendableMetatype {
    static var schema: JSON { get }
}

extension String: ParamType { public static var schema: JSON { ["type": "string"] } }
extension Bool: ParamType { public static var schema: JSON { ["type": "boolean"] } }
extension Int64: ParamType { public static var schema: JSON { ["type": "integer"] } }
extension Double: ParamType { public static var schema: JSON { ["type": "number"] } }
extension JSONObject: ParamType { public static var schema: JSON { ["type": "object"] } }
extension JSON: ParamType { public static var schema: JSON { [:] } }
extension Array: ParamType where Element: ParamType {
    public static var schema: JSON { ["type": "array", "items": Element.schema] }
}

/// One declared param of a method: how its member is read and checked, and how the OpenRPC document
/// describes it. Both come from this one value, so the description cannot drift from what is accepted.
public struct Param<Value>: Sendable {
    public let name: String
    public let required: Bool
    /// Its JSON Schema.
    public let schema: JSON
    let read: @Sendable (inout ObjectReader) throws(FieldError) -> Value

    public init(name: String, required: Bool, schema: JSON,
                read: @escaping @Sendable (inout ObjectReader) throws(FieldError) -> Value) {
        self.name = name
        self.required = required
        self.schema = schema
        self.read = read
    }

    /// The OpenRPC content descriptor.
    var descriptor: JSON {
        ["name": .string(name), "required": .bool(required), "schema": schema]
    }

    /// The same param, described further (`description`, bounds, ...): these schema keywords are added.
    public func schema(_ more: JSON) -> Param {
        Param(name: name, required: required, schema: merge(schema, more), read: read)
    }

    /// The same param with a description.
    public func described(_ text: String) -> Param { schema(["description": .string(text)]) }

    /// The same param with a further check of its value, which throws naming the param's path.
    public func checked(_ check: @escaping @Sendable (Value, String) throws(FieldError) -> Void) -> Param {
        let read = self.read
        let name = self.name
        return Param(name: name, required: required, schema: schema) { (r: inout ObjectReader) throws(FieldError) -> Value in
            let value = try read(&r)
            try check(value, r.path(name))
            return value
        }
    }
}

/// A required param of type `T`.
public func required<T: ParamType>(_ name: String, _ type: T.Type) -> Param<T> {
    Param(name: name, required: true, schema: T.schema) { (r: inout ObjectReader) throws(FieldError) -> T in try r.required(name) }
}

/// An optional param of type `T` (absent: nil; null is a wrong type).
public func optional<T: ParamType>(_ name: String, _ type: T.Type) -> Param<T?> {
    Param(name: name, required: false, schema: T.schema) { (r: inout ObjectReader) throws(FieldError) -> T? in try r.optional(name) }
}

/// An optional param that may also be null: absent (outer nil), null (inner nil) or a value.
public func nullable<T: ParamType>(_ name: String, _ type: T.Type) -> Param<T??> {
    let schema = T.schema["type"]?.stringValue.map { merge(T.schema, ["type": [.string($0), "null"]]) } ?? T.schema
    return Param(name: name, required: false, schema: schema) { (r: inout ObjectReader) throws(FieldError) -> T?? in try r.nullable(name) }
}

/// A required integer within `range`.
public func required(_ name: String, in range: ClosedRange<Int64>) -> Param<Int64> {
    Param(name: name, required: true, schema: bounds(range)) { (r: inout ObjectReader) throws(FieldError) -> Int64 in
        try r.required(name, in: range)
    }
}

/// An optional integer within `range`.
public func optional(_ name: String, in range: ClosedRange<Int64>) -> Param<Int64?> {
    Param(name: name, required: false, schema: bounds(range)) { (r: inout ObjectReader) throws(FieldError) -> Int64? in
        try r.optional(name, in: range)
    }
}

/// An optional integer within `range`, `fallback` when absent.
public func optional(_ name: String, in range: ClosedRange<Int64>, default fallback: Int64) -> Param<Int64> {
    Param(name: name, required: false, schema: merge(bounds(range), ["default": .int(fallback)])) { (r: inout ObjectReader) throws(FieldError) -> Int64 in
        try r.optional(name, in: range) ?? fallback
    }
}

/// A required string of 1 to `maxBytes` UTF-8 bytes.
public func required(_ name: String, maxBytes: Int) -> Param<String> {
    Param(name: name, required: true, schema: textSchema(maxBytes)) { (r: inout ObjectReader) throws(FieldError) -> String in
        try checkText(try r.required(name), maxBytes, r.path(name))
    }
}

/// An optional string of 1 to `maxBytes` UTF-8 bytes.
public func optional(_ name: String, maxBytes: Int) -> Param<String?> {
    Param(name: name, required: false, schema: textSchema(maxBytes)) { (r: inout ObjectReader) throws(FieldError) -> String? in
        guard let text: String = try r.optional(name) else { return nil }
        return try checkText(text, maxBytes, r.path(name))
    }
}

/// A required string that is one of `choices`.
public func required(_ name: String, oneOf choices: [String]) -> Param<String> {
    Param(name: name, required: true, schema: ["enum": .array(choices.map { .string($0) })]) {
        (r: inout ObjectReader) throws(FieldError) -> String in
        let value: String = try r.required(name)
        guard choices.contains(value) else {
            throw .outOfRange(r.path(name), "must be one of \(choices.joined(separator: ", "))")
        }
        return value
    }
}

/// An optional string that is one of `choices`, `fallback` when absent.
public func optional(_ name: String, oneOf choices: [String], default fallback: String) -> Param<String> {
    Param(name: name, required: false, schema: ["enum": .array(choices.map { .string($0) }), "default": .string(fallback)]) {
        (r: inout ObjectReader) throws(FieldError) -> String in
        let value: String = try r.optional(name) ?? fallback
        guard choices.contains(value) else {
            throw .outOfRange(r.path(name), "must be one of \(choices.joined(separator: ", "))")
        }
        return value
    }
}

/// `base` with the members of `more` added (replacing those of the same name).
private func merge(_ base: JSON, _ more: JSON) -> JSON {
    guard case .object(var merged) = base, case .object(let extra) = more else { return base }
    for (key, value) in extra { merged[key] = value }
    return .object(merged)
}

/// An optional list of `count` strings of 1 to `maxBytes` UTF-8 bytes each.
public func optional(_ name: String, strings count: ClosedRange<Int>, maxBytes: Int) -> Param<[String]?> {
    let schema: JSON = ["type": "array", "minItems": .int(Int64(count.lowerBound)), "maxItems": .int(Int64(count.upperBound)),
                        "items": textSchema(maxBytes)]
    return Param(name: name, required: false, schema: schema) { (r: inout ObjectReader) throws(FieldError) -> [String]? in
        guard let items: [String] = try r.optional(name) else { return nil }
        guard count.contains(items.count) else {
            throw .outOfRange(r.path(name), "must hold \(count.lowerBound) to \(count.upperBound) items")
        }
        for (i, item) in items.enumerated() { _ = try checkText(item, maxBytes, r.path(name) + "[\(i)]") }
        return items
    }
}

/// An optional list of at most `maxItems` values of `T`, counted before any is read, so that an oversized
/// list is refused without decoding it.
public func optional<T: ParamType>(_ name: String, items type: T.Type, maxItems: Int) -> Param<[T]?> {
    let schema: JSON = ["type": "array", "maxItems": .int(Int64(maxItems)), "items": T.schema]
    return Param(name: name, required: false, schema: schema) { (r: inout ObjectReader) throws(FieldError) -> [T]? in
        guard let value = r.value(name) else { return nil }
        if case .array(let items) = value, items.count > maxItems {
            throw .outOfRange(r.path(name), "must hold at most \(maxItems) items")
        }
        return try [T].decode(value, at: r.path(name))
    }
}

/// A required list of `minItems` (default 1) to `maxItems` values of `T`, counted before any is read.
public func required<T: ParamType>(_ name: String, items type: T.Type, minItems: Int = 1, maxItems: Int) -> Param<[T]> {
    let schema: JSON = ["type": "array", "minItems": .int(Int64(minItems)), "maxItems": .int(Int64(maxItems)), "items": T.schema]
    return Param(name: name, required: true, schema: schema) { (r: inout ObjectReader) throws(FieldError) -> [T] in
        guard r.has(name) else { throw FieldError(field: r.path(name), reason: "missing_field", message: "\(r.path(name)) is required") }
        let value = r.value(name)!
        if case .array(let items) = value, items.count < minItems || items.count > maxItems {
            throw .outOfRange(r.path(name), "must hold \(minItems) to \(maxItems) items")
        }
        return try [T].decode(value, at: r.path(name))
    }
}

private func bounds(_ range: ClosedRange<Int64>) -> JSON {
    ["type": "integer", "minimum": .int(range.lowerBound), "maximum": .int(range.upperBound)]
}

private func textSchema(_ maxBytes: Int) -> JSON {
    // JSON Schema counts characters; the kernel counts UTF-8 bytes, which is never fewer.
    ["type": "string", "minLength": 1, "maxLength": .int(Int64(maxBytes)),
     "description": .string("1 to \(maxBytes) bytes of UTF-8")]
}

private func checkText(_ text: String, _ maxBytes: Int, _ path: String) throws(FieldError) -> String {
    guard !text.isEmpty, text.utf8.count <= maxBytes else {
        throw .outOfRange(path, "must be 1 to \(maxBytes) bytes")
    }
    return text
}

/// What a method's params are declared as: read from the params object, and described.
public protocol ParamDecoding: Sendable {
    associatedtype Values
    /// Reads every declared member, in order.
    func decode(_ reader: inout ObjectReader) throws(FieldError) -> Values
    /// OpenRPC content descriptors, in order.
    var descriptors: [JSON] { get }
}

/// A method's params: the one declaration they are read from and described by.
public struct ParamList<each Value>: ParamDecoding {
    let params: (repeat Param<each Value>)

    public init(_ params: repeat Param<each Value>) {
        self.params = (repeat each params)
    }

    public func decode(_ reader: inout ObjectReader) throws(FieldError) -> (repeat each Value) {
        (repeat try (each params).read(&reader))
    }

    public var descriptors: [JSON] {
        var out: [JSON] = []
        for param in repeat each params { out.append(param.descriptor) }
        return out
    }
}
