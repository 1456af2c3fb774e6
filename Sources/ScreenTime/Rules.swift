/// How a day's claim compares with what the phone verified.
public enum DayStatus: String, Sendable {
    /// Nobody claimed anything for the day.
    case unclaimed
    /// A claim exists, but no upload yet.
    case unverified
    /// Claim and upload agree within the tolerance.
    case match
    /// They differ by more than the tolerance.
    case mismatch
}

/// The verdict for one day.
public struct Verdict: Sendable, Equatable {
    public let status: DayStatus
    /// verified - claimed, when both exist.
    public let deltaMinutes: Int64?
    /// Points owed: only when the phone saw more use than was claimed, beyond the tolerance.
    public let penaltyPoints: Int64
}

/// The pure rules of Screen Time verification and rewards (protocol/openrpc.json, `screentime.*` and `rewards.*`).
public enum Rules {
    /// The verdict for a day with these minutes.
    public static func verdict(claimed: Int64?, verified: Int64?, toleranceMinutes: Int64, pointsPerMinute: Int64) -> Verdict {
        guard let claimed else { return Verdict(status: .unclaimed, deltaMinutes: nil, penaltyPoints: 0) }
        guard let verified else { return Verdict(status: .unverified, deltaMinutes: nil, penaltyPoints: 0) }
        let delta = verified - claimed
        guard abs(delta) > toleranceMinutes else { return Verdict(status: .match, deltaMinutes: delta, penaltyPoints: 0) }
        let points = delta > 0 ? (delta - toleranceMinutes) * pointsPerMinute : 0
        return Verdict(status: .mismatch, deltaMinutes: delta, penaltyPoints: points)
    }

    /// Minutes bought by `xp`, or nil when `xp` is not a positive multiple of the rate.
    public static func minutes(forXP xp: Int64, xpPerMinute: Int64) -> Int64? {
        guard xp > 0, xp % xpPerMinute == 0 else { return nil }
        return xp / xpPerMinute
    }

    /// The unlock window for `minutes`, starting now or, when a window is still open, where it ends,
    /// so windows never overlap.
    public static func unlockWindow(minutes: Int64, nowMs: Int64, unlockedUntilMs: Int64?) -> (startsAt: Int64, endsAt: Int64) {
        let start = max(nowMs, unlockedUntilMs ?? nowMs)
        return (start, start + minutes * 60_000)
    }
}
