import Chrono
import DomainSupport
import JSON
import JSONRPC

/// JSON Schemas shared by the screen time and rewards methods.
enum Schemas {
    static let connection = #"""
    {"type": "object", "additionalProperties": false, "required": ["enabled", "timezone", "lastSyncAt", "selection"],
     "properties": {
       "enabled": {"type": "boolean"},
       "timezone": {"type": "string"},
       "lastSyncAt": {"type": ["string", "null"], "format": "date-time"},
       "selection": {"type": ["object", "null"]}}}
    """#
    static let verdictProperties = #"""
       "date": {"type": "string", "format": "date"},
       "status": {"enum": ["unclaimed", "unverified", "match", "mismatch"]},
       "deltaMinutes": {"type": ["integer", "null"]},
       "penaltyPoints": {"type": "integer", "minimum": 0}
    """#
    static let verdict = #"{"type": "object", "additionalProperties": false, "required": ["date", "status", "deltaMinutes", "penaltyPoints"], "properties": {"# + verdictProperties + "}}"
    static let record = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["date", "status", "deltaMinutes", "penaltyPoints", "claimedMinutes", "verifiedMinutes", "claimedAt", "uploadedAt"],
     "properties": {
    """# + verdictProperties + #"""
       ,
       "claimedMinutes": {"type": ["integer", "null"], "minimum": 0, "maximum": 1440},
       "verifiedMinutes": {"type": ["integer", "null"], "minimum": 0, "maximum": 1440},
       "claimedAt": {"type": ["string", "null"], "format": "date-time"},
       "uploadedAt": {"type": ["string", "null"], "format": "date-time"},
       "raw": {"description": "the upload's raw JSON as sent; null when none"}}}
    """#
    static let balance = #"""
    {"type": "object", "additionalProperties": false, "required": ["xp", "minutes"],
     "properties": {"xp": {"type": "integer", "minimum": 0}, "minutes": {"type": "integer", "minimum": 0}}}
    """#
    static let date = #"{"type": "string", "format": "date", "description": "YYYY-MM-DD, an existing day"}"#
    static let minutes = #"{"type": "integer", "minimum": 0, "maximum": 1440}"#
}

/// Limits on what clients may store.
enum Limits {
    static let selectionBytes = 64 * 1024
    static let rawBytes = 256 * 1024
    static let textBytes = 200
}

/// Checks the serialized size of a JSON member.
func checkSize(_ value: JSON, _ limit: Int, _ field: String) throws(FieldError) {
    guard value.serializedCount <= limit else { throw .outOfRange(field, "must be at most \(limit / 1024) KiB") }
}

/// `screentime.getConnection`.
public struct ScreenTimeGetConnection: RPCMethod {
    public static let name = "screentime.getConnection"
    public static let summary = "The Screen Time connection: enabled, time zone, last upload, app selection."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.connection
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON {
        try service.connection(try c.userID()).json
    }
}

/// `screentime.updateConnection`.
public struct ScreenTimeUpdateConnection: RPCMethod {
    public struct Params: RPCParams {
        let enabled: Bool?
        let timezone: Zone?
        let selection: JSON?
        public init(from p: inout ObjectReader) throws(FieldError) {
            enabled = try p.optional("enabled")
            timezone = try p.optional("timezone")
            switch try p.nullable("selection", as: JSONObject.self) {
            case nil: selection = nil
            case .some(nil): selection = .null
            case .some(let o?):
                try checkSize(.object(o), Limits.selectionBytes, p.path("selection"))
                selection = .object(o)
            }
        }
    }
    public static let name = "screentime.updateConnection"
    public static let summary = "Changes the connection; only the fields given change."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"""
    [{"name": "enabled", "required": false, "schema": {"type": "boolean"}},
     {"name": "timezone", "required": false, "schema": {"type": "string", "description": "IANA time zone name"}},
     {"name": "selection", "required": false, "schema": {"type": ["object", "null"], "description": "opaque picker tokens, at most 64 KiB"}}]
    """#
    public static let resultSchema = Schemas.connection
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.updateConnection(try c.userID(), enabled: p.enabled, timezone: p.timezone, selection: p.selection)
    }
}

/// `screentime.claim`.
public struct ScreenTimeClaim: RPCMethod {
    public struct Params: RPCParams {
        let date: CalendarDate
        let minutes: Int64
        public init(from p: inout ObjectReader) throws(FieldError) {
            date = try p.required("date")
            minutes = try p.required("minutes", in: 0...1440)
        }
    }
    public static let name = "screentime.claim"
    public static let summary = "Records the minutes the user says they used the phone on a day, and gives the day's verdict."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "date", "required": true, "schema": "# + Schemas.date + #"}, {"name": "minutes", "required": true, "schema": "# + Schemas.minutes + "}]"
    public static let resultSchema = Schemas.verdict
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.claim(try c.userID(), date: p.date, minutes: p.minutes, now: c.now)
    }
}

/// `screentime.upload`.
public struct ScreenTimeUpload: RPCMethod {
    public struct Params: RPCParams {
        let date: CalendarDate
        let verifiedMinutes: Int64
        let raw: BinaryJSON
        public init(from p: inout ObjectReader) throws(FieldError) {
            date = try p.required("date")
            verifiedMinutes = try p.required("verifiedMinutes", in: 0...1440)
            let value: JSON = try p.optional("raw") ?? .null
            try checkSize(value, Limits.rawBytes, p.path("raw"))
            raw = BinaryJSON(value)
        }
    }
    public static let name = "screentime.upload"
    public static let summary = "The iOS companion's verified minutes for a day; upserts the day, recomputes its penalty, sets lastSyncAt."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"""
    [{"name": "date", "required": true, "schema": {"type": "string", "format": "date"}},
     {"name": "verifiedMinutes", "required": true, "schema": {"type": "integer", "minimum": 0, "maximum": 1440}},
     {"name": "raw", "required": false, "schema": {"description": "any JSON up to 256 KiB, stored and returned as sent"}}]
    """#
    public static let resultSchema = Schemas.verdict
    public static let errors = [ErrorDoc(-32003, "connection_disabled")]
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.upload(try c.userID(), date: p.date, verifiedMinutes: p.verifiedMinutes, raw: p.raw, now: c.now)
    }
}

/// `screentime.day`.
public struct ScreenTimeDay: RPCMethod {
    public struct Params: RPCParams {
        let date: CalendarDate
        public init(from p: inout ObjectReader) throws(FieldError) { date = try p.required("date") }
    }
    public static let name = "screentime.day"
    public static let summary = "One day's claim, upload, verdict and raw upload."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "date", "required": true, "schema": "# + Schemas.date + "}]"
    public static let resultSchema = Schemas.record
    public static let errors = [ErrorDoc(-32004, "not_found: no data for that day")]
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.day(try c.userID(), date: p.date)
    }
}

/// `screentime.history`.
public struct ScreenTimeHistory: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate
        let to: CalendarDate
        let includeRaw: Bool
        public init(from p: inout ObjectReader) throws(FieldError) {
            from = try p.required("from")
            to = try p.required("to")
            includeRaw = try p.optional("includeRaw") ?? false
            guard from <= to else { throw .outOfRange(p.path("to"), "must not be before params.from") }
            guard to.daysSinceEpoch - from.daysSinceEpoch < 366 else {
                throw .outOfRange(p.path("to"), "must be at most 366 days after params.from, counting both")
            }
        }
    }
    public static let name = "screentime.history"
    public static let summary = "Day records from `from` to `to` (at most 366 days), oldest first, only days with data."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "from", "required": true, "schema": "# + Schemas.date + #"}, {"name": "to", "required": true, "schema": "# + Schemas.date + #"}, {"name": "includeRaw", "required": false, "schema": {"type": "boolean"}}]"#
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["days"], "properties": {"days": {"type": "array", "items": "# + Schemas.record + "}}}"
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.history(try c.userID(), from: p.from, to: p.to, includeRaw: p.includeRaw)
    }
}

/// `screentime.penalties`.
public struct ScreenTimePenalties: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate?
        let to: CalendarDate?
        public init(from p: inout ObjectReader) throws(FieldError) {
            from = try p.optional("from")
            to = try p.optional("to")
            if let from, let to, to < from { throw .outOfRange(p.path("to"), "must not be before params.from") }
        }
    }
    public static let name = "screentime.penalties"
    public static let summary = "Penalty entries (one per day at most) and their total, oldest first."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "from", "required": false, "schema": "# + Schemas.date + #"}, {"name": "to", "required": false, "schema": "# + Schemas.date + "}]"
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false, "required": ["totalPoints", "entries"],
     "properties": {
       "totalPoints": {"type": "integer", "minimum": 0},
       "entries": {"type": "array", "items": {"type": "object", "additionalProperties": false,
         "required": ["date", "points", "deltaMinutes", "appliedAt"],
         "properties": {"date": {"type": "string", "format": "date"}, "points": {"type": "integer", "minimum": 1},
           "deltaMinutes": {"type": "integer"}, "appliedAt": {"type": "string", "format": "date-time"}}}}}}
    """#
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.penalties(try c.userID(), from: p.from, to: p.to)
    }
}

