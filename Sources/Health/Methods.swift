import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

// MARK: The wire form of what the service answers

extension HealthError {
    var rpc: RPCError {
        switch self {
        case .future(let path):
            return .invalidParams(path, reason: "future_date", "\(path) is more than a day in the future")
        case .quota(let limit): return .quotaExceeded("HealthKit items", limit: limit)
        case .stale: return .storageConflict("the user's HealthKit rows changed while the ingest was planned")
        case .tooOld(let path, let days):
            return .invalidParams(path, reason: "out_of_range", "\(path) is more than \(days) days ago, further back than this deployment keeps (health.maxHistoryDays)")
        case .unknownType(let path):
            return .invalidParams(path, reason: "invalid_params",
                                  "\(path) is not a type the kernel summarises, and this deployment refuses others (health.unknownTypes)")
        case .storage(let error): return .from(error)
        }
    }
}

/// Runs a service call and answers its result, or its refusal, on the wire.
func answer<T: JSONEncodable>(_ body: () throws(HealthError) -> T) throws(RPCError) -> JSON {
    do { return try body().json } catch { throw error.rpc }
}

/// The members every item shows: its interval, zone and day, and where it came from.
private func placed(_ uuid: String, _ p: Placement, _ members: [(String, JSON)]) -> JSON {
    let o = p.origin
    let source: JSON = o.sourceName == nil && o.bundleId == nil ? .null : ["name": .optional(o.sourceName), "bundleId": .optional(o.bundleId)]
    let device: JSON = o.deviceModel == nil && o.deviceName == nil ? .null : ["model": .optional(o.deviceModel), "name": .optional(o.deviceName)]
    return .object(JSONObject([("uuid", .string(uuid))] + members + [
        ("start", .timestamp(p.start)), ("end", .timestamp(p.end)), ("timezone", .string(p.zone)), ("date", .string(p.day)),
        ("source", source), ("device", device), ("deviceId", .optional(p.deviceId)),
    ]))
}

extension SampleRow {
    func json(_ uuid: String) -> JSON {
        placed(uuid, placement, [("type", .string(type.identifier)), ("value", .double(value))]
               + (type.unit.isEmpty ? [] : [("unit", .string(type.unit))])
               + (type.caseName(value).map { [("valueName", JSON.string($0))] } ?? []))
    }
}

extension WorkoutRow {
    func json(_ uuid: String) -> JSON {
        placed(uuid, placement, [("activityType", .string(activityType)), ("durationSeconds", .int(durationSeconds)),
                                 ("energyKcal", energyKcal.map(JSON.double) ?? .null), ("distanceMeters", distanceMeters.map(JSON.double) ?? .null)])
    }
}

extension SleepRow {
    func json(_ uuid: String) -> JSON { placed(uuid, placement, [("stage", .string(stage.rawValue))]) }
}

extension RecordRow {
    func json(_ uuid: String) -> JSON { placed(uuid, placement, content.members.map { ($0.key, $0.value) }) }
}

extension Workout: JSONEncodable {
    public var json: JSON { row.json(uuid) }
}

extension DayRow {
    /// The summary's members, its metrics narrowed to `types` when given.
    func members(types: Set<Int>?) -> [(String, JSON)] {
        var m = JSONObject()
        for (code, metric) in metrics.sorted(by: { $0.key < $1.key }) where types?.contains(code) ?? true {
            let type = HealthType(code: code)
            switch metric {
            case .sum(let v): m[type.identifier] = ["unit": .string(type.unit), "sum": .double(v)]
            case .stats(let avg, let lo, let hi, let n):
                m[type.identifier] = ["unit": .string(type.unit), "avg": .double(avg), "min": .double(lo), "max": .double(hi), "count": .int(n)]
            case .events(let n, let ms): m[type.identifier] = ["count": .int(n), "durationSeconds": .int((ms + 500) / 1000)]
            }
        }
        var w = JSONObject()
        for (activity, t) in workouts.sorted(by: { $0.key < $1.key }) { w[activity] = t.json }
        var s: JSON = .null
        if !sleep.isEmpty {
            func seconds(_ ms: Int64) -> JSON { .int((ms + 500) / 1000) }
            var o = JSONObject([("inBed", seconds(sleep.ms[.inBed] ?? 0)), ("asleep", seconds(sleep.asleepMs))])
            for stage in SleepStage.allCases where stage != .inBed { o[stage.rawValue] = seconds(sleep.ms[stage] ?? 0) }
            s = .object(o)
        }
        return [("metrics", .object(m)), ("workouts", .object(w)), ("sleep", s)]
    }
}

