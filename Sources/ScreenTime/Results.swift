import Chrono
import DomainSupport
import JSON
import JSONRPC

// The wire forms of what the Screen Time and rewards service answers, each with its schema from one
// declaration.

/// Runs a service call and answers its result, or its refusal, on the wire.
func answer<T>(_ body: () throws(ScreenTimeError) -> T) throws(RPCError) -> T {
    do { return try body() } catch { throw error.rpc }
}

extension ConnectionRow: RPCResult {
    static let fields = ResultFields<ConnectionRow>(
        ResultField("enabled", Schema.boolean) { .bool($0.enabled) },
        ResultField("timezone", Schema.string) { .string($0.timezone) },
        ResultField("lastSyncAt", Schema.nullable(Schema.timestamp)) { .timestamp($0.lastSyncAt) },
        ResultField("selection", ["type": ["object", "null"]]) { $0.selection.json })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// A day's verdict members, shared by `DayVerdict` and `DayRecord`.
private func verdictFields<Value>(_ date: @escaping @Sendable (Value) -> CalendarDate, _ verdict: @escaping @Sendable (Value) -> Verdict) -> [ResultField<Value>] {
    [ResultField("date", Schema.date) { .string(date($0).description) },
     ResultField("status", Schema.oneOf(["unclaimed", "unverified", "match", "mismatch"])) { .string(verdict($0).status.rawValue) },
     ResultField("deltaMinutes", Schema.nullable(Schema.integer)) { .optionalInt(verdict($0).deltaMinutes) },
     ResultField("penaltyPoints", Schema.count) { .int(verdict($0).penaltyPoints) }]
}

extension DayVerdict: RPCResult {
    static let fields = ResultFields<DayVerdict>(fields: verdictFields({ $0.date }, { $0.verdict }))
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// A day record as answered, with or without its `raw`.
struct ShownDay: Sendable {
    let record: DayRecord
    let includeRaw: Bool

    static let fields = ResultFields<ShownDay>(fields: verdictFields({ $0.record.date }, { $0.record.verdict }) + [
        ResultField("claimedMinutes", Schema.nullable(Schema.integer(0...1440))) { .optionalInt($0.record.day.claimedMinutes) },
        ResultField("verifiedMinutes", Schema.nullable(Schema.integer(0...1440))) { .optionalInt($0.record.day.verifiedMinutes) },
        ResultField("claimedAt", Schema.nullable(Schema.timestamp)) { .timestamp($0.record.day.claimedAt) },
        ResultField("uploadedAt", Schema.nullable(Schema.timestamp)) { .timestamp($0.record.day.uploadedAt) },
        .optional("raw", ["description": "the upload's raw JSON as sent; null when none"]) { $0.includeRaw ? $0.record.day.raw.json : JSON?.none },
    ])
}

extension DayRecord: RPCResult {
    public static var schema: JSON { ShownDay.fields.schema }
    public var json: JSON { ShownDay.fields.encode(ShownDay(record: self, includeRaw: true)) }
}

/// `screentime.history`'s answer.
public struct DayList: RPCResult {
    let days: [DayRecord]
    let includeRaw: Bool

    static let fields = ResultFields<DayList>(
        ResultField("days", Schema.array(ShownDay.fields.schema)) { list in
            .array(list.days.map { ShownDay.fields.encode(ShownDay(record: $0, includeRaw: list.includeRaw)) })
        })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension Penalty: RPCResult {
    static let fields = ResultFields<Penalty>(
        ResultField("date", Schema.date) { .string($0.date) },
        ResultField("points", Schema.integer(from: 1)) { .int($0.row.points) },
        ResultField("deltaMinutes", Schema.integer) { .int($0.row.deltaMinutes) },
        ResultField("appliedAt", Schema.timestamp) { .timestamp($0.row.appliedAt) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `screentime.penalties`' answer: the entries and their total.
public struct PenaltyList: RPCResult {
    let entries: [Penalty]

    static let fields = ResultFields<PenaltyList>(
        ResultField("totalPoints", Schema.count) { .int($0.entries.reduce(0) { $0 + $1.row.points }) },
        ResultField("entries", Schema.array(Penalty.schema)) { .array($0.entries.map(\.json)) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension EventRow: RPCResult {
    static let fields = ResultFields<EventRow>(
        ResultField("type", Schema.string) { .string($0.type) },
        ResultField("activity", Schema.string) { .string($0.activity) },
        ResultField("event", Schema.nullable(Schema.string)) { .optional($0.event) },
        ResultField("at", Schema.timestamp) { .timestamp($0.at) },
        ResultField("receivedAt", Schema.timestamp) { .timestamp($0.receivedAt) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `screentime.events`' answer.
public struct EventList: RPCResult {
    let events: [EventRow]

    static let fields = ResultFields<EventList>(ResultField("events", Schema.array(EventRow.schema)) { .array($0.events.map(\.json)) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `screentime.logEvent`'s answer.
public struct Logged: RPCResult {
    static let fields = ResultFields<Logged>(ResultField("logged", Schema.constant(true)) { _ in true })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}