/// `screentime.logEvent`.
public struct ScreenTimeLogEvent: RPCMethod {
    static let types: Set<String> = ["intervalDidStart", "intervalDidEnd", "eventDidReachThreshold", "eventWillReachThresholdWarning"]
    public struct Params: RPCParams {
        let type: String
        let activity: String
        let event: String?
        let at: Timestamp
        public init(from p: inout ObjectReader) throws(FieldError) {
            type = try p.required("type")
            guard ScreenTimeLogEvent.types.contains(type) else {
                throw .outOfRange(p.path("type"), "must be one of \(ScreenTimeLogEvent.types.sorted().joined(separator: ", "))")
            }
            activity = try p.text("activity", maxBytes: Limits.textBytes)
            event = try p.optionalText("event", maxBytes: Limits.textBytes)
            at = try p.required("at")
        }
    }
    public static let name = "screentime.logEvent"
    public static let summary = "Records a DeviceActivity monitor event; the newest 1000 per user are kept."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"""
    [{"name": "type", "required": true, "schema": {"enum": ["intervalDidStart", "intervalDidEnd", "eventDidReachThreshold", "eventWillReachThresholdWarning"]}},
     {"name": "activity", "required": true, "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
     {"name": "event", "required": false, "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
     {"name": "at", "required": true, "schema": {"type": "string", "format": "date-time"}}]
    """#
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["logged"], "properties": {"logged": {"const": true}}}"#
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.logEvent(try c.userID(), type: p.type, activity: p.activity, event: p.event, at: p.at, now: c.now)
        return ["logged": true]
    }
}

