import Foundation
import JSON

/// The subset of JSON Schema that protocol/openrpc.json uses: type, enum, const, properties, required,
/// additionalProperties, items, minimum, maximum, minLength, maxLength, minItems, maxItems, anyOf, oneOf,
/// the formats date-time, date and uuid, and formatMinimum for dates. An unknown keyword is an error, so a schema cannot
/// silently stop checking.
enum SchemaValidator {
    static let known: Set<String> = [
        "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minimum", "maximum",
        "minLength", "maxLength", "minItems", "maxItems", "anyOf", "oneOf", "format", "description", "title",
        "examples", "pattern", "default", "formatMinimum",
    ]

    /// The problems with `value` under `schema` (empty when valid).
    static func validate(_ value: JSON, _ schema: JSON, at path: String = "$") -> [String] {
        guard case .object(let s) = schema else { return ["\(path): schema is not an object"] }
        var problems: [String] = []
        for key in s.keys where !known.contains(key) { problems.append("\(path): unsupported schema keyword \(key)") }
        if let type = s["type"] {
            let types = type.arrayValue?.compactMap(\.stringValue) ?? [type.stringValue ?? ""]
            if !types.contains(where: { matches(value, type: $0) }) {
                problems.append("\(path): \(value.serialized.prefix(80)) is not of type \(types.joined(separator: "|"))")
                return problems
            }
        }
        if let options = s["enum"]?.arrayValue, !options.contains(value) {
            problems.append("\(path): \(value.serialized.prefix(80)) is not one of \(JSON.array(options).serialized)")
        }
        if let c = s["const"], c != value { problems.append("\(path): \(value.serialized.prefix(80)) != \(c.serialized)") }
        if case .object(let o) = value {
            let properties = s["properties"]?.objectValue ?? JSONObject()
            for key in s["required"]?.arrayValue?.compactMap(\.stringValue) ?? [] where o[key] == nil {
                problems.append("\(path).\(key) is required")
            }
            for (key, member) in o {
                if let sub = properties[key] {
                    problems += validate(member, sub, at: "\(path).\(key)")
                } else if let extra = s["additionalProperties"] {
                    if extra == .bool(false) { problems.append("\(path).\(key) is not allowed") }
                    else if extra.objectValue != nil { problems += validate(member, extra, at: "\(path).\(key)") }
                }
            }
        }
        if case .array(let items) = value {
            if let itemSchema = s["items"] {
                for (i, item) in items.enumerated() { problems += validate(item, itemSchema, at: "\(path)[\(i)]") }
            }
            if let n = s["minItems"]?.intValue, items.count < n { problems.append("\(path): fewer than \(n) items") }
            if let n = s["maxItems"]?.intValue, items.count > n { problems.append("\(path): more than \(n) items") }
        }
        if let number = numeric(value) {
            if let min = s["minimum"].flatMap(numeric), number < min { problems.append("\(path): \(number) < \(min)") }
            if let max = s["maximum"].flatMap(numeric), number > max { problems.append("\(path): \(number) > \(max)") }
        }
        if case .string(let str) = value {
            if let n = s["minLength"]?.intValue, str.count < n { problems.append("\(path): shorter than \(n)") }
            if let n = s["maxLength"]?.intValue, str.count > n { problems.append("\(path): longer than \(n)") }
            // Dates and UTC timestamps with four-digit years compare as text.
            if let min = s["formatMinimum"]?.stringValue, String(str.prefix(10)) < min { problems.append("\(path): \(str) is before \(min)") }
            switch s["format"]?.stringValue {
            case "date-time"?: if !Transcript.isTimestamp(str) { problems.append("\(path): \(str) is not a UTC timestamp") }
            case "date"?: if str.wholeMatch(of: /\d{4}-\d\d-\d\d/) == nil { problems.append("\(path): \(str) is not a date") }
            case "uuid"?: if !Transcript.isUUID(str) { problems.append("\(path): \(str) is not a UUID") }
            default: break
            }
        }
        if let alternatives = s["anyOf"]?.arrayValue,
           !alternatives.contains(where: { validate(value, $0, at: path).isEmpty }) {
            problems.append("\(path): matches none of anyOf")
        }
        if let alternatives = s["oneOf"]?.arrayValue,
           alternatives.filter({ validate(value, $0, at: path).isEmpty }).count != 1 {
            problems.append("\(path): does not match exactly one of oneOf")
        }
        return problems
    }

    static func matches(_ value: JSON, type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("integer", .int), ("number", .int), ("number", .double),
             ("string", .string), ("array", .array), ("object", .object): return true
        default: return false
        }
    }

    static func numeric(_ value: JSON) -> Double? {
        switch value {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
}
