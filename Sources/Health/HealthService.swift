import Chrono
import DomainSupport
import JSON
import Logging
import Storage
#if SIMULATION
import Mutants
#endif

/// Why a health call was refused.
public enum HealthError: Error, Equatable {
    /// An item ends further in the future than a device clock can be off; the path names it.
    case future(String)
    /// Storing the request would take the user past this many items.
    case quota(Int64)
    /// The user's HealthKit rows changed while an ingest was planned against a view of them: nothing
    /// was stored, and the ingest is planned again from the start on a worker.
    case stale
    /// A sample of a type the kernel's table lacks, while `health.unknownTypes` is `refuse`; the path
    /// names its `type`.
    case unknownType(String)
    /// A sample would take the user past `UnknownTypes.perUser` distinct unknown type and unit pairs;
    /// the path names its `type`.
    case tooManyUnknownTypes(String)
    /// An item starts further back than the deployment keeps (`health.maxHistoryDays`); the path names
    /// its `start`.
    case tooOld(String, days: Int64)
    case storage(StorageError)
}

/// The second-order range of one type's items (nil: workouts' or sleep's) on days `from` through `to`.
func dayRange(_ type: HealthType?, _ from: CalendarDate, _ to: CalendarDate) -> OrderRange {
    let r = HealthRules.dayRange(type, from: from, to: to)
    return OrderRange(from: r.from, to: r.to)
}

/// Storage reads and commits, their failures answered as this domain's.
func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(HealthError) -> T {
    do { return try body() } catch { throw .storage(error) }
}

/// What `health.ingest` is asked to do, once its params are read.
public struct IngestRequest: Sendable {
    public var deviceId: String?
    public var zone: Zone?
    public var samples: [SampleInput] = []
    public var workouts: [WorkoutInput] = []
    public var sleep: [SleepInput] = []
    /// State of Mind samples and medication dose events.
    public var records: [RecordInput] = []
    public var replaceDays: [CalendarDate] = []
    public var dryRun = false
    /// Per type identifier, the first day the person lets the app read (kept in the profile).
    public var authorizedFrom: [String: CalendarDate] = [:]
    /// A new source order for one type (`health.setSourceOrder`; an empty list removes it): every day
    /// with that type's data is recomputed.
    public var sourceOrder: (type: String, sources: [SourceMatcher])?

    public init(deviceId: String? = nil, zone: Zone? = nil, samples: [SampleInput] = [], workouts: [WorkoutInput] = [],
                sleep: [SleepInput] = [], records: [RecordInput] = [], replaceDays: [CalendarDate] = [], dryRun: Bool = false,
                authorizedFrom: [String: CalendarDate] = [:]) {
        self.authorizedFrom = authorizedFrom
        self.records = records
        self.deviceId = deviceId
        self.zone = zone
        self.samples = samples
        self.workouts = workouts
        self.sleep = sleep
        self.replaceDays = replaceDays
        self.dryRun = dryRun
    }

    var count: Int { samples.count + workouts.count + sleep.count + records.count }

    /// A request that only sets a type's source order.
    public static func sourceOrder(_ type: String, _ sources: [SourceMatcher]) -> IngestRequest {
        var r = IngestRequest()
        r.sourceOrder = (type, sources)
        return r
    }

    /// Every item sent, of every kind.
    var items: [ItemInput] { samples.map(\.item) + workouts.map(\.item) + sleep.map(\.item) + records.map(\.item) }
}

/// What an ingest did (or, dry, would do).
public struct IngestReport: Sendable, Equatable {
    public var samples = 0
    public var workouts = 0
    public var sleep = 0
    /// State of Mind samples and medication dose events, by kind.
    public var records: [RecordKind: Int] = [:]
    public var unchanged = 0
    /// Items left out because the user has a newer version of their synced object (`HKSyncVersion`).
    public var superseded = 0
    /// Items `replaceDays` removed.
    public var replaced = 0
    public var daysRecomputed: [String] = []
    public var dryRun = false
    /// Samples of types the kernel's table lacks, kept but not summarised, by type identifier.
    public var unsummarized: [String: Int] = [:]
    /// Samples of such types left out (`health.unknownTypes` is `skip`), by type identifier.
    public var skipped: [String: Int] = [:]
}

/// What makes two samples of one type the same measurement: source name (else bundle id), interval, value.
enum SampleIdentity {
    struct Measure: Hashable {
        let start: Int64
        let end: Int64
        let value: UInt64

        init(_ row: SampleRow) { (start, end, value) = (row.placement.start, row.placement.end, row.value.bitPattern) }
    }

    static func source(_ row: SampleRow) -> String { row.placement.origin.sourceName ?? row.placement.origin.bundleId ?? "" }
}

/// What a deletion did.
public struct DeleteReport: Sendable, Equatable {
    public var deleted = 0
    public var unknown = 0
    public var daysRecomputed: [String] = []
}

/// A day's summary with its date, or a week's with its ISO week.
public struct Period: Sendable, Equatable {
    public var name: String
    public var summary: SummaryRow
    /// Days with data in it.
    public var days: Int
    /// With `explain`: per cumulative type code, what each source did to its figure, highest rank first.
    public var sources: [Int: [SourceShare]] = [:]
}

/// What one source did to a day's (or week's) figure of a cumulative type: the value it counted, and
/// the value it had where a higher-ranked source's counted instead. The counted values of a figure's
/// sources add up to the figure.
public struct SourceShare: Sendable, Equatable {
    public var source: SourceRef
    public var counted: Double
    public var overridden: Double
}

/// One stored workout, with its UUID.
public struct Workout: Sendable, Equatable {
    public var uuid: String
    public var row: WorkoutRow
}

/// A page of workouts.
public struct WorkoutPage: Sendable {
    public var workouts: [Workout]
    public var nextCursor: String?
}

/// HealthKit samples, workouts, sleep, State of Mind and medication dose events, by UUID, with per-day
/// summaries kept up to date as they change. Its methods run on the serving thread, except `plan`, which
/// a worker runs for a `PreparedIngest` against read-only views of one user's rows (never the live tables).
public final class HealthService: @unchecked Sendable {
    static let profileKey = "profile"
    let store: any Storage
    let tables: HealthTables
    private let cursors: CursorSeal
    private let logger = Logger(label: "healthkernel.health")

