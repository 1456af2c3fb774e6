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

/// The pure rules of Screen Time verification (protocol/openrpc.json, `screentime.*`).
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
}
