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
}

// MARK: The wire form of what the service answers

extension SessionsError {
    var rpc: RPCError {
        switch self {
        case .startInTheFuture:
            return .invalidParams("params.startTime", reason: "future_date", "params.startTime is more than 5 minutes in the future")
        case .endBeforeDuration:
            return .invalidParams("params.endTime", reason: "out_of_range", "params.endTime is earlier than startTime + durationSeconds")
        case .sessionActive: return .conflict("session_active", "A session timer is already running or paused")
        case .clientSessionIdUsed: return .conflict("idempotency_key_reused", "This clientSessionId already belongs to a recorded session")
        case .noActiveSession: return .conflict("no_active_session", "No session timer is running or paused")
        case .notFound: return .notFound("No such session")
        case .quota(let limit): return .quotaExceeded("meditation sessions", limit: limit)
        case .storage(let error): return .from(error)
        }
    }
}

/// Runs a service call and answers its result, or its refusal, on the wire.
func answer<T: JSONEncodable>(_ body: () throws(SessionsError) -> T) throws(RPCError) -> JSON {
    do { return try body().json } catch { throw error.rpc }
}

extension Session: JSONEncodable {
    var json: JSON {
        ["sessionId": .string(id), "startTime": .timestamp(startTime), "durationSeconds": .int(durationSeconds),
         "endTime": .timestamp(endTime), "createdAt": .timestamp(createdAt), "clientSessionId": .optional(clientSessionId)]
    }
}

extension SessionTimer: JSONEncodable {
    var json: JSON {
        ["sessionId": .string(sessionId), "state": .string(running ? "running" : "paused"), "startedAt": .timestamp(startedAt),
         "elapsedSeconds": .int(elapsedSeconds)]
    }
}

extension SessionPage: JSONEncodable {
    var json: JSON { ["sessions": .array(sessions.map(\.json)), "nextCursor": .optional(nextCursor)] }
}

extension SessionStats: JSONEncodable {
    var json: JSON {
        var o = JSONObject([("totalSessions", .int(Int64(totalSessions))), ("totalSeconds", .int(totalSeconds)),
                            ("currentStreakDays", .int(Int64(currentStreakDays))), ("longestStreakDays", .int(Int64(longestStreakDays))),
                            ("last7DaysSeconds", .int(last7DaysSeconds)), ("last30DaysSeconds", .int(last30DaysSeconds))])
        if let days {
            o["days"] = .array(days.map { ["date": .string($0.date.description), "sessions": .int(Int64($0.sessions)), "seconds": .int($0.seconds)] })
        }
        return .object(o)
    }
}

/// Params that name one session by its id.
public struct SessionIDParams: RPCParams {
    public static let declaration = ParamList(required("sessionId", CanonicalUUID.self))
    let sessionId: String
    public init(_ id: CanonicalUUID) { sessionId = id.text }
}

/// An optional client idempotency id.
let clientSessionID = optional("clientSessionId", maxBytes: 200).described("idempotency key: the same id again answers the same session")

/// `sessions.record`.
public struct SessionsRecord: RPCMethod {
    public struct Params: RPCParams {
        let startTime: Timestamp
        let durationSeconds: Int64
        let endTime: Timestamp?
        let clientSessionId: String?
        public static let declaration = ParamList(
            required("startTime", Timestamp.self).notBefore(DateFloor.sessions).described("RFC 3339 with offset; at most 5 minutes in the future"),
            required("durationSeconds", in: 1...SessionRules.maxDuration),
            optional("endTime", Timestamp.self).notBefore(DateFloor.sessions).described("default startTime + durationSeconds; never earlier"),
            clientSessionID)
        public init(_ v: (Timestamp, Int64, Timestamp?, String?)) { (startTime, durationSeconds, endTime, clientSessionId) = v }
    }
    public static let name = "sessions.record"
    public static let summary = "Records a finished session; idempotent by clientSessionId."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.session
    public static let errors = [ErrorDoc(.limited, "quota_exceeded: past limits.sessionsPerUser kept sessions")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in
            try service.record(user, start: p.startTime, duration: p.durationSeconds, end: p.endTime, clientSessionId: p.clientSessionId, now: c.now)
        }
    }
}

/// `sessions.start`.
public struct SessionsStart: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(clientSessionID)
        let clientSessionId: String?
        public init(_ id: String?) { clientSessionId = id }
    }
    public static let name = "sessions.start"
    public static let summary = "Starts the user's server-side timer (one per user)."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.timer
    public static let errors = [ErrorDoc(.conflict, "session_active, idempotency_key_reused"),
                                ErrorDoc(.limited, "quota_exceeded: past limits.sessionsPerUser kept sessions")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.start(user, clientSessionId: p.clientSessionId, now: c.now) }
    }
}

/// `sessions.pause`.
public struct SessionsPause: RPCMethod {
    public static let name = "sessions.pause"
    public static let summary = "Pauses the timer; paused time does not count."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.timer
    public static let errors = [ErrorDoc(.conflict, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.pause(user, now: c.now) }
    }
}

/// `sessions.resume`.
public struct SessionsResume: RPCMethod {
    public static let name = "sessions.resume"
    public static let summary = "Resumes a paused timer."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.timer
    public static let errors = [ErrorDoc(.conflict, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.resume(user, now: c.now) }
    }
}

