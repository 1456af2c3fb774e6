#if canImport(Glibc)
import Glibc
#endif

/// The rules that bound guessing and sign-ups: pure, so tests call them directly. Attempts are kept as
/// lists of times (`ThrottleRow`) in the store, so every kernel on one database counts them.
enum Throttle {
    /// Failed sign-ins of one email from one address (or, when the host names no address, from
    /// anywhere) before that email is refused there, and the window they count in.
    static let failuresPerAddress = 5
    /// Failed sign-ins of one email from every address together: the bound on guessing spread over
    /// many addresses. It is ten times the per-address one, so a stranger who types wrong passwords
    /// for someone else's email locks out their own address, not the owner's.
    static let failuresAllAddresses = 50
    static let failureWindowMs: Int64 = 15 * 60 * 1000
    static let signUpWindowMs: Int64 = 60 * 60 * 1000

    /// The times of `times` still within `window` of `now`, oldest first.
    static func recent(_ times: [Int64], now: Int64, window: Int64) -> [Int64] {
        times.filter { now - $0 < window && $0 <= now }
    }

    /// Milliseconds until an attempt is allowed again, when `times` (recent ones) already hold `limit`.
    static func wait(_ times: [Int64], limit: Int, now: Int64, window: Int64) -> Int64? {
        guard limit > 0, times.count >= limit else { return nil }
        let oldestCounted = times[times.count - limit]
        return max(1, oldestCounted + window - now)
    }

    /// The key a client address is counted under, or nil when `raw` is not an IP address: an IPv4
    /// address as it is, an IPv6 address by the /64 it lies in (one subscriber is handed a whole /64,
    /// so counting single addresses would count nothing), an IPv4-mapped IPv6 address as its IPv4.
    static func addressKey(_ raw: String) -> String? {
        guard raw.utf8.count <= 64 else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, raw, &v4) == 1 { return "v4:" + raw }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, raw, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
            return "v4:" + bytes[12...].map(String.init).joined(separator: ".")
        }
        return "v6:" + bytes[0..<8].map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() + "/64"
    }
}
