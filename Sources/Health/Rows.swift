import Chrono
import DomainSupport
import Threads
import JSON
import Storage

/// Where an item came from: the app that wrote it and the device that measured it. Source priority
/// (`HealthRules.rank`) is decided by these.
public struct Origin: Sendable, Hashable {
    public var sourceName: String?
    public var bundleId: String?
    public var deviceModel: String?
    public var deviceName: String?

    public init(sourceName: String? = nil, bundleId: String? = nil, deviceModel: String? = nil, deviceName: String? = nil) {
        self.sourceName = sourceName
        self.bundleId = bundleId
        self.deviceModel = deviceModel
        self.deviceName = deviceName
    }

    init(_ f: StoredFields) {
        self.init(sourceName: f.optionalString("sourceName"), bundleId: f.optionalString("bundleId"),
                  deviceModel: f.optionalString("deviceModel"), deviceName: f.optionalString("deviceName"))
    }

    var stored: [(String, JSON)] {
        [("sourceName", .optional(sourceName)), ("bundleId", .optional(bundleId)), ("deviceModel", .optional(deviceModel)),
         ("deviceName", .optional(deviceName))]
    }
}

/// What every stored item has besides its content: its interval, the zone it was sent with, the local
/// day it counts toward (in that zone), where it came from, and the `deviceId` of the ingest that sent it.
///
/// Held compactly, since a watch wearer keeps millions: the day as a day number, and the zone, origin
/// and device id in one shared `Provenance` (the items of a request, and of a source, have the same one),
/// so a placement is 40 bytes with no string of its own; metadata, which most items lack, is a
/// reference to one object (nil for most).
public struct Placement: Sendable, Equatable {
    public var start: Int64
    public var end: Int64
    /// Days since 1970-01-01 of `day`.
    var dayNumber: Int32
    var provenance: Provenance
    /// The item's HealthKit metadata as sent, if any.
    public var metadata: Metadata?

    /// `YYYY-MM-DD`: the local start day for samples and workouts, the night's wake day for sleep.
    public var day: String { calendarDay.description }
    public var calendarDay: CalendarDate {
        get { CalendarDate(daysSinceEpoch: Int(dayNumber)) }
        set { dayNumber = Int32(newValue.daysSinceEpoch) }
    }
    public var zone: String { provenance.zone }
    public var origin: Origin { provenance.origin }
    public var deviceId: String? { provenance.deviceId }

    init(_ f: StoredFields) throws(StorageError) {
        start = try f.instant("start")
        end = try f.instant("end")
        guard let day = CalendarDate(try f.string("day")) else { throw StorageError.corrupt("bad day") }
        dayNumber = Int32(day.daysSinceEpoch)
        provenance = .interned(zone: try f.string("zone"), origin: Origin(f), deviceId: f.optionalString("deviceId"))
        metadata = try Metadata.stored(f.object["metadata"])
    }

    init(start: Int64, end: Int64, zone: String, day: CalendarDate, origin: Origin, deviceId: String?, metadata: Metadata? = nil) {
        self.start = start
        self.end = end
        dayNumber = Int32(day.daysSinceEpoch)
        provenance = .interned(zone: zone, origin: origin, deviceId: deviceId)
        self.metadata = metadata
    }

    var stored: [(String, JSON)] {
        [("start", .int(start)), ("end", .int(end)), ("zone", .string(zone)), ("day", .string(day))] + origin.stored
            + [("deviceId", .optional(deviceId)), ("metadata", metadata?.json ?? .null)]
    }

    /// How many members `writeMembers` writes.
    var memberCount: Int {
        4 + [origin.sourceName, origin.bundleId, origin.deviceModel, origin.deviceName, deviceId].reduce(0) { $0 + ($1 == nil ? 0 : 1) }
            + (metadata == nil ? 0 : 1)
    }

    /// Whether HealthKit's rules rank this item as entered by hand: `HKWasUserEntered`.
    var wasUserEntered: Bool { metadata?.wasUserEntered ?? false }

