import Chrono
import DomainSupport
import JSON
import JSONRPC

/// What every item sent to `health.ingest` has: a HealthKit UUID, an interval and where it came from.
public struct ItemInput: Sendable, Equatable {
    public var uuid: String
    public var start: Timestamp
    public var end: Timestamp
    public var origin: Origin
    /// HealthKit metadata as sent (nil: none).
    public var metadata: Metadata?
    /// Path of the item in the request (`params.samples[3]`), for errors found later.
    public var path: String

    /// Reads `uuid`, `start`, `end`, `source` and `device`, checking the interval.
    init(_ r: inout ObjectReader) throws(FieldError) {
        path = r.path
        uuid = try r.required("uuid", as: CanonicalUUID.self).text
        start = try r.required("start")
        end = try r.required("end")
        guard end >= start else { throw .outOfRange(r.path("end"), "must not be before start") }
        guard end.milliseconds - start.milliseconds <= HealthRules.maxDurationMs else {
            throw .outOfRange(r.path("end"), "must be at most 7 days after start")
        }
        try DateFloor.check(start, notBefore: DateFloor.health, at: r.path("start"))
        origin = Origin()
        if let source: JSONObject = try r.optional("source") {
            var s = ObjectReader(source, path: r.path("source"))
            origin.sourceName = try text(&s, "name")
            origin.bundleId = try text(&s, "bundleId")
            try s.finish()
        }
        if let device: JSONObject = try r.optional("device") {
            var d = ObjectReader(device, path: r.path("device"))
            origin.deviceModel = try text(&d, "model")
            origin.deviceName = try text(&d, "name")
            try d.finish()
        }
        if let sent: JSON = try r.optional("metadata") { metadata = try Metadata.decode(sent, at: r.path("metadata")) }
    }

    /// The same item as sent, wherever it stood in the request.
    public static func == (a: ItemInput, b: ItemInput) -> Bool {
        a.uuid == b.uuid && a.start == b.start && a.end == b.end && a.origin == b.origin && a.metadata == b.metadata
    }

    static let schemaProperties: [(String, JSON)] = [
        ("uuid", ["type": "string", "format": "uuid", "description": "the HealthKit UUID; items are upserted by it"]),
        ("start", Timestamp.schema),
        ("end", merge(Timestamp.schema, ["description": "not before start, at most 7 days after it"])),
        ("source", ["type": "object", "additionalProperties": false,
                    "properties": ["name": textSchema, "bundleId": textSchema]]),
        ("device", ["type": "object", "additionalProperties": false,
                    "properties": ["model": merge(textSchema, ["description": "HKDevice.model: Watch, iPhone, ..."]), "name": textSchema]]),
        ("metadata", Metadata.schema),
    ]
}

private let textSchema: JSON = ["type": "string", "minLength": 1, "maxLength": 200]

private func merge(_ a: JSON, _ b: JSON) -> JSON {
    guard case .object(var o) = a, case .object(let extra) = b else { return a }
    for (k, v) in extra { o[k] = v }
    return .object(o)
}

private func text(_ r: inout ObjectReader, _ key: String) throws(FieldError) -> String? { try text(&r, key, max: 200) }

private func finite(_ r: inout ObjectReader, _ key: String, required: Bool) throws(FieldError) -> Double? {
    let value: Double? = required ? try r.required(key) : try r.optional(key)
    guard let value else { return nil }
    guard value.isFinite else { throw .outOfRange(r.path(key), "must be a finite number") }
    guard value >= 0 else { throw .outOfRange(r.path(key), "must not be negative") }
    return value
}

extension ItemInput {
    /// The schema of an item kind: the common members and `properties`.
    static func schema(_ required: [String], _ properties: [(String, JSON)]) -> JSON {
        ["type": "object", "additionalProperties": false, "required": .array(required.map { .string($0) }),
         "properties": .object(JSONObject(schemaProperties + properties))]
    }
}

/// A quantity or category sample as sent.
public struct SampleInput: ParamType, Sendable, Equatable {
    public var item: ItemInput
    public var type: HealthType
    /// In the type's canonical unit.
    public var value: Double

