import Chrono
import JSON
import Foundation
import Testing
import TestSupport
@testable import Health

/// A contribution covering all of its sample (no day boundary inside), from minute `from` to minute `to`.
private func share(_ from: Int64, _ to: Int64, _ value: Double, rank: Int) -> Contribution {
    Contribution(start: from * 60_000, end: to * 60_000, value: value, duration: (to - from) * 60_000, rank: rank)
}

@Suite struct MergeTests {
    @Test func aPhoneAndAWatchRecordingTheSameWalkCountItOnce() {
        // Same ten minutes: the watch (rank 0) wins all of it.
        #expect(HealthRules.mergedSum([share(0, 10, 1000, rank: 1), share(0, 10, 980, rank: 0)]) == 980)
    }

    @Test func aWatchGapIsFilledByThePhone() {
        // Watch 0-10 min: 600. Phone 0-30 min: 1500 (50 a minute); it counts for minutes 10-30 only: 1000.
        #expect(HealthRules.mergedSum([share(0, 30, 1500, rank: 1), share(0, 10, 600, rank: 0)]) == 1600)
    }

    @Test func partialOverlapsAreProrated() {
        // Phone 0-10 min, 1000 (100 a minute); watch 5-15 min, 600 (60 a minute).
        // 0-5: phone 500. 5-10: watch 300. 10-15: watch 300.
        #expect(HealthRules.mergedSum([share(0, 10, 1000, rank: 1), share(5, 15, 600, rank: 0)]) == 1100)
    }

    @Test func threeSources() {
        // Watch 0-10: 100. Phone 5-20: 300 (20 a minute). Another app 0-30: 600 (20 a minute).
        // 0-10 watch 100; 10-20 phone 200; 20-30 the app 200.
        let shares = [share(0, 30, 600, rank: 2), share(5, 20, 300, rank: 1), share(0, 10, 100, rank: 0)]
        #expect(HealthRules.mergedSum(shares) == 500)
        #expect(HealthRules.mergedSum(shares.reversed()) == 500)
    }

    @Test func theWorkedExampleOfProtocolHealthMd() {
        let phone = Origin(sourceName: "iPhone", deviceModel: "iPhone")
        let watch = Origin(sourceName: "Apple Watch", deviceModel: "Watch")
        let garmin = Origin(sourceName: "Connect")
        let ranks = HealthRules.ranks([phone, watch, garmin].map { SourceRef($0) }).reduce(into: [Origin: Int]()) { $0[$1.key.origin] = $1.value }
        let total = HealthRules.mergedSum([share(0, 10, 1000, rank: ranks[phone]!), share(5, 15, 600, rank: ranks[watch]!),
                                           share(0, 30, 600, rank: ranks[garmin]!)])
        #expect(total == 1400)  // 500 + 600 + 300, where a plain sum says 2200
    }

    @Test func samplesOfOneSourceAddUpEvenWhereTheyOverlap() {
        #expect(HealthRules.mergedSum([share(0, 10, 100, rank: 0), share(5, 15, 100, rank: 0)]) == 200)
    }

    @Test func anInstantCountsWholeUnlessABetterSourceCoversIt() {
        let daily = Contribution(start: 600_000, end: 600_000, value: 17, duration: 0, rank: 1)
        #expect(HealthRules.mergedSum([daily]) == 17)
        #expect(HealthRules.mergedSum([daily, share(0, 60, 50, rank: 0)]) == 50)
        #expect(HealthRules.mergedSum([daily, share(0, 60, 50, rank: 2)]) == 67)
    }

    @Test func sourcesRankWatchThenIPhoneThenOthersThenName() {
        let watch = Origin(sourceName: "Zed", deviceModel: "Watch")
        let phone = Origin(sourceName: "Health", deviceModel: "iPhone")
        let garmin = Origin(sourceName: "Connect")
        let other = Origin(sourceName: "Another")
        let byName = Origin(sourceName: "马林康的Apple\u{00A0}Watch")  // no device: the source name tells
        let ranks = HealthRules.ranks([other, garmin, phone, watch, byName].map { SourceRef($0) }).reduce(into: [Origin: Int]()) { $0[$1.key.origin] = $1.value }
        #expect(ranks[watch]! < ranks[phone]!)
        #expect(ranks[byName]! < ranks[phone]!)
        #expect(ranks[phone]! < ranks[other]!)
        #expect(ranks[other]! < ranks[garmin]!)
    }

