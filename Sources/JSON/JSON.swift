/// A JSON value as the kernel sees it: integers and doubles kept apart, object keys in the order they arrived.
public enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object(JSONObject)

    /// The name of this value's JSON type, as used in error messages ("an integer", "a string", ...).
    public var typeDescription: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .int: return "an integer"
        case .double: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    /// The object, when this value is one.
    public var objectValue: JSONObject? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// The string, when this value is one.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The integer, when this value is one.
    public var intValue: Int64? {
        if case .int(let i) = self { return i }
        return nil
    }

    /// The number, when this value is one (an integer as a double).
    public var numberValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }

    /// The array, when this value is one.
    public var arrayValue: [JSON]? {
        if case .array(let a) = self { return a }
        return nil
    }

    /// Member lookup for objects; nil for other values and absent keys.
    public subscript(key: String) -> JSON? {
        objectValue?[key]
    }
}

/// A JSON object that keeps its keys in insertion order (jansson reports them in the order they were read).
/// Equality ignores order, as JSON's does. Members live in one array: one allocation per object, and
/// requests are made of small objects.
public struct JSONObject: Sendable, Equatable, Sequence {
    /// The members in order.
    public private(set) var members: [(key: String, value: JSON)]

    /// An empty object.
    public init() {
        members = []
    }

    /// An object from ordered pairs; a later duplicate key replaces the earlier value.
    public init(_ pairs: [(String, JSON)]) {
        self.init()
        members.reserveCapacity(pairs.count)
        for (k, v) in pairs { self[k] = v }
    }

    /// Keys in order.
    public var keys: [String] { members.map(\.key) }
    /// Values in key order.
    public var values: [JSON] { members.map(\.value) }

    /// Number of members.
    public var count: Int { members.count }

    /// Whether there are no members.
    public var isEmpty: Bool { members.isEmpty }

    /// Appends without checking for an existing key: for the parser, which already rejected duplicates.
    public mutating func appendUnchecked(_ key: String, _ value: JSON) {
        members.append((key, value))
    }

    /// Reserves room for `n` members.
    public mutating func reserve(_ n: Int) {
        members.reserveCapacity(n)
    }

    /// Index of `key`, searched linearly: request objects are small, and this keeps key order for free.
    public func index(of key: String) -> Int? {
        members.firstIndex { $0.key == key }
    }

    /// The member named `key`; setting nil removes it, setting a value replaces it in place or appends it.
    public subscript(key: String) -> JSON? {
        get {
            guard let i = index(of: key) else { return nil }
            return members[i].value
        }
        set {
            if let i = index(of: key) {
                if let newValue {
                    members[i].value = newValue
                } else {
                    members.remove(at: i)
                }
            } else if let newValue {
                members.append((key, newValue))
            }
        }
    }

    /// Members in order.
    public func makeIterator() -> IndexingIterator<[(key: String, value: JSON)]> {
        members.makeIterator()
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for (k, v) in lhs {
            guard let other = rhs[k], other == v else { return false }
        }
        return true
    }
}

extension JSON: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSON)...) { self = .object(JSONObject(elements)) }
}

extension JSON {
    /// An integer value from any binary integer that fits Int64.
    public static func number<I: BinaryInteger>(_ value: I) -> JSON { .int(Int64(value)) }

    /// A string or null.
    public static func optional(_ value: String?) -> JSON { value.map(JSON.string) ?? .null }
}
