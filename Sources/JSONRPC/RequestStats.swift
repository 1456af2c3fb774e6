/// Request counts and a latency histogram over the kernel's lifetime, for `kernel.info`.
/// Confined to the thread that dispatches requests.
public final class RequestStats: @unchecked Sendable {
    /// Requests handled, notifications and invalid ones included.
    public private(set) var total: UInt64 = 0
    /// Requests answered with an error.
    public private(set) var errors: UInt64 = 0
    /// Runs of requests that lost a race with another kernel and ran again.
    public private(set) var retries: UInt64 = 0
    // Log-linear buckets: exact below 128 µs, then 64 buckets per power of two (about 1.5% resolution).
    private var buckets = [UInt64](repeating: 0, count: 128 + 64 * 57)

    /// Empty statistics.
    public init() {}

    /// Records one run again after a storage conflict.
    public func recordRetry() { retries += 1 }

    /// Records one request that took `micros` microseconds.
    public func record(micros: UInt64, failed: Bool) {
        total += 1
        if failed { errors += 1 }
        buckets[Self.bucket(micros)] += 1
    }

    static func bucket(_ v: UInt64) -> Int {
        if v < 128 { return Int(v) }
        let exp = 63 - v.leadingZeroBitCount  // >= 7
        let sub = Int((v >> UInt64(exp - 6)) & 63)
        return min(128 + (exp - 7) * 64 + sub, 128 + 64 * 57 - 1)
    }

    static func lowerBound(ofBucket i: Int) -> UInt64 {
        if i < 128 { return UInt64(i) }
        let exp = (i - 128) / 64 + 7
        let sub = UInt64((i - 128) % 64)
        return (UInt64(64) + sub) << UInt64(exp - 6)
    }

    /// The latency below which `fraction` of requests fell, in microseconds (0 before any request).
    public func percentile(_ fraction: Double) -> UInt64 {
        guard total > 0 else { return 0 }
        let rank = UInt64((Double(total) * fraction).rounded(.up))
        var seen: UInt64 = 0
        for (i, n) in buckets.enumerated() where n > 0 {
            seen += n
            if seen >= max(rank, 1) { return Self.lowerBound(ofBucket: i) }
        }
        return Self.lowerBound(ofBucket: buckets.count - 1)
    }
}