struct Days: JSONEncodable {
    let periods: [Period]
    let types: Set<Int>?
    let authorizedFrom: [String: String]
    var json: JSON {
        .object(JSONObject([("days", .array(periods.map { .object(JSONObject([("date", .string($0.name))] + $0.summary.members(types: types))) }))]
                           + authorizedMember(authorizedFrom, types: types)))
    }
}

struct Weeks: JSONEncodable {
    let periods: [Period]
    let types: Set<Int>?
    let authorizedFrom: [String: String]
    var json: JSON {
        .object(JSONObject([("weeks", .array(periods.map {
            .object(JSONObject([("week", .string($0.name)), ("days", .int(Int64($0.days)))] + $0.summary.members(types: types)))
        }))] + authorizedMember(authorizedFrom, types: types)))
    }
}

/// `authorizedFrom`, narrowed to `types`, when the app said any: a type with no figure on a day before
/// its date was not readable then, which is not the same as no data.
func authorizedMember(_ dates: [String: String], types: Set<Int>?) -> [(String, JSON)] {
    let shown = dates.keys.sorted().filter { name in types.map { codes in HealthType.named(name).map { codes.contains($0.code) } ?? false } ?? true }
    guard !shown.isEmpty else { return [] }
    return [("authorizedFrom", .object(JSONObject(shown.compactMap { name in dates[name].map { (name, JSON.string($0)) } })))]
}

extension IngestReport: JSONEncodable {
    public var json: JSON {
        let accepted = JSON.object(JSONObject([("samples", .int(Int64(samples))), ("workouts", .int(Int64(workouts))), ("sleep", .int(Int64(sleep)))]
                                              + RecordKind.allCases.map { ($0.param, JSON.int(Int64(records[$0] ?? 0))) }))
        var o = JSONObject([("accepted", accepted), ("unchanged", .int(Int64(unchanged))), ("replaced", .int(Int64(replaced))),
                            ("daysRecomputed", .array(daysRecomputed.map { .string($0) })), ("dryRun", .bool(dryRun))])
        // Only when there are some: most ingests carry no type the kernel lacks.
        func counts(_ c: [String: Int]) -> JSON { .object(JSONObject(c.sorted(by: { $0.key < $1.key }).map { ($0.key, JSON.int(Int64($0.value))) })) }
        if !unsummarized.isEmpty { o["unsummarized"] = counts(unsummarized) }
        if !skipped.isEmpty { o["skipped"] = counts(skipped) }
        return .object(o)
    }
}

extension DeleteReport: JSONEncodable {
    public var json: JSON {
        ["deleted": .int(Int64(deleted)), "unknown": .int(Int64(unknown)), "daysRecomputed": .array(daysRecomputed.map { .string($0) })]
    }
}

extension WorkoutPage: JSONEncodable {
    public var json: JSON { ["workouts": .array(workouts.map(\.json)), "nextCursor": .optional(nextCursor)] }
}

// MARK: Schemas

