import Chrono
import Foundation
import JSON
import Store
import Storage
import Testing
import TestSupport
@testable import Health

let steps = "HKQuantityTypeIdentifierStepCount"
let heartRate = "HKQuantityTypeIdentifierHeartRate"
let now = at("2026-11-01T00:00:00Z")

/// A UUID made from a number, so tests can name items briefly.
func uuid(_ n: Int) -> String {
    let hex = String(n, radix: 16)
    return "00000000-0000-4000-8000-" + String(repeating: "0", count: 12 - hex.count) + hex
}

func origin(_ model: String?, source: String? = nil, bundle: String? = nil, metadata: JSON? = nil) -> JSON {
    var o = JSONObject()
    if let model { o["device"] = ["model": .string(model)] }
    if source != nil || bundle != nil {
        var s = JSONObject()
        if let source { s["name"] = .string(source) }
        if let bundle { s["bundleId"] = .string(bundle) }
        o["source"] = .object(s)
    }
    if let metadata { o["metadata"] = metadata }
    return .object(o)
}

/// Steps.
func sample(_ n: Int, _ value: Double, _ start: String, _ end: String, model: String? = nil, source: String? = nil,
            bundle: String? = nil, metadata: JSON? = nil) throws -> SampleInput {
    try quantity(n, steps, value, unit: "count", start, end, model: model, source: source, bundle: bundle, metadata: metadata)
}

func quantity(_ n: Int, _ type: String, _ value: Double, unit: String, _ start: String, _ end: String,
              model: String? = nil, source: String? = nil, bundle: String? = nil, metadata: JSON? = nil) throws -> SampleInput {
    var o = origin(model, source: source, bundle: bundle, metadata: metadata).objectValue!
    for (k, v) in [("uuid", JSON.string(uuid(n))), ("type", .string(type)), ("value", .double(value)), ("unit", .string(unit)),
                   ("start", .string(start)), ("end", .string(end))] { o[k] = v }
    return try SampleInput.decode(.object(o), at: "params.samples[0]")
}

func sleepSample(_ n: Int, _ stage: String, _ start: String, _ end: String, model: String? = nil, source: String? = nil,
                 metadata: JSON? = nil) throws -> SleepInput {
    var o = origin(model, source: source, metadata: metadata).objectValue!
    for (k, v) in [("uuid", JSON.string(uuid(n))), ("stage", .string(stage)), ("start", .string(start)), ("end", .string(end))] { o[k] = v }
    return try SleepInput.decode(.object(o), at: "params.sleep[0]")
}

func workout(_ n: Int, _ activity: String, _ start: String, _ end: String, seconds: Int64, kcal: Double? = nil) throws -> WorkoutInput {
    var o = JSONObject([("uuid", .string(uuid(n))), ("activityType", .string(activity)), ("start", .string(start)), ("end", .string(end)),
                        ("durationSeconds", .int(seconds))])
    if let kcal { o["energyKcal"] = .double(kcal) }
    return try WorkoutInput.decode(.object(o), at: "params.workouts[0]")
}

final class Harness {
    let store: any Storage
    let tables: HealthTables
    /// A table of another domain's, beside the health tables.
    let other: any StorageTable<HealthProfileStandIn>
    let service: HealthService
    let user: String

    init(user: String = testUser) throws {
        (store, (tables, other)) = try testStore { (HealthTables($0), $0.table("other.things", of: HealthProfileStandIn.self)) }
        service = HealthService(store: store, tables: tables, cursorSecrets: [Array("cursor test secret".utf8)])
        self.user = user
    }

    @discardableResult
    func ingest(_ zone: String? = nil, device: String? = nil, samples: [SampleInput] = [], workouts: [WorkoutInput] = [],
                sleep: [SleepInput] = [], replace: [String] = [], dryRun: Bool = false) throws -> IngestReport {
        try service.ingest(user, IngestRequest(deviceId: device, zone: zone.map { Zone.named($0)! }, samples: samples, workouts: workouts,
                                               sleep: sleep, replaceDays: replace.map(day), dryRun: dryRun), now: now)
    }

    /// The day's total of `type`, nil when it has none.
    func sum(_ date: String, _ type: String = steps) throws -> Double? {
        guard let row = try service.day(user, date), case .sum(let v)? = row.metrics[HealthType.named(type)!.code] else { return nil }
        return v
    }

    /// Every stored day summary, by date.
    func days() throws -> [String: SummaryRow] {
        Dictionary(uniqueKeysWithValues: try tables.days.rows(of: user).map { ($0.key, $0.row) })
    }
}

@Suite struct IngestTests {
    @Test func aPhoneAndAWatchOnTheSameWalkCountOnceAndDeletionRecomputesExactly() throws {
        let h = try Harness()
        try h.ingest("Europe/Berlin", samples: [
            try sample(1, 1000, "2026-03-02T10:00:00+01:00", "2026-03-02T10:10:00+01:00", model: "iPhone"),
            try sample(2, 600, "2026-03-02T10:05:00+01:00", "2026-03-02T10:15:00+01:00", model: "Watch"),
        ])
        #expect(try h.sum("2026-03-02") == 1100)  // 500 phone-only, 300 + 300 watch
        let report = try h.service.delete(h.user, uuids: [uuid(2), uuid(99)])
        #expect(report == DeleteReport(deleted: 1, unknown: 1, daysRecomputed: ["2026-03-02"]))
        #expect(try h.sum("2026-03-02") == 1000)
        _ = try h.service.delete(h.user, uuids: [uuid(1)])
        #expect(try h.days().isEmpty)  // a day with nothing left is gone
    }

