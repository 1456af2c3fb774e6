import Chrono
import JSON
import JSONRPC

/// The earliest day each domain accepts in its date and timestamp params (protocol/README.md, "Date
/// floors"). Without one a client could write a row for year 1 (Screen Time back to 0001-01-01 is 738,000
/// days of 256 KiB `raw`), and no real record is that old.
public enum DateFloor {
    /// Screen Time came with iOS 12 (2018): no device reported usage before.
    public static let screenTime = CalendarDate(year: 2018, month: 1, day: 1)!
    /// Meditation sessions: far older than any app that records them.
    public static let sessions = CalendarDate(year: 2000, month: 1, day: 1)!
    /// HealthKit items and days: the Unix epoch, since health records imported from older devices and
    /// apps predate HealthKit (2014) by decades, and stored times count milliseconds from 1970.
    public static let health = CalendarDate(year: 1970, month: 1, day: 1)!
}

/// A param value that holds dates (one, maybe none, or several) a floor can be checked against.
public protocol DateBounded {
    /// The path of the first date before `floor` (midnight UTC of the floor day), or nil.
    func pathBefore(_ floor: Timestamp, at path: String) -> String?
}

extension CalendarDate: DateBounded {
    public func pathBefore(_ floor: Timestamp, at path: String) -> String? {
        Int64(daysSinceEpoch) * 86_400_000 < floor.milliseconds ? path : nil
    }
}

extension Timestamp: DateBounded {
    public func pathBefore(_ floor: Timestamp, at path: String) -> String? { self < floor ? path : nil }
}

extension DayOrInstant: DateBounded {
    public func pathBefore(_ floor: Timestamp, at path: String) -> String? {
        instant(endOfDay: false).pathBefore(floor, at: path)
    }
}

extension Optional: DateBounded where Wrapped: DateBounded {
    public func pathBefore(_ floor: Timestamp, at path: String) -> String? { self?.pathBefore(floor, at: path) }
}

extension Array: DateBounded where Element: DateBounded {
    public func pathBefore(_ floor: Timestamp, at path: String) -> String? {
        for (i, element) in enumerated() { if let bad = element.pathBefore(floor, at: "\(path)[\(i)]") { return bad } }
        return nil
    }
}

extension DateFloor {
    /// Midnight UTC starting `day`.
    public static func start(of day: CalendarDate) -> Timestamp { Timestamp(milliseconds: Int64(day.daysSinceEpoch) * 86_400_000) }

    /// Refuses (`out_of_range`, naming the field) a date or timestamp before `floor`.
    public static func check(_ value: some DateBounded, notBefore floor: CalendarDate, at path: String) throws(FieldError) {
        if let bad = value.pathBefore(start(of: floor), at: path) {
            throw .outOfRange(bad, "must not be before \(floor)")
        }
    }
}

extension Param where Value: DateBounded {
    /// The same param, refusing dates before `floor` with -32602 `out_of_range`; the OpenRPC schema says so.
    public func notBefore(_ floor: CalendarDate) -> Param {
        let minimum: JSON = ["formatMinimum": .string(floor.description)]
        // A list of dates says it of its items.
        let more: JSON = if case .object(var items)? = schema["items"] {
            { items["formatMinimum"] = .string(floor.description); return ["items": .object(items)] }()
        } else { minimum }
        return checked { (value, path) throws(FieldError) in try DateFloor.check(value, notBefore: floor, at: path) }.schema(more)
    }
}

/// A checked date range of at most `maxDays` days.
public func dateRange(_ from: CalendarDate, _ to: CalendarDate, maxDays: Int) throws(FieldError) -> (CalendarDate, CalendarDate) {
    guard to >= from else { throw .outOfRange("params.to", "must not be before params.from") }
    guard to.daysSinceEpoch - from.daysSinceEpoch < maxDays else { throw .outOfRange("params.to", "must be within \(maxDays) days of params.from") }
    return (from, to)
}