    @Test func eachAggregationStyleMakesItsOwnFigure() {
        let timed: [(value: Double, duration: Int64)] = [(60, 600_000), (90, 1_200_000)], instants: [(value: Double, duration: Int64)] = [(60, 0), (90, 0), (75, 0)]
        // Temporally weighted: 60 for 10 minutes and 90 for 20 minutes, (600 + 1800) / 30 = 80; instants by count.
        #expect(HealthRules.figure(.discreteTemporallyWeighted, timed) == .stats(avg: 80, min: 60, max: 90, count: 2))
        #expect(HealthRules.figure(.discreteTemporallyWeighted, instants) == .stats(avg: 75, min: 60, max: 90, count: 3))
        // Arithmetic: by count whatever the durations.
        #expect(HealthRules.figure(.discreteArithmetic, timed) == .stats(avg: 75, min: 60, max: 90, count: 2))
        // Sound: the level of the mean energy, 10 log10((10^6 x 10 + 10^9 x 20) / 30) = 88.241 dB, not 80.
        #expect(HealthRules.figure(.discreteEquivalentContinuousLevel, timed) == .stats(avg: 88.241, min: 60, max: 90, count: 2))
        // Category: how many, and for how long (an instant counts, for no time).
        #expect(HealthRules.figure(.category, timed + [(1, 0)]) == .events(count: 3, durationMs: 1_800_000))
        for style in Aggregation.allCases where style != .cumulative { #expect(HealthRules.figure(style, []) == nil) }
    }

    @Test func aWeekOfSoundLevelsAveragesTheirEnergy() {
        let audio = HealthType.named("HKQuantityTypeIdentifierEnvironmentalAudioExposure")!
        let day = { (level: Double, n: Int64) in SummaryRow(metrics: [audio.code: .stats(avg: level, min: level, max: level, count: n)]) }
        // Three days at 65 dB and one at 80 dB (one sample each): 10 log10((3 x 10^6.5 + 10^8) / 4) = 74.373.
        let week = HealthRules.combine([day(65, 1), day(65, 1), day(65, 1), day(80, 1)])
        #expect(week.metrics[audio.code] == .stats(avg: 74.373, min: 65, max: 80, count: 4))
    }

    @Test func sleepStagesMergeByPriorityAndInBedIsApart() {
        let h: Int64 = 3_600_000
        // Watch (rank 0): core 0-2h, deep 2-3h, awake 3-3.5h. Another app (rank 1): unspecified 0-5h, in bed 0-6h.
        // Watch time decides 0-3.5h; the app fills 3.5-5h with unspecified. In bed: 6h.
        let totals = HealthRules.sleep([
            (.asleepCore, 0, 2 * h, 0), (.asleepDeep, 2 * h, 3 * h, 0), (.awake, 3 * h, 7 * h / 2, 0),
            (.asleepUnspecified, 0, 5 * h, 1), (.inBed, 0, 6 * h, 1),
        ])
        #expect(totals.ms[.asleepCore] == 2 * h)
        #expect(totals.ms[.asleepDeep] == h)
        #expect(totals.ms[.awake] == h / 2)
        #expect(totals.ms[.asleepUnspecified] == 3 * h / 2)
        #expect(totals.ms[.inBed] == 6 * h)
        #expect(totals.asleepMs == 9 * h / 2)
    }

    @Test func copiesOfOneWorkoutCountOnce() {
        func run(_ start: Int64) -> WorkoutRow {
            WorkoutRow(activityType: "running", durationSeconds: 1800, energyKcal: 300, distanceMeters: 5000,
                       placement: Placement(start: start, end: start + 1_800_000, zone: "UTC", day: CalendarDate("2026-01-01")!, origin: Origin(), deviceId: nil))
        }
        let totals = HealthRules.workouts([run(0), run(0), run(0), run(3_600_000)])
        #expect(totals["running"] == WorkoutTotals(count: 2, durationSeconds: 3600, energyKcal: 600, distanceMeters: 10_000))
    }
}

@Suite struct CalendarTests {
    @Test func isoWeeks() {
        #expect(day("2026-01-01").isoWeek == "2026-W01")  // a Thursday
        #expect(day("2027-01-01").isoWeek == "2026-W53")  // a Friday: the last week of 2026
        #expect(day("2024-12-30").isoWeek == "2025-W01")  // a Monday whose Thursday is in 2025
        #expect(day("2026-03-02").isoWeek == "2026-W10")
        #expect(day("2026-03-08").isoWeek == "2026-W10")  // Sunday ends the week
        #expect(day("2026-03-09").isoWeek == "2026-W11")
        #expect(day("2026-03-02").isoWeekday == 1)
        #expect(day("2026-03-08").isoWeekday == 7)
    }

