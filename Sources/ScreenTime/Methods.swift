import Chrono
import DomainSupport
import JSON
import JSONRPC

// MARK: The wire form of what the service answers

extension ScreenTimeError {
    var rpc: RPCError {
        switch self {
        case .futureDate(let today):
            return .invalidParams("params.date", reason: "future_date", "params.date is later than today (\(today)) in the connection's time zone")
        case .connectionDisabled:
            return .forbidden("connection_disabled", "Uploads are refused while the Screen Time connection is disabled: turn it on with screentime.updateConnection {enabled: true}")
        case .noData(let date): return .notFound("No Screen Time data for \(date)")
        case .rawQuota(let limit): return .quotaExceeded("bytes of Screen Time raw", limit: limit)
        case .storage(let error): return .from(error)
        }
    }
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
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> ConnectionRow {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) in try service.connection(user) }
    }
}

/// `screentime.updateConnection`.
public struct ScreenTimeUpdateConnection: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            optional("enabled", Bool.self),
            optional("timezone", Zone.self),
            nullable("selection", JSONObject.self).described("opaque picker tokens, at most 64 KiB").checked { (value, path) throws(FieldError) in
                if case .some(let o?) = value { try checkSize(.object(o), Limits.selectionBytes, path) }
            })
        let enabled: Bool?
        let timezone: Zone?
        /// nil: unchanged; `.null`: cleared.
        let selection: JSON?
        public init(_ v: (Bool?, Zone?, JSONObject??)) {
            (enabled, timezone) = (v.0, v.1)
            selection = v.2.map { $0.map(JSON.object) ?? .null }
        }
    }
    public static let name = "screentime.updateConnection"
    public static let summary = "Changes the connection; only the fields given change."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> ConnectionRow {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) in try service.updateConnection(user, enabled: p.enabled, timezone: p.timezone, selection: p.selection) }
    }
    public static let readsAhead = true
    public func declareReads(_ p: Params, _ c: CallContext) {
        if let user = c.identity?.userId { service.declareConnectionRead(user) }
    }
}

/// `screentime.claim`.
public struct ScreenTimeClaim: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(required("date", CalendarDate.self).notBefore(DateFloor.screenTime), required("minutes", in: 0...1440))
        let date: CalendarDate
        let minutes: Int64
        public init(_ v: (CalendarDate, Int64)) { (date, minutes) = v }
    }
    public static let name = "screentime.claim"
    public static let summary = "Records the minutes the user says they used the phone on a day, and gives the day's verdict."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> DayVerdict {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) in try service.claim(user, date: p.date, minutes: p.minutes, now: c.now) }
    }

    public static let readsAhead = true
    public func declareReads(_ p: Params, _ c: CallContext) {
        if let user = c.identity?.userId { service.declareDayReads(user, p.date) }
    }
}

/// `screentime.upload`.
public struct ScreenTimeUpload: RPCMethod {
    public struct Params: RPCParams {
        let date: CalendarDate
        let verifiedMinutes: Int64
        let raw: BinaryJSON
        public static let declaration = ParamList(
            required("date", CalendarDate.self).notBefore(DateFloor.screenTime),
            required("verifiedMinutes", in: 0...1440),
            optional("raw", JSON.self).described("any JSON up to 256 KiB, stored and returned as sent").checked { (value, path) throws(FieldError) in
                if let value { try checkSize(value, Limits.rawBytes, path) }
            })
        public init(_ v: (CalendarDate, Int64, JSON?)) {
            (date, verifiedMinutes) = (v.0, v.1)
            raw = BinaryJSON(v.2 ?? .null)
        }
    }
    public static let name = "screentime.upload"
    public static let summary = "The iOS companion's verified minutes for a day; upserts the day, recomputes its penalty, sets lastSyncAt."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let errors = [ErrorDoc(.forbidden, "connection_disabled"),
                                ErrorDoc(.limited, "quota_exceeded: past limits.rawBytesPerUser of raw kept")]
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> DayVerdict {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) in try service.upload(user, date: p.date, verifiedMinutes: p.verifiedMinutes, raw: p.raw, now: c.now) }
    }

    public static let readsAhead = true
    public func declareReads(_ p: Params, _ c: CallContext) {
        if let user = c.identity?.userId { service.declareDayReads(user, p.date) }
    }
}

