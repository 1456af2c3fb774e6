import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

// The wire forms of what the health service answers, each with its schema from the same declaration.

/// Runs a service call and answers its result, or its refusal, on the wire.
func answer<T>(_ body: () throws(HealthError) -> T) throws(RPCError) -> T {
    do { return try body() } catch { throw error.rpc }
}

/// The members every item shows after its own: its interval, zone and day, and where it came from.
func placementFields<Value>(_ placement: @escaping @Sendable (Value) -> Placement) -> [ResultField<Value>] {
    func pair(_ a: String, _ b: String) -> JSON {
        ["type": ["object", "null"], "required": [.string(a), .string(b)],
         "properties": [a: ["type": ["string", "null"]], b: ["type": ["string", "null"]]]]
    }
    return [
        ResultField("start", Schema.timestamp) { .timestamp(placement($0).start) },
        ResultField("end", Schema.timestamp) { .timestamp(placement($0).end) },
        ResultField("timezone", Schema.string) { .string(placement($0).zone) },
        ResultField("date", Schema.date) { .string(placement($0).day) },
        ResultField("source", pair("name", "bundleId")) {
            let o = placement($0).origin
            return o.sourceName == nil && o.bundleId == nil ? .null : ["name": .optional(o.sourceName), "bundleId": .optional(o.bundleId)]
        },
        ResultField("device", pair("model", "name")) {
            let o = placement($0).origin
            return o.deviceModel == nil && o.deviceName == nil ? .null : ["model": .optional(o.deviceModel), "name": .optional(o.deviceName)]
        },
        ResultField("deviceId", Schema.nullable(Schema.string)) { .optional(placement($0).deviceId) },
        // Present only on items that carry metadata: most do not.
        .optional("metadata", Metadata.schema) { placement($0).metadata?.json },
    ]
}

/// An item as the feed shows it: its UUID, its own members, then `placementFields`'.
func placed(_ uuid: String, _ p: Placement, _ members: [(String, JSON)]) -> JSON {
    var o = JSONObject([("uuid", .string(uuid))] + members)
    for field in ItemPlacement.fields { if let v = field.encode(ItemPlacement(placement: p)) { o[field.name] = v } }
    return .object(o)
}

private struct ItemPlacement: Sendable {
    let placement: Placement
    static let fields = placementFields { (item: ItemPlacement) in item.placement }
}

extension SampleRow {
    func json(_ uuid: String) -> JSON {
        placed(uuid, placement, [("type", .string(type.identifier)), ("value", .double(value))]
               + (type.unit.isEmpty ? [] : [("unit", .string(type.unit))])
               + (type.caseName(value).map { [("valueName", JSON.string($0))] } ?? []))
    }
}

extension WorkoutRow {
    func json(_ uuid: String) -> JSON { Workout(uuid: uuid, row: self).json }
}

extension SleepRow {
    func json(_ uuid: String) -> JSON { placed(uuid, placement, [("stage", .string(stage.rawValue))]) }
}

extension RecordRow {
    func json(_ uuid: String) -> JSON { placed(uuid, placement, content.members.map { ($0.key, $0.value) }) }
}

