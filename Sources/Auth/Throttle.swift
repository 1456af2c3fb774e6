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
    /// many addresses. It is ten times the per-address one, and it refuses only an address that has
    /// failed for the email itself and never signed in to it (`refusesByTotal`): a stranger who types
    /// wrong passwords for someone else's email, from however many addresses, never locks the owner out.
    static let failuresAllAddresses = 50
    /// Failed sign-ins from one address across every email: one address trying many emails (or the
    /// same password against many accounts) is bounded too. Addresses that signed in to the email
    /// before are not refused by it, so a busy shared address does not lock out its regular users.
    static let failuresPerAddressAllEmails = 30
    static let failureWindowMs: Int64 = 15 * 60 * 1000
    static let signUpWindowMs: Int64 = 60 * 60 * 1000
    /// How long an address that signed in to an account stays known to it (`refusesByTotal`).
    static let knownAddressMs: Int64 = 30 * 86_400 * 1000

    /// Whether the email's total over every address refuses this attempt: only when the total is full,
    /// the address has failed for this email within the window itself, and it has not signed in to the
    /// account lately.
    static func refusesByTotal(total: [Int64], own: [Int64], known: Bool, limit: Int, now: Int64) -> Bool {
        !known && !own.isEmpty && wait(total, limit: limit, now: now, window: failureWindowMs) != nil
    }

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
    /// address as it is, an IPv6 address by the /56 it lies in (one subscriber is handed a /64 at least
    /// and a /56 commonly, so counting single addresses or /64s would let one customer spread guesses over
    /// 256 keys), an IPv4-mapped IPv6 address as its IPv4.
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
        return "v6:" + bytes[0..<7].map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() + "/56"
    }
}