/// `screentime.day`.
public struct ScreenTimeDay: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(required("date", CalendarDate.self).notBefore(DateFloor.screenTime))
        let date: CalendarDate
        public init(_ date: CalendarDate) { self.date = date }
    }
    public static let name = "screentime.day"
    public static let summary = "One day's claim, upload, verdict and raw upload."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let errors = [ErrorDoc(.notFound, "not_found: no data for that day")]
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> DayRecord {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) in try service.day(user, date: p.date) }
    }
}

/// `screentime.history`.
public struct ScreenTimeHistory: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate
        let to: CalendarDate
        let includeRaw: Bool
        public static let declaration = ParamList(
            required("from", CalendarDate.self).notBefore(DateFloor.screenTime),
            required("to", CalendarDate.self).notBefore(DateFloor.screenTime).described("not before from, and at most 366 days from it counting both"),
            optional("includeRaw", Bool.self))
        public init(_ v: (CalendarDate, CalendarDate, Bool?)) throws(FieldError) {
            (from, to, includeRaw) = (v.0, v.1, v.2 ?? false)
            guard from <= to else { throw .outOfRange("params.to", "must not be before params.from") }
            guard to.daysSinceEpoch - from.daysSinceEpoch < 366 else {
                throw .outOfRange("params.to", "must be at most 366 days after params.from, counting both")
            }
        }
    }
    public static let name = "screentime.history"
    public static let summary = "Day records from `from` to `to` (at most 366 days), oldest first, only days with data."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> DayList {
        let user = try c.userID()
        let days: [DayRecord]
        do { days = try service.history(user, from: p.from, to: p.to) } catch { throw error.rpc }
        if p.includeRaw {
            // A year of 256 KiB `raw` is about 96 MB: past the answer limit, ask for a narrower range.
            let bytes = days.reduce(0) { $0 + $1.day.raw.bytes.count + 256 }
            if bytes > service.maxAnswerBytes - AnswerSize.margin {
                throw RPCError.invalidParams("params.to", reason: "answer_too_large",
                                             "params.to: the days from params.from to params.to with includeRaw would answer more than \(service.maxAnswerBytes) bytes; ask for fewer days")
            }
        }
        return DayList(days: days, includeRaw: p.includeRaw)
    }
}

/// `screentime.penalties`.
public struct ScreenTimePenalties: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate?
        let to: CalendarDate?
        public static let declaration = ParamList(optional("from", CalendarDate.self).notBefore(DateFloor.screenTime), optional("to", CalendarDate.self).notBefore(DateFloor.screenTime))
        public init(_ v: (CalendarDate?, CalendarDate?)) throws(FieldError) {
            (from, to) = v
            if let from, let to, to < from { throw .outOfRange("params.to", "must not be before params.from") }
        }
    }
    public static let name = "screentime.penalties"
    public static let summary = "Penalty entries (one per day at most) and their total, oldest first."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> PenaltyList {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) in PenaltyList(entries: try service.penalties(user, from: p.from, to: p.to)) }
    }
}

/// `screentime.logEvent`.
public struct ScreenTimeLogEvent: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            required("type", oneOf: ["eventDidReachThreshold", "eventWillReachThresholdWarning", "intervalDidEnd", "intervalDidStart"]),
            required("activity", maxBytes: Limits.textBytes),
            optional("event", maxBytes: Limits.textBytes),
            required("at", Timestamp.self).notBefore(DateFloor.screenTime))
        let type: String
        let activity: String
        let event: String?
        let at: Timestamp
        public init(_ v: (String, String, String?, Timestamp)) { (type, activity, event, at) = v }
    }
    public static let name = "screentime.logEvent"
    public static let summary = "Records a DeviceActivity monitor event; the newest 1000 per user are kept."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Logged {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) -> Logged in
            try service.logEvent(user, type: p.type, activity: p.activity, event: p.event, at: p.at, now: c.now)
            return Logged()
        }
    }
}

/// `screentime.events`.
public struct ScreenTimeEvents: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(optional("limit", in: 1...ScreenTimeService.eventsKept, default: 50))
        let limit: Int
        public init(_ limit: Int64) { self.limit = Int(limit) }
    }
    public static let name = "screentime.events"
    public static let summary = "Monitor events, newest first (limit 1 to 1000, default 50)."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: ScreenTimeService
    public init(_ service: ScreenTimeService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> EventList {
        let user = try c.userID()
        return try answer { () throws(ScreenTimeError) in EventList(events: try service.events(user, limit: p.limit)) }
    }
}
