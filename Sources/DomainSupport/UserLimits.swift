import JSON

/// What one user may ask of the kernel (the `limits` section of the config file, read through the
/// kernel's settings table): requests per second with a burst, and how much they may keep. Service
/// tokens are never limited. 0 turns a limit off. These are the defaults everywhere.
public struct UserLimits: Sendable, Equatable {
    /// Requests per second per user, refilling a bucket of `burst`.
    public var requestsPerSecond: Int64 = 1000
    public var burst: Int64 = 10_000
    /// Stored HealthKit samples, workouts and sleep samples.
    public var healthItemsPerUser: Int64 = 20_000_000
    /// Bytes of Screen Time `raw` kept (their stored form).
    public var rawBytesPerUser: Int64 = 64 << 20
    /// Deleted records' feed entries kept per user and synced table (see `Tombstones`).
    public var tombstonesPerUser: Int64 = 1_000_000
    /// Meditation sessions kept per user; past it `sessions.record` is refused.
    public var sessionsPerUser: Int64 = 1_000_000
    /// Rewards ledger entries kept per user: `rewards.earn` credits (their idempotency keys) and
    /// `rewards.spend` unlock windows; past it both are refused.
    public var rewardsLedgerPerUser: Int64 = 1_000_000

    public init() {}
}

/// Room kept below the answer limit for what surrounds a method's result (the envelope, ids, member
/// names), so a method that sizes its result against the limit leaves the whole line under it.
public enum AnswerSize {
    public static let margin = 64 << 10
}
