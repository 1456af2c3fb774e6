import Chrono
#if canImport(Glibc)
import Glibc
#endif

/// A sample's share of one local day: the part of its interval inside the day, and its whole value and
/// interval, from which that part's share is prorated.
public struct Contribution: Sendable, Equatable {
    public var start: Int64
    public var end: Int64
    /// The whole sample's value and interval.
    public var value: Double
    public var duration: Int64
    /// Source priority: lower wins (see `HealthRules.ranks`).
    public var rank: Int

    public init(start: Int64, end: Int64, value: Double, duration: Int64, rank: Int) {
        self.start = start
        self.end = end
        self.value = value
        self.duration = duration
        self.rank = rank
    }
}

/// The health rules, as pure functions: where items fall in local days, how sources merge, and what
/// a day and a week add up to.
public enum HealthRules {
    /// The longest interval an item may have.
    public static let maxDurationMs: Int64 = 7 * 86_400_000
    /// Items may end this far past the kernel's clock (a device clock running ahead).
    public static let futureAllowanceMs: Int64 = 86_400_000
    /// Most items in one ingest.
    public static let maxItems = 100_000
    /// Ingests bigger than this log their progress.
    public static let largeIngest = 10_000
    /// The type identifier sleep samples rank their sources under.
    public static let sleepType = "HKCategoryTypeIdentifierSleepAnalysis"
    /// A night runs from 18:00 local to 18:00 local the next day, and counts toward the day it ends on.
    static let nightShiftMs: Int64 = 6 * 3_600_000

    // MARK: Orders

    /// The order of workouts and sleep: local day, start, uuid. Fixed-width ASCII that sorts as the
    /// values do: the day as 5 digits (days since 1970 plus 10,000, so a local day just before 1970
    /// fits), the start as 8 characters of a sorted base 64. What precedes the uuid is at most 15
    /// bytes, which the store keeps inline with no heap string (see `OrderKey` in the store).
    public static func itemOrder(day: CalendarDate, start: Int64, uuid: String) -> String {
        orderKey(nil, day, start, uuid)
    }

    private static func orderKey(_ type: HealthType?, _ day: CalendarDate, _ start: Int64, _ uuid: String) -> String {
        orderHead(type, day: day, start: start) + uuid
    }

    /// What precedes the uuid in an order key (the store's second order of the health tables):
    /// `typePrefix` (samples), `dayCode` and `startCode`, 15 bytes at most (a string with no heap storage).
    public static func orderHead(_ type: HealthType?, day: CalendarDate, start: Int64) -> String {
        (type.map(typePrefix) ?? "") + dayCode(day) + startCode(start)
    }

    /// The order keys of one type's items (or, with nil, workouts' or sleep's) on days `from` through `to`.
    public static func dayRange(_ type: HealthType?, from: CalendarDate, to: CalendarDate) -> (from: String, to: String) {
        let prefix = type.map(typePrefix) ?? ""
        return (prefix + dayCode(from), prefix + dayCode(to) + "~")
    }

    /// Whether a cursor's position has today's order key form (older kernels used `day|start|uuid`).
    public static func isItemOrder(_ position: String) -> Bool { position.utf8.count > 13 && !position.contains("|") }

    /// Two characters per type: codes below 90 as two digits (as every order key written before the type
    /// table grew), later codes as a letter and a sorted base-64 digit. Fixed width, so no type's prefix
    /// begins another's; room for 90 + 26 x 64 types. Every type the table lacks shares `~~`: they are not
    /// summarised, so nothing reads them by type and day.
    static func typePrefix(_ type: HealthType) -> String {
        guard type.isKnown else { return unknownPrefix }
        let code = type.code
        if code < 90 { return (code < 10 ? "0" : "") + String(code) }
        let n = code - 90
        precondition(n < 26 * 64, "type codes fit two characters in order keys")
        return String(decoding: [UInt8(ascii: "A") + UInt8(n / 64), sortedDigits[n % 64]], as: UTF8.self)
    }

    static let unknownPrefix = "~~"

    static func dayCode(_ day: CalendarDate) -> String {
        let n = min(max(day.daysSinceEpoch + 10_000, 0), 99_999)
        let digits = String(n)
        return String(repeating: "0", count: 5 - digits.count) + digits
    }

    /// A sorted base 64 alphabet: ASCII order is digit order.
    private static let sortedDigits = Array("-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz".utf8)