    /// The members of `stored`, in the binary form, without building them: samples are stored by the
    /// ten thousand.
    func writeMembers(to out: inout [UInt8]) {
        Binary.writeString("start", to: &out)
        Binary.writeInt(start, to: &out)
        Binary.writeString("end", to: &out)
        Binary.writeInt(end, to: &out)
        Binary.writeString("zone", to: &out)
        Binary.writeStringValue(zone, to: &out)
        Binary.writeString("day", to: &out)
        Binary.writeStringValue(day, to: &out)
        for (key, value) in [("sourceName", origin.sourceName), ("bundleId", origin.bundleId), ("deviceModel", origin.deviceModel),
                             ("deviceName", origin.deviceName), ("deviceId", deviceId)] {
            if let value {
                Binary.writeString(key, to: &out)
                Binary.writeStringValue(value, to: &out)
            }
        }
        if let metadata {
            Binary.writeString("metadata", to: &out)
            metadata.json.writeBinary(to: &out)
        }
    }

    /// Whether two placements describe the same item as sent: the zone and day an item was first placed
    /// in stay with it, and which device id sent it is not part of what it is.
    func sameContent(_ other: Placement) -> Bool {
        start == other.start && end == other.end && origin == other.origin && metadata == other.metadata
    }
}

/// A placement's members as `SampleRow.init(binaryStored:)` meets them.
struct PlacementFields {
    var start: Int64?, end: Int64?, zone: String?, day: String?
    var sourceName: String?, bundleId: String?, deviceModel: String?, deviceName: String?, deviceId: String?
    var metadata: JSON?

    /// Reads the value of member `key` if it is a placement's.
    mutating func read(_ key: UnsafeBufferPointer<UInt8>, _ r: inout BinaryReader) throws(BinaryDecodeError) -> Bool {
        switch key.count {
        case 3 where key.elementsEqual("end".utf8): end = try r.int()
        case 3 where key.elementsEqual("day".utf8): day = try r.optionalStringValue()
        case 4 where key.elementsEqual("zone".utf8): zone = try r.optionalStringValue()
        case 5 where key.elementsEqual("start".utf8): start = try r.int()
        case 8 where key.elementsEqual("bundleId".utf8): bundleId = try r.optionalStringValue()
        case 8 where key.elementsEqual("deviceId".utf8): deviceId = try r.optionalStringValue()
        case 8 where key.elementsEqual("metadata".utf8): metadata = try r.value().json
        case 10 where key.elementsEqual("sourceName".utf8): sourceName = try r.optionalStringValue()
        case 10 where key.elementsEqual("deviceName".utf8): deviceName = try r.optionalStringValue()
        case 11 where key.elementsEqual("deviceModel".utf8): deviceModel = try r.optionalStringValue()
        default: return false
        }
        return true
    }

    func placement() throws(StorageError) -> Placement {
        guard let start, let end, let zone, let day, let date = CalendarDate(day) else { throw StorageError.corrupt("bad placement") }
        return Placement(start: start, end: end, zone: zone, day: date,
                         origin: Origin(sourceName: sourceName, bundleId: bundleId, deviceModel: deviceModel, deviceName: deviceName),
                         deviceId: deviceId, metadata: try Metadata.stored(metadata))
    }
}

/// The zone, origin and device id items share, interned so that equal ones are one object: rows hold a
/// reference instead of five strings. The intern table is bounded (emptied when full), so it never
/// holds more than a few thousand entries however many sources users send; a provenance made after
/// that is simply not shared with older rows.
public final class Provenance: Sendable, Hashable {
    public let zone: String
    public let origin: Origin
    public let deviceId: String?

    private init(zone: String, origin: Origin, deviceId: String?) {
        self.zone = zone
        self.origin = origin
        self.deviceId = deviceId
    }

    private static let table = Locked<[Provenance: Provenance]>([:])
    private static let tableMax = 4096

    /// The shared provenance equal to these values.
    static func interned(zone: String, origin: Origin, deviceId: String?) -> Provenance {
        let made = Provenance(zone: zone, origin: origin, deviceId: deviceId)
        return table.withLock { table in
            if let known = table[made] { return known }
            if table.count >= tableMax { table.removeAll(keepingCapacity: true) }
            table[made] = made
            return made
        }
    }

    public static func == (a: Provenance, b: Provenance) -> Bool {
        a === b || (a.zone == b.zone && a.origin == b.origin && a.deviceId == b.deviceId)
    }

    public func hash(into h: inout Hasher) {
        h.combine(zone)
        h.combine(origin)
        h.combine(deviceId)
    }
}

private func object(_ members: [(String, JSON)]) -> JSON {
    .object(JSONObject(members.filter { $0.1 != .null }))
}

