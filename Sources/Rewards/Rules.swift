/// The pure rules of earn-to-unlock rewards (protocol/openrpc.json, `rewards.*`).
public enum RewardsRules {
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