    @Test func daylightSavingDaysLast23And25Hours() throws {
        let berlin = try #require(Zone("Europe/Berlin"))
        func hours(_ d: String) -> Int64 {
            (berlin.startOfDay(day(d).adding(days: 1)).milliseconds - berlin.startOfDay(day(d)).milliseconds) / 3_600_000
        }
        #expect(hours("2026-03-29") == 23)
        #expect(hours("2026-10-25") == 25)
        #expect(hours("2026-06-01") == 24)
        #expect(berlin.startOfDay(day("2026-03-29")) == at("2026-03-28T23:00:00Z"))
    }

    @Test func aDayWhoseMidnightDoesNotExistStartsAtTheChange() throws {
        // Santiago moved its clocks from 00:00 to 01:00 on 2022-09-11.
        let santiago = try #require(Zone("America/Santiago"))
        #expect(santiago.startOfDay(day("2022-09-11")) == at("2022-09-11T04:00:00Z"))
    }

    @Test func aNightCountsTowardTheDayItEnds() throws {
        let berlin = try #require(Zone("Europe/Berlin"))
        #expect(HealthRules.sleepDay(end: at("2026-03-01T22:30:00+01:00").milliseconds, in: berlin) == day("2026-03-02"))
        #expect(HealthRules.sleepDay(end: at("2026-03-02T07:00:00+01:00").milliseconds, in: berlin) == day("2026-03-02"))
        #expect(HealthRules.sleepDay(end: at("2026-03-02T15:00:00+01:00").milliseconds, in: berlin) == day("2026-03-02"))
        #expect(HealthRules.sleepDay(end: at("2026-03-02T18:00:00+01:00").milliseconds, in: berlin) == day("2026-03-02"))
        #expect(HealthRules.sleepDay(end: at("2026-03-02T18:00:01+01:00").milliseconds, in: berlin) == day("2026-03-03"))
    }

    @Test func aSampleAcrossMidnightSplitsByTime() throws {
        let utc = Zone.utc
        let parts = HealthRules.split(start: at("2026-01-01T23:00:00Z").milliseconds, end: at("2026-01-02T01:00:00Z").milliseconds, in: utc) {
            utc.startOfDay($0).milliseconds
        }
        #expect(parts.map(\.day) == [day("2026-01-01"), day("2026-01-02")])
        #expect(parts.map { $0.end - $0.start } == [3_600_000, 3_600_000])
    }
}

@Suite struct DocumentationTests {
    /// protocol/health.md's type table, made from the kernel's table. Regenerate it with
    /// `HEALTHKERNEL_UPDATE_DOCS=1 swift test --filter protocolHealthMdCarriesTheWholeTypeTable`.
    static func typeTable() -> String {
        func number(_ x: Double) -> String { String(format: "%.6g", x) }
        var lines = ["| type | aggregation | units (canonical first, then examples as factor, offset; any HealthKit unit of the same dimension converts) |", "|---|---|---|"]
        for type in HealthType.all {
            var units = type.units.enumerated().map { i, u in
                i == 0 || (u.factor == 1 && u.offset == 0) ? "`\(u.unit)`"
                    : "`\(u.unit)` (×\(number(u.factor))\(u.offset == 0 ? "" : (u.offset < 0 ? " − " : " + ") + number(abs(u.offset))))"
            }.joined(separator: ", ")
            if type.units.isEmpty {
                units = type.enumeration.map { "none; value: " + $0.map { "`\($0.name)` (\($0.raw))" }.joined(separator: ", ") } ?? "none; value: the raw value"
            }
            if type.isFraction { units += ", kept as a fraction" }
            lines.append("| `\(type.identifier)` | \(type.aggregation.rawValue) | \(units) |")
        }
        return lines.joined(separator: "\n")
    }

