/// A POSIX TZ rule (`PST8PDT,M3.2.0,M11.1.0`), as a tz file's footer gives it for the years after its
/// last transition: a standard offset and, optionally, a daylight offset with the days it starts and ends.
struct PosixTZ: Sendable, Equatable {
    /// Seconds east of UTC in standard time.
    let standard: Int
    /// Seconds east of UTC in daylight time, with when it starts and ends (local times), if it is kept.
    let daylight: (offset: Int, start: Moment, end: Moment)?

    /// A day of the year and a time on it.
    struct Moment: Sendable, Equatable {
        enum Day: Sendable, Equatable {
            /// `Jn`: day 1...365, February 29 never counted.
            case julianNoLeap(Int)
            /// `n`: day 0...365, February 29 counted.
            case zeroBased(Int)
            /// `Mm.w.d`: weekday d (0 Sunday) of week w (5: the last) of month m.
            case monthWeekDay(month: Int, week: Int, weekday: Int)
        }
        let day: Day
        /// Seconds after local midnight (may be negative or past a day, RFC 8536).
        let time: Int
    }

    static func == (a: PosixTZ, b: PosixTZ) -> Bool {
        a.standard == b.standard && a.daylight?.offset == b.daylight?.offset && a.daylight?.start == b.daylight?.start
            && a.daylight?.end == b.daylight?.end
    }

    /// Parses `text`; nil when it is not a rule this reader understands.
    init?(_ text: String) {
        var p = Parser(bytes: Array(text.utf8))
        guard p.name(), let std = p.offset() else { return nil }
        standard = -std
        guard !p.done else {
            daylight = nil
            return
        }
        guard p.name() else { return nil }
        let dst = p.peek == UInt8(ascii: ",") ? std - 3600 : p.offset()
        guard let dst, p.eat(","), let start = p.moment(), p.eat(","), let end = p.moment(), p.done else { return nil }
        daylight = (-dst, start, end)
    }

    /// Seconds east of UTC at `seconds` since 1970.
    func offset(at seconds: Int64) -> Int {
        guard let daylight else { return standard }
        let year = Timestamp(milliseconds: (seconds + Int64(standard)) * 1000).utcDate.year
        let start = Self.instant(daylight.start, year: year) - Int64(standard)
        let end = Self.instant(daylight.end, year: year) - Int64(daylight.offset)
        let inDaylight = start < end ? (seconds >= start && seconds < end) : !(seconds >= end && seconds < start)
        return inDaylight ? daylight.offset : standard
    }

    /// Local seconds since 1970 (as if local time were UTC) of `moment` in `year`.
    static func instant(_ moment: Moment, year: Int) -> Int64 {
        guard let jan1 = CalendarDate(year: year, month: 1, day: 1) else { return 0 }
        var days = jan1.daysSinceEpoch
        switch moment.day {
        case .julianNoLeap(let n):
            days += n - 1 + (CalendarDate.isLeap(year) && n >= 60 ? 1 : 0)
        case .zeroBased(let n):
            days += n
        case .monthWeekDay(let month, let week, let weekday):
            guard let first = CalendarDate(year: year, month: month, day: 1) else { return 0 }
            // isoWeekday: 1 Monday ... 7 Sunday; POSIX: 0 Sunday ... 6 Saturday.
            let firstWeekday = first.isoWeekday % 7
            var day = 1 + (weekday - firstWeekday + 7) % 7 + (week - 1) * 7
            let length = CalendarDate.daysIn(month: month, year: year)
            while day > length { day -= 7 }
            days = first.daysSinceEpoch + day - 1
        }
        return Int64(days) * 86_400 + Int64(moment.time)
    }

    private struct Parser {
        let bytes: [UInt8]
        var at = 0

        var done: Bool { at == bytes.count }
        var peek: UInt8? { at < bytes.count ? bytes[at] : nil }

        mutating func eat(_ c: Character) -> Bool {
            guard let ascii = c.asciiValue, peek == ascii else { return false }
            at += 1
            return true
        }

        /// `<+03>` or three or more letters.
        mutating func name() -> Bool {
            if eat("<") {
                while let c = peek, c != UInt8(ascii: ">") { at += 1 }
                return eat(">")
            }
            let start = at
            while let c = peek, (c | 0x20) >= UInt8(ascii: "a"), (c | 0x20) <= UInt8(ascii: "z") { at += 1 }
            return at - start >= 3
        }

        mutating func number() -> Int? {
            let start = at
            var n = 0
            while let c = peek, c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9"), at - start < 4 {
                n = n * 10 + Int(c - UInt8(ascii: "0"))
                at += 1
            }
            return at > start ? n : nil
        }

        /// `[+-]hh[:mm[:ss]]` in seconds.
        mutating func offset() -> Int? {
            let sign = eat("-") ? -1 : (eat("+") ? 1 : 1)
            guard let h = number(), h <= 167 else { return nil }
            var seconds = h * 3600
            if eat(":") {
                guard let m = number(), m < 60 else { return nil }
                seconds += m * 60
                if eat(":") {
                    guard let s = number(), s < 60 else { return nil }
                    seconds += s
                }
            }
            return sign * seconds
        }

        /// `Jn`, `n` or `Mm.w.d`, then an optional `/time` (02:00 when absent).
        mutating func moment() -> Moment? {
            let day: Moment.Day
            if eat("J") {
                guard let n = number(), (1...365).contains(n) else { return nil }
                day = .julianNoLeap(n)
            } else if eat("M") {
                guard let m = number(), (1...12).contains(m), eat("."), let w = number(), (1...5).contains(w), eat("."),
                      let d = number(), (0...6).contains(d) else { return nil }
                day = .monthWeekDay(month: m, week: w, weekday: d)
            } else {
                guard let n = number(), (0...365).contains(n) else { return nil }
                day = .zeroBased(n)
            }
            var time = 7200
            if eat("/") {
                guard let t = offset() else { return nil }
                time = t
            }
            return Moment(day: day, time: time)
        }
    }
}
