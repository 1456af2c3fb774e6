import JSON
import Chrono

/// Requests per user: a token bucket per user, `burst` deep, refilled at `perSecond`, so one user
/// sending as fast as the pipe allows gets -32029 `rate_limited` (with how long to wait) while the
/// others are served. Service tokens are never limited. O(1) per request; idle users' buckets are
/// dropped once there are many, at a cost spread over the requests that made them (amortised O(1)).
public final class RateLimiter {
    public let perSecond: Int64
    public let burst: Int64
    private var buckets: [String: Bucket] = [:]
    private var pruneAbove = 100_000

    private struct Bucket {
        /// Tokens, in thousandths, at `at`.
        var milliTokens: Int64
        var at: Int64
    }

    /// A limiter of `perSecond` requests per user with bursts of `burst` (both at least 1).
    public init(perSecond: Int64, burst: Int64) {
        self.perSecond = max(1, perSecond)
        self.burst = max(1, burst)
    }

    /// Takes one request of `user` at `now`: nil when it may go, else milliseconds until it could.
    /// One hash lookup: the bucket is updated in place.
    public func admit(_ user: String, now: Timestamp) -> Int64? {
        let ms = now.milliseconds
        let (full, rate) = (burst * 1000, perSecond)
        let before = buckets.count
        let wait = Self.take(&buckets[user, default: Bucket(milliTokens: full, at: ms)], now: ms, full: full, rate: rate)
        if buckets.count > before && buckets.count > pruneAbove { prune(now: ms) }
        return wait
    }

    private static func take(_ bucket: inout Bucket, now ms: Int64, full: Int64, rate: Int64) -> Int64? {
        bucket.milliTokens = min(full, bucket.milliTokens + max(0, ms - bucket.at) * rate)
        bucket.at = max(ms, bucket.at)
        guard bucket.milliTokens >= 1000 else { return max(1, (1000 - bucket.milliTokens + rate - 1) / rate) }
        bucket.milliTokens -= 1000
        return nil
    }

    /// Drops buckets that have refilled (their users would start full anyway).
    private func prune(now: Int64) {
        let full = burst * 1000
        buckets = buckets.filter { $0.value.milliTokens + max(0, now - $0.value.at) * perSecond < full }
        pruneAbove = max(100_000, buckets.count * 2)
    }
}

extension RPCError {
    /// -32029 `rate_limited`: the user sent more than the limit; `data.retryAfterMs` says when to try again.
    public static func rateLimited(retryAfterMs: Int64) -> RPCError {
        RPCError(code: .limited, message: "Too many requests for this user; retry in \(retryAfterMs) ms", reason: "rate_limited",
                 extra: [("retryAfterMs", .int(retryAfterMs))])
    }

    /// -32029 `quota_exceeded`: storing this would take the user past `limit` of `what`.
    public static func quotaExceeded(_ what: String, limit: Int64) -> RPCError {
        RPCError(code: .limited, message: "Quota exceeded: at most \(limit) \(what) per user", reason: "quota_exceeded",
                 extra: [("limit", .int(limit))])
    }
}