/// A quantity or category sample (`health.samples`, key: its HealthKit UUID).
public struct SampleRow: StoredRow {
    public var type: HealthType
    /// In the type's canonical unit.
    public var value: Double
    public var placement: Placement

    public init(type: HealthType, value: Double, placement: Placement) {
        self.type = type
        self.value = value
        self.placement = placement
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "sample")
        let type = try Self.type(try f.string("type"), unit: f.object["unit"]?.stringValue)
        guard case .some(let v) = f.object["value"], let value = v.numberValue else { throw StorageError.corrupt("missing value") }
        self.type = type
        self.value = value
        placement = try Placement(f)
    }

    public var stored: JSON {
        object([("type", .string(type.identifier)), ("value", .double(value))] + (type.isKnown || type.unit.isEmpty ? [] : [("unit", .string(type.unit))])
               + placement.stored)
    }

    /// The type a stored row names: from the table, else an unknown one with the unit it was sent in.
    /// A name that is no HealthKit identifier at all is a corrupt row.
    static func type(_ identifier: String, unit: String?) throws(StorageError) -> HealthType {
        if let known = HealthType.named(identifier) { return known }
        guard UnknownTypes.isHealthKitName(identifier) else { throw StorageError.corrupt("unknown sample type") }
        return HealthType(unknown: identifier, unit: unit)
    }

    /// Reads the members straight from the binary form, without a JSON tree: recovery reads millions.
    public init(binaryStored reader: inout BinaryReader) throws(StorageError) {
        var fields = PlacementFields()
        var name: String?, unit: String?, value: Double?
        do {
            try reader.readObjectMembers { (key, r) throws(BinaryDecodeError) in
                if key.elementsEqual("type".utf8) {
                    name = try r.optionalStringValue()
                } else if key.elementsEqual("unit".utf8) {
                    unit = try r.optionalStringValue()
                } else if key.elementsEqual("value".utf8) {
                    value = try r.numberValue()
                } else {
                    return try fields.read(key, &r)
                }
                return true
            }
        } catch {
            throw StorageError.corrupt("sample: \(error)")
        }
        guard let name else { throw StorageError.corrupt("unknown sample type") }
        guard let value else { throw StorageError.corrupt("missing value") }
        self.type = try Self.type(name, unit: unit)
        self.value = value
        placement = try fields.placement()
    }

    public func writeStored(to out: inout [UInt8]) {
        let unit = type.isKnown ? "" : type.unit
        Binary.writeObjectHeader(count: 2 + (unit.isEmpty ? 0 : 1) + placement.memberCount, to: &out)
        Binary.writeString("type", to: &out)
        Binary.writeStringValue(type.identifier, to: &out)
        Binary.writeString("value", to: &out)
        Binary.writeDouble(value, to: &out)
        if !unit.isEmpty {
            Binary.writeString("unit", to: &out)
            Binary.writeStringValue(unit, to: &out)
        }
        placement.writeMembers(to: &out)
    }

    func sameContent(_ other: SampleRow) -> Bool {
        type == other.type && value == other.value && placement.sameContent(other.placement)
    }
}

/// A workout (`health.workouts`, key: its HealthKit UUID).
public struct WorkoutRow: StoredRow {
    public var activityType: String
    public var durationSeconds: Int64
    public var energyKcal: Double?
    public var distanceMeters: Double?
    public var placement: Placement

    public init(activityType: String, durationSeconds: Int64, energyKcal: Double?, distanceMeters: Double?, placement: Placement) {
        self.activityType = activityType
        self.durationSeconds = durationSeconds
        self.energyKcal = energyKcal
        self.distanceMeters = distanceMeters
        self.placement = placement
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "workout")
        activityType = try f.string("activityType")
        durationSeconds = try f.int("durationSeconds")
        energyKcal = f.object["energyKcal"]?.numberValue
        distanceMeters = f.object["distanceMeters"]?.numberValue
        placement = try Placement(f)
    }

    public var stored: JSON {
        object([("activityType", .string(activityType)), ("durationSeconds", .int(durationSeconds)),
                ("energyKcal", energyKcal.map(JSON.double) ?? .null), ("distanceMeters", distanceMeters.map(JSON.double) ?? .null)]
               + placement.stored)
    }

    func sameContent(_ other: WorkoutRow) -> Bool {
        activityType == other.activityType && durationSeconds == other.durationSeconds && energyKcal == other.energyKcal
            && distanceMeters == other.distanceMeters && placement.sameContent(other.placement)
    }
}

