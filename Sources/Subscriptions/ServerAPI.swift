import JSON

/// Apple's App Store Server API as data: where each call goes and what its answers hold, as pure
/// functions. The calls themselves (HTTPClient on a worker thread, with `ServerAPIToken`) are the next
/// part of the issue "App Store Server API"; until then nothing here is reachable from a method.
public enum ServerAPI {
    public static let productionURL = "https://api.storekit.itunes.apple.com"
    public static let sandboxURL = "https://api.storekit-sandbox.itunes.apple.com"

    /// The base URL for a transaction's environment; `override` (`appStore.serverApi.baseUrl`) wins.
    public static func baseURL(environment: String, override: String?) -> String {
        if let override { return override.hasSuffix("/") ? String(override.dropLast()) : override }
        return environment == "Sandbox" ? sandboxURL : productionURL
    }

    /// The path of Get All Subscription Statuses, or nil for an id that is not a transaction id (Apple's
    /// are decimal digits; anything else must never reach a URL path).
    public static func statusesPath(transactionId: String) -> String? {
        guard !transactionId.isEmpty, transactionId.utf8.count <= 64, transactionId.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            return nil
        }
        return "/inApps/v1/subscriptions/" + transactionId
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

    /// How long to wait after a 429, from its `Retry-After` (seconds, or an HTTP date we do not parse:
    /// then a minute), capped at an hour.
    public static func retryAfterSeconds(_ header: String?) -> Int {
        guard let header, let seconds = Int(header.trimmingSpaces), seconds >= 0 else { return 60 }
        return min(seconds, 3600)
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