    /// Most items one user may keep; 0: no limit.
    let healthItemsPerUser: Int64
    /// What happens to samples of types the kernel's table lacks.
    let unknownTypes: UnknownTypePolicy
    /// How many days back from the clock an item may start; 0: no bound (`health.maxHistoryDays`).
    let maxHistoryDays: Int64
    /// Times a big ingest's planning for the log.
    let clock: Clock

    public init(store: any Storage, tables: HealthTables, cursorSecrets: [[UInt8]], healthItemsPerUser: Int64 = UserLimits().healthItemsPerUser, unknownTypes: UnknownTypePolicy = .keep,
                maxHistoryDays: Int64 = 0, clock: Clock = SystemClock()) {
        self.clock = clock
        self.healthItemsPerUser = healthItemsPerUser
        self.unknownTypes = unknownTypes
        self.maxHistoryDays = maxHistoryDays
        self.store = store
        self.tables = tables
        cursors = CursorSeal(purpose: "health.workouts", secrets: cursorSecrets)
    }

    private func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(HealthError) -> T { try Health.storage(try body()) }

    // MARK: Reads

    public func sample(_ user: String, _ uuid: String) throws(HealthError) -> SampleRow? { try storage(try tables.samples.get(user: user, key: uuid)) }
    public func workout(_ user: String, _ uuid: String) throws(HealthError) -> WorkoutRow? { try storage(try tables.workouts.get(user: user, key: uuid)) }
    public func sleep(_ user: String, _ uuid: String) throws(HealthError) -> SleepRow? { try storage(try tables.sleep.get(user: user, key: uuid)) }
    public func record(_ kind: RecordKind, _ user: String, _ uuid: String) throws(HealthError) -> RecordRow? {
        try storage(try tables.records(kind).get(user: user, key: uuid))
    }
    public func day(_ user: String, _ date: String) throws(HealthError) -> SummaryRow? { try storage(try tables.days.get(user: user, key: date)) }

    /// The zone ingests use when they name none: the one last sent, else UTC.
    public func zone(_ user: String) throws(HealthError) -> Zone {
        try storage(try tables.profile.get(user: user, key: Self.profileKey)).flatMap { Zone.named($0.timezone) } ?? .utc
    }

    /// Days from `from` through `to` that have data.
    /// Per type identifier, the first day the person lets the app read, as the app last said.
    public func authorizedFrom(_ user: String) throws(HealthError) -> [String: String] {
        try storage(try tables.profile.get(user: user, key: Self.profileKey))?.authorizedFrom ?? [:]
    }

    public func summary(_ user: String, from: CalendarDate, to: CalendarDate) throws(HealthError) -> [Period] {
        try storage(try tables.days.scan(user: user, from: from.description, to: to.description, after: nil, reverse: false, limit: .max))
            .map { Period(name: $0.key, summary: $0.row, days: 1) }
    }

    /// The person's source orders of `types` (nil: every type with one), by type.
    public func sourceOrders(_ user: String, types: [String]?) throws(HealthError) -> [(type: String, row: SourceOrderRow)] {
        if let types {
            let found = try storage(try tables.sourceOrder.get(user: user, keys: types))
            return types.compactMap { t in found[t].map { (t, $0) } }
        }
        return try storage(try tables.sourceOrder.rows(of: user)).map { ($0.key, $0.row) }.sorted { $0.0 < $1.0 }
    }

    /// The longest range `explain` reads: it reads every sample of the range's cumulative types.
    public static let explainMaxDays = 92

    /// `periods` (days, from `summary`) with what each source did to each cumulative figure of the
    /// types asked for: recomputed from the stored samples by the rules that made the figures. Cost:
    /// O(samples of those types in the range, log of them), one ordered read a type.
    public func explained(_ user: String, _ periods: [Period], types: Set<Int>?) throws(HealthError) -> [Period] {
        var out = periods
        var byType: [Int: Set<CalendarDate>] = [:]
        var index: [CalendarDate: Int] = [:]
        for (i, p) in periods.enumerated() {
            guard let day = CalendarDate(p.name) else { continue }
            index[day] = i
            for (code, metric) in p.summary.metrics where types?.contains(code) ?? true {
                if case .sum = metric, HealthType(code: code).aggregation == .cumulative { byType[code, default: []].insert(day) }
            }
        }
        var work = Work(tables: tables, writes: tables, user: user)
        for (code, days) in byType.sorted(by: { $0.key < $1.key }) {
            let type = HealthType(code: code)
            for (d, list) in try work.rankedShares(type, try work.samples(type, days: days, pending: []), days: days) {
                guard let i = index[d], case .sum(let total)? = periods[i].summary.metrics[code], !list.isEmpty else { continue }
                let refs = Dictionary(list.map { ($0.1.rank, $0.0) }, uniquingKeysWith: { a, _ in a })
                out[i].sources[code] = HealthRules.mergedShares(list.map(\.1), total: total).sorted { $0.key < $1.key }.compactMap { rank, part in
                    refs[rank].map { SourceShare(source: $0, counted: part.counted, overridden: part.overridden) }
                }
            }
        }
        return out
    }

    /// ISO weeks touching `from` through `to`, each whole (Monday to Sunday), that have data.
    public func weekly(_ user: String, from: CalendarDate, to: CalendarDate, explain: Bool = false, types: Set<Int>? = nil) throws(HealthError) -> [Period] {
        let monday = from.adding(days: 1 - from.isoWeekday)
        let sunday = to.adding(days: 7 - to.isoWeekday)
        var weeks: [(String, [Period])] = []
        var days = try summary(user, from: monday, to: sunday)
        if explain { days = try explained(user, days, types: types) }
        for period in days {
            guard let week = CalendarDate(period.name)?.isoWeek else { throw .storage(.corrupt("health.days key \(JSON.string(period.name).serialized) is not a date")) }
            if weeks.last?.0 == week { weeks[weeks.count - 1].1.append(period) } else { weeks.append((week, [period])) }
        }
        return weeks.map { week, days in
            Period(name: week, summary: HealthRules.combine(days.map(\.summary)), days: days.count, sources: SourceShare.combined(days.map(\.sources)))
        }
    }

    /// Workouts whose local start day is from `from` through `to`, newest first.
    public func workouts(_ user: String, from: CalendarDate, to: CalendarDate, limit: Int, after: String?) throws(HealthError) -> WorkoutPage {
        let range = dayRange(nil, from, to)
        let rows = try storage(try tables.workouts.scanOrdered(user: user, from: range.from, to: range.to,
                                                               after: after, reverse: true, limit: limit + 1))
        let page = rows.prefix(limit).map { Workout(uuid: $0.key, row: $0.row) }
        let next = rows.count > limit ? page.last.map { cursors.seal(HealthRules.itemOrder(day: $0.row.placement.calendarDay, start: $0.row.placement.start, uuid: $0.uuid), user: user) } : nil
        return WorkoutPage(workouts: page, nextCursor: next)
    }