/// A sleep sample (`health.sleep`, key: its HealthKit UUID).
public struct SleepRow: StoredRow {
    public var stage: SleepStage
    public var placement: Placement

    public init(stage: SleepStage, placement: Placement) {
        self.stage = stage
        self.placement = placement
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "sleep")
        guard let stage = SleepStage(rawValue: try f.string("stage")) else { throw StorageError.corrupt("unknown sleep stage") }
        self.stage = stage
        placement = try Placement(f)
    }

    public var stored: JSON { object([("stage", .string(stage.rawValue))] + placement.stored) }

    func sameContent(_ other: SleepRow) -> Bool { stage == other.stage && placement.sameContent(other.placement) }
}

/// One type's figure for a day (or a week).
public enum Metric: Sendable, Equatable {
    case sum(Double)
    case stats(avg: Double, min: Double, max: Double, count: Int64)
    /// A category type's samples that start on the day, and their total duration.
    case events(count: Int64, durationMs: Int64)
}

/// A day's workouts of one activity type.
public struct WorkoutTotals: Sendable, Equatable {
    public var count: Int64 = 0
    public var durationSeconds: Int64 = 0
    public var energyKcal: Double = 0
    public var distanceMeters: Double = 0

    public init(count: Int64 = 0, durationSeconds: Int64 = 0, energyKcal: Double = 0, distanceMeters: Double = 0) {
        self.count = count
        self.durationSeconds = durationSeconds
        self.energyKcal = energyKcal
        self.distanceMeters = distanceMeters
    }

    mutating func add(_ other: WorkoutTotals) {
        count += other.count
        durationSeconds += other.durationSeconds
        energyKcal += other.energyKcal
        distanceMeters += other.distanceMeters
    }
}

/// Sleep of a night, in milliseconds per stage after merging sources.
public struct SleepTotals: Sendable, Equatable {
    public var ms: [SleepStage: Int64] = [:]

    public init(ms: [SleepStage: Int64] = [:]) { self.ms = ms.filter { $0.value > 0 } }

    public var asleepMs: Int64 { SleepStage.allCases.filter(\.isAsleep).reduce(0) { $0 + (ms[$1] ?? 0) } }
    public var isEmpty: Bool { ms.isEmpty }

    mutating func add(_ other: SleepTotals) {
        for (stage, v) in other.ms { ms[stage, default: 0] += v }
    }
}

/// A day's summary (`health.days`, key: the local date), kept up to date as its items change so that
/// reading days never rescans samples.
public struct SummaryRow: StoredRow {
    /// Kept by local date (`YYYY-MM-DD`).
    public static func isValidKey(_ key: String) -> Bool { CalendarDate(key) != nil }
    /// By type code, in code order.
    public var metrics: [Int: Metric]
    /// By activity type.
    public var workouts: [String: WorkoutTotals]
    public var sleep: SleepTotals

    public init(metrics: [Int: Metric] = [:], workouts: [String: WorkoutTotals] = [:], sleep: SleepTotals = SleepTotals()) {
        self.metrics = metrics
        self.workouts = workouts
        self.sleep = sleep
    }