    public static func decode(_ json: JSON, at path: String) throws(FieldError) -> SampleInput {
        var r = ObjectReader(try JSONObject.decode(json, at: path), path: path)
        let item = try ItemInput(&r)
        let name: String = try r.required("type")
        guard let type = HealthType.named(name) else { return try unknown(&r, item, name) }
        // A category sample's value is an enumeration case, by its raw value or (for a type whose
        // enumeration the kernel knows) its case name, sent without a unit.
        let category = type.aggregation == .category
        let raw = category ? try categoryValue(&r, type, name) : try r.required("value", as: Double.self)
        guard raw.isFinite else { throw .outOfRange(r.path("value"), "must be a finite number") }
        let unit: String? = category ? try r.optional("unit") : try r.required("unit")
        if category {
            guard unit == nil else {
                throw FieldError(field: r.path("unit"), reason: "invalid_params", message: "\(r.path("unit")) is not sent for a category type (\(name))")
            }
            guard raw == raw.rounded(), raw >= 0, raw <= 1000 else { throw .outOfRange(r.path("value"), "must be an enumeration value from 0 to 1000") }
        }
        guard let value = type.canonical(raw, unit: unit) else {
            throw FieldError(field: r.path("unit"), reason: "invalid_params",
                             message: "\(r.path("unit")) must be a HealthKit unit of \(name)'s dimension, such as \(type.units.prefix(3).map(\.unit).joined(separator: ", "))")
        }
        guard value >= type.minimum else {
            throw .outOfRange(r.path("value"), type.minimum == 0 ? "must not be negative" : "must be at least \(type.minimum) \(type.unit)")
        }
        guard value <= type.maximum else {
            throw .outOfRange(r.path("value"), type.maximum == 1 ? "must be at most 100%" : "must be at most 1e9 \(type.unit)")
        }
        try r.finish()
        return SampleInput(item: item, type: type, value: value)
    }

    /// A category sample's value: its raw value, or the name of its case where the type's enumeration is known.
    private static func categoryValue(_ r: inout ObjectReader, _ type: HealthType, _ name: String) throws(FieldError) -> Double {
        let sent: JSON = try r.required("value")
        guard case .string(let caseName) = sent, let cases = type.enumeration else { return try Double.decode(sent, at: r.path("value")) }
        guard let match = cases.first(where: { $0.name == caseName }) else {
            throw .outOfRange(r.path("value"), "must be one of \(cases.map(\.name).joined(separator: ", ")) (or its raw value) for \(name)")
        }
        return Double(match.raw)
    }

    /// A sample of a type the kernel's table lacks (a newer iOS's): its value and unit are kept as sent.
    private static func unknown(_ r: inout ObjectReader, _ item: ItemInput, _ name: String) throws(FieldError) -> SampleInput {
        guard UnknownTypes.isHealthKitName(name) else {
            throw FieldError(field: r.path("type"), reason: "invalid_params",
                             message: "\(r.path("type")) is not a HealthKit quantity or category type identifier")
        }
        let value: Double = try r.required("value")
        guard value.isFinite else { throw .outOfRange(r.path("value"), "must be a finite number") }
        guard abs(value) <= 1e9 else { throw .outOfRange(r.path("value"), "must be within ±1e9") }
        let unit: String? = try r.optional("unit")
        if let unit, unit.utf8.count > 50 || HealthKitUnit(unit) == nil {
            throw FieldError(field: r.path("unit"), reason: "invalid_params", message: "\(r.path("unit")) must be a HealthKit unit string of at most 50 bytes")
        }
        try r.finish()
        return SampleInput(item: item, type: HealthType(unknown: name, unit: unit), value: value)
    }

    public static var schema: JSON {
        ItemInput.schema(["uuid", "type", "value", "start", "end"], [
            ("type", ["type": "string", "pattern": "^HK(Quantity|Category)TypeIdentifier[A-Za-z0-9]+$", "maxLength": 100,
                      "description": "a HealthKit type identifier; those protocol/health.md lists are summarised, others kept as sent (health.unknownTypes)"]),
            ("value", ["type": "number", "description": "not negative, except temperatures; a category type's enumeration value"]),
            ("unit", ["type": "string", "description": "one the type accepts (protocol/health.md), converted to its canonical unit; required for quantity types, absent for category types"]),
        ])
    }
}