    /// The slow path: planned against a view while the user's HealthKit rows change, the plan is not
    /// committed (it read stale rows) but refused as `.stale`, which the dispatcher answers by planning it
    /// again on a worker (#39: never on the serving thread); made again, it merges with what changed.
    /// Unchanged HealthKit rows commit the plan as made, whatever else of the user changed.
    @Test func aPlanMadeOnStaleRowsIsRefusedAndMadeAgain() throws {
        let h = try Harness()
        let first = IngestRequest(samples: [try sample(1, 1000, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", model: "iPhone")])
        let prepared = try h.service.beginIngest(h.user, now: now)
        // Meanwhile, on another connection: a watch's steps over the same ten minutes.
        try h.ingest(samples: [try sample(2, 600, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", model: "Watch")])
        let planned = prepared.plan(first)
        #expect(try planned.result.get().report.daysRecomputed == ["2026-03-02"])
        #expect(throws: HealthError.stale) { try h.service.finishIngest(prepared, planned) }
        #expect(try h.sum("2026-03-02") == 600, "nothing of the stale plan was stored")
        // Planned again (as the dispatcher does, on a worker): the two merge and the watch's 600 wins the
        // interval they share.
        let again = try h.service.beginIngest(h.user, now: now)
        let report = try h.service.finishIngest(again, again.plan(first))
        #expect(report.samples == 1)
        #expect(try h.sum("2026-03-02") == 600)
        #expect(try h.service.sample(h.user, uuid(2)) != nil && h.service.sample(h.user, uuid(1)) != nil)
        // A write to another table of the user (another domain's) leaves the plan current in memory;
        // PostgreSQL keeps one version per user, so there the plan is made again.
        let third = IngestRequest(samples: [try sample(3, 50, "2026-03-03T10:00:00Z", "2026-03-03T10:10:00Z")])
        let current = try h.service.beginIngest(h.user, now: now)
        var tx = Transaction()
        tx.put(h.other, user: h.user, key: "k", HealthProfileStandIn())
        try h.store.commit(tx)
        h.store.endRequest()
        if testStoreKind == "memory" {
            _ = try h.service.finishIngest(current, current.plan(third))
            #expect(try h.sum("2026-03-03") == 50)
        } else {
            #expect(throws: HealthError.stale) { try h.service.finishIngest(current, current.plan(third)) }
        }
    }

    @Test func reSentDaysChangeNothing() throws {
        let h = try Harness()
        let items = [try sample(1, 1000, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z"),
                     try quantity(2, heartRate, 72, unit: "count/min", "2026-03-02T10:00:00Z", "2026-03-02T10:00:00Z")]
        try h.ingest(samples: items)
        let horizon = try h.store.lastFeedPosition(of: nil)
        let again = try h.ingest(samples: items)
        #expect(again.unchanged == 2 && again.samples == 0 && again.daysRecomputed.isEmpty)
        #expect(try h.store.lastFeedPosition(of: nil) == horizon)  // nothing committed: no log record, no feed entry
    }

    @Test func theSameUUIDWithNewContentReplacesItAndRecomputesBothDays() throws {
        let h = try Harness()
        try h.ingest(samples: [try sample(1, 1000, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z")])
        let moved = try h.ingest(samples: [try sample(1, 400, "2026-03-03T10:00:00Z", "2026-03-03T10:10:00Z")])
        #expect(moved.samples == 1 && moved.daysRecomputed == ["2026-03-02", "2026-03-03"])
        #expect(try h.sum("2026-03-02") == nil)
        #expect(try h.sum("2026-03-03") == 400)
    }

    @Test func replaceDaysRemovesOnlyThatDevicesItems() throws {
        let h = try Harness()
        try h.ingest(device: "phone", samples: [
            try sample(1, 100, "2026-03-02T08:00:00Z", "2026-03-02T08:10:00Z"),
            try sample(2, 200, "2026-03-02T09:00:00Z", "2026-03-02T09:10:00Z"),
            try sample(3, 300, "2026-03-03T09:00:00Z", "2026-03-03T09:10:00Z"),  // another day: kept
        ])
        try h.ingest(device: "watch", samples: [try sample(4, 400, "2026-03-02T12:00:00Z", "2026-03-02T12:10:00Z")])
        let report = try h.ingest(device: "phone", samples: [try sample(1, 100, "2026-03-02T08:00:00Z", "2026-03-02T08:10:00Z")],
                                  replace: ["2026-03-02"])
        #expect(report.replaced == 1 && report.unchanged == 1)
        #expect(try h.sum("2026-03-02") == 500)  // 100 (phone, re-sent) + 400 (watch)
        #expect(try h.sum("2026-03-03") == 300)
        #expect(try h.service.sample(h.user, uuid(2)) == nil)
    }

    @Test func dryRunReportsWithoutStoring() throws {
        let h = try Harness()
        let report = try h.ingest(samples: [try sample(1, 1000, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z")], dryRun: true)
        #expect(report.samples == 1 && report.dryRun && report.daysRecomputed == ["2026-03-02"])
        #expect(try h.days().isEmpty)
        #expect(try h.service.sample(h.user, uuid(1)) == nil)
    }

    @Test func daylightSavingDaysOf23And25Hours() throws {
        let h = try Harness()
        // 100 steps an hour, noon to noon across each change in Berlin.
        try h.ingest("Europe/Berlin", samples: [
            try sample(1, 4700, "2026-03-28T12:00:00+01:00", "2026-03-30T12:00:00+02:00"),  // 12 + 23 + 12 hours
            try sample(2, 4900, "2026-10-24T12:00:00+02:00", "2026-10-26T12:00:00+01:00"),  // 12 + 25 + 12 hours
        ])
        #expect(try h.sum("2026-03-28") == 1200)
        #expect(try h.sum("2026-03-29") == 2300)
        #expect(try h.sum("2026-03-30") == 1200)
        #expect(try h.sum("2026-10-24") == 1200)
        #expect(try h.sum("2026-10-25") == 2500)
        #expect(try h.sum("2026-10-26") == 1200)
    }

    @Test func aSampleAcrossMidnightSplitsBetweenDays() throws {
        let h = try Harness()
        try h.ingest("America/New_York", samples: [try sample(1, 1200, "2026-05-01T23:00:00-04:00", "2026-05-02T01:00:00-04:00")])
        #expect(try h.sum("2026-05-01") == 600)
        #expect(try h.sum("2026-05-02") == 600)
        // A later sample on the second day recomputes that day from both.
        try h.ingest(samples: [try sample(2, 50, "2026-05-02T09:00:00-04:00", "2026-05-02T09:05:00-04:00")])
        #expect(try h.sum("2026-05-02") == 650)
        #expect(try h.sum("2026-05-01") == 600)
    }

    @Test func sleepAcrossMidnightAndAnAfternoonNap() throws {
        let h = try Harness()
        try h.ingest("Europe/Berlin", sleep: [
            try sleepSample(1, "inBed", "2026-03-01T22:45:00+01:00", "2026-03-02T07:10:00+01:00", model: "iPhone"),
            try sleepSample(2, "asleepCore", "2026-03-01T23:00:00+01:00", "2026-03-02T03:00:00+01:00", model: "Watch"),
            try sleepSample(3, "asleepDeep", "2026-03-02T03:00:00+01:00", "2026-03-02T04:00:00+01:00", model: "Watch"),
            try sleepSample(4, "asleepREM", "2026-03-02T04:00:00+01:00", "2026-03-02T05:00:00+01:00", model: "Watch"),
            try sleepSample(5, "awake", "2026-03-02T05:00:00+01:00", "2026-03-02T05:15:00+01:00", model: "Watch"),
            try sleepSample(6, "asleepCore", "2026-03-02T05:15:00+01:00", "2026-03-02T07:00:00+01:00", model: "Watch"),
            try sleepSample(7, "asleepUnspecified", "2026-03-02T14:00:00+01:00", "2026-03-02T14:30:00+01:00", model: "Watch"),
        ])
        let night = try #require(try h.service.day(h.user, "2026-03-02")).sleep
        func minutes(_ stage: SleepStage) -> Int64 { (night.ms[stage] ?? 0) / 60_000 }
        #expect(minutes(.asleepCore) == 4 * 60 + 105)
        #expect(minutes(.asleepDeep) == 60)
        #expect(minutes(.asleepREM) == 60)
        #expect(minutes(.asleepUnspecified) == 30)  // the nap
        #expect(minutes(.awake) == 15)
        #expect(night.asleepMs / 60_000 == 8 * 60 + 15)
        #expect(minutes(.inBed) == 8 * 60 + 25)  // from the phone, reckoned apart
        #expect(try h.service.day(h.user, "2026-03-01") == nil)  // the evening before counts with the morning
    }

    @Test func aUserWhoTravelsFromLosAngelesToBerlinMidWeek() throws {
        let h = try Harness()
        // Monday to Wednesday in Los Angeles, 1000 steps at 10:00 local each day.
        for (i, d) in ["02", "03", "04"].enumerated() {
            try h.ingest("America/Los_Angeles", samples: [try sample(i + 1, 1000, "2026-03-\(d)T10:00:00-08:00", "2026-03-\(d)T10:30:00-08:00")])
        }
        // Thursday to Sunday in Berlin, 2000 a day; the zone is sent once and then remembered.
        try h.ingest("Europe/Berlin", samples: [try sample(4, 2000, "2026-03-05T10:00:00+01:00", "2026-03-05T10:30:00+01:00")])
        for (i, d) in ["06", "07", "08"].enumerated() {
            try h.ingest(samples: [try sample(i + 5, 2000, "2026-03-\(d)T10:00:00+01:00", "2026-03-\(d)T10:30:00+01:00")])
        }
        // Wednesday evening in Los Angeles is Thursday morning in Berlin; re-sent from Berlin, the sample
        // keeps the zone it was sent with, so Wednesday stays Wednesday.
        try h.ingest("America/Los_Angeles", samples: [try sample(10, 500, "2026-03-04T20:00:00-08:00", "2026-03-04T20:10:00-08:00")])
        let resent = try h.ingest("Europe/Berlin", samples: [try sample(10, 500, "2026-03-04T20:00:00-08:00", "2026-03-04T20:10:00-08:00")])
        #expect(resent.unchanged == 1)
        #expect(try h.sum("2026-03-04") == 1500)
        #expect(try h.sum("2026-03-05") == 2000)
        #expect(try h.service.zone(h.user).identifier == "Europe/Berlin")
        let weeks = try h.service.weekly(h.user, from: day("2026-03-04"), to: day("2026-03-04"))
        #expect(weeks.map(\.name) == ["2026-W10"])
        #expect(weeks.first?.days == 7)
        let total: Double = 3 * 1000 + 500 + 4 * 2000
        #expect(weeks.first?.summary.metrics[HealthType.named(steps)!.code] == .sum(total))
    }

    @Test func discreteTypesAndWorkouts() throws {
        let h = try Harness()
        try h.ingest(samples: [
            try quantity(1, heartRate, 60, unit: "count/min", "2026-03-02T10:00:00Z", "2026-03-02T10:00:00Z"),
            try quantity(2, heartRate, 1.5, unit: "count/s", "2026-03-02T11:00:00Z", "2026-03-02T11:00:00Z"),  // 90 a minute
            try quantity(3, "HKQuantityTypeIdentifierBodyMass", 154.32358352941, unit: "lb", "2026-03-02T07:00:00Z", "2026-03-02T07:00:00Z"),
            try quantity(4, "HKQuantityTypeIdentifierOxygenSaturation", 97, unit: "%", "2026-03-02T07:00:00Z", "2026-03-02T07:00:00Z"),
            try quantity(5, "HKQuantityTypeIdentifierOxygenSaturation", 0.95, unit: "%", "2026-03-02T08:00:00Z", "2026-03-02T08:00:00Z"),
            try quantity(6, "HKQuantityTypeIdentifierActiveEnergyBurned", 418.4, unit: "kJ", "2026-03-02T08:00:00Z", "2026-03-02T09:00:00Z"),
            try quantity(7, "HKQuantityTypeIdentifierDistanceWalkingRunning", 2, unit: "mi", "2026-03-02T08:00:00Z", "2026-03-02T09:00:00Z"),
        ], workouts: [
            try workout(20, "running", "2026-03-02T06:00:00Z", "2026-03-02T06:40:00Z", seconds: 2400, kcal: 350),
            try workout(21, "running", "2026-03-02T18:00:00Z", "2026-03-02T18:20:00Z", seconds: 1100),
            try workout(22, "yoga", "2026-03-02T19:00:00Z", "2026-03-02T20:00:00Z", seconds: 3600),
        ])
        let row = try #require(try h.service.day(h.user, "2026-03-02"))
        func metric(_ type: String) -> Metric? { row.metrics[HealthType.named(type)!.code] }
        #expect(metric(heartRate) == .stats(avg: 75, min: 60, max: 90, count: 2))
        #expect(metric("HKQuantityTypeIdentifierOxygenSaturation") == .stats(avg: 0.96, min: 0.95, max: 0.97, count: 2))
        if case .stats(let kg, _, _, _)? = metric("HKQuantityTypeIdentifierBodyMass") { #expect(abs(kg - 70) < 0.001) } else { Issue.record("no body mass") }
        #expect(metric("HKQuantityTypeIdentifierActiveEnergyBurned") == .sum(100))
        #expect(metric("HKQuantityTypeIdentifierDistanceWalkingRunning") == .sum(3218.688))
        #expect(row.workouts["running"] == WorkoutTotals(count: 2, durationSeconds: 3500, energyKcal: 350, distanceMeters: 0))
        #expect(row.workouts["yoga"]?.count == 1)
        let page = try h.service.workouts(h.user, from: day("2026-03-01"), to: day("2026-03-03"), limit: 2, after: nil)
        #expect(page.workouts.map(\.uuid) == [uuid(22), uuid(21)])
        // A workout added before the cursor's position does not shift the next page.
        try h.ingest(workouts: [try workout(23, "walking", "2026-03-02T21:00:00Z", "2026-03-02T21:30:00Z", seconds: 1800)])
        let next = try h.service.workouts(h.user, from: day("2026-03-01"), to: day("2026-03-03"), limit: 2,
                                          after: h.service.openCursor(try #require(page.nextCursor), user: h.user))
        #expect(next.workouts.map(\.uuid) == [uuid(20)])
        #expect(next.nextCursor == nil)
    }
}

@Suite struct OrderIndependenceTests {
    /// Random overlapping step samples from three sources over three days, some across midnight, some instants.
    func randomSamples(_ rng: inout some RandomNumberGenerator) throws -> [SampleInput] {
        let models = ["Watch", "iPhone", nil]
        var out: [SampleInput] = []
        for n in 1...60 {
            let start = at("2026-04-01T20:00:00Z").milliseconds + Int64.random(in: 0..<(40 * 3_600_000), using: &rng) / 60_000 * 60_000
            let minutes = [0, 1, 5, 30, 90, 300].randomElement(using: &rng)!
            let end = start + Int64(minutes) * 60_000
            out.append(try sample(n, Double(Int.random(in: 0...2000, using: &rng)), Timestamp(milliseconds: start).description,
                                  Timestamp(milliseconds: end).description, model: models.randomElement(using: &rng)!,
                                  source: ["Health", "Connect"].randomElement(using: &rng)!))
        }
        return out
    }

    @Test(arguments: [1, 2, 3, 4, 5])
    func theSameSamplesGiveTheSameSummaryWhateverOrderTheyArrivedIn(seed: UInt64) throws {
        var rng = SeededRandom(seed: seed)
        let samples = try randomSamples(&rng)
        let once = try Harness()
        try once.ingest("Asia/Shanghai", samples: samples)
        let expected = try once.days()
        #expect(!expected.isEmpty)

        // The same samples in random batches, in random order, with re-sends and a detour through other values.
        let piecemeal = try Harness()
        try piecemeal.ingest("Asia/Shanghai")
        var pending = samples.shuffled(using: &rng)
        while !pending.isEmpty {
            let batch = Array(pending.prefix(Int.random(in: 1...9, using: &rng)))
            pending.removeFirst(batch.count)
            var detour = batch[0]
            detour.value += 1
            try piecemeal.ingest(samples: [detour])
            try piecemeal.ingest(samples: batch)
            try piecemeal.ingest(samples: batch.shuffled(using: &rng))
        }
        // A deleted sample sent again leaves no trace either.
        _ = try piecemeal.service.delete(piecemeal.user, uuids: [samples[0].item.uuid, samples[1].item.uuid])
        try piecemeal.ingest(samples: [samples[1], samples[0]])
        #expect(try piecemeal.days() == expected)
    }
}

/// A small deterministic generator (SplitMix64), so a failing seed can be replayed.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A row of some other domain's table, for `aPlanMadeOnStaleRowsIsRefusedAndMadeAgain`.
struct HealthProfileStandIn: StoredRow {
    init() {}
    init(stored: JSON) throws(StorageError) {}
    var stored: JSON { [:] }
}

/// Every type of the kernel's table through `health.ingest` (#40): a type added to the table is tested
/// here without being named. Each gets, on one day, a 10-minute sample, a 20-minute one and a point in
/// time, and its day figure is checked against the figure its aggregation style gives by hand.
@Suite struct EveryTypeTests {
    func sample(_ n: Int, _ type: HealthType, _ value: Double, unit: String?, _ start: String, _ end: String) throws -> SampleInput {
        var o = JSONObject([("uuid", .string(uuid(n))), ("type", .string(type.identifier)), ("value", .double(value)),
                            ("start", .string(start)), ("end", .string(end))])
        if let unit { o["unit"] = .string(unit) }
        return try SampleInput.decode(.object(o), at: "params.samples[0]")
    }

    @Test func everyTypeIsKeptAndSummarisedByItsStyle() throws {
        let h = try Harness()
        var samples: [SampleInput] = []
        var expected: [Int: Metric] = [:]
        for type in HealthType.all {
            let (a, b, c) = type.isFraction ? (0.2, 0.5, 0.35) : type.aggregation == .category ? (0.0, 1, 2) : (60.0, 90, 75)
            let unit = type.units.first?.unit
            let n = type.code * 3
            samples += [try sample(n + 1, type, a, unit: unit, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z"),
                        try sample(n + 2, type, b, unit: unit, "2026-03-02T11:00:00Z", "2026-03-02T11:20:00Z"),
                        try sample(n + 3, type, c, unit: unit, "2026-03-02T12:00:00Z", "2026-03-02T12:00:00Z")]
            let r = HealthRules.rounded
            switch type.aggregation {
            case .cumulative: expected[type.code] = .sum(r(a + b + c))
            case .discreteArithmetic, .discreteTemporallyWeighted:
                // With a point in time among them, the temporally weighted average is by count too.
                expected[type.code] = .stats(avg: r((a + b + c) / 3), min: a, max: b, count: 3)
            case .discreteEquivalentContinuousLevel:
                let energy = (pow(10, a / 10) + pow(10, b / 10) + pow(10, c / 10)) / 3
                expected[type.code] = .stats(avg: r(10 * log10(energy)), min: a, max: b, count: 3)
            case .category: expected[type.code] = .events(count: 3, durationMs: 30 * 60_000)
            }
        }
        let report = try h.ingest("UTC", samples: samples)
        #expect(report.samples == HealthType.all.count * 3)
        let day = try #require(try h.service.day(h.user, "2026-03-02"))
        for type in HealthType.all {
            #expect(day.metrics[type.code] == expected[type.code], "\(type.identifier) (\(type.aggregation))")
        }
        #expect(day.metrics.count == HealthType.all.count)
        // Stored and read back whole, through the feed's form.
        for type in HealthType.all { #expect(try h.service.sample(h.user, uuid(type.code * 3 + 3)) != nil, "\(type.identifier)") }
    }

    @Test func everyUnitOfEveryTypeConvertsAndOthersAreRefusedOnTheirField() throws {
        for type in HealthType.all {
            if type.aggregation == .category {
                #expect(try sample(1, type, 1, unit: nil, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z").value == 1)
                #expect(throws: FieldError.self) { try sample(1, type, 1, unit: "count", "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z") }
                #expect(throws: FieldError.self) { try sample(1, type, 1.5, unit: nil, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z") }
                continue
            }
            // Each spelling the table shows converts by HealthKit's unit grammar to the factor it shows.
            for unit in type.units {
                // 0.5 stays below 1, so a fraction type reads it as a fraction, not a percentage; 0.5 K would
                // be colder than anything (refused), so kelvins get 300.
                let v = unit.offset < -100 ? 300 : 0.5
                let s = try sample(1, type, v, unit: unit.unit, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z")
                #expect(abs(s.value - (v * unit.factor + unit.offset)) < 1e-9 * max(1, abs(s.value)), "\(type.identifier) in \(unit.unit)")
            }
            do {
                _ = try sample(1, type, 1, unit: "furlong", "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z")
                Issue.record("\(type.identifier) took furlongs")
            } catch let error as FieldError {
                #expect(error.field == "params.samples[0].unit")
            }
            #expect(throws: FieldError.self) { try sample(1, type, 1, unit: nil, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z") }
        }
    }
}

/// Samples of types the kernel's table lacks (next year's iOS): kept as sent by default, or skipped, or
/// refused, as `health.unknownTypes` says (#40).
@Suite struct UnknownTypeTests {
    static let future = "HKQuantityTypeIdentifierNextYearsThing", event = "HKCategoryTypeIdentifierNextYearsEvent"

    func unknown(_ n: Int, _ type: String, _ value: Double, unit: String?, _ start: String = "2026-03-02T10:00:00Z",
                 _ end: String = "2026-03-02T10:10:00Z") throws -> SampleInput {
        var o = JSONObject([("uuid", .string(uuid(n))), ("type", .string(type)), ("value", .double(value)), ("start", .string(start)),
                            ("end", .string(end))])
        if let unit { o["unit"] = .string(unit) }
        return try SampleInput.decode(.object(o), at: "params.samples[1]")
    }

    func month() throws -> [SampleInput] {
        [try sample(1, 100, "2026-03-02T09:00:00Z", "2026-03-02T09:10:00Z"),
         try quantity(2, "HKQuantityTypeIdentifierHeartRateVariabilityRMSSD", 42, unit: "ms", "2026-03-02T09:00:00Z", "2026-03-02T09:00:00Z"),
         try unknown(3, Self.future, -3.5, unit: "mg/dL"),
         try unknown(4, Self.future, 7, unit: "mg/dL", "2026-03-03T10:00:00Z", "2026-03-03T10:00:00Z"),
         try unknown(5, Self.event, 2, unit: nil)]
    }

    @Test func aMonthMixingKnownAndUnknownTypesIsKeptWholeAndOnlyKnownOnesAreSummarised() throws {
        let h = try Harness()
        let report = try h.ingest("UTC", samples: try month())
        #expect(report.samples == 5)
        #expect(report.unsummarized == [Self.future: 2, Self.event: 1])
        #expect(report.json["unsummarized"] == [Self.future: 2, Self.event: 1])
        let day = try #require(try h.service.day(h.user, "2026-03-02"))
        #expect(day.metrics.count == 2, "steps and RMSSD; unknown types are not summarised")
        #expect(try h.days().keys.sorted() == ["2026-03-02"], "the unknown sample of 3 March made no day")
        // Kept as sent: value (negative too) and unit, through the feed's form and the stored form.
        let kept = try #require(try h.service.sample(h.user, uuid(3)))
        #expect(kept.type.identifier == Self.future && kept.type.unit == "mg/dL" && kept.value == -3.5 && !kept.type.isKnown)
        #expect(kept.json(uuid(3))["unit"] == "mg/dL")
        #expect(try h.service.sample(h.user, uuid(5))?.json(uuid(5))["unit"] == nil)
        for row in [kept, try #require(try h.service.sample(h.user, uuid(5)))] { try StoredFormTests.expectStoredFormsAgree(row) }
        // Deleted by UUID like any other.
        #expect(try h.service.delete(h.user, uuids: [uuid(3), uuid(5)]).deleted == 2)
        #expect(try h.service.sample(h.user, uuid(3)) == nil)
        #expect(try h.service.sample(h.user, uuid(4)) != nil)
    }

    @Test func aDeploymentMaySkipOrRefuseThem() throws {
        let skipping = try Harness()
        let service = HealthService(store: skipping.store, tables: skipping.tables, cursorSecrets: [Array("s".utf8)], unknownTypes: .skip)
        let report = try service.ingest(skipping.user, IngestRequest(zone: .utc, samples: try month()), now: now)
        #expect(report.samples == 2 && report.skipped == [Self.future: 2, Self.event: 1] && report.unsummarized.isEmpty)
        #expect(try service.sample(skipping.user, uuid(3)) == nil)
        #expect(try service.sample(skipping.user, uuid(1)) != nil)

        let refusing = try Harness()
        let strict = HealthService(store: refusing.store, tables: refusing.tables, cursorSecrets: [Array("s".utf8)], unknownTypes: .refuse)
        #expect(throws: HealthError.unknownType("params.samples[1].type")) {
            try strict.ingest(refusing.user, IngestRequest(zone: .utc, samples: try month()), now: now)
        }
        #expect(try strict.sample(refusing.user, uuid(1)) == nil, "refused whole")
    }

    @Test func namesThatAreNoHealthKitIdentifierAreRefusedOnTheirField() throws {
        for bad in ["Steps", "HKQuantityTypeIdentifier", "HKQuantityTypeIdentifierHeart Rate", "HKWorkoutTypeIdentifier",
                    "HKQuantityTypeIdentifier" + String(repeating: "A", count: 90)] {
            do {
                _ = try unknown(1, bad, 1, unit: "count")
                Issue.record("\(bad) was taken")
            } catch let error as FieldError {
                #expect(error.field == "params.samples[1].type")
            }
        }
        #expect(throws: FieldError.self) { try unknown(1, Self.future, .infinity, unit: nil) }
        for unit in ["", "zorkmid", "u0", "mg/dL/", "count^99"] {
            do {
                _ = try unknown(1, Self.future, 1, unit: unit)
                Issue.record("unit \(unit) was taken")
            } catch let error as FieldError {
                #expect(error.field == "params.samples[1].unit")
            }
        }
    }

    /// #51 item 1: the bound on invented type and unit pairs is each user's own (kept in their profile, so
    /// a restart keeps it) and each request's, so one user flooding it never refuses another user's sync.
    @Test func oneUserInventingTypesIsRefusedAloneAndOthersSyncOn() throws {
        let h = try Harness()
        func pairs(_ range: Range<Int>, unitPrefix: String = "count") throws -> [SampleInput] {
            try range.map { try unknown($0 + 1, "HKQuantityTypeIdentifierZz\($0)", 1, unit: unitPrefix) }
        }
        // Per request: one more than `perRequest` distinct pairs is refused on the sample that brings it.
        var o = JSONObject()
        o["samples"] = .array(try (0...UnknownTypes.perRequest).map { n -> JSON in
            ["uuid": .string(uuid(n + 1)), "type": .string("HKQuantityTypeIdentifierZz\(n)"), "value": 1, "unit": "count",
             "start": "2026-03-02T10:00:00Z", "end": "2026-03-02T10:10:00Z"]
        })
        let refused = #expect(throws: FieldError.self) {
            var reader = ObjectReader(o, path: "params")
            _ = try HealthIngest.Params(try HealthIngest.Params.declaration.decode(&reader))
        }
        #expect(refused?.field == "params.samples[\(UnknownTypes.perRequest)].type")
        // Per user: requests of `perRequest` each, up to `perUser`; one more pair is refused whole.
        var n = 0
        while n < UnknownTypes.perUser {
            try h.ingest("UTC", samples: try pairs(n..<min(n + UnknownTypes.perRequest, UnknownTypes.perUser)))
            n += UnknownTypes.perRequest
        }
        #expect(throws: HealthError.tooManyUnknownTypes("params.samples[1].type")) {
            try h.ingest("UTC", samples: [try sample(9_000, 5, "2026-03-02T09:00:00Z", "2026-03-02T09:01:00Z"),
                                          try unknown(9_001, "HKQuantityTypeIdentifierOneMore", 1, unit: "count")])
        }
        #expect(try h.service.sample(h.user, uuid(9_000)) == nil, "refused whole")
        #expect(HealthError.tooManyUnknownTypes("p").rpc.code == .invalidParams)
        // Pairs the user already keeps are still taken.
        #expect(try h.ingest("UTC", samples: try pairs(0..<3)).unchanged == 3)
        #expect(try h.ingest("UTC", samples: [try unknown(9_002, "HKQuantityTypeIdentifierZz0", 2, unit: "count")]).samples == 1)
        // Another user of the same store and service is not refused.
        let other = try h.service.ingest("another-user", IngestRequest(zone: .utc, samples: [try unknown(1, Self.future, 1, unit: "count")]), now: now)
        #expect(other.samples == 1 && other.unsummarized == [Self.future: 1])
        // The bound lives in the stored profile: a service over the same store (a restarted kernel) keeps it.
        let restarted = HealthService(store: h.store, tables: h.tables, cursorSecrets: [Array("s".utf8)])
        #expect(throws: HealthError.tooManyUnknownTypes("params.samples[1].type")) {
            try restarted.ingest(h.user, IngestRequest(zone: .utc, samples: [try unknown(9_003, "HKQuantityTypeIdentifierOneMore", 1, unit: "count")]), now: now)
        }
        // A deployment that skips them counts nothing against anyone.
        let skipping = HealthService(store: h.store, tables: h.tables, cursorSecrets: [Array("s".utf8)], unknownTypes: .skip)
        #expect(try skipping.ingest(h.user, IngestRequest(zone: .utc, samples: [try unknown(9_004, "HKQuantityTypeIdentifierOneMore", 1, unit: "count")]), now: now).skipped.count == 1)
    }
}

/// `health.maxHistoryDays` (#40, limited history): a deployment that keeps only recent history refuses an
/// older item whole, naming its `start`; 0 keeps everything.
@Suite struct HistoryBoundTests {
    @Test func itemsStartingBeforeTheBoundAreRefusedWholeOnTheirStart() throws {
        let h = try Harness()
        let bounded = HealthService(store: h.store, tables: h.tables, cursorSecrets: [Array("s".utf8)], maxHistoryDays: 30)
        // `now` is 2026-11-01: 30 days back is 2026-10-02T00:00Z.
        let recent = try sample(1, 10, "2026-10-02T00:00:00Z", "2026-10-02T00:10:00Z")
        let old = try sample(2, 10, "2026-10-01T23:59:00Z", "2026-10-02T00:01:00Z")
        #expect(throws: HealthError.tooOld("params.samples[0].start", days: 30)) {
            try bounded.ingest(h.user, IngestRequest(zone: .utc, samples: [recent, old]), now: now)
        }
        #expect(try bounded.sample(h.user, uuid(1)) == nil, "refused whole")
        #expect(try bounded.ingest(h.user, IngestRequest(zone: .utc, samples: [recent]), now: now).samples == 1)
        #expect(HealthError.tooOld("params.samples[0].start", days: 30).rpc.code == .invalidParams)
        // Without a bound, 1970 is fine.
        #expect(try h.ingest("UTC", samples: [try sample(3, 1, "1970-01-02T00:00:00Z", "1970-01-02T00:01:00Z")]).samples == 1)
    }
}

/// `authorizedFrom` (#40, limited history): the app says from which day each type is readable; the
/// kernel keeps it (later values replace earlier ones, per type) and summaries show it, so "no figure
/// before that day" reads as "not readable", not "no data".
@Suite struct AuthorizedFromTests {
    @Test func theEarliestReadableDayPerTypeIsKeptAndShownBesideSummaries() throws {
        let h = try Harness()
        let rmssd = "HKQuantityTypeIdentifierHeartRateVariabilityRMSSD"
        try h.service.ingest(h.user, IngestRequest(zone: .utc, samples: [try sample(1, 100, "2026-03-02T09:00:00Z", "2026-03-02T09:10:00Z")],
                                                   authorizedFrom: [steps: day("2026-03-01"), rmssd: day("2026-02-01")]), now: now)
        #expect(try h.service.authorizedFrom(h.user) == [steps: "2026-03-01", rmssd: "2026-02-01"])
        // Later: the person widens steps; RMSSD stays as it was.
        try h.service.ingest(h.user, IngestRequest(authorizedFrom: [steps: day("2025-03-01")]), now: now)
        #expect(try h.service.authorizedFrom(h.user) == [steps: "2025-03-01", rmssd: "2026-02-01"])
        let json = Days(periods: try h.service.summary(h.user, from: day("2026-03-01"), to: day("2026-03-31")), types: nil,
                        authorizedFrom: try h.service.authorizedFrom(h.user)).json
        #expect(json["authorizedFrom"] == [steps: "2025-03-01", rmssd: "2026-02-01"])
        // Narrowed with the summary's types; absent when the app never said.
        let narrowed = Days(periods: [], types: [HealthType.named(steps)!.code], authorizedFrom: try h.service.authorizedFrom(h.user)).json
        #expect(narrowed["authorizedFrom"] == [steps: "2025-03-01"])
        #expect(Days(periods: [], types: nil, authorizedFrom: [:]).json["authorizedFrom"] == nil)
    }

    @Test func keysMustBeHealthKitTypesAndValuesDays() throws {
        #expect(try AuthorizedFrom.decode(["HKQuantityTypeIdentifierNextYearsThing": "2026-01-01"], at: "params.authorizedFrom").dates.count == 1)
        let cases: [(JSON, String)] = [(["Steps": "2026-01-01"], "params.authorizedFrom.Steps"),
                                       ([steps: "2026-02-30"], "params.authorizedFrom.\(steps)"), ([steps: 5], "params.authorizedFrom.\(steps)")]
        for (bad, field) in cases {
            do {
                _ = try AuthorizedFrom.decode(bad, at: "params.authorizedFrom")
                Issue.record("\(bad) was taken")
            } catch {
                #expect(error.field == field)
            }
        }
    }
}

/// Category values by their `HKCategoryValue...` case names (#40): sent by name or raw value, kept as the
/// raw value, shown with its name.
@Suite struct CategoryCaseNameTests {
    func category(_ type: String, _ value: JSON) throws -> SampleInput {
        try SampleInput.decode(["uuid": .string(uuid(1)), "type": .string(type), "value": value, "start": "2026-03-02T10:00:00Z",
                                "end": "2026-03-02T10:00:00Z"], at: "params.samples[0]")
    }

    @Test func aCaseNameAndItsRawValueAreTheSameSample() throws {
        let flow = "HKCategoryTypeIdentifierMenstrualFlow", headache = "HKCategoryTypeIdentifierHeadache"
        #expect(try category(flow, "heavy").value == 4)
        #expect(try category(flow, "heavy") == category(flow, 4))
        #expect(try category(headache, "moderate").value == 3)
        do {
            _ = try category(flow, "torrential")
            Issue.record("an unknown case was taken")
        } catch let error as FieldError {
            #expect(error.field == "params.samples[0].value" && error.message.contains("light"))
        }
        // A type without a known enumeration takes raw values only.
        #expect(throws: FieldError.self) { try category("HKCategoryTypeIdentifierMindfulSession", "calm") }
        // Shown with its name through the feed's form.
        let h = try Harness()
        try h.ingest("UTC", samples: [try category(flow, "light")])
        #expect(try h.service.sample(h.user, uuid(1))?.json(uuid(1))["valueName"] == "light")
        #expect(try h.service.sample(h.user, uuid(1))?.json(uuid(1))["value"] == 2.0)
    }
}

/// State of Mind samples and medication dose events (#40): shapes of named members, kept as sent, upserted,
/// replaced and deleted by UUID like any item, counted against the quota, and never summarised.
@Suite struct RecordTests {
    static func mood(_ n: Int, valence: Double = 0.4, labels: [String] = ["calm", "grateful"]) -> JSON {
        ["uuid": .string(uuid(n)), "start": "2026-03-02T08:00:00Z", "end": "2026-03-02T08:00:00Z", "kind": "momentaryEmotion",
         "valence": .double(valence), "valenceClassification": "slightlyPleasant", "labels": .array(labels.map(JSON.string)),
         "associations": ["family", "work"]]
    }

    static func dose(_ n: Int, status: String = "taken") -> JSON {
        ["uuid": .string(uuid(n)), "start": "2026-03-02T09:00:00+01:00", "end": "2026-03-02T09:00:00+01:00", "logStatus": .string(status),
         "scheduleType": "schedule", "doseQuantity": 1, "scheduledDoseQuantity": 1, "unit": "count", "scheduledDate": "2026-03-02T08:00:00Z",
         "medication": ["conceptId": "med-1", "displayText": "Ibuprofen 200 MG Oral Tablet", "generalForm": "tablet",
                        "codings": [["system": "http://www.nlm.nih.gov/research/umls/rxnorm", "code": "310965"]]]]
    }

    func records(_ moods: [JSON], _ doses: [JSON]) throws -> [RecordInput] {
        try moods.enumerated().map { try StateOfMindInput.decode($1, at: "params.stateOfMind[\($0)]").record }
            + doses.enumerated().map { try MedicationDoseInput.decode($1, at: "params.medicationDoses[\($0)]").record }
    }

    @Test func theyAreKeptAsSentAndReSendsChangeNothing() throws {
        let h = try Harness()
        let sent = try records([Self.mood(1)], [Self.dose(2)])
        let report = try h.service.ingest(h.user, IngestRequest(zone: .utc, samples: [try sample(3, 100, "2026-03-02T09:00:00Z", "2026-03-02T09:10:00Z")],
                                                                records: sent), now: now)
        #expect(report.records == [.stateOfMind: 1, .medicationDose: 1] && report.samples == 1)
        #expect(report.json["accepted"] == ["samples": 1, "workouts": 0, "sleep": 0, "stateOfMind": 1, "medicationDoses": 1])
        #expect(report.daysRecomputed == ["2026-03-02"], "only the steps made a day to recompute")
        #expect(try h.days()["2026-03-02"]?.metrics.count == 1, "records are not summarised")

        let mood = try #require(try h.service.record(.stateOfMind, h.user, uuid(1)))
        let json = mood.json(uuid(1))
        #expect(json["kind"] == "momentaryEmotion" && json["valence"] == 0.4 && json["labels"] == ["calm", "grateful"])
        #expect(json["associations"] == ["family", "work"] && json["valenceClassification"] == "slightlyPleasant")
        #expect(json["date"] == "2026-03-02" && json["timezone"] == "UTC")
        let dose = try #require(try h.service.record(.medicationDose, h.user, uuid(2))).json(uuid(2))
        #expect(dose["logStatus"] == "taken" && dose["doseQuantity"] == 1.0 && dose["scheduledDate"] == "2026-03-02T08:00:00.000Z")
        #expect(dose["medication"]?["codings"]?.arrayValue?.first?["code"] == "310965" && dose["medication"]?["displayText"] == "Ibuprofen 200 MG Oral Tablet")
        #expect(dose["start"] == "2026-03-02T08:00:00.000Z", "kept as the instant sent")
        for row in [mood, try #require(try h.service.record(.medicationDose, h.user, uuid(2)))] {
            #expect(try RecordRow(stored: row.stored) == row)
            var binary: [UInt8] = []
            row.writeStored(to: &binary)
            #expect(try binary.withUnsafeBytes { raw in var reader = BinaryReader(raw); return try RecordRow(binaryStored: &reader) } == row)
        }

        // The same again: nothing written. A changed one: replaced.
        let again = try h.service.ingest(h.user, IngestRequest(records: sent), now: now)
        #expect(again.unchanged == 2 && again.records.isEmpty)
        let changed = try h.service.ingest(h.user, IngestRequest(records: try records([Self.mood(1, valence: -0.2, labels: ["stressed"])], [])), now: now)
        #expect(changed.records == [.stateOfMind: 1])
        #expect(try h.service.record(.stateOfMind, h.user, uuid(1))?.json(uuid(1))["labels"] == ["stressed"])
        // A UUID moves between kinds as it does between samples and workouts: the old row goes.
        try h.service.ingest(h.user, IngestRequest(records: try records([], [Self.dose(1, status: "skipped")])), now: now)
        #expect(try h.service.record(.stateOfMind, h.user, uuid(1)) == nil)
        #expect(try h.service.record(.medicationDose, h.user, uuid(1))?.json(uuid(1))["logStatus"] == "skipped")
    }

    @Test func theyAreDeletedReplacedByDeviceAndCountedAgainstTheQuota() throws {
        let h = try Harness()
        try h.service.ingest(h.user, IngestRequest(deviceId: "phone", zone: .utc, records: try records([Self.mood(1)], [Self.dose(2)])), now: now)
        let replaced = try h.service.ingest(h.user, IngestRequest(deviceId: "phone", zone: .utc, records: try records([], [Self.dose(2)]),
                                                                  replaceDays: [day("2026-03-02")]), now: now)
        #expect(replaced.replaced == 1 && replaced.unchanged == 1)
        #expect(try h.service.record(.stateOfMind, h.user, uuid(1)) == nil)
        #expect(try h.service.delete(h.user, uuids: [uuid(2), uuid(9)]) == DeleteReport(deleted: 1, unknown: 1, daysRecomputed: []))
        #expect(try h.service.record(.medicationDose, h.user, uuid(2)) == nil)

        let limited = HealthService(store: h.store, tables: h.tables, cursorSecrets: [Array("s".utf8)], healthItemsPerUser: 2)
        try limited.ingest(h.user, IngestRequest(records: try records([Self.mood(1)], [Self.dose(2)])), now: now)
        #expect(throws: HealthError.quota(2)) { try limited.ingest(h.user, IngestRequest(records: try records([Self.mood(3)], [])), now: now) }
    }

    @Test func badMembersAreRefusedOnTheirPath() throws {
        func refused(_ mood: JSON? = nil, _ dose: JSON? = nil) -> String? {
            do {
                _ = try records(mood.map { [$0] } ?? [], dose.map { [$0] } ?? [])
                return nil
            } catch let error as FieldError { return error.field } catch { return "\(error)" }
        }
        func with(_ base: JSON, _ key: String, _ value: JSON?) -> JSON {
            var o = base.objectValue!
            o[key] = value
            return .object(o)
        }
        let mood = Self.mood(1), dose = Self.dose(2)
        #expect(refused(with(mood, "valence", 1.5)) == "params.stateOfMind[0].valence")
        #expect(refused(with(mood, "kind", "weeklyMood")) == "params.stateOfMind[0].kind")
        #expect(refused(with(mood, "labels", ["calm", "grumpy"])) == "params.stateOfMind[0].labels[1]")
        #expect(refused(with(mood, "labels", ["calm", "calm"])) == "params.stateOfMind[0].labels[1]")
        #expect(refused(with(mood, "associations", ["pets"])) == "params.stateOfMind[0].associations[0]")
        #expect(refused(with(mood, "value", 3)) == "params.stateOfMind[0].value")
        #expect(refused(with(mood, "valence", nil)) == "params.stateOfMind[0].valence")
        #expect(refused(nil, with(dose, "logStatus", "took")) == "params.medicationDoses[0].logStatus")
        #expect(refused(nil, with(dose, "doseQuantity", -1)) == "params.medicationDoses[0].doseQuantity")
        #expect(refused(nil, with(dose, "scheduledDate", "yesterday")) == "params.medicationDoses[0].scheduledDate")
        #expect(refused(nil, with(dose, "medication", ["codings": []])) == "params.medicationDoses[0].medication.displayText")
        #expect(refused(nil, with(dose, "medication", ["displayText": "x", "codings": [["system": "rx"]]])) == "params.medicationDoses[0].medication.codings[0].code")
        #expect(refused(nil, with(dose, "medication", nil)) == "params.medicationDoses[0].medication")
        // Optional members may be left out.
        #expect(refused(with(with(mood, "labels", nil), "valenceClassification", nil), ["uuid": .string(uuid(3)), "start": "2026-03-02T09:00:00Z",
                        "end": "2026-03-02T09:00:00Z", "logStatus": "notLogged", "medication": ["displayText": "x"]]) == nil)
    }
}