/// `sessions.stop`.
public struct SessionsStop: RPCMethod {
    public static let name = "sessions.stop"
    public static let summary = "Stops the timer and records the session (elapsed time without pauses)."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.session
    public static let errors = [ErrorDoc(.conflict, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.stop(user, now: c.now) }
    }
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
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.active(user, now: c.now) }
    }
}

/// `sessions.get`.
public struct SessionsGet: RPCMethod {
    public static let name = "sessions.get"
    public static let summary = "One of the user's sessions."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.session
    public static let errors = [ErrorDoc(.notFound, "not_found (also for another user's session)")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: SessionIDParams, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.get(user, sessionId: p.sessionId) }
    }
}

/// `sessions.list`.
public struct SessionsList: RPCMethod {
    public struct Params: RPCParams {
        let from: Timestamp?
        let to: Timestamp?
        let limit: Int
        let cursor: String?
        public static let declaration = ParamList(
            optional("from", DayOrInstant.self).notBefore(DateFloor.sessions).described("RFC 3339 timestamp, or YYYY-MM-DD (from the start of that UTC day)"),
            optional("to", DayOrInstant.self).notBefore(DateFloor.sessions).described("RFC 3339 timestamp (exclusive), or YYYY-MM-DD (to the end of that UTC day)"),
            optional("limit", in: 1...500, default: 50),
            optional("cursor", String.self).described("the nextCursor of the previous page"))
        public init(_ v: (DayOrInstant?, DayOrInstant?, Int64, String?)) throws(FieldError) {
            from = v.0?.instant(endOfDay: false)
            to = v.1?.instant(endOfDay: true)
            (limit, cursor) = (Int(v.2), v.3)
            if let from, let to, to < from { throw .outOfRange("params.to", "must not be before params.from") }
        }
    }
    public static let name = "sessions.list"
    public static let summary = "Sessions newest first, optionally those starting from `from` up to `to` (timestamps, or UTC dates counting the whole day); paged with limit and cursor."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["sessions", "nextCursor"], "properties": {"sessions": {"type": "array", "items": "# + Schemas.session + #"}, "nextCursor": {"type": ["string", "null"]}}}"#
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        var after: SessionsService.Position?
        if let cursor = p.cursor {
            guard let position = service.decodeCursor(cursor, user: user) else {
                throw RPCError.invalidParams("params.cursor", reason: "invalid_params", "params.cursor is not a cursor this kernel issued")
            }
            after = position
        }
        return try answer { () throws(SessionsError) in try service.list(user, from: p.from, to: p.to, limit: p.limit, after: after) }
    }
}

/// `sessions.delete`.
public struct SessionsDelete: RPCMethod {
    public static let name = "sessions.delete"
    public static let summary = "Deletes one of the user's sessions."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["deleted"], "properties": {"deleted": {"const": true}}}"#
    public static let errors = [ErrorDoc(.notFound, "not_found")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: SessionIDParams, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) -> JSON in
            try service.delete(user, sessionId: p.sessionId)
            return ["deleted": true]
        }
    }
}

/// `sessions.stats`.
public struct SessionsStats: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            optional("timezone", Zone.self).described("IANA time zone name for local days; default UTC"),
            optional("from", CalendarDate.self).notBefore(DateFloor.sessions).described("with to: also answer days, the totals of each local day from through to"),
            optional("to", CalendarDate.self).notBefore(DateFloor.sessions).described("inclusive; at most 366 days after from"))
        let zone: Zone
        let days: (CalendarDate, CalendarDate)?
        public init(_ v: (Zone?, CalendarDate?, CalendarDate?)) throws(FieldError) {
            zone = v.0 ?? Zone.utc
            switch (v.1, v.2) {
            case (nil, nil): days = nil
            case (let from?, let to?): days = try dateRange(from, to, maxDays: 366)
            case (nil, _): throw FieldError(field: "params.from", reason: "missing_field", message: "params.from is required with params.to")
            case (_, nil): throw FieldError(field: "params.to", reason: "missing_field", message: "params.to is required with params.from")
            }
        }
    }
    public static let name = "sessions.stats"
    public static let summary = "Totals, streaks of consecutive local days (in timezone, default UTC), last 7 and 30 local days; with from and to, each of those days' totals."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["totalSessions", "totalSeconds", "currentStreakDays", "longestStreakDays", "last7DaysSeconds", "last30DaysSeconds"],
     "properties": {
       "totalSessions": {"type": "integer", "minimum": 0}, "totalSeconds": {"type": "integer", "minimum": 0},
       "currentStreakDays": {"type": "integer", "minimum": 0}, "longestStreakDays": {"type": "integer", "minimum": 0},
       "last7DaysSeconds": {"type": "integer", "minimum": 0}, "last30DaysSeconds": {"type": "integer", "minimum": 0},
       "days": {"type": "array", "description": "with from and to: the local days of that range with sessions, oldest first (by each session's start)",
                "items": {"type": "object", "additionalProperties": false, "required": ["date", "sessions", "seconds"],
                          "properties": {"date": {"type": "string", "format": "date"}, "sessions": {"type": "integer", "minimum": 1},
                                         "seconds": {"type": "integer", "minimum": 0}}}}}}
    """#
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.stats(user, zone: p.zone, days: p.days, now: c.now) }
    }
}