    /// The position a cursor of `user` names, or nil when it is not one this kernel gave that user.
    public func openCursor(_ cursor: String, user: String) -> String? {
        cursors.open(cursor, user: user).flatMap { HealthRules.isItemOrder($0) ? $0 : nil }
    }

    // MARK: Writes

    public func ingest(_ user: String, _ request: IngestRequest, now: Timestamp) throws(HealthError) -> IngestReport {
        let planned = try plan(user, request, now: now, tables: tables)
        if !request.dryRun { try storage(try store.commit(planned.tx)) }
        return planned.report
    }

    /// Starts an ingest whose placing and recomputing run on a worker thread (`PreparedIngest.plan`),
    /// against a view of the user's rows as they are now: a month of samples never holds up the
    /// requests of other users. O(1) here.
    public func beginIngest(_ user: String, now: Timestamp) throws(HealthError) -> PreparedIngest {
        PreparedIngest(service: self, user: user, now: now, views: Views(tables.views(of: user, in: store)),
                       versions: try storage(try store.viewedVersions(of: user, in: tables.all)), attached: store.attachedToUnit)
    }

    /// Commits a planned ingest, on the serving thread. When the user's HealthKit rows changed after the
    /// view was made (a health write of theirs on another connection), the plan read stale rows: it is
    /// refused as `.stale`, and the dispatcher plans it again on a worker (a few times at most), so that a
    /// month's re-plan never runs on the thread every other user waits for. Writes to the user's other
    /// tables (a reward, a Screen Time day) leave the plan current.
    public func finishIngest(_ prepared: PreparedIngest, _ planned: PlannedIngest) throws(HealthError) -> IngestReport {
        // Let go of the views first: while they hold the user's partitions, the commit would copy every
        // chunk it touches (copy on write), which for random UUIDs is all of them.
        prepared.views.tables = nil
        var current = try storage(try store.versions(of: prepared.user, in: tables.all))
        #if SIMULATION
        if Mutant.stalePlan.isOn { current = prepared.versions }
        #endif
        guard current == prepared.versions else {
            logger.info("health.ingest: the user's HealthKit rows changed while it was planned; planning it again on a worker")
            throw .stale
        }
        let plan = try planned.result.get()
        if !planned.request.dryRun { try storage(try store.commit(plan.tx)) }
        return plan.report
    }

    /// What an ingest would do to the rows `tables` reads: its report and its unit of work.
    func plan(_ user: String, _ request: IngestRequest, now: Timestamp, tables: HealthTables) throws(HealthError) -> (report: IngestReport, tx: Transaction) {
        let began = clock.monotonicMicros()
        let large = request.count > HealthRules.largeIngest
        if large { logger.info("health.ingest: \(request.count) items, placing them") }
        let latest = now.milliseconds + HealthRules.futureAllowanceMs
        // The oldest start kept; with no bound, before anything.
        let earliest = maxHistoryDays > 0 ? now.milliseconds - maxHistoryDays * 86_400_000 : .min
        let items = request.items
        for item in items {
            if item.end.milliseconds > latest { throw .future(item.path + ".end") }
            if item.start.milliseconds < earliest { throw .tooOld(item.path + ".start", days: maxHistoryDays) }
        }
        var work = Work(tables: tables, writes: self.tables, user: user)
        work.now = now.milliseconds
        let zone: Zone
        if let named = request.zone { zone = named } else { zone = try work.profile().flatMap { Zone.named($0.timezone) } ?? .utc }
        var report = IngestReport(dryRun: request.dryRun)
        try work.prefetch(items.map(\.uuid))
        try work.loadSyncIds(items.compactMap { $0.metadata?.syncKey($0.origin) })

        if let (type, sources) = request.sourceOrder { try work.setSourceOrder(type, sources) }
        try work.migrateRanking()
        if let device = request.deviceId, !request.replaceDays.isEmpty {
            let incoming = Set(items.map(\.uuid))
            report.replaced = try work.removeDevice(device, days: request.replaceDays, keeping: incoming)
        }
        for s in request.samples {
            if !s.type.isKnown {
                switch unknownTypes {
                case .refuse: throw .unknownType(s.item.path + ".type")
                case .skip:
                    report.skipped[s.type.identifier, default: 0] += 1
                    continue
                case .keep:
                    report.unsummarized[s.type.identifier, default: 0] += 1
                    let key = ProfileRow.unknownTypeKey(s.type)
                    if work.unknownKeys.insert(key).inserted { work.unknownTypes.append((key, s.item.path + ".type")) }
                }
            }
            guard try work.admit(s.item) else { report.superseded += 1; continue }
            let existing = try work.current(s.item.uuid)
            let row = SampleRow(type: s.type, value: s.value, placement: work.placement(s.item, existing, zone, request.deviceId))
            if existing == .sample(row, sameContent: true) { report.unchanged += 1; continue }
            try work.put(s.item.uuid, .sample(row, sameContent: false), replacing: existing)
            if s.type.aggregation.spreads { try work.noteSource(s.type.identifier, row.placement) }
            report.samples += 1
        }
        for w in request.workouts {
            guard try work.admit(w.item) else { report.superseded += 1; continue }
            let existing = try work.current(w.item.uuid)
            let row = WorkoutRow(activityType: w.activityType, durationSeconds: w.durationSeconds, energyKcal: w.energyKcal,
                                 distanceMeters: w.distanceMeters, placement: work.placement(w.item, existing, zone, request.deviceId))
            if existing == .workout(row, sameContent: true) { report.unchanged += 1; continue }
            try work.put(w.item.uuid, .workout(row, sameContent: false), replacing: existing)
            report.workouts += 1
        }
        for s in request.sleep {
            guard try work.admit(s.item) else { report.superseded += 1; continue }
            let existing = try work.current(s.item.uuid)
            var placement = work.placement(s.item, existing, zone, request.deviceId)
            placement.calendarDay = HealthRules.sleepDay(end: s.item.end.milliseconds, in: Zone.named(placement.zone) ?? zone)
            let row = SleepRow(stage: s.stage, placement: placement)
            if existing == .sleep(row, sameContent: true) { report.unchanged += 1; continue }
            try work.put(s.item.uuid, .sleep(row, sameContent: false), replacing: existing)
            try work.noteSource(HealthRules.sleepType, row.placement)
            report.sleep += 1
        }
        for r in request.records {
            guard try work.admit(r.item) else { report.superseded += 1; continue }
            let existing = try work.current(r.item.uuid)
            let row = RecordRow(kind: r.kind, content: r.content, placement: work.placement(r.item, existing, zone, request.deviceId))
            if existing == .record(row, sameContent: true) { report.unchanged += 1; continue }
            try work.put(r.item.uuid, .record(row, sameContent: false), replacing: existing)
            report.records[r.kind, default: 0] += 1
        }
        if large { logger.info("health.ingest: placed \(request.count) items in \((clock.monotonicMicros() - began) / 1000) ms, recomputing days") }
        report.daysRecomputed = try work.recompute()
        work.putSyncIds()
        work.putSourcesSeen()
        try saveProfile(&work, zone: request.zone, authorizedFrom: request.authorizedFrom)
        if large {
            logger.info("health.ingest: \(request.count) items (\(report.unchanged) unchanged), \(report.daysRecomputed.count) days recomputed, planned in \((clock.monotonicMicros() - began) / 1000) ms")
        }
        return (report, work.tx)
    }

