import Chrono
import Crypto
import Foundation
import JSON
import Storage
import Testing
import TestSupport
@testable import Subscriptions

/// A month after the first purchase: when its period has ended.
let monthLater = nov1 + 31 * dayMs

extension Fixture {
    /// `subscriptions.refresh` in api mode, its three steps in a row.
    func apiRefresh(limit: Int = 50, at now: Int64) throws -> RefreshReport {
        let t = Timestamp(milliseconds: now)
        let (lookups, remaining) = try service.beginLookups(limit: limit, now: t)
        let results = try #require(service.api).run(lookups, now: t, budgetSeconds: 60)
        return try service.finishLookups(lookups, results, remaining: remaining, now: t)
    }

    /// `subscriptions.recoverNotifications`, its steps in a row.
    func recover(from start: Int64, to end: Int64, token: String? = nil, at now: Int64) throws -> RecoveryReport {
        let t = Timestamp(milliseconds: now)
        let (environment, appleToken) = try #require(service.recoveryStart(token))
        switch try #require(service.api).notificationPage(startDate: start, endDate: end, environment: environment,
                                                            paginationToken: appleToken, now: t) {
        case .failure(let failure): throw failure
        case .success(let page): return try service.finishRecovery(page.notifications, environment: environment, next: page.next, now: t)
        }
    }

    func row(_ original: String = "1000", user: String = testUser) throws -> MembershipRow? {
        try service.tables.memberships.get(user: user, key: original)
    }

    func check(_ original: String = "1000", user: String = testUser) throws -> CheckRow? {
        try service.tables.checks.get(user: user, key: original)
    }
}

/// One fake App Store Server for the suite's tests, each with its own handler (the tests of a suite run
/// one at a time here: `.serialized`).
@Suite(.serialized) struct ServerAPIRefreshTests {
    let apple: FakeAppStoreServer

    init() throws {
        apple = try FakeAppStoreServer(bundleId: AppStorePayloads.bundleId)
    }