    static func startCode(_ start: Int64) -> String {
        var v = UInt64(max(start, 0))
        return String(unsafeUninitializedCapacity: 8) { out in
            for i in (0..<8).reversed() {
                out[i] = sortedDigits[Int(v & 63)]
                v >>= 6
            }
            return 8
        }
    }

    // MARK: Days

    /// The local day an item starting at `start` in `zone` starts on.
    public static func day(_ start: Int64, in zone: Zone) -> CalendarDate {
        zone.localDate(at: Timestamp(milliseconds: start))
    }

    /// The day a sleep sample counts toward: the local day of its end, where days for sleep turn at 18:00,
    /// so a night's samples all count toward the morning it ends on, and an afternoon nap toward its day.
    public static func sleepDay(end: Int64, in zone: Zone) -> CalendarDate {
        let local = end + Int64(zone.offsetSeconds(at: Timestamp(milliseconds: end))) * 1000
        // An end at exactly 18:00 still belongs to that day.
        return Timestamp(milliseconds: local + nightShiftMs - 1).utcDate
    }

    /// The local days `[start, end)` touches in `zone`, each with the part of the interval inside it
    /// (an instant: its own day). `dayStart` gives the first instant of a local day.
    public static func split(start: Int64, end: Int64, in zone: Zone, dayStart: (CalendarDate) -> Int64)
        -> [(day: CalendarDate, start: Int64, end: Int64)] {
        var day = self.day(start, in: zone)
        guard end > start else { return [(day, start, end)] }
        var parts: [(day: CalendarDate, start: Int64, end: Int64)] = []
        var from = start
        while from < end {
            let next = day.adding(days: 1)
            let boundary = dayStart(next)
            let to = min(end, boundary)
            if to > from { parts.append((day, from, to)) }
            from = max(from, to)
            day = next
        }
        return parts
    }

    // MARK: Merging

    /// A cumulative type's total over a day's contributions. Each sample's value is spread evenly over
    /// its interval; where samples of several sources overlap, only those of the highest-priority source
    /// count for that time. An instant (a zero-length sample, such as a daily total written at 23:59:59)
    /// counts whole unless a higher-priority source's sample covers its instant. Contributions are summed
    /// in a fixed order (by start, end, rank, value), so the same samples give the same total whatever
    /// order they arrived in.
    public static func mergedSum(_ contributions: [Contribution]) -> Double {
        let spans = contributions.filter { $0.duration > 0 && $0.end > $0.start }.sorted(by: canonicalOrder)
        let instants = contributions.filter { $0.duration <= 0 }.sorted(by: canonicalOrder)
        var total = 0.0
        sweep(spans, start: \.start, end: \.end) { a, b, active in
            guard let best = active.map(\.rank).min() else { return }
            for s in active where s.rank == best { total += s.value * Double(b - a) / Double(s.duration) }
        }
        for p in instants where !spans.contains(where: { $0.rank < p.rank && $0.start <= p.start && p.start < $0.end }) {
            total += p.value
        }
        return rounded(total)
    }

    /// What each source (by rank) did to a day's total, by the rules of `mergedSum`: the value it counted,
    /// and the value it had where a higher-ranked source's counted instead. Each figure is in thousandths
    /// of the unit, rounded so that the counted values add up exactly to `total` (the figure shown: the
    /// largest remainders take the last thousandths), and the overridden ones to a thousandth each.
    public static func mergedShares(_ contributions: [Contribution], total: Double) -> [Int: (counted: Double, overridden: Double)] {
        let spans = contributions.filter { $0.duration > 0 && $0.end > $0.start }.sorted(by: canonicalOrder)
        let instants = contributions.filter { $0.duration <= 0 }.sorted(by: canonicalOrder)
        var counted: [Int: Double] = [:], overridden: [Int: Double] = [:]
        for c in contributions { counted[c.rank] = 0; overridden[c.rank] = 0 }
        sweep(spans, start: \.start, end: \.end) { a, b, active in
            guard let best = active.map(\.rank).min() else { return }
            for s in active {
                let share = s.value * Double(b - a) / Double(s.duration)
                if s.rank == best { counted[s.rank, default: 0] += share } else { overridden[s.rank, default: 0] += share }
            }
        }
        for p in instants {
            if spans.contains(where: { $0.rank < p.rank && $0.start <= p.start && p.start < $0.end }) {
                overridden[p.rank, default: 0] += p.value
            } else {
                counted[p.rank, default: 0] += p.value
            }
        }
        let parts = apportioned(counted, total: total)
        return Dictionary(uniqueKeysWithValues: counted.keys.map { ($0, (parts[$0] ?? 0, rounded(overridden[$0] ?? 0))) })
    }

