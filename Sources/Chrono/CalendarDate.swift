/// A proleptic Gregorian calendar date ("YYYY-MM-DD") that is known to exist.
public struct CalendarDate: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let year: Int
    public let month: Int
    public let day: Int

    /// A date, or nil when it does not exist (2025-02-30) or lies outside years 1...9999.
    public init?(year: Int, month: Int, day: Int) {
        guard (1...9999).contains(year), (1...12).contains(month),
              day >= 1, day <= CalendarDate.daysIn(month: month, year: year) else { return nil }
        self.year = year
        self.month = month
        self.day = day
    }

    /// Parses exactly "YYYY-MM-DD"; nil for any other shape or a date that does not exist.
    public init?(_ text: String) {
        let b = Array(text.utf8)
        guard b.count == 10, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"),
              let y = digits(b, 0, 4), let m = digits(b, 5, 2), let d = digits(b, 8, 2) else { return nil }
        self.init(year: y, month: m, day: d)
    }

    /// Whether `year` is a Gregorian leap year.
    public static func isLeap(_ year: Int) -> Bool {
        (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    }

    /// Days in `month` of `year`.
    public static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 (negative before), by Howard Hinnant's days_from_civil.
    public var daysSinceEpoch: Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    /// The date `days` after 1970-01-01 (civil_from_days).
    public init(daysSinceEpoch days: Int) {
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        day = doy - (153 * mp + 2) / 5 + 1
        month = mp < 10 ? mp + 3 : mp - 9
        year = yoe + era * 400 + (month <= 2 ? 1 : 0)
    }

    /// The date `n` days later (earlier when negative).
    public func adding(days n: Int) -> CalendarDate {
        CalendarDate(daysSinceEpoch: daysSinceEpoch + n)
    }

    /// ISO 8601 day of the week: 1 for Monday through 7 for Sunday (1970-01-01 was a Thursday).
    public var isoWeekday: Int {
        let d = (daysSinceEpoch + 3) % 7
        return (d < 0 ? d + 7 : d) + 1
    }

    /// The ISO 8601 week this date lies in, as `YYYY-Www`: weeks start on Monday, and week 1 is the one
    /// holding the year's first Thursday, so the week's year can differ from the date's.
    public var isoWeek: String {
        let thursday = adding(days: 4 - isoWeekday)
        let jan1 = CalendarDate(year: thursday.year, month: 1, day: 1)!
        let week = (thursday.daysSinceEpoch - jan1.daysSinceEpoch) / 7 + 1
        let year = String(thursday.year)
        return String(repeating: "0", count: max(0, 4 - year.count)) + year + (week < 10 ? "-W0" : "-W") + String(week)
    }

    public static func < (a: CalendarDate, b: CalendarDate) -> Bool {
        (a.year, a.month, a.day) < (b.year, b.month, b.day)
    }

    /// "YYYY-MM-DD", written digit by digit: dates are table keys, formatted on every request.
    public var description: String {
        // A year outside 0...9999 (only from arithmetic on a bad stored instant) is written plainly.
        guard (0...9999).contains(year) else { return "\(year)-\(month < 10 ? "0" : "")\(month)-\(day < 10 ? "0" : "")\(day)" }
        return String(unsafeUninitializedCapacity: 10) { out in
            func put(_ value: Int, width: Int, at start: Int) {
                var v = value
                for k in stride(from: width - 1, through: 0, by: -1) {
                    out[start + k] = UInt8(ascii: "0") + UInt8(v % 10)
                    v /= 10
                }
            }
            put(year, width: 4, at: 0)  // years are 1...9999
            out[4] = UInt8(ascii: "-")
            put(month, width: 2, at: 5)
            out[7] = UInt8(ascii: "-")
            put(day, width: 2, at: 8)
            return 10
        }
    }
}

/// Reads `count` ASCII digits at `start` as a number.
func digits(_ b: [UInt8], _ start: Int, _ count: Int) -> Int? {
    guard start + count <= b.count else { return nil }
    var n = 0
    for i in start..<(start + count) {
        let c = b[i]
        guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
        n = n * 10 + Int(c - UInt8(ascii: "0"))
    }
    return n
}

/// Zero-pads a non-negative number to `width` digits.
func pad(_ n: Int, _ width: Int) -> String {
    let s = String(n)
    return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
}
