import Chrono
import Foundation
import JSON
import Testing
@testable import Subscriptions

/// The App Store Server API's URLs and answers as the domain reads them.
@Suite struct ServerAPITests {
    @Test func urlsFollowTheEnvironmentUnlessOverriddenAndTakeOnlyDigitIds() {
        #expect(ServerAPI.baseURL(environment: "Production", override: nil) == "https://api.storekit.apple.com")
        #expect(ServerAPI.baseURL(environment: "Sandbox", override: nil) == "https://api.storekit-sandbox.apple.com")
        #expect(ServerAPI.baseURL(environment: "Production", override: "http://127.0.0.1:8080/") == "http://127.0.0.1:8080")
        #expect(ServerAPI.baseURL(environment: "Sandbox", override: "http://127.0.0.1:8080/") == "http://127.0.0.1:8080/sandbox")
        #expect(ServerAPI.statusesPath(transactionId: "2000000000000001") == "/inApps/v1/subscriptions/2000000000000001")
        #expect(ServerAPI.statusesPath(transactionId: "1/../../v2/history") == nil)
        #expect(ServerAPI.statusesPath(transactionId: "") == nil)
    }

    @Test func aStatusAnswerYieldsThePurchasesEntriesAcrossGroups() throws {
        let answer: JSON = [
            "environment": "Sandbox", "bundleId": "com.example.app",
            "data": [
                ["subscriptionGroupIdentifier": "21000001",
                 "lastTransactions": [["status": 1, "originalTransactionId": "1000", "signedTransactionInfo": "t.a.s", "signedRenewalInfo": "r.a.s"],
                                      ["status": 2, "originalTransactionId": "2000", "signedTransactionInfo": "t.b.s"]]],
                ["subscriptionGroupIdentifier": "21000002",
                 "lastTransactions": [["status": 4, "originalTransactionId": "1000", "signedTransactionInfo": "t.c.s"]]],
            ],
        ]
        let items = try ServerAPI.lastTransactions(answer, of: "1000")
        #expect(items == [
            ServerAPI.LastTransaction(status: 1, originalTransactionId: "1000", signedTransactionInfo: "t.a.s", signedRenewalInfo: "r.a.s"),
            ServerAPI.LastTransaction(status: 4, originalTransactionId: "1000", signedTransactionInfo: "t.c.s", signedRenewalInfo: nil),
        ])
        #expect(try ServerAPI.lastTransactions(answer, of: "3000").isEmpty)
        #expect(throws: ServerAPIError.self) { try ServerAPI.lastTransactions(["data": "nope"], of: "1000") }
        #expect(throws: ServerAPIError.self) {
            try ServerAPI.lastTransactions(["data": [["lastTransactions": [["originalTransactionId": "1000"]]]]], of: "1000")
        }
    }

    @Test func applesStatusCodesAndRetryAfter() {
        #expect(MembershipRules.status(apple: 1)! == ("active", nil))
        #expect(MembershipRules.status(apple: 2)! == ("inactive", "expired"))
        #expect(MembershipRules.status(apple: 3)! == ("billing_retry", nil))
        #expect(MembershipRules.status(apple: 4)! == ("grace_period", nil))
        #expect(MembershipRules.status(apple: 5)! == ("inactive", "revoked"))
        #expect(MembershipRules.status(apple: 6) == nil)
    }

    /// Apple's `Retry-After` is a UNIX time in milliseconds; proxies may send seconds or an HTTP date.
    @Test func retryAfterInApplesFormAndOthers() {
        let now = Timestamp(milliseconds: 1_795_000_000_000)
        // Apple's form: 42.5 s from now waits 43 s, never less than asked.
        #expect(ServerAPI.retryAfterSeconds("1795000042500", now: now) == 43)
        #expect(ServerAPI.retryAfterSeconds(" 1795000001000 ", now: now) == 1)
        #expect(ServerAPI.retryAfterSeconds("1794999990000", now: now) == 1, "a time already past: a second")
        #expect(ServerAPI.retryAfterSeconds("1795090000000", now: now) == 3600, "capped at an hour")
        // Seconds, and an HTTP date, from a proxy.
        #expect(ServerAPI.retryAfterSeconds("7", now: now) == 7)
        #expect(ServerAPI.retryAfterSeconds(" 120 ", now: now) == 120)
        #expect(ServerAPI.retryAfterSeconds("999999", now: now) == 3600)
        #expect(ServerAPI.retryAfterSeconds(Self.httpDate(now.milliseconds / 1000 + 90), now: now) == 90)
        #expect(ServerAPI.retryAfterSeconds("Wed, 21 Oct 2015 07:28:00 GMT", now: now) == 1)
        // Unreadable or missing: a minute.
        #expect(ServerAPI.retryAfterSeconds(nil, now: now) == 60)
        #expect(ServerAPI.retryAfterSeconds("soon", now: now) == 60)
        #expect(ServerAPI.retryAfterSeconds("Wed, 32 Oct 2015 07:28:00 GMT", now: now) == 60)
        #expect(ServerAPI.retryAfterSeconds("99999999999999999999", now: now) == 3600)
    }

    /// An IMF-fixdate for `seconds` since 1970.
    static func httpDate(_ seconds: Int64) -> String {
        let date = CalendarDate(daysSinceEpoch: Int(seconds / 86_400)), s = Int(seconds % 86_400)
        let names = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let weekdays = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        return String(format: "%@, %02d %@ %04d %02d:%02d:%02d GMT", weekdays[date.isoWeekday - 1], date.day, names[date.month - 1], date.year,
                      s / 3600, s / 60 % 60, s % 60)
    }
}