enum Schemas {
    static let placed = #"""
    "start": {"type": "string", "format": "date-time"}, "end": {"type": "string", "format": "date-time"},
    "timezone": {"type": "string"}, "date": {"type": "string", "format": "date"},
    "source": {"type": ["object", "null"], "required": ["name", "bundleId"], "properties": {"name": {"type": ["string", "null"]}, "bundleId": {"type": ["string", "null"]}}},
    "device": {"type": ["object", "null"], "required": ["model", "name"], "properties": {"model": {"type": ["string", "null"]}, "name": {"type": ["string", "null"]}}},
    "deviceId": {"type": ["string", "null"]}, "uuid": {"type": "string", "format": "uuid"}
    """#
    static let placedRequired = #""uuid", "start", "end", "timezone", "date", "source", "device", "deviceId""#
    static let workout = #"{"type": "object", "additionalProperties": false, "required": [\#(placedRequired), "activityType", "durationSeconds", "energyKcal", "distanceMeters"], "properties": {\#(placed), "activityType": {"type": "string"}, "durationSeconds": {"type": "integer", "minimum": 0}, "energyKcal": {"type": ["number", "null"]}, "distanceMeters": {"type": ["number", "null"]}}}"#
    static let summary = #"""
    "metrics": {"type": "object", "description": "by HealthKit type identifier: {unit, sum} for cumulative types, {unit, avg, min, max, count} for discrete ones, {count, durationSeconds} for category types",
      "additionalProperties": {"type": "object", "properties": {"unit": {"type": "string"}, "sum": {"type": "number"},
        "avg": {"type": "number"}, "min": {"type": "number"}, "max": {"type": "number"}, "count": {"type": "integer", "minimum": 1},
        "durationSeconds": {"type": "integer", "minimum": 0}}}},
    "workouts": {"type": "object", "description": "by activity type",
      "additionalProperties": {"type": "object", "additionalProperties": false, "required": ["count", "durationSeconds", "energyKcal", "distanceMeters"],
        "properties": {"count": {"type": "integer", "minimum": 1}, "durationSeconds": {"type": "integer", "minimum": 0},
          "energyKcal": {"type": "number", "minimum": 0}, "distanceMeters": {"type": "number", "minimum": 0}}}},
    "sleep": {"type": ["object", "null"], "description": "seconds per stage after merging sources; asleep = core + deep + REM + unspecified",
      "additionalProperties": false, "required": ["inBed", "asleep", "asleepUnspecified", "asleepCore", "asleepDeep", "asleepREM", "awake"],
      "properties": {"inBed": {"type": "integer", "minimum": 0}, "asleep": {"type": "integer", "minimum": 0},
        "asleepUnspecified": {"type": "integer", "minimum": 0}, "asleepCore": {"type": "integer", "minimum": 0},
        "asleepDeep": {"type": "integer", "minimum": 0}, "asleepREM": {"type": "integer", "minimum": 0}, "awake": {"type": "integer", "minimum": 0}}}
    """#
    static let authorizedFrom = #""authorizedFrom": {"type": "object", "description": "per type, the first day the person lets the app read (as health.ingest last said; present when it said any): a type with no figure before it was not readable, not absent", "additionalProperties": {"type": "string", "format": "date"}}"#
    static let day = #"{"type": "object", "additionalProperties": false, "required": ["date", "metrics", "workouts", "sleep"], "properties": {"date": {"type": "string", "format": "date"}, \#(summary)}}"#
}

// MARK: Methods

/// Narrows metrics to HealthKit type identifiers.
let typesParam = optional("types", strings: 1...64, maxBytes: 100).described("HealthKit type identifiers; default every type")

/// The type codes `names` name, or an error naming the first unknown one.
func typeCodes(_ names: [String]?) throws(FieldError) -> Set<Int>? {
    guard let names else { return nil }
    var codes = Set<Int>()
    for (i, name) in names.enumerated() {
        guard let type = HealthType.named(name) else {
            throw FieldError(field: "params.types[\(i)]", reason: "invalid_params", message: "params.types[\(i)] is not a type the kernel keeps")
        }
        codes.insert(type.code)
    }
    return codes
}


/// An item of any kind as sent.
enum Sent: Equatable {
    case sample(SampleInput)
    case workout(WorkoutInput)
    case sleep(SleepInput)
    case record(RecordInput)

    var item: ItemInput {
        switch self {
        case .sample(let s): return s.item
        case .workout(let w): return w.item
        case .sleep(let s): return s.item
        case .record(let r): return r.item
        }
    }
}

/// `health.ingest`.
public struct HealthIngest: BulkRPCMethod {
    public struct Params: RPCParams {
        let request: IngestRequest
        public static let declaration = ParamList(
            optional("deviceId", maxBytes: 200).described("the sending device; replaceDays removes what it sent"),
            optional("timezone", Zone.self).described("IANA zone for local days; default the one last sent, else UTC"),
            optional("samples", items: SampleInput.self, maxItems: HealthRules.maxItems),
            optional("workouts", items: WorkoutInput.self, maxItems: HealthRules.maxItems),
            optional("sleep", items: SleepInput.self, maxItems: HealthRules.maxItems),
            optional("stateOfMind", items: StateOfMindInput.self, maxItems: HealthRules.maxItems).described("HKStateOfMind samples, kept as sent, not summarised"),
            optional("medicationDoses", items: MedicationDoseInput.self, maxItems: HealthRules.maxItems).described("HKMedicationDoseEvent samples, kept as sent, not summarised"),
            optional("replaceDays", items: CalendarDate.self, maxItems: 366).notBefore(DateFloor.health).described("local days whose items from deviceId are replaced by this request's"),
            optional("dryRun", Bool.self).described("validate and report without storing"),
            optional("authorizedFrom", AuthorizedFrom.self).described("per type, the first day the person lets the app read; kept, shown by health.summary and health.weekly"))
        public init(_ v: (String?, Zone?, [SampleInput]?, [WorkoutInput]?, [SleepInput]?, [StateOfMindInput]?, [MedicationDoseInput]?,
                          [CalendarDate]?, Bool?, AuthorizedFrom?)) throws(FieldError) {
            let (samples, workouts, sleep) = (v.2 ?? [], v.3 ?? [], v.4 ?? [])
            let records = (v.5 ?? []).map(\.record) + (v.6 ?? []).map(\.record)
            if samples.count + workouts.count + sleep.count + records.count > HealthRules.maxItems {
                throw .outOfRange("params", "must hold at most \(HealthRules.maxItems) items in all")
            }
            if v.7 != nil, v.0 == nil {
                throw FieldError(field: "params.deviceId", reason: "missing_field", message: "params.deviceId is required with replaceDays")
            }
            // The same UUID twice must be the same item: a request that says two things of one item is refused.
            var seen: [String: Sent] = [:]
            for sent in samples.map(Sent.sample) + workouts.map(Sent.workout) + sleep.map(Sent.sleep) + records.map(Sent.record) {
                let item = sent.item
                if let first = seen[item.uuid], first != sent {
                    throw FieldError(field: item.path + ".uuid", reason: "invalid_params",
                                     message: "\(item.path).uuid also names a different item at \(first.item.path)")
                }
                seen[item.uuid] = seen[item.uuid] ?? sent
            }
            request = IngestRequest(deviceId: v.0, zone: v.1, samples: samples, workouts: workouts, sleep: sleep, records: records,
                                    replaceDays: v.7 ?? [], dryRun: v.8 ?? false, authorizedFrom: v.9?.dates ?? [:])
        }
    }
    public static let name = "health.ingest"
    public static let summary = "Upserts HealthKit samples, workouts, sleep, State of Mind and medication doses by UUID and recomputes the local days they touch; an identical re-send writes nothing."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false, "required": ["accepted", "unchanged", "replaced", "daysRecomputed", "dryRun"],
     "properties": {
       "accepted": {"type": "object", "additionalProperties": false, "required": ["samples", "workouts", "sleep", "stateOfMind", "medicationDoses"],
         "properties": {"samples": {"type": "integer", "minimum": 0}, "workouts": {"type": "integer", "minimum": 0}, "sleep": {"type": "integer", "minimum": 0},
           "stateOfMind": {"type": "integer", "minimum": 0}, "medicationDoses": {"type": "integer", "minimum": 0}}},
       "unchanged": {"type": "integer", "minimum": 0},
       "replaced": {"type": "integer", "minimum": 0, "description": "items replaceDays removed"},
       "daysRecomputed": {"type": "array", "items": {"type": "string", "format": "date"}},
       "dryRun": {"type": "boolean"},
       "unsummarized": {"type": "object", "description": "samples of types the kernel does not summarise, kept as sent, by type (present when any)",
         "additionalProperties": {"type": "integer", "minimum": 1}},
       "skipped": {"type": "object", "description": "samples of such types left out (health.unknownTypes skip), by type (present when any)",
         "additionalProperties": {"type": "integer", "minimum": 1}}}}
    """#
    public static let errors = [ErrorDoc(.limited, "quota_exceeded: past limits.healthItemsPerUser stored items")]
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    /// Reading the params, placing and recomputing run on a worker against a view of the user's rows;
    /// the commit is on the serving thread, in the user's order.
    public func prepare(_ c: CallContext) throws(RPCError) -> PreparedIngest {
        let user = try c.userID()
        do { return try service.beginIngest(user, now: c.now) } catch { throw error.rpc }
    }
    public func work(_ p: Params, _ prepared: PreparedIngest) -> PlannedIngest { prepared.plan(p.request) }
    public func apply(_ planned: PlannedIngest, _ prepared: PreparedIngest, _ c: CallContext) throws(RPCError) -> JSON {
        try answer { () throws(HealthError) in try service.finishIngest(prepared, planned) }
    }
}