    /// `values` rounded to thousandths so that they add up to `total` exactly (the largest-remainder
    /// method; ties by key, so the result does not depend on dictionary order).
    static func apportioned(_ values: [Int: Double], total: Double) -> [Int: Double] {
        let keys = values.keys.sorted()
        var floors = keys.map { Int64(((values[$0] ?? 0) * 1000).rounded(.down)) }
        let remainders = keys.indices.map { (values[keys[$0]] ?? 0) * 1000 - Double(floors[$0]) }
        var missing = Int64((total * 1000).rounded()) - floors.reduce(0, +)
        let order = keys.indices.sorted { (remainders[$0], -$0) > (remainders[$1], -$1) }
        var i = 0
        while missing != 0 && !order.isEmpty {
            let k = order[i % order.count]
            if missing > 0 { floors[k] += 1; missing -= 1 } else if floors[k] > 0 { floors[k] -= 1; missing += 1 }
            i += 1
            if i > 4 * order.count + Int(abs(missing)) { break }
        }
        return Dictionary(uniqueKeysWithValues: keys.indices.map { (keys[$0], Double(floors[$0]) / 1000) })
    }

    private static func canonicalOrder(_ a: Contribution, _ b: Contribution) -> Bool {
        (a.start, a.end, a.rank, a.value) < (b.start, b.end, b.rank, b.value)
    }

    /// A day's figure of a type that does not spread (`Aggregation.spreads` is false) from the samples
    /// that start on it: for discrete types the average (by count; by duration for temporally weighted
    /// types and sound levels where every sample has one; of sound energy for sound levels), minimum,
    /// maximum and count; for category types the count and total duration. O(n log n) in the samples.
    public static func figure(_ aggregation: Aggregation, _ samples: [(value: Double, duration: Int64)]) -> Metric? {
        guard !samples.isEmpty else { return nil }
        if aggregation == .category {
            return .events(count: Int64(samples.count), durationMs: samples.reduce(0) { $0 + max($1.duration, 0) })
        }
        // Sorted first, so the sum (and its last bits) does not depend on the order samples arrived in.
        let ordered = samples.sorted { ($0.value, $0.duration) < ($1.value, $1.duration) }
        let level = aggregation == .discreteEquivalentContinuousLevel
        let timed = aggregation != .discreteArithmetic && ordered.allSatisfy { $0.duration > 0 }
        var weighted = 0.0
        var weight = 0.0
        for s in ordered {
            let w = timed ? Double(s.duration) : 1
            weighted += (level ? energy(s.value) : s.value) * w
            weight += w
        }
        let avg = level ? decibels(weighted / weight) : weighted / weight
        return .stats(avg: rounded(avg), min: ordered.first!.value, max: ordered.last!.value, count: Int64(ordered.count))
    }

    /// A sound level's relative energy, and back (`10^(L/10)`, `10·log10(E)`).
    static func energy(_ decibels: Double) -> Double { pow(10, decibels / 10) }
    static func decibels(_ energy: Double) -> Double { 10 * log10(energy) }

    /// A night's sleep per stage from the samples counted toward it. In-bed time is the time any source
    /// marks in bed. The other stages are merged like cumulative samples: at each moment the
    /// highest-priority source that reports a stage decides it, and where that source reports several
    /// at once, the most specific asleep stage wins (`SleepStage.precedence`).
    public static func sleep(_ samples: [(stage: SleepStage, start: Int64, end: Int64, rank: Int)]) -> SleepTotals {
        var ms: [SleepStage: Int64] = [:]
        ms[.inBed] = unionLength(samples.filter { $0.stage == .inBed }.map { ($0.start, $0.end) })
        let stages = samples.filter { $0.stage != .inBed && $0.end > $0.start }
            .sorted { ($0.start, $0.end, $0.rank, $0.stage.precedence) < ($1.start, $1.end, $1.rank, $1.stage.precedence) }
        sweep(stages, start: \.start, end: \.end) { a, b, active in
            guard let best = active.min(by: { ($0.rank, $0.stage.precedence) < ($1.rank, $1.stage.precedence) }) else { return }
            ms[best.stage, default: 0] += b - a
        }
        return SleepTotals(ms: ms)
    }