    public func delete(_ user: String, uuids: [String]) throws(HealthError) -> DeleteReport {
        var work = Work(tables: tables, writes: tables, user: user)
        var report = DeleteReport()
        let uuids = Set(uuids).sorted()
        try work.prefetch(uuids)
        for uuid in uuids {
            if try work.current(uuid) == nil { report.unknown += 1; continue }
            try work.remove(uuid)
            report.deleted += 1
        }
        report.daysRecomputed = try work.recompute()
        work.putSyncIds()
        if work.itemDelta != 0 { try saveProfile(&work, zone: nil, authorizedFrom: [:]) }
        if !work.tx.isEmpty { try storage(try store.commit(work.tx)) }
        return report
    }

    /// Puts the user's profile into the unit of work when it changes: the zone last sent, and the item
    /// count after `work`, refused (nothing is stored) when it grows past the quota.
    private func saveProfile(_ work: inout Work, zone: Zone?, authorizedFrom: [String: CalendarDate]) throws(HealthError) {
        let (user, tables) = (work.user, work.tables)
        let old = try work.profile()
        guard let after = try Quota.after(stored: old?.items, adding: work.itemDelta, limit: healthItemsPerUser,
                                          recount: { () throws(HealthError) in try countItems(user, tables) }) else { throw .quota(healthItemsPerUser) }
        var row = ProfileRow(timezone: zone?.identifier ?? old?.timezone ?? Zone.utc.identifier, items: after)
        row.ranking = old == nil || work.migratedRanking ? ProfileRow.currentRanking : old?.ranking ?? 1
        row.authorizedFrom = (old?.authorizedFrom ?? [:]).merging(authorizedFrom.mapValues(\.description)) { $1 }
        row.unknownTypes = old?.unknownTypes ?? []
        for (key, path) in work.unknownTypes where !row.unknownTypes.contains(key) {
            guard row.unknownTypes.count < UnknownTypes.perUser else { throw .tooManyUnknownTypes(path) }
            row.unknownTypes.insert(key)
        }
        if row != old { work.tx.put(work.writes.profile, user: user, key: Self.profileKey, row) }
    }

