import Chrono
import JSON

/// Apple's App Store Server API as data: where each call goes and what its answers hold, as pure
/// functions. `ServerAPIClient` sends the calls; `ServerAPILookups` makes them for refresh and recovery.
public enum ServerAPI {
    public static let productionURL = "https://api.storekit.apple.com"
    public static let sandboxURL = "https://api.storekit-sandbox.apple.com"

    /// The base URL for a transaction's environment. `override` (`appStore.serverApi.baseUrl`) serves
    /// both: Production at it, Sandbox under its `/sandbox`, so one proxy or test server tells them apart.
    public static func baseURL(environment: String, override: String?) -> String {
        if let override {
            let base = override.hasSuffix("/") ? String(override.dropLast()) : override
            return environment == "Sandbox" ? base + "/sandbox" : base
        }
        return environment == "Sandbox" ? sandboxURL : productionURL
    }

    /// Get Transaction History v2, newest first, from where `revision` left off.
    public static func historyPath(transactionId: String, revision: String?) -> String? {
        guard let path = statusesPath(transactionId: transactionId) else { return nil }
        let base = "/inApps/v2/history/" + path.dropFirst("/inApps/v1/subscriptions/".count) + "?sort=DESCENDING"
        return revision.map { base + "&revision=" + percentEncoded($0) } ?? base
    }

    /// Get Notification History (POST), from where `paginationToken` left off.
    public static func notificationHistoryPath(paginationToken: String?) -> String {
        let base = "/inApps/v1/notifications/history"
        return paginationToken.map { base + "?paginationToken=" + percentEncoded($0) } ?? base
    }

    /// The body of Get Notification History: milliseconds since 1970, as Apple's dates are.
    public static func notificationHistoryBody(startDate: Int64, endDate: Int64) -> JSON {
        ["startDate": .int(startDate), "endDate": .int(endDate)]
    }

    /// One page of an answer that pages: its signed items, and where the next page starts (nil at the end).
    public struct Page: Equatable, Sendable {
        public let items: [String]
        public let next: String?
    }

    /// A Get Transaction History answer: `signedTransactions`, and `revision` while `hasMore`.
    public static func transactionPage(_ answer: JSON) throws(ServerAPIError) -> Page {
        try page(answer, items: "signedTransactions", item: { $0.stringValue }, next: "revision")
    }

    /// A Get Notification History answer: each entry's `signedPayload`, and `paginationToken` while `hasMore`.
    public static func notificationPage(_ answer: JSON) throws(ServerAPIError) -> Page {
        try page(answer, items: "notificationHistory", item: { $0["signedPayload"]?.stringValue }, next: "paginationToken")
    }

    private static func page(_ answer: JSON, items key: String, item: (JSON) -> String?, next: String) throws(ServerAPIError) -> Page {
        guard case .array(let entries)? = answer[key] else { throw ServerAPIError("the answer has no \(key) array") }
        var items: [String] = []
        for entry in entries {
            guard let signed = item(entry) else { throw ServerAPIError("an entry of \(key) has no signed data") }
            items.append(signed)
        }
        guard case .bool(true)? = answer["hasMore"] else { return Page(items: items, next: nil) }
        guard let token = answer[next]?.stringValue, !token.isEmpty else { throw ServerAPIError("hasMore without \(next)") }
        return Page(items: items, next: token)
    }

