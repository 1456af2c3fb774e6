import JSON
import Testing
@testable import Subscriptions

/// The App Store Server API's URLs and answers as the domain reads them.
@Suite struct ServerAPITests {
    @Test func urlsFollowTheEnvironmentUnlessOverriddenAndTakeOnlyDigitIds() {
        #expect(ServerAPI.baseURL(environment: "Production", override: nil) == "https://api.storekit.itunes.apple.com")
        #expect(ServerAPI.baseURL(environment: "Sandbox", override: nil) == "https://api.storekit-sandbox.itunes.apple.com")
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
        #expect(ServerAPI.retryAfterSeconds("7") == 7)
        #expect(ServerAPI.retryAfterSeconds(" 120 ") == 120)
        #expect(ServerAPI.retryAfterSeconds("Wed, 21 Oct 2015 07:28:00 GMT") == 60)
        #expect(ServerAPI.retryAfterSeconds(nil) == 60)
        #expect(ServerAPI.retryAfterSeconds("999999") == 3600)
    }
}
