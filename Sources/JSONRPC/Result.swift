import JSON

/// A method's result type: it encodes itself and states its JSON Schema, both from one declaration
/// (`ResultFields`), so the wire form and the published contract (`rpc.discover`, the Node client's
/// types, an MCP tool's `outputSchema`) cannot drift apart.
public protocol RPCResult: JSONEncodable {
    static var schema: JSON { get }
}

/// One member of a result object: its name, its schema, and how a value shows it. A member whose
/// encoder answers nil is left out, and such a member is not `required`.
public struct ResultField<Value>: Sendable {
    public let name: String
    public let schema: JSON
    /// Whether the member may be left out (not `required`).
    public let omittable: Bool
    /// The member's value for a result, nil when it is left out.
    public let encode: @Sendable (Value) -> JSON?

    /// A member every result has (its value may still be `null` where the schema allows it).
    public init(_ name: String, _ schema: JSON, _ encode: @escaping @Sendable (Value) -> JSON) {
        (self.name, self.schema, self.omittable) = (name, schema, false)
        self.encode = { encode($0) }
    }

    /// A member present only when the encoder gives one.
    public static func optional(_ name: String, _ schema: JSON, _ encode: @escaping @Sendable (Value) -> JSON?) -> ResultField {
        ResultField(name: name, schema: schema, omittable: true, encode: encode)
    }

    private init(name: String, schema: JSON, omittable: Bool, encode: @escaping @Sendable (Value) -> JSON?) {
        (self.name, self.schema, self.omittable, self.encode) = (name, schema, omittable, encode)
    }
}

/// The members of a result object, in wire order: encodes a value and describes the object
/// (`additionalProperties: false`, every member not `optional` required).
public struct ResultFields<Value>: Sendable {
    let fields: [ResultField<Value>]
    let description: String?

    public init(description: String? = nil, _ fields: ResultField<Value>...) {
        self.init(description: description, fields: fields)
    }

    public init(description: String? = nil, fields: [ResultField<Value>]) {
        self.fields = fields
        self.description = description
    }

    public func encode(_ value: Value) -> JSON {
        var members: [(String, JSON)] = []
        members.reserveCapacity(fields.count)
        for field in fields { if let json = field.encode(value) { members.append((field.name, json)) } }
        return .object(JSONObject(members))
    }

    public var schema: JSON {
        var o = JSONObject([("type", "object"), ("additionalProperties", false),
                            ("required", .array(fields.filter { !$0.omittable }.map { .string($0.name) })),
                            ("properties", .object(JSONObject(fields.map { ($0.name, $0.schema) })))])
        if let description { o["description"] = .string(description) }
        return .object(o)
    }
}

/// Schemas of the kinds of values results hold.
public enum Schema {
    public static let string: JSON = ["type": "string"]
    public static let boolean: JSON = ["type": "boolean"]
    public static let number: JSON = ["type": "number"]
    public static let integer: JSON = ["type": "integer"]
    /// A whole number from 0.
    public static let count: JSON = ["type": "integer", "minimum": 0]
    public static let uuid: JSON = ["type": "string", "format": "uuid"]
    /// `YYYY-MM-DD`.
    public static let date: JSON = ["type": "string", "format": "date"]
    /// RFC 3339, UTC with milliseconds.
    public static let timestamp: JSON = ["type": "string", "format": "date-time"]

    /// A whole number in `range`.
    public static func integer(_ range: ClosedRange<Int64>) -> JSON {
        ["type": "integer", "minimum": .int(range.lowerBound), "maximum": .int(range.upperBound)]
    }

    /// A whole number from `minimum`.
    public static func integer(from minimum: Int64) -> JSON { ["type": "integer", "minimum": .int(minimum)] }

    /// One of these strings.
    public static func oneOf(_ values: [String]) -> JSON { ["enum": .array(values.map(JSON.string))] }

    /// Exactly this value.
    public static func constant(_ value: JSON) -> JSON { ["const": value] }

    public static func array(_ items: JSON) -> JSON { ["type": "array", "items": items] }

    /// `schema` or `null`: a scalar's `type` widened, an object's as `anyOf` (so its members are never
    /// read as those of a null).
    public static func nullable(_ schema: JSON) -> JSON {
        guard case .object(var o) = schema else { return schema }
        switch o["type"] {
        case .string(let t)? where t != "object":
            o["type"] = [.string(t), "null"]
            return .object(o)
        case .array(let types)?:
            o["type"] = .array(types + ["null"])
            return .object(o)
        default:
            if case .array(let values)? = o["enum"] {
                o["enum"] = .array(values + [.null])
                return .object(o)
            }
            return ["anyOf": [["type": "null"], schema]]
        }
    }

    /// `schema` or `null` by widening its `type`, objects too (their members then apply to an object only).
    public static func orNull(_ schema: JSON) -> JSON {
        guard case .object(var o) = schema, case .string(let t)? = o["type"] else { return nullable(schema) }
        o["type"] = [.string(t), "null"]
        return .object(o)
    }

    /// `schema` with a description.
    public static func described(_ schema: JSON, _ text: String) -> JSON {
        guard case .object(var o) = schema else { return schema }
        o["description"] = .string(text)
        return .object(o)
    }
}

extension Optional: RPCResult where Wrapped: RPCResult {
    public static var schema: JSON { Schema.nullable(Wrapped.schema) }
}
