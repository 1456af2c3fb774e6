import Chrono
import DomainSupport
import JSON

/// How the elements of an Apple Health export (`export.xml`, HealthKit Export Version 11 and later) become
/// items of `health.ingest`: pure functions, so tests call them directly.
///
/// The export carries no HealthKit UUIDs, so an item's UUID is derived from what it is: a SHA-256 of its
/// kind, type, source name, start, end, value and unit (or a workout's activity, duration, energy and
/// distance) and metadata, shaped as a UUID (version 8, RFC 9562). Importing the same export again gives
/// the same UUIDs, so it changes nothing (`unchanged`); copies of one sample or workout in the export (Garmin
/// Connect writes each workout seven times, each with its own creation date, which is left out) are one
/// item. The same sample synced later from the phone comes under its real UUID; the merge counts identical
/// samples of one source name once (protocol/health.md, "Merging sources"), so it never adds twice.
public enum ExportMapping {
    /// What an element became.
    public enum Mapped: Equatable {
        case sample(JSONObject)
        case sleep(JSONObject)
        case workout(JSONObject)
        /// Not imported, and why (counted by reason in the summary).
        case skipped(String)
    }

    /// A `Record` with its `MetadataEntry` children.
    public static func record(_ a: [String: String], metadata: [(String, String)]) -> Mapped {
        guard let type = a["type"] else { return .skipped("record without a type") }
        guard let start = rfc3339(a["startDate"]), let end = rfc3339(a["endDate"]) else { return .skipped("record without valid dates") }
        var item = JSONObject()
        item["start"] = .string(start)
        item["end"] = .string(end)
        addOrigin(&item, a)
        if !metadata.isEmpty { item["metadata"] = .object(JSONObject(metadata.map { ($0.0, JSON.string($0.1)) })) }
        let value = a["value"] ?? ""
        if type == "HKCategoryTypeIdentifierSleepAnalysis" {
            guard let stage = sleepStages[value] else { return .skipped("sleep value \(value)") }
            item["stage"] = .string(stage)
            item["uuid"] = .string(uuid(["sleep", type, a["sourceName"] ?? "", start, end, stage, metadataKey(metadata)]))
            return .sleep(item)
        }
        item["type"] = .string(type)
        if type.hasPrefix("HKQuantityTypeIdentifier") {
            guard let number = Double(value), number.isFinite else { return .skipped("quantity without a numeric value") }
            item["value"] = .double(number)
            if let unit = a["unit"] { item["unit"] = .string(unit) }
        } else if type.hasPrefix("HKCategoryTypeIdentifier") {
            if let number = Double(value) { item["value"] = .double(number) } else { item["value"] = .string(categoryCase(value, type: type)) }
        } else {
            return .skipped("record type \(type.prefix(40))")
        }
        item["uuid"] = .string(uuid(["sample", type, a["sourceName"] ?? "", start, end, value, a["unit"] ?? "", metadataKey(metadata)]))
        return .sample(item)
    }

    /// A `Workout` with its `MetadataEntry` and `WorkoutStatistics` children (`statistics`: type, sum, unit).
    public static func workout(_ a: [String: String], metadata: [(String, String)], statistics: [(type: String, sum: String, unit: String)]) -> Mapped {
        guard let start = rfc3339(a["startDate"]), let end = rfc3339(a["endDate"]) else { return .skipped("workout without valid dates") }
        guard let kind = a["workoutActivityType"], kind.hasPrefix("HKWorkoutActivityType"), kind.count > 21 else { return .skipped("workout without an activity type") }
        let name = kind.dropFirst(21)
        let activity = name.prefix(1).lowercased() + name.dropFirst()
        var item = JSONObject()
        item["activityType"] = .string(activity)
        item["start"] = .string(start)
        item["end"] = .string(end)
        let seconds = (Double(a["duration"] ?? "") ?? 0) * (durationUnits[a["durationUnit"] ?? "min"] ?? 60)
        guard let from = Timestamp(rfc3339: start), let to = Timestamp(rfc3339: end) else { return .skipped("workout without valid dates") }
        let span = Double(to.milliseconds - from.milliseconds) / 1000
        item["durationSeconds"] = .int(Int64(max(0, min(seconds, span)).rounded(.down)))
        var energy = quantity(a["totalEnergyBurned"], a["totalEnergyBurnedUnit"], energyUnits)
        var distance = quantity(a["totalDistance"], a["totalDistanceUnit"], distanceUnits)
        for s in statistics {
            if energy == nil, s.type == "HKQuantityTypeIdentifierActiveEnergyBurned" { energy = quantity(s.sum, s.unit, energyUnits) }
            if distance == nil, s.type.hasPrefix("HKQuantityTypeIdentifierDistance") { distance = quantity(s.sum, s.unit, distanceUnits) }
        }
        if let energy { item["energyKcal"] = .double(energy) }
        if let distance { item["distanceMeters"] = .double(distance) }
        addOrigin(&item, a)
        if !metadata.isEmpty { item["metadata"] = .object(JSONObject(metadata.map { ($0.0, JSON.string($0.1)) })) }
        item["uuid"] = .string(uuid(["workout", activity, a["sourceName"] ?? "", start, end, String(seconds), String(energy ?? -1),
                                     String(distance ?? -1), metadataKey(metadata)]))
        return .workout(item)
    }

