import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

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
func answer<T>(_ body: () throws(SessionsError) -> T) throws(RPCError) -> T {
    do { return try body() } catch { throw error.rpc }
}

extension Session: RPCResult {
    static let fields = ResultFields<Session>(
        ResultField("sessionId", Schema.uuid) { .string($0.id) },
        ResultField("startTime", Schema.timestamp) { .timestamp($0.startTime) },
        ResultField("durationSeconds", Schema.integer(1...86_400)) { .int($0.durationSeconds) },
        ResultField("endTime", Schema.timestamp) { .timestamp($0.endTime) },
        ResultField("createdAt", Schema.timestamp) { .timestamp($0.createdAt) },
        ResultField("clientSessionId", Schema.nullable(Schema.string)) { .optional($0.clientSessionId) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension SessionTimer: RPCResult {
    static let fields = ResultFields<SessionTimer>(
        ResultField("sessionId", Schema.uuid) { .string($0.sessionId) },
        ResultField("state", Schema.oneOf(["running", "paused"])) { .string($0.running ? "running" : "paused") },
        ResultField("startedAt", Schema.timestamp) { .timestamp($0.startedAt) },
        ResultField("elapsedSeconds", Schema.count) { .int($0.elapsedSeconds) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension SessionPage: RPCResult {
    static let fields = ResultFields<SessionPage>(
        ResultField("sessions", Schema.array(Session.schema)) { .array($0.sessions.map(\.json)) },
        ResultField("nextCursor", Schema.nullable(Schema.string)) { .optional($0.nextCursor) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension SessionStats.Day: RPCResult {
    static let fields = ResultFields<SessionStats.Day>(
        ResultField("date", Schema.date) { .string($0.date.description) },
        ResultField("sessions", Schema.integer(from: 1)) { .int(Int64($0.sessions)) },
        ResultField("seconds", Schema.count) { .int($0.seconds) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension SessionStats: RPCResult {
    static let fields = ResultFields<SessionStats>(
        ResultField("totalSessions", Schema.count) { .int(Int64($0.totalSessions)) },
        ResultField("totalSeconds", Schema.count) { .int($0.totalSeconds) },
        ResultField("currentStreakDays", Schema.count) { .int(Int64($0.currentStreakDays)) },
        ResultField("longestStreakDays", Schema.count) { .int(Int64($0.longestStreakDays)) },
        ResultField("last7DaysSeconds", Schema.count) { .int($0.last7DaysSeconds) },
        ResultField("last30DaysSeconds", Schema.count) { .int($0.last30DaysSeconds) },
        .optional("days", Schema.described(Schema.array(SessionStats.Day.schema),
                                           "with from and to: the local days of that range with sessions, oldest first (by each session's start)")) {
            $0.days.map { .array($0.map(\.json)) }
        })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `sessions.delete`'s answer.
public struct Deleted: RPCResult {
    static let fields = ResultFields<Deleted>(ResultField("deleted", Schema.constant(true)) { _ in true })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
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
    public static let errors = [ErrorDoc(.limited, "quota_exceeded: past limits.sessionsPerUser kept sessions")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Session {
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
    public static let errors = [ErrorDoc(.conflict, "session_active, idempotency_key_reused"),
                                ErrorDoc(.limited, "quota_exceeded: past limits.sessionsPerUser kept sessions")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> SessionTimer {
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
    public static let errors = [ErrorDoc(.conflict, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> SessionTimer {
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
    public static let errors = [ErrorDoc(.conflict, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> SessionTimer {
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
    public static let errors = [ErrorDoc(.conflict, "no_active_session")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> Session {
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
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> SessionTimer? {
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
    public static let errors = [ErrorDoc(.notFound, "not_found (also for another user's session)")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: SessionIDParams, _ c: CallContext) throws(RPCError) -> Session {
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
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> SessionPage {
        let user = try c.userID()
        let after = try position(p, user)
        return try answer { () throws(SessionsError) in try service.list(user, from: p.from, to: p.to, limit: p.limit, after: after) }
    }

    public static let readsAhead = true
    public func declareReads(_ p: Params, _ c: CallContext) {
        guard let user = c.identity?.userId else { return }
        // A cursor that is not ours names nothing: the call answers -32602.
        let after: SessionsService.Position?
        do { after = try position(p, user) } catch { return }
        service.declareList(user, from: p.from, to: p.to, limit: p.limit, after: after)
    }

    /// Where the page starts: after the cursor's session, if any.
    private func position(_ p: Params, _ user: String) throws(RPCError) -> SessionsService.Position? {
        guard let cursor = p.cursor else { return nil }
        guard let position = service.decodeCursor(cursor, user: user) else {
            throw RPCError.invalidParams("params.cursor", reason: "invalid_params", "params.cursor is not a cursor this kernel issued")
        }
        return position
    }
}

/// `sessions.delete`.
public struct SessionsDelete: RPCMethod {
    public static let name = "sessions.delete"
    public static let summary = "Deletes one of the user's sessions."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let errors = [ErrorDoc(.notFound, "not_found")]
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: SessionIDParams, _ c: CallContext) throws(RPCError) -> Deleted {
        let user = try c.userID()
        return try answer { () throws(SessionsError) -> Deleted in
            try service.delete(user, sessionId: p.sessionId)
            return Deleted()
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
    let service: SessionsService
    public init(_ service: SessionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> SessionStats {
        let user = try c.userID()
        return try answer { () throws(SessionsError) in try service.stats(user, zone: p.zone, days: p.days, now: c.now) }
    }
}
