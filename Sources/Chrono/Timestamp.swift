#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An instant, in whole milliseconds since 1970-01-01T00:00:00Z: the precision the protocol promises.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Milliseconds since the Unix epoch.
    public var milliseconds: Int64

    /// An instant from milliseconds since the epoch.
    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    /// An instant from whole seconds since the epoch.
    public init(seconds: Int64) { self.milliseconds = seconds * 1000 }

    /// Whole seconds since the epoch (rounded down).
    public var seconds: Int64 { milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000 }

    /// This instant plus `s` seconds.
    public func adding(seconds s: Int64) -> Timestamp { Timestamp(milliseconds: milliseconds + s * 1000) }

    public static func < (a: Timestamp, b: Timestamp) -> Bool { a.milliseconds < b.milliseconds }

    /// The UTC calendar date of this instant.
    public var utcDate: CalendarDate {
        // Division and remainder, never ms - 86_399_999: every Int64 has a date, even one read from a bad row.
        let days = milliseconds / 86_400_000 - (milliseconds % 86_400_000 < 0 ? 1 : 0)
        return CalendarDate(daysSinceEpoch: Int(days))
    }

    /// RFC 3339 in UTC with millisecond precision: "2026-11-22T06:00:00.000Z".
    public var description: String {
        let date = utcDate
        let rest = Int(milliseconds % 86_400_000)
        let msOfDay = rest < 0 ? rest + 86_400_000 : rest
        let h = msOfDay / 3_600_000, m = (msOfDay / 60_000) % 60, s = (msOfDay / 1000) % 60, ms = msOfDay % 1000
        return "\(date)T\(pad(h, 2)):\(pad(m, 2)):\(pad(s, 2)).\(pad(ms, 3))Z"
    }

    /// Parses RFC 3339 ("2026-11-22T06:00:00Z", "...T06:00:00.123456+01:00"); the offset is required,
    /// digits beyond milliseconds are truncated. Nil for any other shape or an impossible date or time.
    public init?(rfc3339 text: String) {
        let b = Array(text.utf8)
        guard b.count >= 20, b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t"),
              b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"),
              let date = CalendarDate(String(decoding: b[0..<10], as: UTF8.self)),
              let h = digits(b, 11, 2), let mi = digits(b, 14, 2), let s = digits(b, 17, 2),
              h < 24, mi < 60, s < 60 else { return nil }
        var i = 19
        var ms = 0
        if b[i] == UInt8(ascii: ".") {
            i += 1
            let start = i
            while i < b.count, b[i] >= UInt8(ascii: "0"), b[i] <= UInt8(ascii: "9") {
                if i - start < 3 { ms = ms * 10 + Int(b[i] - UInt8(ascii: "0")) }
                i += 1
            }
            let n = i - start
            guard n > 0, n <= 9 else { return nil }
            if n < 3 { for _ in n..<3 { ms *= 10 } }
        }
        guard i < b.count else { return nil }
        var offsetMinutes = 0
        switch b[i] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            i += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard i + 6 == b.count, b[i + 3] == UInt8(ascii: ":"),
                  let oh = digits(b, i + 1, 2), let om = digits(b, i + 4, 2), oh < 24, om < 60 else { return nil }
            offsetMinutes = (oh * 60 + om) * (b[i] == UInt8(ascii: "-") ? -1 : 1)
            i += 6
        default:
            return nil
        }
        guard i == b.count else { return nil }
        let secondsOfDay = Int64(h * 3600 + mi * 60 + s) - Int64(offsetMinutes * 60)
        milliseconds = (Int64(date.daysSinceEpoch) * 86_400 + secondsOfDay) * 1000 + Int64(ms)
    }
}

/// Where the kernel gets "now": one injectable source, so tests can fix or shift time and a simulation
/// can run it. Both kinds of time come from it: the wall clock (what is stored and shown) and the
/// monotonic clock (durations, deadlines, time slices; never stored).
public protocol Clock: Sendable {
    /// The current wall-clock instant.
    func now() -> Timestamp
    /// Monotonic time in microseconds, for measuring durations and deadlines (never for stored times).
    func monotonicMicros() -> UInt64
    /// Waits `micros` microseconds (a retry's pause): the thread sleeps; a simulated clock moves instead.
    func pause(micros: UInt64)
}

extension Clock {
    public func pause(micros: UInt64) { usleep(UInt32(min(micros, UInt64(UInt32.max)))) }
}

/// The system's real-time clock, optionally shifted by a fixed offset (for tests only).
public struct SystemClock: Clock {
    /// Milliseconds added to the real time.
    public let offsetMilliseconds: Int64

    /// The system clock shifted by `offsetMilliseconds`.
    public init(offsetMilliseconds: Int64 = 0) { self.offsetMilliseconds = offsetMilliseconds }

    public func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Timestamp(milliseconds: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000 + offsetMilliseconds)
    }
}

extension SystemClock {
    /// The system's monotonic clock (`CLOCK_MONOTONIC`), unshifted.
    public func monotonicMicros() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }
}
