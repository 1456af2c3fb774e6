import JSON
import JSONRPC

/// One MCP tool: a kernel method an assistant may call for the signed-in user, its input schema made
/// from the method's own param declaration (the one OpenRPC publishes) and its output schema from the
/// method's result type.
public struct MCPTool: Sendable {
    /// Letters, digits, `_`, `-` and `.` only.
    public let name: String
    public let method: String
    public let description: String
    public let writes: Bool
    public let inputSchema: JSON
    public let outputSchema: JSON?

    /// The catalogue over `methods` (as `rpc.discover` describes them): the reads always, the writes
    /// with `allowWrites`.
    public static func catalogue(_ methods: [MCPMethod], allowWrites: Bool) -> [MCPTool] {
        let byName = Dictionary(methods.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        return entries.compactMap { entry in
            guard let m = byName[entry.method], allowWrites || !entry.writes else { return nil }
            return MCPTool(name: entry.tool, method: m.name, description: entry.description, writes: entry.writes,
                           inputSchema: inputSchema(m.params), outputSchema: objectSchema(m.resultSchema))
        }
    }

    /// What an assistant may reach: the user's own data, read; with `--allow-writes`, two writes a
    /// person may reasonably ask an assistant for. Descriptions are written for the assistant.
    static let entries: [(tool: String, method: String, writes: Bool, description: String)] = [
        ("health_daily_summary", "health.summary", false,
         "The user's HealthKit totals per local day from `from` to `to` (YYYY-MM-DD, at most 366 days): steps and other sums, heart rate and other averages with min and max, workouts per activity, sleep seconds per stage. Only days with data are listed. Narrow with `types` (HealthKit identifiers such as HKQuantityTypeIdentifierStepCount). With `explain: true` (at most 92 days) each sum also lists its sources: what each counted and what a higher-ranked source overrode, to answer why a total differs from another app's."),
        ("health_weekly_summary", "health.weekly", false,
         "The user's HealthKit figures per ISO week (Monday to Sunday) for the weeks touching `from` to `to` (YYYY-MM-DD, at most 731 days), aggregated from the days; `days` says how many days of each week have data. Use it to compare one week with another."),
        ("health_workouts", "health.workouts", false,
         "The user's workouts whose local start day lies from `from` to `to` (YYYY-MM-DD), newest first: activity, duration in seconds, energy in kcal, distance in meters. Page with `limit` and the answer's `nextCursor`."),
        ("meditation_stats", "sessions.stats", false,
         "The user's meditation totals: sessions, seconds, current and longest streak of consecutive local days, the last 7 and 30 days. With `from` and `to` (YYYY-MM-DD), also each of those days' sessions and seconds; `timezone` (IANA) decides local days, default UTC."),
        ("meditation_sessions", "sessions.list", false,
         "The user's meditation sessions, newest first: start, end, duration in seconds. `from` and `to` take RFC 3339 timestamps or YYYY-MM-DD dates; page with `limit` and `cursor`."),
        ("screen_time_history", "screentime.history", false,
         "The user's Screen Time days from `from` to `to` (YYYY-MM-DD): minutes claimed, minutes the phone verified, the verdict (match, mismatch, unverified, unclaimed) and penalty points."),
        ("screen_time_penalties", "screentime.penalties", false,
         "Penalty points the user got for using the phone more than they claimed, per day, with the total; optionally from `from` to `to` (YYYY-MM-DD)."),
        ("rewards_balance", "rewards.balance", false, "The user's rewards: XP held and unlock minutes held."),
        ("subscription_status", "subscriptions.status", false,
         "The user's App Store membership now: active, grace_period, billing_retry, inactive or none; the product, when the current period ends, and why access ended (expired, revoked)."),
        ("changes_since", "sync.changes", false,
         "What changed in the user's data since `since` (a cursor from an earlier answer; omitted: from the beginning), oldest first, each record once: entity, id, upsert or delete. Keep `cursor` for next time."),
        ("record_meditation_session", "sessions.record", true,
         "Records a finished meditation session for the user: `startTime` (RFC 3339) and `durationSeconds` (1 to 86400). Changes the user's data."),
        ("claim_screen_time", "screentime.claim", true,
         "Records how many minutes (0 to 1440) the user says they used the phone on `date` (YYYY-MM-DD), and answers the day's verdict. Changes the user's data."),
    ]

    /// `{type: object, properties, required}` from OpenRPC content descriptors, without `auth` (the
    /// server sends the user's token itself).
    static func inputSchema(_ params: [JSON]) -> JSON {
        var properties = JSONObject()
        var required: [JSON] = []
        for p in params {
            guard let name = p["name"]?.stringValue, name != "auth" else { continue }
            var schema = p["schema"] ?? [:]
            if case .object(var o) = schema, let d = p["description"], o["description"] == nil {
                o["description"] = d
                schema = .object(o)
            }
            properties[name] = schema
            if p["required"] == true { required.append(.string(name)) }
        }
        return ["type": "object", "properties": .object(properties), "required": .array(required), "additionalProperties": false]
    }

    /// The result schema when it describes an object (MCP's `outputSchema` must).
    static func objectSchema(_ schema: JSON) -> JSON? { schema["type"] == "object" ? schema : nil }

    var json: JSON {
        var o = JSONObject([("name", .string(name)), ("description", .string(description)), ("inputSchema", inputSchema)])
        if let outputSchema { o["outputSchema"] = outputSchema }
        o["annotations"] = ["readOnlyHint": .bool(!writes), "destructiveHint": false, "idempotentHint": .bool(!writes), "openWorldHint": false]
        return .object(o)
    }
}

/// A kernel method as `rpc.discover` describes it: its name, its params' content descriptors and its
/// result's schema (from its result type).
public struct MCPMethod: Sendable {
    public let name: String
    public let params: [JSON]
    public let resultSchema: JSON

    public init(name: String, params: [JSON], resultSchema: JSON) {
        (self.name, self.params, self.resultSchema) = (name, params, resultSchema)
    }
}
