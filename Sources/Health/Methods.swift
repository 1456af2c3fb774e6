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
        case .tooManyUnknownTypes(let path):
            return .invalidParams(path, reason: "out_of_range",
                                  "\(path) is one more type and unit pair the kernel does not know than a user may keep (\(UnknownTypes.perUser))")
        case .unknownType(let path):
            return .invalidParams(path, reason: "invalid_params",
                                  "\(path) is not a type the kernel summarises, and this deployment refuses others (health.unknownTypes)")
        case .storage(let error): return .from(error)
        }
    }
}

// MARK: Methods

/// Narrows metrics to HealthKit type identifiers.
let typesParam = optional("types", strings: 1...64, maxBytes: 100).described("HealthKit type identifiers; default every type")
let explainParam = optional("explain", Bool.self)
    .described("each cumulative figure also answers its sources: what each counted and what a higher-ranked source overrode (at most 92 days)")

/// `explain` reads every sample of the range: it takes at most `HealthService.explainMaxDays` days.
func checkExplain(_ explain: Bool?, _ from: CalendarDate, _ to: CalendarDate) throws(FieldError) -> Bool {
    guard explain == true else { return false }
    guard to.daysSinceEpoch - from.daysSinceEpoch < HealthService.explainMaxDays else {
        throw .outOfRange("params.to", "must be within \(HealthService.explainMaxDays) days of params.from with explain")
    }
    return true
}

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
            // A new iOS adds a handful of types; a request naming more is a client inventing them.
            var unknown = Set<HealthType>()
            for s in samples where !s.type.isKnown {
                unknown.insert(s.type)
                if unknown.count > UnknownTypes.perRequest {
                    throw .outOfRange(s.item.path + ".type", "is one more type and unit pair the kernel does not know than a request may bring (\(UnknownTypes.perRequest))")
                }
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
    public func apply(_ planned: PlannedIngest, _ prepared: PreparedIngest, _ c: CallContext) throws(RPCError) -> IngestReport {
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
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> DeleteReport {
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
        let explain: Bool
        public static let declaration = ParamList(
            required("from", CalendarDate.self).notBefore(DateFloor.health), required("to", CalendarDate.self).notBefore(DateFloor.health).described("inclusive; at most 366 days after from"), typesParam,
            explainParam)
        public init(_ v: (CalendarDate, CalendarDate, [String]?, Bool?)) throws(FieldError) {
            (from, to) = try dateRange(v.0, v.1, maxDays: 366)
            types = try typeCodes(v.2)
            explain = try checkExplain(v.3, from, to)
        }
    }
    public static let name = "health.summary"
    public static let summary = "Each local day from `from` through `to` that has data: metrics per type, workouts per activity, sleep per stage."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Days {
        let user = try c.userID()
        return try answer { () throws(HealthError) in
            let days = try service.summary(user, from: p.from, to: p.to)
            return Days(periods: p.explain ? try service.explained(user, days, types: p.types) : days, types: p.types,
                        authorizedFrom: try service.authorizedFrom(user))
        }
    }
}

/// `health.weekly`.
public struct HealthWeekly: RPCMethod {
    public struct Params: RPCParams {
        let from: CalendarDate
        let to: CalendarDate
        let types: Set<Int>?
        let explain: Bool
        public static let declaration = ParamList(
            required("from", CalendarDate.self).notBefore(DateFloor.health).described("a day of the first week"),
            required("to", CalendarDate.self).notBefore(DateFloor.health).described("a day of the last week; at most 731 days after from"), typesParam,
            explainParam)
        public init(_ v: (CalendarDate, CalendarDate, [String]?, Bool?)) throws(FieldError) {
            (from, to) = try dateRange(v.0, v.1, maxDays: 731)
            types = try typeCodes(v.2)
            explain = try checkExplain(v.3, from, to)
        }
    }
    public static let name = "health.weekly"
    public static let summary = "ISO 8601 weeks (Monday to Sunday, whole) touching `from` through `to` that have data, aggregated from their days."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Weeks {
        let user = try c.userID()
        return try answer { () throws(HealthError) in
            Weeks(periods: try service.weekly(user, from: p.from, to: p.to, explain: p.explain, types: p.types), types: p.types,
                  authorizedFrom: try service.authorizedFrom(user))
        }
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
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> WorkoutPage {
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
