/// A problem with one field of a JSON object, named by its path ("params.minutes", "auth.providers.google").
public struct FieldError: Error, Sendable, Equatable {
    /// Dotted path of the offending field.
    public var field: String
    /// Machine-readable slug: `missing_field`, `wrong_type`, `out_of_range`, `unknown_field`, ...
    public var reason: String
    /// Human text; never echoes the value, which may be a secret.
    public var message: String

    /// A field error.
    public init(field: String, reason: String, message: String) {
        self.field = field
        self.reason = reason
        self.message = message
    }

    /// The value has the wrong JSON type.
    public static func wrongType(_ field: String, expected: String, got: JSON) -> FieldError {
        FieldError(field: field, reason: "wrong_type", message: "\(field) must be \(expected), not \(got.typeDescription)")
    }

    /// The value is outside the accepted range.
    public static func outOfRange(_ field: String, _ detail: String) -> FieldError {
        FieldError(field: field, reason: "out_of_range", message: "\(field) \(detail)")
    }
}

/// Reads the members of one JSON object by name, checking types, tracking which members were used
/// so that `finish()` can reject the ones nobody asked for (a typo never silently does nothing).
public struct ObjectReader: Sendable {
    /// Path of the object itself, e.g. "params".
    public let path: String
    /// The object being read.
    public let object: JSONObject
    private var used: [Bool]

    /// A reader over `object`, which lives at `path`.
    public init(_ object: JSONObject, path: String) {
        self.object = object
        self.path = path
        self.used = Array(repeating: false, count: object.count)
    }

    /// Path of member `key`.
    public func path(_ key: String) -> String { "\(path).\(key)" }

    /// The raw member, marked as used; nil when absent.
    public mutating func value(_ key: String) -> JSON? {
        guard let i = object.index(of: key) else { return nil }
        used[i] = true
        return object.members[i].value
    }

    /// Whether the member is present (null counts as present).
    public func has(_ key: String) -> Bool { object.index(of: key) != nil }

    /// A member that must be present and non-null.
    public mutating func required<T: FieldDecodable>(_ key: String, as type: T.Type = T.self) throws(FieldError) -> T {
        guard let v = value(key) else {
            throw FieldError(field: path(key), reason: "missing_field", message: "\(path(key)) is required")
        }
        return try T.decode(v, at: path(key))
    }

    /// A member that may be absent; null is rejected as a wrong type (use `nullable` where null means something).
    public mutating func optional<T: FieldDecodable>(_ key: String, as type: T.Type = T.self) throws(FieldError) -> T? {
        guard let v = value(key) else { return nil }
        return try T.decode(v, at: path(key))
    }

    /// A member that may be absent (outer nil), null (inner nil) or a value.
    public mutating func nullable<T: FieldDecodable>(_ key: String, as type: T.Type = T.self) throws(FieldError) -> T?? {
        guard let v = value(key) else { return nil }
        if v == .null { return .some(nil) }
        return .some(try T.decode(v, at: path(key)))
    }

    /// A required integer within `range`.
    public mutating func required(_ key: String, in range: ClosedRange<Int64>) throws(FieldError) -> Int64 {
        let v: Int64 = try required(key)
        return try Self.check(v, range, path(key))
    }

    /// An optional integer within `range`.
    public mutating func optional(_ key: String, in range: ClosedRange<Int64>) throws(FieldError) -> Int64? {
        guard let v: Int64 = try optional(key) else { return nil }
        return try Self.check(v, range, path(key))
    }

    private static func check(_ v: Int64, _ range: ClosedRange<Int64>, _ field: String) throws(FieldError) -> Int64 {
        guard range.contains(v) else {
            throw .outOfRange(field, "must be between \(range.lowerBound) and \(range.upperBound)")
        }
        return v
    }

    /// A reader for a nested object member (required).
    public mutating func object(_ key: String) throws(FieldError) -> ObjectReader {
        let o: JSONObject = try required(key)
        return ObjectReader(o, path: path(key))
    }

    /// Marks `key` as accepted without reading it.
    public mutating func ignore(_ key: String) {
        _ = value(key)
    }

    /// Rejects the first member that was never read, with reason `unknown_field`.
    public func finish() throws(FieldError) {
        if let i = used.firstIndex(of: false) {
            let key = object.members[i].key
            throw FieldError(field: path(key), reason: "unknown_field", message: "\(path(key)) is not a known field")
        }
    }
}

/// A value that can be read from a JSON member with a precise error path.
public protocol FieldDecodable {
    /// Decodes `value`, found at `path`, or throws a `FieldError` naming that path.
    static func decode(_ value: JSON, at path: String) throws(FieldError) -> Self
}

extension JSON: FieldDecodable {
    /// Any value, so long as every number in it is finite (NaN and infinities have no JSON form to keep).
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> JSON {
        try value.checkFinite(at: path)
        return value
    }

    /// Throws naming the first non-finite number inside. The path is only spelled out for a value that
    /// has one: this runs over every object a request holds.
    func checkFinite(at path: String) throws(FieldError) {
        if isFinite { return }
        switch self {
        case .double(let d) where !d.isFinite: throw .outOfRange(path, "must be a finite number")
        case .array(let items): for (i, item) in items.enumerated() { try item.checkFinite(at: "\(path)[\(i)]") }
        case .object(let o): for (k, v) in o { try v.checkFinite(at: "\(path).\(k)") }
        default: break
        }
    }

    /// Whether every number inside is finite.
    var isFinite: Bool {
        switch self {
        case .double(let d): return d.isFinite
        case .array(let items): return items.allSatisfy(\.isFinite)
        case .object(let o): return o.allSatisfy { $0.value.isFinite }
        default: return true
        }
    }
}

extension String: FieldDecodable {
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> String {
        guard case .string(let s) = value else { throw .wrongType(path, expected: "a string", got: value) }
        return s
    }
}

extension Bool: FieldDecodable {
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> Bool {
        guard case .bool(let b) = value else { throw .wrongType(path, expected: "a boolean", got: value) }
        return b
    }
}

extension Int64: FieldDecodable {
    /// Only JSON integers: `5.0` and `"5"` are wrong types, so a fractional or quoted count never slips through.
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> Int64 {
        guard case .int(let i) = value else {
            if case .double(let d) = value, d.rounded() == d, d.magnitude >= 0x1p63 {
                throw .outOfRange(path, "must fit in 64 bits")
            }
            throw .wrongType(path, expected: "an integer", got: value)
        }
        return i
    }
}

extension Int: FieldDecodable {
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> Int {
        Int(try Int64.decode(value, at: path))
    }
}

extension Double: FieldDecodable {
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> Double {
        switch value {
        case .int(let i): return Double(i)
        case .double(let d):
            guard d.isFinite else { throw .outOfRange(path, "must be a finite number") }
            return d
        default: throw .wrongType(path, expected: "a number", got: value)
        }
    }
}

extension JSONObject: FieldDecodable {
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> JSONObject {
        guard case .object(let o) = value else { throw .wrongType(path, expected: "an object", got: value) }
        try value.checkFinite(at: path)
        return o
    }
}

extension Array: FieldDecodable where Element: FieldDecodable {
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> [Element] {
        guard case .array(let items) = value else { throw .wrongType(path, expected: "an array", got: value) }
        var out: [Element] = []
        out.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            out.append(try Element.decode(item, at: "\(path)[\(i)]"))
        }
        return out
    }
}