    public var isEmpty: Bool { metrics.isEmpty && workouts.isEmpty && sleep.isEmpty }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "day")
        metrics = [:]
        for (id, m) in f.object["metrics"]?.objectValue ?? JSONObject() {
            guard let type = HealthType.named(id), let o = m.objectValue else { throw StorageError.corrupt("bad day metric") }
            if let sum = o["sum"]?.numberValue {
                metrics[type.code] = .sum(sum)
            } else if let count = o["count"]?.intValue, let ms = o["durationMs"]?.intValue {
                metrics[type.code] = .events(count: count, durationMs: ms)
            } else if let avg = o["avg"]?.numberValue, let lo = o["min"]?.numberValue, let hi = o["max"]?.numberValue,
                      let count = o["count"]?.intValue {
                metrics[type.code] = .stats(avg: avg, min: lo, max: hi, count: count)
            } else {
                throw StorageError.corrupt("bad day metric")
            }
        }
        workouts = [:]
        for (activity, w) in f.object["workouts"]?.objectValue ?? JSONObject() {
            guard let o = w.objectValue, let count = o["count"]?.intValue, let d = o["durationSeconds"]?.intValue,
                  let e = o["energyKcal"]?.numberValue, let m = o["distanceMeters"]?.numberValue else {
                throw StorageError.corrupt("bad day workouts")
            }
            workouts[activity] = WorkoutTotals(count: count, durationSeconds: d, energyKcal: e, distanceMeters: m)
        }
        var sleepMs: [SleepStage: Int64] = [:]
        for (stage, v) in f.object["sleepMs"]?.objectValue ?? JSONObject() {
            guard let s = SleepStage(rawValue: stage), let ms = v.intValue else { throw StorageError.corrupt("bad day sleep") }
            sleepMs[s] = ms
        }
        sleep = SleepTotals(ms: sleepMs)
    }

    public var stored: JSON {
        var m = JSONObject()
        for (code, metric) in metrics.sorted(by: { $0.key < $1.key }) {
            switch metric {
            case .sum(let v): m[HealthType(code: code).identifier] = ["sum": .double(v)]
            case .stats(let avg, let lo, let hi, let count):
                m[HealthType(code: code).identifier] = ["avg": .double(avg), "min": .double(lo), "max": .double(hi), "count": .int(count)]
            case .events(let count, let ms): m[HealthType(code: code).identifier] = ["count": .int(count), "durationMs": .int(ms)]
            }
        }
        var w = JSONObject()
        for (activity, t) in workouts.sorted(by: { $0.key < $1.key }) { w[activity] = t.json }
        var s = JSONObject()
        for stage in SleepStage.allCases { if let v = sleep.ms[stage] { s[stage.rawValue] = .int(v) } }
        return ["metrics": .object(m), "workouts": .object(w), "sleepMs": .object(s)]
    }
}

/// What the kernel remembers of a user's syncing (`health.profile`, key `profile`): the zone last sent,
/// the default for the next ingest.
public struct ProfileRow: StoredRow {
    public var timezone: String
    /// How many samples, workouts and sleep samples the user keeps (the `healthItemsPerUser` quota);
    /// nil in rows written before it was kept, counted once when first needed.
    public var items: Int64?
    /// Per type identifier, the first day (`YYYY-MM-DD`) the person lets the app read.
    public var authorizedFrom: [String: String] = [:]
    /// The type and unit pairs the table lacks that the user's samples have brought (`unknownTypeKey`),
    /// at most `UnknownTypes.perUser`: the bound is the user's own, so one user inventing names never
    /// refuses another's. Pairs count from the first ingest that keeps them; deleting samples keeps them.
    public var unknownTypes: Set<String> = []
    /// The source order the user's stored days were summed by: 1 before Apple's default order (releases up to 0.2),
    /// `currentRanking` since (`HealthService.Work.migrateRanking`).
    public var ranking = 1
    static let currentRanking = 2

    /// `identifier` and, after a space, the unit (no HealthKit identifier or unit string holds a space).
    static func unknownTypeKey(_ type: HealthType) -> String { type.identifier + (type.unit.isEmpty ? "" : " " + type.unit) }

    public init(timezone: String, items: Int64? = nil) {
        self.timezone = timezone
        self.items = items
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "profile")
        timezone = try f.string("timezone")
        items = try f.optionalInt("items")
        for (type, day) in f.object["authorizedFrom"]?.objectValue ?? JSONObject() {
            guard let d = day.stringValue, CalendarDate(d) != nil else { throw StorageError.corrupt("bad authorizedFrom") }
            authorizedFrom[type] = d
        }
        if case .int(let r)? = f.object["ranking"] { ranking = Int(r) }
        for key in f.object["unknownTypes"]?.arrayValue ?? [] {
            guard let k = key.stringValue else { throw StorageError.corrupt("bad unknownTypes") }
            unknownTypes.insert(k)
        }
    }
    public var stored: JSON {
        var o = JSONObject([("timezone", .string(timezone))])
        if let items { o["items"] = .int(items) }
        if !authorizedFrom.isEmpty { o["authorizedFrom"] = .object(JSONObject(authorizedFrom.sorted(by: { $0.key < $1.key }).map { ($0.key, JSON.string($0.value)) })) }
        if !unknownTypes.isEmpty { o["unknownTypes"] = .array(unknownTypes.sorted().map { .string($0) }) }
        if ranking != 1 { o["ranking"] = .int(Int64(ranking)) }
        return .object(o)
    }
}