    /// The user's items, counted: once per user whose profile predates the count (O(items)).
    private func countItems(_ user: String, _ tables: HealthTables) throws(HealthError) -> Int64 {
        let samples = try storage(try tables.samples.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)).count
        let workouts = try storage(try tables.workouts.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)).count
        let sleep = try storage(try tables.sleep.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)).count
        var records = 0
        for table in tables.recordTables {
            records += try storage(try table.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)).count
        }
        return Int64(samples + workouts + sleep + records)
    }

    // MARK: The unit of work

    /// An item as it stands: stored, or as this request leaves it.
    enum Item: Equatable {
        case sample(SampleRow, sameContent: Bool)
        case workout(WorkoutRow, sameContent: Bool)
        case sleep(SleepRow, sameContent: Bool)
        case record(RecordRow, sameContent: Bool)

        var placement: Placement {
            switch self {
            case .sample(let r, _): return r.placement
            case .workout(let r, _): return r.placement
            case .sleep(let r, _): return r.placement
            case .record(let r, _): return r.placement
            }
        }

        /// Equal when the same kind with the same content, if either side asks for content only.
        static func == (a: Item, b: Item) -> Bool {
            switch (a, b) {
            case (.sample(let x, let c1), .sample(let y, let c2)): return c1 || c2 ? x.sameContent(y) : x == y
            case (.workout(let x, let c1), .workout(let y, let c2)): return c1 || c2 ? x.sameContent(y) : x == y
            case (.sleep(let x, let c1), .sleep(let y, let c2)): return c1 || c2 ? x.sameContent(y) : x == y
            case (.record(let x, let c1), .record(let y, let c2)): return c1 || c2 ? x.sameContent(y) : x == y
            default: return false
            }
        }
    }

    /// What a day's summary is recomputed for.
    enum Part: Hashable {
        case metric(Int)
        case workouts
        case sleep
    }

    /// One request's changes: items put and removed (by UUID), the day parts they touch, and the
    /// transaction that carries them with the recomputed days.
    struct Work {
        /// What the work reads: the live tables, or views of the user's rows.
        let tables: HealthTables
        /// What its transaction writes: the live tables (so it never holds on to a view).
        let writes: HealthTables
        let user: String
        var tx = Transaction()
        /// UUID -> the item as this request leaves it (nil: removed).
        var pending: [String: Item?] = [:]
        /// UUID -> the item stored before this request (nil: none), for the UUIDs read in bulk.
        var stored: [String: Item?] = [:]
        var touched: [Part: Set<CalendarDate>] = [:]
        var dayStarts: [String: Int64] = [:]
        /// Items this request adds, less those it removes.
        var itemDelta: Int64 = 0
        /// The unknown type and unit pairs this request keeps (`ProfileRow.unknownTypeKey`), with the path
        /// of the sample that brought each: at most `UnknownTypes.perRequest` distinct.
        var unknownTypes: [(key: String, path: String)] = []
        /// The keys of `unknownTypes`, so a month of one unknown type adds one entry, not one a sample.
        var unknownKeys = Set<String>()
        /// Sync key -> the newest version of that synced object as this request leaves it (nil: none),
        /// for the keys read; `syncChanged` are the keys to write.
        var syncIds: [String: SyncIdRow?] = [:]
        var syncChanged = Set<String>()
        /// Per type identifier, how its sources rank for this user, once read; `seenChanged`: the types
        /// whose first-seen times this request added to.
        var rankings: [String: SourceRanking] = [:]
        var rankingsLoaded = false
        /// The source `noteSource` saw last.
        var lastNoted: (type: String, provenance: Provenance, manual: Bool)?
        var seenChanged = Set<String>()
        /// The request's clock (first-seen times).
        var now: Int64 = 0
        /// The user's profile as stored before this request, once read (`profile()`).
        var storedProfile: ProfileRow??
        /// This request recomputed the user's days under today's source order (`migrateRanking`).
        var migratedRanking = false
        /// `recordTablesInUse()`, once asked.
        var recordTablesWithRows: [any StorageTable<RecordRow>]?

        init(tables: HealthTables, writes: HealthTables, user: String) {
            self.tables = tables
            self.writes = writes
            self.user = user
        }

        func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(HealthError) -> T { try Health.storage(try body()) }

        /// Reads the stored items of `uuids`, of every kind, in one call per table.
        mutating func prefetch(_ uuids: [String]) throws(HealthError) {
            guard !uuids.isEmpty else { return }
            stored.reserveCapacity(uuids.count)
            for uuid in uuids { stored[uuid] = .some(nil) }
            for (uuid, r) in try storage(try tables.samples.get(user: user, keys: uuids)) { stored[uuid] = .sample(r, sameContent: false) }
            for (uuid, r) in try storage(try tables.workouts.get(user: user, keys: uuids)) { stored[uuid] = .workout(r, sameContent: false) }
            for (uuid, r) in try storage(try tables.sleep.get(user: user, keys: uuids)) { stored[uuid] = .sleep(r, sameContent: false) }
            for table in try recordTablesInUse() {
                for (uuid, r) in try storage(try table.get(user: user, keys: uuids)) { stored[uuid] = .record(r, sameContent: false) }
            }
        }

        /// The record tables where the user keeps rows, found once per unit of work: most users send no
        /// State of Mind or dose events, and a month's sync should not look up 44,640 keys in tables
        /// that hold none of theirs (one query each on PostgreSQL). One single-row read per table.
        mutating func recordTablesInUse() throws(HealthError) -> [any StorageTable<RecordRow>] {
            if let known = recordTablesWithRows { return known }
            var inUse: [any StorageTable<RecordRow>] = []
            for table in tables.recordTables
            where !(try storage(try table.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: 1))).isEmpty {
                inUse.append(table)
            }
            recordTablesWithRows = inUse
            return inUse
        }

        /// Reads the sync index entries of `keys` in one call.
        mutating func loadSyncIds(_ keys: [String]) throws(HealthError) {
            let missing = Set(keys).filter { syncIds[$0] == nil }
            guard !missing.isEmpty else { return }
            for key in missing { syncIds[key] = .some(nil) }
            for (key, row) in try storage(try tables.syncIds.get(user: user, keys: Array(missing))) { syncIds[key] = row }
        }

        /// Whether an item is to be stored: yes unless its metadata names a synced object
        /// (`HKSyncIdentifier`) whose stored version under another UUID is as new or newer. An older
        /// version under another UUID is removed, as HealthKit replaces it. O(1) with the index read.
        mutating func admit(_ item: ItemInput) throws(HealthError) -> Bool {
            guard let key = item.metadata?.syncKey(item.origin), let version = item.metadata?.syncVersion else { return true }
            try loadSyncIds([key])
            if let held = syncIds[key] ?? nil, held.uuid != item.uuid {
                guard version > held.version else { return false }
                try remove(held.uuid)
            }
            return true
        }

        /// The user's profile as stored before this request: one read, whoever asks (the default zone,
        /// the ranking migration, the quota).
        mutating func profile() throws(HealthError) -> ProfileRow? {
            if let known = storedProfile { return known }
            let row = try storage(try tables.profile.get(user: user, key: HealthService.profileKey))
            storedProfile = .some(row)
            return row
        }

        /// How `type`'s sources rank for this user. The first call reads every type's first-seen times
        /// and order in one scan of each table (a row a type, so O(the user's types)).
        mutating func ranking(_ type: String) throws(HealthError) -> SourceRanking {
            if !rankingsLoaded {
                // Before any change of this request's: setSourceOrder and noteSource ask first.
                for (key, row) in try storage(try tables.sourcesSeen.rows(of: user)) { rankings[key] = SourceRanking(firstSeen: row.firstSeen) }
                for (key, row) in try storage(try tables.sourceOrder.rows(of: user)) {
                    rankings[key, default: SourceRanking()].userOrder = row.sources
                }
                rankingsLoaded = true
            }
            return rankings[type] ?? SourceRanking()
        }

        /// Sets the person's order of `type`'s sources and marks every day with the type's data for
        /// recomputing. O(the type's samples) on the worker that plans it, one ordered read.
        mutating func setSourceOrder(_ type: String, _ sources: [SourceMatcher]) throws(HealthError) {
            var ranking = try ranking(type)
            guard ranking.userOrder != sources else { return }
            ranking.userOrder = sources
            rankings[type] = ranking
            if sources.isEmpty { tx.delete(writes.sourceOrder, user: user, key: type) } else {
                tx.put(writes.sourceOrder, user: user, key: type, SourceOrderRow(sources: sources))
            }
            try touchEveryDay(of: type == HealthRules.sleepType ? nil : HealthType.named(type))
        }

        /// Marks every day with data of `type` (nil: sleep) for recomputing.
        mutating func touchEveryDay(of type: HealthType?) throws(HealthError) {
            let all = dayRange(type, CalendarDate(daysSinceEpoch: -10_000), CalendarDate(daysSinceEpoch: 89_999))
            if let type {
                guard type.isKnown, type.aggregation.spreads else { return }
                for (_, row) in try storage(try tables.samples.scanOrdered(user: user, ranges: [all])) {
                    touched[.metric(type.code), default: []].formUnion(split(row.placement).map(\.day))
                }
            } else {
                for (_, row) in try storage(try tables.sleep.scanOrdered(user: user, ranges: [all])) {
                    touched[.sleep, default: []].insert(row.placement.calendarDay)
                }
            }
        }

        /// A user whose days were summed by the source order of releases up to 0.2 (`ProfileRow.ranking`
        /// below 2) has every merged type's days recomputed once, by the planning worker of their next
        /// ingest: O(their cumulative and sleep samples), once. Users without a profile have no days.
        mutating func migrateRanking() throws(HealthError) {
            guard let profile = try profile(), profile.ranking < ProfileRow.currentRanking else { return }
            for type in HealthType.all where type.aggregation.spreads { try touchEveryDay(of: type) }
            try touchEveryDay(of: nil)
            migratedRanking = true
        }

        /// Records when a third-party source of `type` first reached the user (at most
        /// `SourcesSeenRow.limit` a type).
        mutating func noteSource(_ type: String, _ placement: Placement) throws(HealthError) {
            // A request's samples come in runs of one source: its interned provenance, compared by identity,
            // spares the rest of the run the string work below.
            let manual = placement.wasUserEntered
            if let last = lastNoted, last.type == type, last.provenance === placement.provenance, last.manual == manual { return }
            lastNoted = (type, placement.provenance, manual)
            let ref = SourceRef(placement.origin, enteredByHand: manual)
            guard HealthRules.defaultTier(ref) == .thirdParty else { return }
            var ranking = try ranking(type)
            let key = HealthRules.sourceKey(ref.origin)
            guard ranking.firstSeen[key] == nil, ranking.firstSeen.count < SourcesSeenRow.limit else { return }
            ranking.firstSeen[key] = now
            rankings[type] = ranking
            seenChanged.insert(type)
        }

        /// Writes the first-seen times this request added.
        mutating func putSourcesSeen() {
            for type in seenChanged.sorted() {
                tx.put(writes.sourcesSeen, user: user, key: type, SourcesSeenRow(firstSeen: rankings[type]?.firstSeen ?? [:]))
            }
            seenChanged.removeAll()
        }

        /// Writes the sync index entries this request changed.
        mutating func putSyncIds() {
            for key in syncChanged.sorted() {
                if let row = syncIds[key] ?? nil { tx.put(writes.syncIds, user: user, key: key, row) } else { tx.delete(writes.syncIds, user: user, key: key) }
            }
            syncChanged.removeAll()
        }

        /// The item `uuid` names now, of whichever kind.
        func current(_ uuid: String) throws(HealthError) -> Item? {
            if let p = pending[uuid] { return p }
            if let known = stored[uuid] { return known }
            if let r = try storage(try tables.samples.get(user: user, key: uuid)) { return .sample(r, sameContent: false) }
            if let r = try storage(try tables.workouts.get(user: user, key: uuid)) { return .workout(r, sameContent: false) }
            if let r = try storage(try tables.sleep.get(user: user, key: uuid)) { return .sleep(r, sameContent: false) }
            for table in recordTablesWithRows ?? tables.recordTables {
                if let r = try storage(try table.get(user: user, key: uuid)) { return .record(r, sameContent: false) }
            }
            return nil
        }

        /// Where an item sent now is placed: in its `HKTimeZone` when its metadata names one (the zone the
        /// device was in, as the Health app places it), else in the zone the item it replaces was first
        /// placed in (so that travelling does not move old days), else in `zone`.
        func placement(_ item: ItemInput, _ existing: Item?, _ fallback: Zone, _ deviceId: String?) -> Placement {
            let zone = item.metadata?.timeZone.flatMap(Zone.named) ?? existing.flatMap { Zone.named($0.placement.zone) } ?? fallback
            return Placement(start: item.start.milliseconds, end: item.end.milliseconds, zone: zone.identifier,
                             day: HealthRules.day(item.start.milliseconds, in: zone), origin: item.origin, deviceId: deviceId,
                             metadata: item.metadata)
        }

        /// Stores `item` under `uuid`, replacing `existing` (what `uuid` names now, of any kind).
        mutating func put(_ uuid: String, _ item: Item, replacing existing: Item?) throws(HealthError) {
            if let existing { try remove(uuid, existing) }
            let placement = item.placement
            if let key = placement.metadata?.syncKey(placement.origin), let version = placement.metadata?.syncVersion {
                syncIds[key] = SyncIdRow(uuid: uuid, version: version)
                syncChanged.insert(key)
            }
            itemDelta += 1
            pending[uuid] = item
            switch item {
            case .sample(let r, _): tx.put(writes.samples, user: user, key: uuid, r)
            case .workout(let r, _): tx.put(writes.workouts, user: user, key: uuid, r)
            case .sleep(let r, _): tx.put(writes.sleep, user: user, key: uuid, r)
            case .record(let r, _): tx.put(writes.records(r.kind), user: user, key: uuid, r)
            }
            touch(item)
        }

        /// Removes the item `uuid` names, if any.
        mutating func remove(_ uuid: String) throws(HealthError) {
            if let old = try current(uuid) { try remove(uuid, old) }
        }

        private mutating func remove(_ uuid: String, _ old: Item) throws(HealthError) {
            // A removed synced item leaves the index, unless the index already names a newer one.
            if let key = old.placement.metadata?.syncKey(old.placement.origin) {
                try loadSyncIds([key])
                if (syncIds[key] ?? nil)?.uuid == uuid {
                    syncIds[key] = .some(nil)
                    syncChanged.insert(key)
                }
            }
            switch old {
            case .sample: tx.delete(writes.samples, user: user, key: uuid)
            case .workout: tx.delete(writes.workouts, user: user, key: uuid)
            case .sleep: tx.delete(writes.sleep, user: user, key: uuid)
            case .record(let r, _): tx.delete(writes.records(r.kind), user: user, key: uuid)
            }
            itemDelta -= 1
            pending[uuid] = .some(nil)
            touch(old)
        }

        /// Removes what device `device` sent on `days` (by the day each item counts toward), except `keeping`.
        mutating func removeDevice(_ device: String, days: [CalendarDate], keeping: Set<String>) throws(HealthError) -> Int {
            // One call per table: every (type, day) range of samples, every day of workouts and sleep.
            let days = Set(days).sorted()
            let itemRanges = days.map { dayRange(nil, $0, $0) }
            // Per known type and day, plus every unknown type's (which share one prefix) per day: 195 x days.
            let unknownRanges = days.map { d in
                OrderRange(from: HealthRules.unknownPrefix + HealthRules.dayCode(d), to: HealthRules.unknownPrefix + HealthRules.dayCode(d) + "~")
            }
            let sampleRanges = HealthType.all.flatMap { type in days.map { dayRange(type, $0, $0) } } + unknownRanges
            var doomed: [String] = []
            for (uuid, row) in try storage(try tables.samples.scanOrdered(user: user, ranges: sampleRanges))
            where row.placement.deviceId == device && !keeping.contains(uuid) {
                doomed.append(uuid)
                stored[uuid] = .sample(row, sameContent: false)
            }
            for (uuid, row) in try storage(try tables.workouts.scanOrdered(user: user, ranges: itemRanges))
            where row.placement.deviceId == device && !keeping.contains(uuid) {
                doomed.append(uuid)
                stored[uuid] = .workout(row, sameContent: false)
            }
            for (uuid, row) in try storage(try tables.sleep.scanOrdered(user: user, ranges: itemRanges))
            where row.placement.deviceId == device && !keeping.contains(uuid) {
                doomed.append(uuid)
                stored[uuid] = .sleep(row, sameContent: false)
            }
            for table in try recordTablesInUse() {
                for (uuid, row) in try storage(try table.scanOrdered(user: user, ranges: itemRanges))
                where row.placement.deviceId == device && !keeping.contains(uuid) {
                    doomed.append(uuid)
                    stored[uuid] = .record(row, sameContent: false)
                }
            }
            for uuid in doomed { try remove(uuid) }
            return doomed.count
        }

        /// The first instant of local day `day` in `zone`, remembered for this request.
        mutating func dayStart(_ day: CalendarDate, _ zone: Zone) -> Int64 {
            let key = zone.identifier + " " + day.description
            if let hit = dayStarts[key] { return hit }
            let start = zone.startOfDay(day).milliseconds
            dayStarts[key] = start
            return start
        }

        /// The local days a sample's share falls on, with the part of its interval on each.
        mutating func split(_ p: Placement) -> [(day: CalendarDate, start: Int64, end: Int64)] {
            let zone = Zone.named(p.zone) ?? .utc
            let day = p.calendarDay
            // Most samples lie within their start day: no time zone arithmetic beyond one lookup.
            if p.end <= p.start || p.end <= dayStart(day.adding(days: 1), zone) { return [(day, p.start, p.end)] }
            var starts: [CalendarDate: Int64] = [:]
            let parts = HealthRules.split(start: p.start, end: p.end, in: zone) { d in
                if let s = starts[d] { return s }
                let s = zone.startOfDay(d).milliseconds
                starts[d] = s
                return s
            }
            return parts
        }

        mutating func touch(_ item: Item) {
            switch item {
            case .sample(let r, _):
                guard r.type.isKnown else { return }
                let days = r.type.aggregation.spreads ? split(r.placement).map(\.day) : [r.placement.calendarDay]
                touched[.metric(r.type.code), default: []].formUnion(days)
            case .workout(let r, _): touched[.workouts, default: []].insert(r.placement.calendarDay)
            case .sleep(let r, _): touched[.sleep, default: []].insert(r.placement.calendarDay)
            case .record: return // kept as sent, not summarised
            }
        }

        /// Recomputes every touched part of every touched day from the items as this request leaves
        /// them, and puts the days whose summary changed. Answers the touched days.
        mutating func recompute() throws(HealthError) -> [String] {
            var days: [CalendarDate: SummaryRow] = [:]
            var original: [CalendarDate: SummaryRow] = [:]
            // Every touched day's stored summary in one read (on PostgreSQL one statement, not one round
            // trip a day: a month touches 31). O(touched days).
            let touchedDays = Set(touched.values.flatMap { $0 })
            let stored = try storage(try tables.days.get(user: user, keys: touchedDays.map(\.description)))
            func load(_ d: CalendarDate) throws(HealthError) -> SummaryRow {
                if let row = days[d] { return row }
                let row = stored[d.description] ?? SummaryRow()
                original[d] = row
                return row
            }
            let pendingSamples = pendingByType()
            for (part, set) in touched.sorted(by: { "\($0.key)" < "\($1.key)" }) {
                switch part {
                case .metric(let code):
                    let type = HealthType(code: code)
                    for (d, metric) in try metrics(type, days: set, pending: pendingSamples[code] ?? []) {
                        var row = try load(d)
                        row.metrics[code] = metric
                        days[d] = row
                    }
                case .workouts:
                    let byDay = try items(tables.workouts, days: set, pick: { if case .workout(let r, _) = $0 { r } else { nil } }, placement: \.placement)
                    for d in set {
                        var row = try load(d)
                        row.workouts = HealthRules.workouts(byDay[d.description] ?? [])
                        days[d] = row
                    }
                case .sleep:
                    let byDay = try items(tables.sleep, days: set, pick: { if case .sleep(let r, _) = $0 { r } else { nil } }, placement: \.placement)
                    for d in set {
                        var row = try load(d)
                        let samples = byDay[d.description] ?? []
                        let ranking = try ranking(HealthRules.sleepType)
                        let refs = samples.map { SourceRef($0.placement.origin, enteredByHand: $0.placement.wasUserEntered) }
                        let ranks = HealthRules.ranks(refs, ranking)
                        row.sleep = HealthRules.sleep(zip(samples, refs).map { ($0.stage, $0.placement.start, $0.placement.end, ranks[$1] ?? 0) })
                        days[d] = row
                    }
                }
            }
            for (d, row) in days.sorted(by: { $0.key < $1.key }) where row != original[d] {
                if row.isEmpty { tx.delete(writes.days, user: user, key: d.description) } else { tx.put(writes.days, user: user, key: d.description, row) }
            }
            return days.keys.sorted().map(\.description)
        }

        /// Pending samples by type code.
        func pendingByType() -> [Int: [(String, SampleRow)]] {
            var out: [Int: [(String, SampleRow)]] = [:]
            for (uuid, item) in pending { if case .sample(let r, _)? = item { out[r.type.code, default: []].append((uuid, r)) } }
            return out
        }

        /// The items of a workouts or sleep table counted toward each of `days`, as this request leaves
        /// them, by day: one read of the table.
        func items<Row: StoredRow>(_ table: any StorageTable<Row>, days: Set<CalendarDate>, pick: (Item) -> Row?,
                                   placement: (Row) -> Placement) throws(HealthError) -> [String: [Row]] {
            let names = Set(days.map(\.description))
            let ranges = days.sorted().map { dayRange(nil, $0, $0) }
            var out: [String: [Row]] = [:]
            for (uuid, row) in try storage(try table.scanOrdered(user: user, ranges: ranges)) where pending[uuid] == nil {
                out[placement(row).day, default: []].append(row)
            }
            for (_, item) in pending {
                if let item, let row = pick(item), names.contains(item.placement.day) { out[item.placement.day, default: []].append(row) }
            }
            return out
        }

        /// Type `type`'s figure on each of `days` (nil where it has no samples), from its samples as this
        /// request leaves them.
        mutating func metrics(_ type: HealthType, days: Set<CalendarDate>, pending: [(String, SampleRow)]) throws(HealthError) -> [(CalendarDate, Metric?)] {
            let rows = try samples(type, days: days, pending: pending)
            var out: [(CalendarDate, Metric?)] = []
            switch type.aggregation {
            case .cumulative:
                for (d, list) in try rankedShares(type, rows, days: days) {
                    out.append((d, list.isEmpty ? nil : .sum(HealthRules.mergedSum(list.map(\.1)))))
                }
            case .discreteArithmetic, .discreteTemporallyWeighted, .discreteEquivalentContinuousLevel, .category:
                var values: [CalendarDate: [(value: Double, duration: Int64)]] = [:]
                for (_, r) in rows {
                    let d = r.placement.calendarDay
                    guard days.contains(d) else { continue }
                    values[d, default: []].append((r.value, r.placement.end - r.placement.start))
                }
                for d in days { out.append((d, values[d].flatMap { HealthRules.figure(type.aggregation, $0) })) }
            }
            return out
        }

        /// Type `type`'s samples that may count toward `days`, as this request leaves them: one ordered read.
        /// Identical samples of one named source (the same interval and value under two UUIDs: an imported
        /// Apple Health export and the phone's own sync of that sample) are one: the one of the lowest UUID
        /// stands. O(n) in the samples read (one hash each).
        func samples(_ type: HealthType, days: Set<CalendarDate>, pending: [(String, SampleRow)]) throws(HealthError) -> [(String, SampleRow)] {
            // Samples start at most 7 days (and a zone's offset) before a day they reach into.
            let lookback = type.aggregation.spreads ? 8 : 0
            let ranges = clusters(days.sorted(), gap: lookback).map { lo, hi in dayRange(type, lo.adding(days: -lookback), hi) }
            let rows = try storage(try tables.samples.scanOrdered(user: user, ranges: ranges))
                .filter { self.pending[$0.key] == nil }.map { ($0.key, $0.row) } + pending
            var out: [(String, SampleRow)] = []
            out.reserveCapacity(rows.count)
            // By interval and value first (integers: cheap to hash); names are compared only where those meet.
            var at: [SampleIdentity.Measure: [Int]] = [:]
            at.reserveCapacity(rows.count)
            for row in rows {
                let source = SampleIdentity.source(row.1)
                // Without a source name or bundle id nothing says two samples are one measurement: both count.
                guard !source.isEmpty else { out.append(row); continue }
                let measure = SampleIdentity.Measure(row.1)
                if let i = at[measure]?.first(where: { SampleIdentity.source(out[$0].1) == source }) {
                    if row.0 < out[i].0 { out[i] = row }
                } else {
                    at[measure, default: []].append(out.count)
                    out.append(row)
                }
            }
            return out
        }

        /// Each of `days`' shares of a cumulative type's samples, with their source and its rank for the
        /// user (empty for a day with none).
        mutating func rankedShares(_ type: HealthType, _ rows: [(String, SampleRow)], days: Set<CalendarDate>)
            throws(HealthError) -> [(CalendarDate, [(SourceRef, Contribution)])] {
            var shares: [CalendarDate: [(SourceRef, Contribution)]] = [:]
            for (_, r) in rows {
                let p = r.placement
                let ref = SourceRef(p.origin, enteredByHand: p.wasUserEntered)
                for part in split(p) where days.contains(part.day) {
                    shares[part.day, default: []].append((ref, Contribution(start: part.start, end: part.end, value: r.value,
                                                                              duration: p.end - p.start, rank: 0)))
                }
            }
            let ranking = try ranking(type.identifier)
            return days.sorted().map { d in
                let list = shares[d] ?? []
                let ranks = HealthRules.ranks(list.map(\.0), ranking)
                return (d, list.map { ref, share in
                    var ranked = share
                    ranked.rank = ranks[ref] ?? 0
                    return (ref, ranked)
                })
            }
        }

        /// Runs of sorted days, split where two lie more than `gap` days apart: one scan each.
        func clusters(_ days: [CalendarDate], gap: Int) -> [(CalendarDate, CalendarDate)] {
            var out: [(CalendarDate, CalendarDate)] = []
            for d in days {
                if let last = out.last, d.daysSinceEpoch - last.1.daysSinceEpoch <= gap + 1 { out[out.count - 1].1 = d } else { out.append((d, d)) }
            }
            return out
        }
    }
}