/// `health.delete`.
public struct HealthDelete: RPCMethod {
    public struct Params: RPCParams {
        let uuids: [String]
        public static let declaration = ParamList(
            required("uuids", items: CanonicalUUID.self, maxItems: HealthRules.maxItems).described("items of any kind; unknown ones are counted"))
        public init(_ v: [CanonicalUUID]) { uuids = v.map(\.text) }
    }
    public static let name = "health.delete"
    public static let summary = "Deletes HealthKit items of any kind by UUID and recomputes the days they touched."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false, "required": ["deleted", "unknown", "daysRecomputed"],
     "properties": {"deleted": {"type": "integer", "minimum": 0}, "unknown": {"type": "integer", "minimum": 0},
       "daysRecomputed": {"type": "array", "items": {"type": "string", "format": "date"}}}}
    """#
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(HealthError) in try service.delete(user, uuids: p.uuids) }
    }
}

/// `health.summary`.
public struct HealthSummary: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate
        let to: CalendarDate
        let types: Set<Int>?
        public static let declaration = ParamList(
            required("from", CalendarDate.self).notBefore(DateFloor.health), required("to", CalendarDate.self).notBefore(DateFloor.health).described("inclusive; at most 366 days after from"), typesParam)
        public init(_ v: (CalendarDate, CalendarDate, [String]?)) throws(FieldError) {
            (from, to) = try dateRange(v.0, v.1, maxDays: 366)
            types = try typeCodes(v.2)
        }
    }
    public static let name = "health.summary"
    public static let summary = "Each local day from `from` through `to` that has data: metrics per type, workouts per activity, sleep per stage."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["days"], "properties": {"days": {"type": "array", "items": \#(Schemas.day)}, \#(Schemas.authorizedFrom)}}"#
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(HealthError) in Days(periods: try service.summary(user, from: p.from, to: p.to), types: p.types,
                                                                authorizedFrom: try service.authorizedFrom(user)) }
    }
}

/// `health.weekly`.
public struct HealthWeekly: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate
        let to: CalendarDate
        let types: Set<Int>?
        public static let declaration = ParamList(
            required("from", CalendarDate.self).notBefore(DateFloor.health).described("a day of the first week"),
            required("to", CalendarDate.self).notBefore(DateFloor.health).described("a day of the last week; at most 731 days after from"), typesParam)
        public init(_ v: (CalendarDate, CalendarDate, [String]?)) throws(FieldError) {
            (from, to) = try dateRange(v.0, v.1, maxDays: 731)
            types = try typeCodes(v.2)
        }
    }
    public static let name = "health.weekly"
    public static let summary = "ISO 8601 weeks (Monday to Sunday, whole) touching `from` through `to` that have data, aggregated from their days."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["weeks"], "properties": {"weeks": {"type": "array", "items": {"type": "object", "additionalProperties": false, "required": ["week", "days", "metrics", "workouts", "sleep"], "properties": {"week": {"type": "string", "pattern": "^[0-9]{4}-W[0-9]{2}$"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}, \#(Schemas.summary)}}}, \#(Schemas.authorizedFrom)}}"#
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(HealthError) in Weeks(periods: try service.weekly(user, from: p.from, to: p.to), types: p.types,
                                                                 authorizedFrom: try service.authorizedFrom(user)) }
    }
}

/// `health.workouts`.
public struct HealthWorkouts: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate
        let to: CalendarDate
        let limit: Int
        let cursor: String?
        public static let declaration = ParamList(
            required("from", CalendarDate.self).notBefore(DateFloor.health).described("first local day (each workout's own zone)"),
            required("to", CalendarDate.self).notBefore(DateFloor.health).described("last local day, inclusive"),
            optional("limit", in: 1...500, default: 50),
            optional("cursor", String.self).described("the nextCursor of the previous page"))
        public init(_ v: (CalendarDate, CalendarDate, Int64, String?)) throws(FieldError) {
            guard v.1 >= v.0 else { throw .outOfRange("params.to", "must not be before params.from") }
            (from, to, limit, cursor) = (v.0, v.1, Int(v.2), v.3)
        }
    }
    public static let name = "health.workouts"
    public static let summary = "Workouts starting on local days `from` through `to`, newest first; pages stay stable while workouts are added."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["workouts", "nextCursor"], "properties": {"workouts": {"type": "array", "items": \#(Schemas.workout)}, "nextCursor": {"type": ["string", "null"]}}}"#
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        var after: String?
        if let cursor = p.cursor {
            guard let position = service.openCursor(cursor, user: user) else {
                throw RPCError.invalidParams("params.cursor", reason: "invalid_params", "params.cursor is not a cursor this kernel issued")
            }
            after = position
        }
        return try answer { () throws(HealthError) in try service.workouts(user, from: p.from, to: p.to, limit: p.limit, after: after) }
    }
}