/// `screentime.events`.
public struct ScreenTimeEvents: RPCMethod {
    public struct Params: RPCParams {
        let limit: Int
        public init(from p: inout ObjectReader) throws(FieldError) {
            limit = Int(try p.optional("limit", in: 1...ScreenTimeService.eventsKept) ?? 50)
        }
    }
    public static let name = "screentime.events"
    public static let summary = "Monitor events, newest first (limit 1 to 1000, default 50)."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "limit", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}]"#
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false, "required": ["events"],
     "properties": {"events": {"type": "array", "items": {"type": "object", "additionalProperties": false,
       "required": ["type", "activity", "event", "at", "receivedAt"],
       "properties": {"type": {"type": "string"}, "activity": {"type": "string"}, "event": {"type": ["string", "null"]},
         "at": {"type": "string", "format": "date-time"}, "receivedAt": {"type": "string", "format": "date-time"}}}}}}
    """#
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.events(try c.userID(), limit: p.limit)
    }
}

/// `rewards.earn`.
public struct RewardsEarn: RPCMethod {
    public struct Params: RPCParams {
        let xp: Int64
        let reason: String
        let key: String
        public init(from p: inout ObjectReader) throws(FieldError) {
            xp = try p.required("xp", in: 1...1_000_000)
            reason = try p.text("reason", maxBytes: Limits.textBytes)
            key = try p.text("key", maxBytes: Limits.textBytes)
        }
    }
    public static let name = "rewards.earn"
    public static let summary = "Credits XP once per idempotency key; the same key again credits nothing."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"""
    [{"name": "xp", "required": true, "schema": {"type": "integer", "minimum": 1, "maximum": 1000000}},
     {"name": "reason", "required": true, "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
     {"name": "key", "required": true, "schema": {"type": "string", "minLength": 1, "maxLength": 200}}]
    """#
    public static let resultSchema = Schemas.balance
    public static let errors = [ErrorDoc(-32009, "idempotency_key_reused")]
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.earn(try c.userID(), xp: p.xp, reason: p.reason, key: p.key, now: c.now)
    }
}

/// `rewards.redeem`.
public struct RewardsRedeem: RPCMethod {
    public struct Params: RPCParams {
        let xp: Int64
        public init(from p: inout ObjectReader) throws(FieldError) { xp = try p.required("xp", in: 1...ScreenTimeService.maxXP) }
    }
    public static let name = "rewards.redeem"
    public static let summary = "Turns XP into unlock minutes (10 XP per minute by default)."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "xp", "required": true, "schema": {"type": "integer", "minimum": 1, "description": "a positive multiple of the XP-per-minute rate"}}]"#
    public static let resultSchema = Schemas.balance
    public static let errors = [ErrorDoc(-32009, "insufficient_balance")]
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.redeem(try c.userID(), xp: p.xp)
    }
}

/// `rewards.spend`.
public struct RewardsSpend: RPCMethod {
    public struct Params: RPCParams {
        let minutes: Int64
        public init(from p: inout ObjectReader) throws(FieldError) { minutes = try p.required("minutes", in: 1...1440) }
    }
    public static let name = "rewards.spend"
    public static let summary = "Spends unlock minutes on a window of unlocked screen time, starting now or when the current window ends."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "minutes", "required": true, "schema": {"type": "integer", "minimum": 1, "maximum": 1440}}]"#
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["startsAt", "endsAt", "balance"], "properties": {"startsAt": {"type": "string", "format": "date-time"}, "endsAt": {"type": "string", "format": "date-time"}, "balance": "# + Schemas.balance + "}}"
    public static let errors = [ErrorDoc(-32009, "insufficient_balance")]
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.spend(try c.userID(), minutes: p.minutes, now: c.now)
    }
}

/// `rewards.balance`.
public struct RewardsBalance: RPCMethod {
    public static let name = "rewards.balance"
    public static let summary = "XP and unlock minutes held."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.balance
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON {
        try service.balance(try c.userID()).json
    }
}