    /// Walks the pieces of time between consecutive edges of `spans` (sorted by start), handing each
    /// piece `[a, b)` to `body` with the spans that cover it, in the order they were given.
    static func sweep<T>(_ spans: [T], start: (T) -> Int64, end: (T) -> Int64, _ body: (Int64, Int64, [T]) -> Void) {
        var bounds = Set<Int64>()
        for s in spans { bounds.insert(start(s)); bounds.insert(end(s)) }
        let edges = bounds.sorted()
        var active: [T] = []
        var next = 0
        for i in 0..<max(0, edges.count - 1) {
            let (a, b) = (edges[i], edges[i + 1])
            active.removeAll { end($0) <= a }
            while next < spans.count, start(spans[next]) <= a {
                if end(spans[next]) > a { active.append(spans[next]) }
                next += 1
            }
            body(a, b, active)
        }
    }

    /// The length of the union of intervals.
    static func unionLength(_ intervals: [(Int64, Int64)]) -> Int64 {
        var total: Int64 = 0
        var reach = Int64.min
        for (s, e) in intervals.sorted(by: { $0 < $1 }) where e > s {
            if s >= reach {
                total += e - s
                reach = e
            } else if e > reach {
                total += e - reach
                reach = e
            }
        }
        return total
    }

    /// A day's workouts by activity type. Copies of one workout (the same activity, start and end under
    /// different UUIDs, as some apps write them) count once.
    public static func workouts(_ items: [WorkoutRow]) -> [String: WorkoutTotals] {
        var seen = Set<String>()
        var out: [String: WorkoutTotals] = [:]
        let ordered = items.sorted {
            ($0.placement.start, $0.placement.end, $0.activityType, $0.durationSeconds, $0.energyKcal ?? 0, $0.distanceMeters ?? 0)
                < ($1.placement.start, $1.placement.end, $1.activityType, $1.durationSeconds, $1.energyKcal ?? 0, $1.distanceMeters ?? 0)
        }
        for w in ordered where seen.insert("\(w.activityType)|\(w.placement.start)|\(w.placement.end)").inserted {
            out[w.activityType, default: WorkoutTotals()].add(
                WorkoutTotals(count: 1, durationSeconds: w.durationSeconds, energyKcal: w.energyKcal ?? 0, distanceMeters: w.distanceMeters ?? 0))
        }
        return out.mapValues { t in
            var r = t
            r.energyKcal = rounded(t.energyKcal)
            r.distanceMeters = rounded(t.distanceMeters)
            return r
        }
    }

    // MARK: Periods

    /// Several days' summaries as one (a week): sums add up, averages are weighted by count, sleep and
    /// workouts add up.
    public static func combine(_ days: [SummaryRow]) -> SummaryRow {
        var out = SummaryRow()
        for day in days {
            for (code, m) in day.metrics {
                switch (out.metrics[code], m) {
                case (nil, _): out.metrics[code] = m
                case (.sum(let a)?, .sum(let b)): out.metrics[code] = .sum(a + b)
                case (.stats(let a, let lo, let hi, let n)?, .stats(let b, let lo2, let hi2, let n2)):
                    let count = n + n2
                    // Sound levels average their energy, not their decibels.
                    let avg = HealthType(code: code).aggregation == .discreteEquivalentContinuousLevel
                        ? decibels((energy(a) * Double(n) + energy(b) * Double(n2)) / Double(count))
                        : (a * Double(n) + b * Double(n2)) / Double(count)
                    out.metrics[code] = .stats(avg: avg, min: Swift.min(lo, lo2), max: Swift.max(hi, hi2), count: count)
                case (.events(let n, let ms)?, .events(let n2, let ms2)): out.metrics[code] = .events(count: n + n2, durationMs: ms + ms2)
                default: break
                }
            }
            for (activity, t) in day.workouts { out.workouts[activity, default: WorkoutTotals()].add(t) }
            out.sleep.add(day.sleep)
        }
        for (code, m) in out.metrics {
            switch m {
            case .sum(let v): out.metrics[code] = .sum(rounded(v))
            case .stats(let avg, let lo, let hi, let n): out.metrics[code] = .stats(avg: rounded(avg), min: lo, max: hi, count: n)
            case .events: break
            }
        }
        for (activity, t) in out.workouts {
            out.workouts[activity] = WorkoutTotals(count: t.count, durationSeconds: t.durationSeconds, energyKcal: rounded(t.energyKcal),
                                                   distanceMeters: rounded(t.distanceMeters))
        }
        return out
    }

    /// `value` to a thousandth: what floating-point sums add beyond that is noise, and keeping it would
    /// make equal data look different.
    public static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
}