    /// RFC 3986 unreserved characters as they are; every other byte as %XX.
    static func percentEncoded(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                out += "%" + String(decoding: [hex[Int(b >> 4)], hex[Int(b & 15)]], as: UTF8.self)
            }
        }
        return out
    }

    /// The path of Get All Subscription Statuses, or nil for an id that is not a transaction id (Apple's
    /// are decimal digits; anything else must never reach a URL path).
    public static func statusesPath(transactionId: String) -> String? {
        guard isTransactionId(transactionId) else { return nil }
        return "/inApps/v1/subscriptions/" + transactionId
    }

    /// Send Consumption Information (v2): `PUT` with a `ConsumptionRequest`, answered 202.
    public static func consumptionPath(transactionId: String) -> String? {
        guard isTransactionId(transactionId) else { return nil }
        return "/inApps/v2/transactions/consumption/" + transactionId
    }

    /// App Store transaction ids are decimal digits.
    static func isTransactionId(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64 && id.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
    }

    /// One entry of a Get All Subscription Statuses answer: Apple's status and the signed data (to be
    /// verified like a receipt before anything is believed).
    public struct LastTransaction: Equatable, Sendable {
        public let status: Int
        public let originalTransactionId: String
        public let signedTransactionInfo: String
        public let signedRenewalInfo: String?
    }

    /// The entries of purchase `originalTransactionId` in a Get All Subscription Statuses answer
    /// (`data[].lastTransactions[]`, across subscription groups). Throws a message naming what is missing.
    public static func lastTransactions(_ answer: JSON, of originalTransactionId: String) throws(ServerAPIError) -> [LastTransaction] {
        guard case .array(let groups)? = answer["data"] else { throw ServerAPIError("the answer has no data array") }
        var out: [LastTransaction] = []
        for group in groups {
            guard case .array(let items)? = group["lastTransactions"] else { throw ServerAPIError("a group has no lastTransactions") }
            for item in items where item["originalTransactionId"]?.stringValue == originalTransactionId {
                guard let status = item["status"]?.intValue, let signed = item["signedTransactionInfo"]?.stringValue else {
                    throw ServerAPIError("an entry has no status or signedTransactionInfo")
                }
                out.append(LastTransaction(status: Int(status), originalTransactionId: originalTransactionId, signedTransactionInfo: signed,
                                           signedRenewalInfo: item["signedRenewalInfo"]?.stringValue))
            }
        }
        return out
    }

    /// How long to wait after a 429, from its `Retry-After`, in whole seconds (rounded up, so never
    /// sooner than asked), at least 1 and at most an hour. Apple sends the UNIX time in milliseconds
    /// after which to try again ("Identifying rate limits"); a proxy in between may send seconds or an
    /// HTTP date instead. A number of 10^11 or more is a time in milliseconds (10^11 s is 3,000 years
    /// of waiting, and 10^11 ms is 1973); a smaller one, seconds. Unreadable or missing: a minute.
    public static func retryAfterSeconds(_ header: String?, now: Timestamp) -> Int {
        guard let text = header?.trimmingSpaces, !text.isEmpty else { return 60 }
        let waitMs: Int64
        if text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            guard text.utf8.count <= 18, let number = Int64(text) else { return 3600 }
            waitMs = number >= 100_000_000_000 ? number - now.milliseconds : number * 1000
        } else if let date = httpDate(String(text)) {
            waitMs = date.milliseconds - now.milliseconds
        } else {
            return 60
        }
        let seconds = waitMs <= 0 ? 1 : (waitMs + 999) / 1000
        return Int(min(max(seconds, 1), 3600))
    }

    /// An HTTP date in its preferred form (RFC 9110's IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`).
    static func httpDate(_ text: String) -> Timestamp? {
        let parts = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT", let day = Int(parts[1]), let year = Int(parts[3]),
              let month = months.firstIndex(of: String(parts[2])), let date = CalendarDate(year: year, month: month + 1, day: day) else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int($0) }
        guard clock.count == 3, (0..<24).contains(clock[0]), (0..<60).contains(clock[1]), (0...60).contains(clock[2]) else { return nil }
        return Timestamp(seconds: Int64(date.daysSinceEpoch) * 86_400 + Int64(clock[0] * 3600 + clock[1] * 60 + clock[2]))
    }
}

// Apple's status codes (1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked) are read as a
// membership's status by `MembershipRules.status(apple:)`, shared with notifications' `data.status`.

/// An App Store Server API answer that does not have Apple's documented shape.
public struct ServerAPIError: Error, CustomStringConvertible, Equatable {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension String {
    fileprivate var trimmingSpaces: Substring {
        var s = Substring(self)
        while s.first == " " { s.removeFirst() }
        while s.last == " " { s.removeLast() }
        return s
    }
}
