import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

enum Schemas {
    static let session = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["sessionId", "startTime", "durationSeconds", "endTime", "createdAt", "clientSessionId"],
     "properties": {
       "sessionId": {"type": "string", "format": "uuid"},
       "startTime": {"type": "string", "format": "date-time"},
       "durationSeconds": {"type": "integer", "minimum": 1, "maximum": 86400},
       "endTime": {"type": "string", "format": "date-time"},
       "createdAt": {"type": "string", "format": "date-time"},
       "clientSessionId": {"type": ["string", "null"]}}}
    """#
    static let timer = #"""
    {"type": "object", "additionalProperties": false, "required": ["sessionId", "state", "startedAt", "elapsedSeconds"],
     "properties": {
       "sessionId": {"type": "string", "format": "uuid"},
       "state": {"enum": ["running", "paused"]},
       "startedAt": {"type": "string", "format": "date-time"},
       "elapsedSeconds": {"type": "integer", "minimum": 0}}}
    """#
    static let clientSessionId = #"{"name": "clientSessionId", "required": false, "schema": {"type": "string", "minLength": 1, "maxLength": 200}}"#
    static let sessionId = #"[{"name": "sessionId", "required": true, "schema": {"type": "string", "format": "uuid"}}]"#
}

/// Params that name one session by its id.
public struct SessionIDParams: RPCParams {
    let sessionId: String
    public init(from p: inout ObjectReader) throws(FieldError) {
        let raw: String = try p.required("sessionId")
        guard let id = Identifiers.canonicalUUID(raw) else {
            throw FieldError(field: p.path("sessionId"), reason: "invalid_params", message: "\(p.path("sessionId")) must be a UUID")
        }
        sessionId = id
    }
}

/// An optional client idempotency id.
func clientSessionID(_ p: inout ObjectReader) throws(FieldError) -> String? {
    try p.optionalText("clientSessionId", maxBytes: 200)
}

/// `sessions.record`.
public struct SessionsRecord: RPCMethod {
    public struct Params: RPCParams {
        let startTime: Timestamp
        let durationSeconds: Int64
        let endTime: Timestamp?
        let clientSessionId: String?
        public init(from p: inout ObjectReader) throws(FieldError) {
            startTime = try p.required("startTime")
            durationSeconds = try p.required("durationSeconds", in: 1...SessionRules.maxDuration)
            endTime = try p.optional("endTime")
            clientSessionId = try clientSessionID(&p)
        }
    }
    public static let name = "sessions.record"
    public static let summary = "Records a finished session; idempotent by clientSessionId."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"""
    [{"name": "startTime", "required": true, "schema": {"type": "string", "format": "date-time", "description": "RFC 3339 with offset; at most 5 minutes in the future"}},
     {"name": "durationSeconds", "required": true, "schema": {"type": "integer", "minimum": 1, "maximum": 86400}},
     {"name": "endTime", "required": false, "schema": {"type": "string", "format": "date-time", "description": "default startTime + durationSeconds; never earlier"}},
    """# + Schemas.clientSessionId + "]"
    public static let resultSchema = Schemas.session
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.record(try c.userID(), start: p.startTime, duration: p.durationSeconds, end: p.endTime,
                           clientSessionId: p.clientSessionId, now: c.now)
    }
}

/// `sessions.start`.
public struct SessionsStart: RPCMethod {
    public struct Params: RPCParams {
        let clientSessionId: String?
        public init(from p: inout ObjectReader) throws(FieldError) { clientSessionId = try clientSessionID(&p) }
    }
    public static let name = "sessions.start"
    public static let summary = "Starts the user's server-side timer (one per user)."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = "[" + Schemas.clientSessionId + "]"
    public static let resultSchema = Schemas.timer
    public static let errors = [ErrorDoc(-32009, "session_active, idempotency_key_reused")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.start(try c.userID(), clientSessionId: p.clientSessionId, now: c.now)
    }
}

/// `sessions.pause`.
public struct SessionsPause: RPCMethod {
    public static let name = "sessions.pause"
    public static let summary = "Pauses the timer; paused time does not count."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.timer
    public static let errors = [ErrorDoc(-32009, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON { try service.pause(try c.userID(), now: c.now) }
}

/// `sessions.resume`.
public struct SessionsResume: RPCMethod {
    public static let name = "sessions.resume"
    public static let summary = "Resumes a paused timer."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.timer
    public static let errors = [ErrorDoc(-32009, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON { try service.resume(try c.userID(), now: c.now) }
}

/// `sessions.stop`.
public struct SessionsStop: RPCMethod {
    public static let name = "sessions.stop"
    public static let summary = "Stops the timer and records the session (elapsed time without pauses)."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.session
    public static let errors = [ErrorDoc(-32009, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON { try service.stop(try c.userID(), now: c.now) }
}

/// `sessions.active`.
public struct SessionsActive: RPCMethod {
    public static let name = "sessions.active"
    public static let summary = "The running or paused timer, or null."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"{"anyOf": [{"type": "null"}, "# + Schemas.timer + "]}"
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON { try service.active(try c.userID(), now: c.now) }
}

/// `sessions.get`.
public struct SessionsGet: RPCMethod {
    public static let name = "sessions.get"
    public static let summary = "One of the user's sessions."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = Schemas.sessionId
    public static let resultSchema = Schemas.session
    public static let errors = [ErrorDoc(-32004, "not_found (also for another user's session)")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: SessionIDParams, _ c: CallContext) throws(RPCError) -> JSON {
        try service.get(try c.userID(), sessionId: p.sessionId)
    }
}

/// `sessions.list`.
public struct SessionsList: RPCMethod {
    public struct Params: RPCParams {
        let from: Timestamp?
        let to: Timestamp?
        let limit: Int
        let cursor: String?
        public init(from p: inout ObjectReader) throws(FieldError) {
            from = try Self.bound(&p, "from", endOfDay: false)
            to = try Self.bound(&p, "to", endOfDay: true)
            limit = Int(try p.optional("limit", in: 1...500) ?? 50)
            cursor = try p.optional("cursor")
            if let from, let to, to < from { throw .outOfRange(p.path("to"), "must not be before params.from") }
        }

        /// A timestamp, or a `YYYY-MM-DD` date meaning that UTC day (its start for `from`, the end for `to`).
        static func bound(_ p: inout ObjectReader, _ key: String, endOfDay: Bool) throws(FieldError) -> Timestamp? {
            guard let value = p.value(key) else { return nil }
            if case .string(let text) = value, text.utf8.count == 10 {
                let date = try CalendarDate.decode(value, at: p.path(key))
                return Timestamp(seconds: Int64(date.daysSinceEpoch + (endOfDay ? 1 : 0)) * 86_400)
            }
            return try Timestamp.decode(value, at: p.path(key))
        }
    }
    public static let name = "sessions.list"
    public static let summary = "Sessions newest first, optionally those starting from `from` up to `to` (timestamps, or UTC dates counting the whole day); paged with limit and cursor."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"""
    [{"name": "from", "required": false, "schema": {"type": "string", "description": "RFC 3339 timestamp, or YYYY-MM-DD (from the start of that UTC day)"}},
     {"name": "to", "required": false, "schema": {"type": "string", "description": "RFC 3339 timestamp (exclusive), or YYYY-MM-DD (to the end of that UTC day)"}},
     {"name": "limit", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
     {"name": "cursor", "required": false, "schema": {"type": "string"}}]
    """#
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["sessions", "nextCursor"], "properties": {"sessions": {"type": "array", "items": "# + Schemas.session + #"}, "nextCursor": {"type": ["string", "null"]}}}"#
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        var after: SessionsService.Position?
        if let cursor = p.cursor {
            guard let position = service.decodeCursor(cursor) else {
                throw RPCError.invalidParams("params.cursor", reason: "invalid_params", "params.cursor is not a cursor this kernel issued")
            }
            after = position
        }
        return try service.list(try c.userID(), from: p.from, to: p.to, limit: p.limit, after: after)
    }
}

/// `sessions.delete`.
public struct SessionsDelete: RPCMethod {
    public static let name = "sessions.delete"
    public static let summary = "Deletes one of the user's sessions."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let paramsDoc = Schemas.sessionId
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["deleted"], "properties": {"deleted": {"const": true}}}"#
    public static let errors = [ErrorDoc(-32004, "not_found")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: SessionIDParams, _ c: CallContext) throws(RPCError) -> JSON {
        try service.delete(try c.userID(), sessionId: p.sessionId)
        return ["deleted": true]
    }
}

/// `sessions.stats`.
public struct SessionsStats: RPCMethod {
    public struct Params: RPCParams {
        let zone: Zone
        public init(from p: inout ObjectReader) throws(FieldError) { zone = try p.optional("timezone") ?? Zone.utc }
    }
    public static let name = "sessions.stats"
    public static let summary = "Totals, streaks of consecutive local days (in timezone, default UTC), last 7 and 30 local days."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"[{"name": "timezone", "required": false, "schema": {"type": "string", "description": "IANA time zone name"}}]"#
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["totalSessions", "totalSeconds", "currentStreakDays", "longestStreakDays", "last7DaysSeconds", "last30DaysSeconds"],
     "properties": {
       "totalSessions": {"type": "integer", "minimum": 0}, "totalSeconds": {"type": "integer", "minimum": 0},
       "currentStreakDays": {"type": "integer", "minimum": 0}, "longestStreakDays": {"type": "integer", "minimum": 0},
       "last7DaysSeconds": {"type": "integer", "minimum": 0}, "last30DaysSeconds": {"type": "integer", "minimum": 0}}}
    """#
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try service.stats(try c.userID(), zone: p.zone, now: c.now)
    }
}
