import Chrono

/// The pure rules of meditation sessions (protocol/sessions.md).
public enum SessionRules {
    /// Longest session, in seconds.
    public static let maxDuration: Int64 = 86_400
    /// How far in the future a recorded session may start.
    public static let futureAllowanceMs: Int64 = 5 * 60 * 1000

    /// Seconds a timer has run: time before its last pause plus the current run, pauses excluded.
    public static func elapsedMs(accumulatedMs: Int64, runningSinceMs: Int64?, nowMs: Int64) -> Int64 {
        accumulatedMs + max(0, runningSinceMs.map { nowMs - $0 } ?? 0)
    }

    /// The duration a stopped timer records: whole seconds, rounded, at least 1 and at most a day.
    public static func recordedDuration(elapsedMs: Int64) -> Int64 {
        min(maxDuration, max(1, (elapsedMs + 500) / 1000))
    }

    /// The key `sessions.list` orders sessions by: the start time (20 digits, so that text order is time
    /// order, times before 1970 included), then the session id. Without an id it is the bound before
    /// every session starting at `startTime`.
    public static func listOrder(startTime: Int64, sessionId: String? = nil) -> String {
        let digits = String(UInt64(bitPattern: startTime) ^ (1 << 63))
        let time = String(repeating: "0", count: 20 - digits.count) + digits
        return sessionId.map { time + "|" + $0 } ?? time
    }

    /// Current and longest runs of consecutive local days with a session. The current streak ends
    /// today or yesterday; otherwise it is 0.
    public static func streaks(days: Set<CalendarDate>, today: CalendarDate) -> (current: Int, longest: Int) {
        let numbers = days.map(\.daysSinceEpoch).sorted()
        var longest = 0, run = 0
        var previous: Int?
        for n in numbers {
            run = (previous.map { n == $0 + 1 } ?? false) ? run + 1 : 1
            longest = max(longest, run)
            previous = n
        }
        let t = today.daysSinceEpoch
        let present = Set(numbers)
        var anchor = present.contains(t) ? t : (present.contains(t - 1) ? t - 1 : nil as Int?)
        var current = 0
        while let a = anchor, present.contains(a) {
            current += 1
            anchor = a - 1
        }
        return (current, longest)
    }
}
