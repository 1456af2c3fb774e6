import JSON

/// What one user may ask of the kernel (the `limits` section of the config file): requests per second
/// with a burst, and how much they may keep. Service tokens are never limited. 0 turns a limit off.
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

    /// Reads the `limits` section; unknown keys and negative numbers are errors naming the key.
    public mutating func read(_ r: inout ObjectReader) throws(FieldError) {
        if let v = try r.optional("requestsPerSecond", in: 0...1_000_000_000) { requestsPerSecond = v }
        if let v = try r.optional("burst", in: 0...1_000_000_000) { burst = v }
        if let v = try r.optional("healthItemsPerUser", in: 0...Int64(Int32.max) * 16) { healthItemsPerUser = v }
        if let v = try r.optional("rawBytesPerUser", in: 0...(1 << 50)) { rawBytesPerUser = v }
        if let v = try r.optional("tombstonesPerUser", in: 0...Int64(Int32.max)) { tombstonesPerUser = v }
        if let v = try r.optional("sessionsPerUser", in: 0...Int64(Int32.max)) { sessionsPerUser = v }
        if let v = try r.optional("rewardsLedgerPerUser", in: 0...Int64(Int32.max)) { rewardsLedgerPerUser = v }
        try r.finish()
    }
}

/// Room kept below the answer limit for what surrounds a method's result (the envelope, ids, member
/// names), so a method that sizes its result against the limit leaves the whole line under it.
public enum AnswerSize {
    public static let margin = 64 << 10
}