/// An ingest started on the serving thread (`HealthService.beginIngest`): `plan` runs on a worker
/// thread and reads only the views it holds.
public struct PreparedIngest: @unchecked Sendable {
    let service: HealthService
    let user: String
    let now: Timestamp
    let views: Views
    /// The versions of the user's HealthKit tables (`Storage.versions(of:in:)`) when the views were made.
    let versions: [UInt64]
    /// Changes attached to the request's unit (its user's account): joined on the worker, so that the
    /// commit on the serving thread copies nothing to add them.
    let attached: [Transaction.Entry]

    /// Places, compares and recomputes against the views: safe on any thread.
    public func plan(_ request: IngestRequest) -> PlannedIngest {
        PlannedIngest(request: request, result: Result { () throws(HealthError) in
            guard let tables = views.tables else { preconditionFailure("an ingest planned after it finished") }
            var planned = try service.plan(user, request, now: now, tables: tables)
            planned.tx = UnitOfWork.joined(attached, planned.tx)
            service.store.prepare(&planned.tx)
            return planned
        })
    }
}

/// The views an ingest plans against, dropped (on the serving thread) once it has been planned.
final class Views: @unchecked Sendable {
    var tables: HealthTables?
    init(_ tables: HealthTables) { self.tables = tables }
}

/// What a worker planned, handed once to the serving thread (a transaction holds class references,
/// none of which the worker keeps).
public struct PlannedIngest: @unchecked Sendable {
    let request: IngestRequest
    let result: Result<(report: IngestReport, tx: Transaction), HealthError>
}