    @Test func protocolHealthMdCarriesTheWholeTypeTable() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let url = root.appendingPathComponent("protocol/health.md")
        let doc = try String(contentsOf: url, encoding: .utf8)
        let begin = try #require(doc.range(of: "<!-- types:begin -->\n")), end = try #require(doc.range(of: "<!-- types:end -->"))
        let table = Self.typeTable() + "\n"
        if ProcessInfo.processInfo.environment["HEALTHKERNEL_UPDATE_DOCS"] == "1" {
            try (String(doc[..<begin.upperBound]) + table + String(doc[end.lowerBound...])).write(to: url, atomically: true, encoding: .utf8)
            return
        }
        #expect(String(doc[begin.upperBound..<end.lowerBound]) == table,
                "protocol/health.md's type table differs from the kernel's: HEALTHKERNEL_UPDATE_DOCS=1 swift test --filter protocolHealthMdCarriesTheWholeTypeTable")
        for stage in SleepStage.allCases { #expect(doc.contains("`\(stage.rawValue)`")) }
    }
}

@Suite struct StoredFormTests {
    @Test func samplesWriteTheBytesTheirStoredFormWould() throws {
        let bare = Placement(start: 1, end: 2, zone: "UTC", day: CalendarDate("1970-01-01")!, origin: Origin(), deviceId: nil)
        let full = Placement(start: 1_772_323_200_000, end: 1_772_323_260_000, zone: "Europe/Berlin", day: CalendarDate("2026-03-01")!,
                             origin: Origin(sourceName: "Apple Watch", bundleId: "com.apple.health.1", deviceModel: "Watch", deviceName: "W"),
                             deviceId: "watch-1")
        for row in [SampleRow(type: HealthType.all[0], value: 12.5, placement: bare), SampleRow(type: HealthType.all[10], value: 61, placement: full)] {
            try Self.expectStoredFormsAgree(row)
        }
    }

    /// The row's direct binary form is its stored JSON's, and both read back to the row.
    static func expectStoredFormsAgree(_ row: SampleRow) throws {
        var direct: [UInt8] = []
        row.writeStored(to: &direct)
        var generic: [UInt8] = []
        row.stored.writeBinary(to: &generic)
        #expect(direct == generic)
        #expect(try SampleRow(stored: row.stored) == row)
        let back = try direct.withUnsafeBytes { raw in
            var reader = BinaryReader(raw)
            return try SampleRow(binaryStored: &reader)
        }
        #expect(back == row)
    }
}

/// #51 item 2: units are read with HealthKit's unit grammar (`HKUnit(from:)`), not a list of spellings.
@Suite struct UnitGrammarTests {
    func value(_ v: Double, _ unit: String, as type: String) -> Double? { HealthType.named(type)!.canonical(v, unit: unit) }

    @Test func aRealIPhonesGlucoseInAnyPrecisionOfItsMolarMassConverts() throws {
        let glucose = "HKQuantityTypeIdentifierBloodGlucose"
        // HKUnit.unitString on a phone set to mmol/L, and the spelling other tools print.
        for unit in ["mmol<180.1558800000541>/L", "mmol<180.15588000005408>/L", "mmol<180.16>/L", "mmol/L"] {
            let mgdl = try #require(value(5.5, unit, as: glucose), "\(unit)")
            #expect(abs(mgdl - 5.5 * 18.0156) < 0.01, "\(unit): \(mgdl)")
        }
        #expect(value(99, "mg/dL", as: glucose) == 99)
        #expect(abs(value(0.99, "g/L", as: glucose)! - 99) < 1e-9)
        #expect(value(5.5, "mmol<0>/L", as: glucose) == nil)
        #expect(value(5.5, "mmol<x>/L", as: glucose) == nil)
    }