    @Test func aRenewalIsSeenByRefresh() throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        apple.answer { [ca = f.ca] r in
            .json(ca.statuses(1, n: 2, purchase: nov1 + 30 * dayMs, signed: monthLater))
        }
        let report = try f.apiRefresh(at: monthLater)
        #expect(report == RefreshReport(checked: 1, expired: 0, renewed: 1, unchanged: 0, failed: 0, remaining: 0, mode: "api"))
        #expect(apple.received.map { "\($0.method) \($0.path)" } == ["GET /sandbox/inApps/v1/subscriptions/1000"])
        let m = try f.status(at: monthLater)
        #expect(m.status == "active")
        #expect(m.transactionId == "1000-2")
        #expect(m.currentPeriodEnd == nov1 + 60 * dayMs)
        // Looked at now: not due again until the interval has passed.
        #expect(try f.apiRefresh(at: monthLater + 1000).checked == 0)
        #expect(apple.received.count == 1)
    }

    @Test(arguments: [
        (Int64(3), "billing_retry", nil as String?, 1, 0),
        (4, "grace_period", nil, 0, 0),
        (2, "inactive", "expired", 1, 0),
        (5, "inactive", "revoked", 1, 0),
    ])
    func appleStatusDecides(apple status: Int64, becomes expected: String, error: String?, expired: Int, renewed: Int) throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        // Mid-period, so that the clock alone would still say active.
        let midMonth = nov1 + 10 * dayMs
        apple.answer { [ca = f.ca] _ in
            .json(ca.statuses(status, n: 1, purchase: nov1, signed: midMonth, revoked: status == 5 ? midMonth - 1 : nil,
                              grace: status == 4 ? midMonth + 6 * dayMs : nil, autoRenew: status == 2 ? 0 : 1))
        }
        let report = try f.apiRefresh(at: midMonth)
        #expect(report.checked == 1 && report.expired == expired && report.renewed == renewed && report.failed == 0)
        let m = try f.status(at: midMonth)
        #expect(m.status == expected)
        #expect(m.error == error)
        if status == 4 { #expect(try f.row()?.gracePeriodEnd == midMonth + 6 * dayMs) }
    }

    @Test func aRefundWhoseNotificationWasLostIsFoundByRefresh() throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        // Mid-period: only Apple knows of the refund.
        let midMonth = nov1 + 10 * dayMs
        apple.answer { [ca = f.ca] _ in .json(ca.statuses(5, n: 1, purchase: nov1, signed: midMonth, revoked: midMonth - 3_600_000)) }
        #expect(try f.status(at: midMonth).status == "active")
        let report = try f.apiRefresh(at: midMonth)
        #expect(report.expired == 1)
        let m = try f.status(at: midMonth)
        #expect(m.status == "inactive" && m.error == "revoked")
    }

    @Test func aPurchaseProductionDoesNotKnowIsAskedInSandbox() throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1, environment: "Production"), at: nov1 + dayMs)
        apple.answer { [ca = f.ca] r in
            r.environment == "Production" ? .error(404, code: 4040010, "Transaction id not found.")
                : .json(ca.statuses(1, n: 2, purchase: nov1 + 30 * dayMs, signed: monthLater, environment: "Sandbox"))
        }
        let report = try f.apiRefresh(at: monthLater)
        #expect(report.renewed == 1 && report.failed == 0)
        #expect(apple.received.map(\.path) == ["/inApps/v1/subscriptions/1000", "/sandbox/inApps/v1/subscriptions/1000"])
        #expect(try f.status(at: monthLater).environment == "Sandbox")
    }

    @Test func aKeyAppleRefusesFailsEveryLookupClearlyAndChangesNothing() throws {
        let f = try Fixture(api: apple, apiKeyPEM: P256Key.fresh(), maxConcurrentCalls: 1)
        for n in 0..<3 { _ = try f.verify(f.receipt(1, original: "100\(n)"), at: nov1 + dayMs) }
        let before = try (0..<3).map { try f.row("100\($0)") }
        apple.answer { [ca = f.ca] _ in .json(ca.statuses(2, n: 1, purchase: nov1, signed: monthLater)) }
        let report = try f.apiRefresh(at: monthLater)
        #expect(report.failed == 3 && report.checked == 3)
        // After Apple refused the key, no more calls in this refresh.
        #expect(apple.refused == ["bad signature"])
        #expect(try (0..<3).map { try f.row("100\($0)") } == before)
        let lately = try #require(f.service.api).client.lately
        #expect(lately.lastFailure?.contains("Apple refused the key") == true)
        #expect(lately.lastFailure?.contains("keyId") == true)
        #expect(lately.lastSuccessAt == nil)
    }

    @Test func aThrottledRefreshStopsCallingAndWaitsRetryAfter() throws {
        let f = try Fixture(api: apple, maxConcurrentCalls: 1)
        for n in 0..<3 { _ = try f.verify(f.receipt(1, original: "100\(n)"), at: nov1 + dayMs) }
        // As Apple sends it: the UNIX time in milliseconds (Apple's clock: the real one, not the test's) after
        // which to try again, two minutes on.
        apple.answer { _ in FakeAppStoreServer.Response(status: 429, headers: [("Retry-After", "\(SystemClock().now().milliseconds + 120_000)")],
                                                        body: ["errorCode": 4290000]) }
        let report = try f.apiRefresh(at: monthLater)
        #expect(report.failed == 3 && report.remaining == 0)
        #expect(apple.received.count == 1)
        // Not due again until Retry-After has passed; then first.
        #expect(try f.apiRefresh(at: monthLater + 119_000).checked == 0)
        apple.answer { [ca = f.ca] r in .json(ca.statuses(1, original: String(r.path.split(separator: "/").last!), n: 1, purchase: nov1, signed: monthLater)) }
        let later = try f.apiRefresh(limit: 3, at: monthLater + 121_000)
        #expect(later.checked == 3 && later.failed == 0)
    }

    @Test(arguments: ["5xx", "timeout"])
    func anUnavailableAppleIsCountedFailedAndChangesNothing(_ kind: String) throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        _ = try f.verify(f.receipt(1, original: "2000"), at: nov1 + dayMs)
        let before = try f.row()
        apple.answer { [ca = f.ca] r in
            guard r.path.hasSuffix("/1000") else { return .json(ca.statuses(1, original: "2000", n: 1, purchase: nov1, signed: monthLater)) }
            return kind == "5xx" ? .error(503, code: 5000000, "An unknown error occurred.") : .init(delay: 2.5)
        }
        let report = try f.apiRefresh(at: monthLater)
        #expect(report.checked == 2 && report.failed == 1 && report.unchanged == 1)
        #expect(try f.row() == before)
        // Due again a minute later, before memberships looked at just now.
        #expect(try f.check()?.dueAt == monthLater + 60_000)
        #expect(try f.apiRefresh(at: monthLater + 30_000).checked == 0)
        let again = try f.apiRefresh(limit: 1, at: monthLater + 61_000)
        #expect(again.checked == 1)
        #expect(try #require(f.service.api).client.lately.lastFailure != nil)
    }

    @Test func anAnswerSignedByAnUntrustedChainIsRejected() throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        let before = try f.row()
        let stranger = AppStoreTestCA(name: "not the trusted root")
        apple.answer { _ in .json(stranger.statuses(5, n: 1, purchase: nov1, signed: monthLater, revoked: monthLater)) }
        let report = try f.apiRefresh(at: monthLater)
        #expect(report.failed == 1)
        #expect(try f.row() == before)
    }

    @Test func anAnswerSignedBeforeTheStoredStateNeverRollsItBack() throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        // A renewal notification signed at monthLater moved the membership on.
        let renewal = f.receipt(2, purchase: nov1 + 30 * dayMs, signed: monthLater)
        _ = try f.notify(f.notification("3f1c7c1e-0000-4000-8000-0000000000a1", "DID_RENEW", transaction: renewal, signed: monthLater), at: monthLater)
        // Apple's answer (from a lagging replica, say) was signed before it and says expired.
        apple.answer { [ca = f.ca] _ in .json(ca.statuses(2, n: 1, purchase: nov1, signed: monthLater - 1000)) }
        let report = try f.apiRefresh(at: monthLater + 1000)
        #expect(report.unchanged == 1 && report.failed == 0)
        let m = try f.status(at: monthLater + 1000)
        #expect(m.status == "active" && m.transactionId == "1000-2")
    }

    @Test func aPurchaseThatDoesNotRenewIsReadFromItsTransactionHistory() throws {
        let f = try Fixture(api: apple)
        let receipt = f.receipt(1, type: "Non-Renewing Subscription")
        _ = try f.verify(receipt, at: nov1 + dayMs)
        apple.answer { [ca = f.ca] r in
            if r.apiPath.hasPrefix("/inApps/v1/subscriptions/") { return .json(["environment": "Sandbox", "bundleId": .string(AppStorePayloads.bundleId), "data": []]) }
            // Two pages: another purchase's transactions first, then this one's, refunded.
            let other = ca.sign(AppStorePayloads.transaction(id: "3000-1", original: "3000", purchase: nov1, expires: nil, signed: monthLater,
                                                               type: "Non-Consumable"))
            if r.query["revision"] == nil {
                return .json(["revision": "rev+1/2", "hasMore": true, "signedTransactions": [.string(other)]])
            }
            let refunded = ca.sign(AppStorePayloads.transaction(id: "1000-1", original: "1000", purchase: nov1, expires: nil, signed: monthLater,
                                                                  revoked: monthLater - 1000, type: "Non-Renewing Subscription"))
            return .json(["revision": "rev2", "hasMore": false, "signedTransactions": [.string(refunded)]])
        }
        let report = try f.apiRefresh(at: monthLater)
        #expect(report.expired == 1 && report.failed == 0)
        #expect(apple.received.map(\.apiPath) == ["/inApps/v1/subscriptions/1000", "/inApps/v2/history/1000", "/inApps/v2/history/1000"])
        #expect(apple.received.dropFirst().map { $0.query["sort"] } == ["DESCENDING", "DESCENDING"])
        #expect(apple.received.dropFirst().map { $0.query["revision"] } == [nil, "rev+1/2"])
        #expect(try f.status(at: monthLater).error == "revoked")
    }

    @Test func aMembershipBeingAskedAboutIsNotTakenByAnotherRefresh() throws {
        let f = try Fixture(api: apple)
        for n in 0..<5 { _ = try f.verify(f.receipt(1, original: "100\(n)"), at: nov1 + dayMs) }
        let t = Timestamp(milliseconds: monthLater)
        let first = try f.service.beginLookups(limit: 3, now: t)
        f.store.endRequest()
        let second = try f.service.beginLookups(limit: 3, now: t)
        f.store.endRequest()
        #expect(first.lookups.count == 3 && first.remaining == 2)
        #expect(second.lookups.count == 2 && second.remaining == 0)
        #expect(Set(first.lookups.map(\.originalTransactionId)).isDisjoint(with: second.lookups.map(\.originalTransactionId)))
        // A kernel that dies mid-call leaves them due again once the lease ends.
        let afterLease = Timestamp(milliseconds: monthLater + SubscriptionsService.leaseMs + 1)
        #expect(try f.service.beginLookups(limit: 10, now: afterLease).lookups.count == 5)
    }

    @Test func theDueRuleHoldsInApiMode() throws {
        let f = try Fixture(api: apple)
        apple.answer { [ca = f.ca] _ in .json(ca.statuses(1, n: 1, purchase: nov1, signed: nov1 + dayMs)) }
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        // Never looked at by refresh: due at once, though the verify has just happened.
        #expect(try f.apiRefresh(at: nov1 + dayMs).checked == 1)
        // Looked at: due an interval later...
        #expect(try f.apiRefresh(at: nov1 + dayMs + 3_599_000).checked == 0)
        #expect(try f.apiRefresh(at: nov1 + dayMs + 3_600_000).checked == 1)
        // ...or when the period ends, whichever comes first.
        #expect(try f.check()?.dueAt == nov1 + dayMs + 7_200_000)
        _ = try f.apiRefresh(at: nov1 + 30 * dayMs - 60_000)
        #expect(try f.check()?.dueAt == nov1 + 30 * dayMs)
    }

    // MARK: Recovery

    @Test func aLostRenewalIsRecoveredFromNotificationHistoryAcrossPages() throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(f.receipt(1), at: nov1 + dayMs)
        let applied = f.notification("3f1c7c1e-0000-4000-8000-0000000000b1", "DID_CHANGE_RENEWAL_STATUS", transaction: f.receipt(1, signed: nov1 + 2 * dayMs),
                                     signed: nov1 + 2 * dayMs)
        _ = try f.notify(applied, at: nov1 + 2 * dayMs)
        let lost = f.notification("3f1c7c1e-0000-4000-8000-0000000000b2", "DID_RENEW",
                                  transaction: f.receipt(2, purchase: nov1 + 30 * dayMs, signed: nov1 + 30 * dayMs), signed: nov1 + 30 * dayMs)
        let untrusted = AppStoreTestCA(name: "not the trusted root").sign(AppStorePayloads.notification(
            uuid: "3f1c7c1e-0000-4000-8000-0000000000b3", type: "REFUND", signed: nov1 + 30 * dayMs, transaction: nil))
        apple.answer { r in
            if r.environment == "Sandbox" { return .json(["notificationHistory": [], "hasMore": false]) }
            if r.query["paginationToken"] == nil {
                return .json(["notificationHistory": [["signedPayload": .string(applied)]], "hasMore": true, "paginationToken": "page/2"])
            }
            return .json(["notificationHistory": [["signedPayload": .string(lost)], ["signedPayload": .string(untrusted)]], "hasMore": false])
        }
        let page1 = try f.recover(from: nov1, to: monthLater, at: monthLater)
        #expect(page1 == RecoveryReport(fetched: 1, applied: 0, duplicates: 1, failed: 0, paginationToken: "P:page/2"))
        let page2 = try f.recover(from: nov1, to: monthLater, token: page1.paginationToken, at: monthLater)
        #expect(page2 == RecoveryReport(fetched: 2, applied: 1, duplicates: 0, failed: 1, paginationToken: "S:"))
        let page3 = try f.recover(from: nov1, to: monthLater, token: page2.paginationToken, at: monthLater)
        #expect(page3 == RecoveryReport(fetched: 0, applied: 0, duplicates: 0, failed: 0, paginationToken: nil))
        let m = try f.status(at: monthLater)
        #expect(m.status == "active" && m.transactionId == "1000-2")
        #expect(apple.received.allSatisfy { $0.method == "POST" && $0.body?["startDate"]?.intValue == nov1 && $0.body?["endDate"]?.intValue == monthLater })
        #expect(apple.received.map { $0.query["paginationToken"] } == [nil, "page/2", nil])
        // Running it again changes nothing.
        let again = try f.recover(from: nov1, to: monthLater, token: "P:page/2", at: monthLater)
        #expect(again.duplicates == 1 && again.applied == 0)
    }

    @Test func recoveryTokensNameTheirEnvironment() throws {
        let both = try Fixture(api: apple)
        #expect(both.service.recoveryStart(nil)! == ("Production", nil))
        #expect(both.service.recoveryStart("S:abc")! == ("Sandbox", "abc"))
        #expect(both.service.recoveryStart("X:abc") == nil)
        #expect(both.service.recoveryToken(after: "Sandbox", next: nil) == nil)
        let sandboxOnly = try Fixture(environments: ["Sandbox"], api: apple)
        #expect(sandboxOnly.service.recoveryStart(nil)! == ("Sandbox", nil))
        #expect(sandboxOnly.service.recoveryStart("P:abc") == nil)
    }
}

extension RefreshReport {
    init(checked: Int, expired: Int, renewed: Int, unchanged: Int, failed: Int, remaining: Int, mode: String) {
        self.init()
        (self.checked, self.expired, self.renewed, self.unchanged, self.failed, self.remaining, self.mode) =
            (checked, expired, renewed, unchanged, failed, remaining, mode)
    }
}

extension RecoveryReport {
    init(fetched: Int, applied: Int, duplicates: Int, failed: Int, paginationToken: String?) {
        self.init(fetched: fetched, paginationToken: paginationToken)
        (self.applied, self.duplicates, self.failed) = (applied, duplicates, failed)
    }
}

enum P256Key {
    /// A key Apple does not know.
    static func fresh() -> String { P256.Signing.PrivateKey().pemRepresentation }
}