/// A workout as sent.
public struct WorkoutInput: ParamType, Sendable, Equatable {
    public var item: ItemInput
    public var activityType: String
    public var durationSeconds: Int64
    public var energyKcal: Double?
    public var distanceMeters: Double?

    public static func decode(_ json: JSON, at path: String) throws(FieldError) -> WorkoutInput {
        var r = ObjectReader(try JSONObject.decode(json, at: path), path: path)
        let item = try ItemInput(&r)
        let activity: String = try r.required("activityType")
        guard ActivityTypes.names.contains(activity) else {
            throw FieldError(field: r.path("activityType"), reason: "invalid_params",
                             message: "\(r.path("activityType")) must be an HKWorkoutActivityType name such as running or walking")
        }
        let span = (item.end.milliseconds - item.start.milliseconds + 999) / 1000
        let duration = try r.required("durationSeconds", in: 0...(7 * 86_400))
        guard duration <= span else { throw .outOfRange(r.path("durationSeconds"), "must not exceed end - start") }
        let energy = try finite(&r, "energyKcal", required: false)
        let distance = try finite(&r, "distanceMeters", required: false)
        try r.finish()
        return WorkoutInput(item: item, activityType: activity, durationSeconds: duration, energyKcal: energy, distanceMeters: distance)
    }

    public static var schema: JSON {
        ItemInput.schema(["uuid", "activityType", "start", "end", "durationSeconds"], [
            ("activityType", ["type": "string", "description": "an HKWorkoutActivityType case name: running, walking, cycling, ..."]),
            ("durationSeconds", ["type": "integer", "minimum": 0, "maximum": 604_800, "description": "at most end - start (pauses excluded)"]),
            ("energyKcal", ["type": "number", "minimum": 0]),
            ("distanceMeters", ["type": "number", "minimum": 0]),
        ])
    }
}

/// A sleep sample as sent.
public struct SleepInput: ParamType, Sendable, Equatable {
    public var item: ItemInput
    public var stage: SleepStage

    public static func decode(_ json: JSON, at path: String) throws(FieldError) -> SleepInput {
        var r = ObjectReader(try JSONObject.decode(json, at: path), path: path)
        let item = try ItemInput(&r)
        let name: String = try r.required("stage")
        guard let stage = SleepStage(rawValue: name) else {
            throw .outOfRange(r.path("stage"), "must be one of \(SleepStage.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        try r.finish()
        return SleepInput(item: item, stage: stage)
    }

    public static var schema: JSON {
        ItemInput.schema(["uuid", "stage", "start", "end"], [("stage", ["enum": .array(SleepStage.allCases.map { .string($0.rawValue) })])])
    }
}

/// `authorizedFrom`: per HealthKit type, the first day the person lets the app read
/// (`HKHealthStore.earliestAuthorizedSampleDate(for:)`, iOS 27). Keys are HealthKit type identifiers
/// (known or not), values `YYYY-MM-DD`; at most 256.
public struct AuthorizedFrom: ParamType, Sendable, Equatable {
    public var dates: [String: CalendarDate]

    public static func decode(_ json: JSON, at path: String) throws(FieldError) -> AuthorizedFrom {
        let object = try JSONObject.decode(json, at: path)
        guard object.count <= 256 else { throw .outOfRange(path, "must name at most 256 types") }
        var dates: [String: CalendarDate] = [:]
        for (key, value) in object {
            let field = path + "." + key
            guard HealthType.named(key) != nil || UnknownTypes.isHealthKitName(key) else {
                throw FieldError(field: field, reason: "invalid_params", message: "\(field) is not a HealthKit quantity or category type identifier")
            }
            dates[key] = try CalendarDate.decode(value, at: field)
        }
        return AuthorizedFrom(dates: dates)
    }

    public static var schema: JSON {
        ["type": "object",
         "description": "per HealthKit type identifier (at most 256), the first day (YYYY-MM-DD) the person lets the app read (earliestAuthorizedSampleDate)",
         "additionalProperties": CalendarDate.schema]
    }
}