    @Test func compoundUnitsPrefixesAndPowersFollowHealthKit() throws {
        let cases: [(String, String, Double, Double)] = [
            ("HKQuantityTypeIdentifierHeartRate", "count/min", 60, 60),
            ("HKQuantityTypeIdentifierHeartRate", "count/s", 1, 60),
            ("HKQuantityTypeIdentifierHeartRate", "Hz", 1, 60),
            ("HKQuantityTypeIdentifierVO2Max", "mL/kg·min", 40, 40),
            ("HKQuantityTypeIdentifierVO2Max", "ml/(kg*min)", 40, 40),
            ("HKQuantityTypeIdentifierVO2Max", "L/kg·hr", 2.4, 40),
            ("HKQuantityTypeIdentifierPhysicalEffort", "kcal/hr·kg", 3, 3),
            ("HKQuantityTypeIdentifierPhysicalEffort", "kcal/(kg·hr)", 3, 3),
            ("HKQuantityTypeIdentifierPhysicalEffort", "cal/kg·s", 1, 3.6),
            ("HKQuantityTypeIdentifierDistanceWalkingRunning", "km", 1.5, 1500),
            ("HKQuantityTypeIdentifierDistanceWalkingRunning", "dam", 1, 10),
            ("HKQuantityTypeIdentifierDietaryCaffeine", "mcg", 1000, 0.001),
            ("HKQuantityTypeIdentifierDietaryWater", "fl_oz_imp", 1, 28.4130625),
            ("HKQuantityTypeIdentifierBodyTemperature", "degF", 98.6, 37),
            ("HKQuantityTypeIdentifierBodyTemperature", "K", 310.15, 37),
            ("HKQuantityTypeIdentifierBloodPressureSystolic", "kPa", 16, 120.0098),
            ("HKQuantityTypeIdentifierBloodPressureSystolic", "cmAq", 100, 73.5559),
            ("HKQuantityTypeIdentifierActiveEnergyBurned", "kJ", 4.184, 1),
            ("HKQuantityTypeIdentifierActiveEnergyBurned", "Cal", 2, 2),
            ("HKQuantityTypeIdentifierWalkingSpeed", "km/hr", 3.6, 1),
            ("HKQuantityTypeIdentifierWalkingSpeed", "m·s^-1", 2, 2),
            ("HKQuantityTypeIdentifierElectrodermalActivity", "S", 1, 1_000_000),
        ]
        for (type, unit, sent, expected) in cases {
            let got = try #require(value(sent, unit, as: type), "\(type) in \(unit)")
            #expect(abs(got - expected) < 1e-3 * max(1, abs(expected)), "\(type) in \(unit): \(got), not \(expected)")
        }
        // Units of another dimension, and strings that are no unit at all.
        for (type, unit) in [("HKQuantityTypeIdentifierHeartRate", "count"), ("HKQuantityTypeIdentifierStepCount", "%"),
                             ("HKQuantityTypeIdentifierDistanceWalkingRunning", "s"), ("HKQuantityTypeIdentifierBodyMass", "mol"),
                             ("HKQuantityTypeIdentifierHeartRate", "count/"), ("HKQuantityTypeIdentifierHeartRate", "count//min"),
                             ("HKQuantityTypeIdentifierHeartRate", "(count/min"), ("HKQuantityTypeIdentifierHeartRate", "furlong/min"),
                             ("HKQuantityTypeIdentifierHeartRate", "count/min^"), ("HKQuantityTypeIdentifierDistanceWalkingRunning", "xm"),
                             ("HKQuantityTypeIdentifierBodyMass", "kkg"), ("HKQuantityTypeIdentifierDistanceWalkingRunning", "m^10")] {
            #expect(value(1, unit, as: type) == nil, "\(type) took \(unit)")
        }
        #expect(HealthKitUnit(String(repeating: "(", count: 50) + "m" + String(repeating: ")", count: 50)) == nil, "nesting is bounded")
    }

    /// Every unit string, type by type, of the real Health export in `shared/testdata/healthkit`.
    @Test func everyUnitOfARealHealthExportConverts() throws {
        let folder = try #require(HealthKitVectors.folder, "the HealthKit test data (shared/testdata/healthkit) is not on this machine")
        let xml = try String(contentsOf: folder.appendingPathComponent("garmin-connect-iphone-export-excerpt.xml"), encoding: .utf8)
        var seen = Set<String>()
        for line in xml.split(separator: "\n") where line.contains("<Record ") && line.contains(" unit=\"") {
            func attribute(_ name: String) -> String? {
                guard let r = line.range(of: " \(name)=\"") else { return nil }
                return String(line[r.upperBound...].prefix { $0 != "\"" })
            }
            guard let typeName = attribute("type"), let unit = attribute("unit"), let value = attribute("value").flatMap(Double.init) else { continue }
            guard seen.insert(typeName + " " + unit).inserted else { continue }
            let type = try #require(HealthType.named(typeName), "\(typeName)")
            #expect(type.canonical(value, unit: unit) != nil, "\(typeName) in \(unit)")
        }
        #expect(seen.count >= 6, "\(seen)")
    }
}

/// The public HealthKit material in `../shared/testdata/healthkit` (never copied into the repository).
enum HealthKitVectors {
    static let folder = testdataFolder("healthkit")
}