/// The health tables, registered with the store before it recovers.
public struct HealthTables: Sendable {
    public let samples: any StorageTable<SampleRow>
    public let workouts: any StorageTable<WorkoutRow>
    public let sleep: any StorageTable<SleepRow>
    public let days: any StorageTable<SummaryRow>
    public let profile: any StorageTable<ProfileRow>
    /// The newest version of each synced object (`HKSyncIdentifier`).
    public let syncIds: any StorageTable<SyncIdRow>
    /// When each third-party source of a type first reached the user.
    public let sourcesSeen: any StorageTable<SourcesSeenRow>
    /// The person's own source order per type.
    public let sourceOrder: any StorageTable<SourceOrderRow>
    /// One per `RecordKind`, in `RecordKind.allCases` order.
    @usableFromInline let recordTables: [any StorageTable<RecordRow>]

    init(samples: any StorageTable<SampleRow>, workouts: any StorageTable<WorkoutRow>, sleep: any StorageTable<SleepRow>,
         days: any StorageTable<SummaryRow>, profile: any StorageTable<ProfileRow>, syncIds: any StorageTable<SyncIdRow>,
         sourcesSeen: any StorageTable<SourcesSeenRow>, sourceOrder: any StorageTable<SourceOrderRow>, recordTables: [any StorageTable<RecordRow>]) {
        (self.samples, self.workouts, self.sleep, self.days, self.profile, self.syncIds) = (samples, workouts, sleep, days, profile, syncIds)
        (self.sourcesSeen, self.sourceOrder) = (sourcesSeen, sourceOrder)
        self.recordTables = recordTables
    }

    /// The table of `kind`'s records.
    func records(_ kind: RecordKind) -> any StorageTable<RecordRow> {
        recordTables[RecordKind.allCases.firstIndex(of: kind) ?? 0]
    }

    /// Every table, as `Storage.versions(of:in:)` takes them.
    var all: [TableHandle] { [samples, workouts, sleep, days, profile, syncIds, sourcesSeen, sourceOrder] + recordTables }

    /// Read-only copies of `user`'s rows of every health table, for a worker thread (`Storage.view`).
    func views(of user: String, in store: any Storage) -> HealthTables {
        HealthTables(samples: store.view(samples, user: user), workouts: store.view(workouts, user: user), sleep: store.view(sleep, user: user),
                     days: store.view(days, user: user), profile: store.view(profile, user: user),
                     syncIds: store.view(syncIds, user: user), sourcesSeen: store.view(sourcesSeen, user: user),
                     sourceOrder: store.view(sourceOrder, user: user), recordTables: recordTables.map { store.view($0, user: user) })
    }

    @inlinable
    public init(_ store: some Storage) {
        samples = store.table("health.samples", of: SampleRow.self,
                              orderedBy: { row in HealthRules.orderHead(row.type, day: row.placement.calendarDay, start: row.placement.start) },
                              entity: Entity("health.sample"))
        workouts = store.table("health.workouts", of: WorkoutRow.self,
                               orderedBy: { row in HealthRules.orderHead(nil, day: row.placement.calendarDay, start: row.placement.start) },
                               entity: Entity("health.workout"))
        sleep = store.table("health.sleep", of: SleepRow.self,
                            orderedBy: { row in HealthRules.orderHead(nil, day: row.placement.calendarDay, start: row.placement.start) },
                            entity: Entity("health.sleep"))
        days = store.table("health.days", of: SummaryRow.self, entity: Entity("health.day"))
        profile = store.table("health.profile", of: ProfileRow.self)
        syncIds = store.table("health.syncIds", of: SyncIdRow.self)
        sourcesSeen = store.table("health.sourcesSeen", of: SourcesSeenRow.self)
        sourceOrder = store.table("health.sourceOrder", of: SourceOrderRow.self, entity: Entity("health.sourceOrder"))
        recordTables = RecordKind.allCases.map { kind in
            store.table(kind.table, of: RecordRow.self,
                        orderedBy: { row in HealthRules.orderHead(nil, day: row.placement.calendarDay, start: row.placement.start) },
                        entity: Entity(kind.entity))
        }
    }
}