extension Workout: RPCResult {
    static let fields = ResultFields<Workout>(fields: [
        ResultField("uuid", Schema.uuid) { .string($0.uuid) },
        ResultField("activityType", Schema.string) { .string($0.row.activityType) },
        ResultField("durationSeconds", Schema.count) { .int($0.row.durationSeconds) },
        ResultField("energyKcal", Schema.nullable(Schema.number)) { $0.row.energyKcal.map(JSON.double) ?? .null },
        ResultField("distanceMeters", Schema.nullable(Schema.number)) { $0.row.distanceMeters.map(JSON.double) ?? .null },
    ] + placementFields { $0.row.placement })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension WorkoutPage: RPCResult {
    static let fields = ResultFields<WorkoutPage>(
        ResultField("workouts", Schema.array(Workout.schema)) { .array($0.workouts.map(\.json)) },
        ResultField("nextCursor", Schema.nullable(Schema.string)) { .optional($0.nextCursor) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension IngestReport: RPCResult {
    /// Items stored, by kind.
    static let accepted = ResultFields<IngestReport>(fields: [
        ResultField("samples", Schema.count) { .int(Int64($0.samples)) },
        ResultField("workouts", Schema.count) { .int(Int64($0.workouts)) },
        ResultField("sleep", Schema.count) { .int(Int64($0.sleep)) },
    ] + RecordKind.allCases.map { kind in ResultField(kind.param, Schema.count) { .int(Int64($0.records[kind] ?? 0)) } })

    static let fields = ResultFields<IngestReport>(
        ResultField("accepted", accepted.schema) { accepted.encode($0) },
        ResultField("unchanged", Schema.count) { .int(Int64($0.unchanged)) },
        ResultField("superseded", Schema.described(Schema.count, "items left out: the user has a newer version of their synced object (HKSyncVersion)")) {
            .int(Int64($0.superseded))
        },
        ResultField("replaced", Schema.described(Schema.count, "items replaceDays removed")) { .int(Int64($0.replaced)) },
        ResultField("daysRecomputed", Schema.array(Schema.date)) { .array($0.daysRecomputed.map(JSON.string)) },
        ResultField("dryRun", Schema.boolean) { .bool($0.dryRun) },
        // Per type identifier, only when there are some: most ingests carry no type the kernel lacks.
        .optional("unsummarized", countsSchema("samples of types the kernel does not summarise, kept as sent, by type (present when any)")) {
            $0.unsummarized.isEmpty ? JSON?.none : countsJSON($0.unsummarized)
        },
        .optional("skipped", countsSchema("samples of such types left out (health.unknownTypes skip), by type (present when any)")) {
            $0.skipped.isEmpty ? JSON?.none : countsJSON($0.skipped)
        })
    private static func countsSchema(_ description: String) -> JSON {
        ["type": "object", "description": .string(description), "additionalProperties": Schema.integer(from: 1)]
    }
    private static func countsJSON(_ c: [String: Int]) -> JSON {
        .object(JSONObject(c.sorted(by: { $0.key < $1.key }).map { ($0.key, JSON.int(Int64($0.value))) }))
    }
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension DeleteReport: RPCResult {
    static let fields = ResultFields<DeleteReport>(
        ResultField("deleted", Schema.count) { .int(Int64($0.deleted)) },
        ResultField("unknown", Schema.count) { .int(Int64($0.unknown)) },
        ResultField("daysRecomputed", Schema.array(Schema.date)) { .array($0.daysRecomputed.map(JSON.string)) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// A day's or a week's summary as answered: its metrics narrowed to the types asked for.
struct Summary: Sendable {
    let period: Period
    let types: Set<Int>?

    static let metrics = ResultField<Summary>("metrics", [
        "type": "object",
        "description": "by HealthKit type identifier: {unit, sum} for cumulative types, {unit, avg, min, max, count} for discrete ones, {count, durationSeconds} for category types",
        "additionalProperties": ["type": "object", "properties": ["unit": Schema.string, "sum": Schema.number, "avg": Schema.number, "min": Schema.number,
                                                                  "max": Schema.number, "count": Schema.integer(from: 1), "durationSeconds": Schema.count,
                                                                  "sources": Schema.array(SourceShare.fields.schema)]],
    ]) { s in
        var m = JSONObject()
        for (code, metric) in s.period.summary.metrics.sorted(by: { $0.key < $1.key }) where s.types?.contains(code) ?? true {
            let type = HealthType(code: code)
            switch metric {
            case .sum(let v):
                var o = JSONObject([("unit", .string(type.unit)), ("sum", .double(v))])
                if let sources = s.period.sources[code] { o["sources"] = .array(sources.map(SourceShare.fields.encode)) }
                m[type.identifier] = .object(o)
            case .stats(let avg, let lo, let hi, let n):
                m[type.identifier] = ["unit": .string(type.unit), "avg": .double(avg), "min": .double(lo), "max": .double(hi), "count": .int(n)]
            case .events(let n, let ms): m[type.identifier] = ["count": .int(n), "durationSeconds": .int((ms + 500) / 1000)]
            }
        }
        return .object(m)
    }

    static let workouts = ResultField<Summary>("workouts", [
        "type": "object", "description": "by activity type",
        "additionalProperties": WorkoutTotals.fields.schema,
    ]) { s in .object(JSONObject(s.period.summary.workouts.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value.json) })) }

    static let sleep = ResultField<Summary>("sleep", {
        guard case .object(var o) = SleepTotals.fields.schema else { return [:] }
        o["type"] = ["object", "null"]
        o["description"] = "seconds per stage after merging sources; asleep = core + deep + REM + unspecified"
        return .object(o)
    }()) { s in s.period.summary.sleep.isEmpty ? .null : SleepTotals.fields.encode(s.period.summary.sleep) }
}

extension SourceShare {
    /// A source of a figure, as `explain` answers it.
    static let fields = ResultFields<SourceShare>(
        ResultField("name", Schema.nullable(Schema.string)) { .optional($0.source.origin.sourceName) },
        ResultField("bundleId", Schema.nullable(Schema.string)) { .optional($0.source.origin.bundleId) },
        ResultField("deviceModel", Schema.nullable(Schema.string)) { .optional($0.source.origin.deviceModel) },
        ResultField("enteredByHand", Schema.boolean) { .bool($0.source.enteredByHand) },
        ResultField("counted", Schema.number) { .double($0.counted) },
        ResultField("overridden", Schema.number) { .double($0.overridden) })
}

extension WorkoutTotals {
    /// Shown and stored alike (`health.days` keeps this form).
    static let fields = ResultFields<WorkoutTotals>(
        ResultField("count", Schema.integer(from: 1)) { .int($0.count) },
        ResultField("durationSeconds", Schema.count) { .int($0.durationSeconds) },
        ResultField("energyKcal", ["type": "number", "minimum": 0]) { .double($0.energyKcal) },
        ResultField("distanceMeters", ["type": "number", "minimum": 0]) { .double($0.distanceMeters) })
    var json: JSON { Self.fields.encode(self) }
}

extension SleepTotals {
    static let fields: ResultFields<SleepTotals> = {
        @Sendable func seconds(_ ms: Int64) -> JSON { .int((ms + 500) / 1000) }
        return ResultFields<SleepTotals>(fields: [
            ResultField("inBed", Schema.count) { seconds($0.ms[.inBed] ?? 0) },
            ResultField("asleep", Schema.count) { seconds($0.asleepMs) },
        ] + SleepStage.allCases.filter { $0 != .inBed }.map { stage in ResultField(stage.rawValue, Schema.count) { seconds($0.ms[stage] ?? 0) } })
    }()
}

/// `authorizedFrom`, narrowed to `types`, when the app said any: a type with no figure on a day before
/// its date was not readable then, which is not the same as no data.
private func authorizedField<Value>(_ dates: @escaping @Sendable (Value) -> [String: String], _ types: @escaping @Sendable (Value) -> Set<Int>?) -> ResultField<Value> {
    .optional("authorizedFrom", ["type": "object",
                                 "description": "per type, the first day the person lets the app read (as health.ingest last said; present when it said any): a type with no figure before it was not readable, not absent",
                                 "additionalProperties": Schema.date]) { value in
        let (dates, types) = (dates(value), types(value))
        let shown = dates.keys.sorted().filter { name in types.map { codes in HealthType.named(name).map { codes.contains($0.code) } ?? false } ?? true }
        guard !shown.isEmpty else { return nil }
        return .object(JSONObject(shown.compactMap { name in dates[name].map { (name, JSON.string($0)) } }))
    }
}

/// `health.summary`'s answer.
public struct Days: RPCResult {
    let periods: [Period]
    let types: Set<Int>?
    let authorizedFrom: [String: String]

    static let day = ResultFields<Summary>(ResultField("date", Schema.date) { .string($0.period.name) }, Summary.metrics, Summary.workouts, Summary.sleep)
    static let fields = ResultFields<Days>(
        ResultField("days", Schema.array(day.schema)) { d in .array(d.periods.map { day.encode(Summary(period: $0, types: d.types)) }) },
        authorizedField({ $0.authorizedFrom }, { $0.types }))
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `health.weekly`'s answer.
public struct Weeks: RPCResult {
    let periods: [Period]
    let types: Set<Int>?
    let authorizedFrom: [String: String]

    static let week = ResultFields<Summary>(
        ResultField("week", ["type": "string", "pattern": "^[0-9]{4}-W[0-9]{2}$"]) { .string($0.period.name) },
        ResultField("days", Schema.integer(1...7)) { .int(Int64($0.period.days)) },
        Summary.metrics, Summary.workouts, Summary.sleep)
    static let fields = ResultFields<Weeks>(
        ResultField("weeks", Schema.array(week.schema)) { w in .array(w.periods.map { week.encode(Summary(period: $0, types: w.types)) }) },
        authorizedField({ $0.authorizedFrom }, { $0.types }))
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension SummaryRow {
    /// The day as the feed shows it (`health.day`): every type.
    func json(date: String) -> JSON {
        Days.day.encode(Summary(period: Period(name: date, summary: self, days: 1), types: nil))
    }
}