    /// `2020-11-28 23:59:59 +0100` as RFC 3339 (`2020-11-28T23:59:59+01:00`); nil when it is not one.
    public static func rfc3339(_ text: String?) -> String? {
        guard let text else { return nil }
        let b = Array(text.utf8)
        guard b.count == 25, b[10] == UInt8(ascii: " "), b[19] == UInt8(ascii: " "), b[20] == UInt8(ascii: "+") || b[20] == UInt8(ascii: "-"),
              b[4] == UInt8(ascii: "-"), b[13] == UInt8(ascii: ":") else { return nil }
        return String(decoding: b[0..<10], as: UTF8.self) + "T" + String(decoding: b[11..<19], as: UTF8.self)
            + String(decoding: b[20..<23], as: UTF8.self) + ":" + String(decoding: b[23..<25], as: UTF8.self)
    }

    /// `<<HKDevice: 0x…>, name:iPhone, manufacturer:Apple Inc., model:iPhone, hardware:iPhone10,1, …>`:
    /// its `name` and `model` (the address changes from record to record; nothing is keyed on it).
    public static func device(_ text: String?) -> (name: String?, model: String?) {
        guard let text, text.hasPrefix("<<HKDevice") else { return (nil, nil) }
        var fields: [String: String] = [:]
        for part in text.dropFirst().dropLast().split(separator: ",").map({ $0.hasPrefix(" ") ? $0.dropFirst() : $0 }) {
            guard let colon = part.firstIndex(of: ":") else { continue }
            fields[String(part[..<colon])] = String(part[part.index(after: colon)...])
        }
        let clean = { (v: String?) in v.flatMap { $0.isEmpty ? nil : String($0.prefix(200)) } }
        return (clean(fields["name"]), clean(fields["model"]))
    }

    static let sleepStages = [
        "HKCategoryValueSleepAnalysisInBed": "inBed", "HKCategoryValueSleepAnalysisAsleep": "asleepUnspecified",
        "HKCategoryValueSleepAnalysisAsleepUnspecified": "asleepUnspecified", "HKCategoryValueSleepAnalysisAsleepCore": "asleepCore",
        "HKCategoryValueSleepAnalysisAsleepDeep": "asleepDeep", "HKCategoryValueSleepAnalysisAsleepREM": "asleepREM",
        "HKCategoryValueSleepAnalysisAwake": "awake",
    ]
    static let durationUnits: [String: Double] = ["s": 1, "min": 60, "hr": 3600, "h": 3600, "ms": 0.001]
    static let energyUnits: [String: Double] = ["kcal": 1, "Cal": 1, "kJ": 1 / 4.184, "cal": 0.001, "J": 1 / 4184]
    static let distanceUnits: [String: Double] = ["m": 1, "km": 1000, "mi": 1609.344, "yd": 0.9144, "ft": 0.3048, "cm": 0.01]

    private static func quantity(_ value: String?, _ unit: String?, _ units: [String: Double]) -> Double? {
        guard let value, let number = Double(value), number.isFinite, number >= 0, let factor = units[unit ?? ""] else { return nil }
        return number * factor
    }

    /// `HKCategoryValueAppleStandHourStood` of `HKCategoryTypeIdentifierAppleStandHour`: `stood`.
    static func categoryCase(_ value: String, type: String) -> String {
        let name = type.hasPrefix("HKCategoryTypeIdentifier") ? String(type.dropFirst(24)) : type
        let prefix = "HKCategoryValue" + name
        guard value.hasPrefix(prefix), value.count > prefix.count else { return value }
        let rest = value.dropFirst(prefix.count)
        return rest.prefix(1).lowercased() + rest.dropFirst()
    }

    private static func addOrigin(_ item: inout JSONObject, _ a: [String: String]) {
        if let name = a["sourceName"], !name.isEmpty { item["source"] = ["name": .string(String(name.prefix(200)))] }
        let (name, model) = device(a["device"])
        if name != nil || model != nil {
            var d = JSONObject()
            if let model { d["model"] = .string(model) }
            if let name { d["name"] = .string(name) }
            item["device"] = .object(d)
        }
    }

    private static func metadataKey(_ metadata: [(String, String)]) -> String {
        metadata.sorted { $0.0 < $1.0 }.map { $0.0 + "=" + $0.1 }.joined(separator: "\u{1F}")
    }

    /// A version-8 UUID from the SHA-256 of `parts`.
    static func uuid(_ parts: [String]) -> String {
        var hex = Array(Digest.sha256Hex(parts.joined(separator: "\u{1E}")).prefix(32))
        hex[12] = "8"
        hex[16] = ["8", "9", "a", "b"][Int(String(hex[16]), radix: 16)! & 3]
        let s = String(hex)
        func part(_ from: Int, _ to: Int) -> Substring { s[s.index(s.startIndex, offsetBy: from)..<s.index(s.startIndex, offsetBy: to)] }
        return "\(part(0, 8))-\(part(8, 12))-\(part(12, 16))-\(part(16, 20))-\(part(20, 32))"
    }
}
