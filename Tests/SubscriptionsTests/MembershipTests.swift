import Chrono
import Foundation
import JSON
import Storage
import Store
import Testing
import TestSupport
import X509
@testable import Subscriptions

/// 2026-11-01T00:00:00Z and day lengths, in milliseconds.
let nov1: Int64 = 1_793_491_200_000
let dayMs: Int64 = 86_400_000
let otherUser = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"

/// A subscriptions service on a memory-only store, trusting a fresh test CA.
struct Fixture {
    let ca = AppStoreTestCA()
    let store: any Storage
    let service: SubscriptionsService

    /// With `api`, refresh asks that fake App Store Server (calls time out after a second).
    init(environments: [String] = ["Production", "Sandbox"], appAppleId: Int64? = nil, bundleId: String? = AppStorePayloads.bundleId,
         api: FakeAppStoreServer? = nil, apiKeyPEM: String? = nil, maxConcurrentCalls: Int = 8, consumption: ConsumptionPolicy = ConsumptionPolicy()) throws {
        var config = AppStoreConfig()
        config.consumptionRequests = consumption
        config.bundleId = bundleId
        config.environments = environments
        config.appAppleId = appAppleId
        config.rootsPEM = [ca.rootPEM]
        if let api {
            var settings = ServerAPISettings(issuerId: api.issuerId, keyId: api.keyId, privateKeyPEM: apiKeyPEM ?? api.keyPEM, baseURL: api.baseURL)
            settings.timeoutSeconds = 1
            settings.maxConcurrentCalls = maxConcurrentCalls
            config.serverApi = settings
        }
        let (store, tables) = try testStore { SubscriptionTables($0) }
        self.store = store
        service = SubscriptionsService(config: config, store: store, tables: tables)
    }

    /// A monthly transaction `n` of purchase `original`, bought `purchase` and signed `signed`.
    func receipt(_ n: Int = 1, original: String = "1000", purchase: Int64 = nov1, months: Int64 = 1, signed: Int64? = nil,
                 environment: String = "Sandbox", product: String = "premium.monthly", revoked: Int64? = nil,
                 token: String? = nil, type: String = "Auto-Renewable Subscription") -> String {
        ca.sign(AppStorePayloads.transaction(
            id: "\(original)-\(n)", original: original, product: product, purchase: purchase,
            expires: type == "Auto-Renewable Subscription" ? purchase + months * 30 * dayMs : nil,
            signed: signed ?? purchase, environment: environment, revoked: revoked, appAccountToken: token, type: type))
    }

    func verify(_ receipt: String, user: String = testUser, product: String = "premium.monthly", at now: Int64 = nov1 + dayMs)
        throws(SubscriptionsError) -> Membership {
        try service.verify(user, productId: product, receipt: receipt, now: Timestamp(milliseconds: now))
    }

    func status(_ user: String = testUser, at now: Int64) throws -> Membership {
        try service.status(user, now: Timestamp(milliseconds: now))
    }

    /// A notification about purchase `original` carrying `transaction` (signed) and optional renewal info.
    func notification(_ uuid: String, _ type: String, subtype: String? = nil, transaction: String?, renewal: JSON? = nil,
                      signed: Int64, status: Int64? = nil) -> String {
        ca.sign(AppStorePayloads.notification(uuid: uuid, type: type, subtype: subtype, signed: signed, transaction: transaction,
                                              renewal: renewal.map { ca.sign($0) }, status: status))
    }

    func notify(_ payload: String, at now: Int64) throws(SubscriptionsError) -> NotifyReport {
        try service.notify(payload, now: Timestamp(milliseconds: now))
    }
}

func reason(_ body: () throws(SubscriptionsError) -> Membership) -> String {
    do {
        _ = try body()
        return "accept"
    } catch {
        switch error {
        case .verification(let reason, _): return reason
        case .ownedByOtherUser: return "transaction_owned_by_other_user"
        case .storage(let e): return "storage: \(e)"
        }
    }
}

@Suite struct MembershipTests {
    @Test func aVerifiedReceiptMakesAnActiveMembership() throws {
        let f = try Fixture()
        #expect(try f.status(at: nov1) == .none)
        let m = try f.verify(f.receipt())
        #expect(m == Membership(status: "active", productId: "premium.monthly", currentPeriodEnd: nov1 + 30 * dayMs, transactionId: "1000-1",
                                originalTransactionId: "1000", environment: "Sandbox", error: nil))
        #expect(try f.status(at: nov1 + dayMs) == m)
        // The clock alone ends it: reads never grant access past the period.
        #expect(try f.status(at: nov1 + 31 * dayMs).status == "inactive")
        #expect(try f.status(at: nov1 + 31 * dayMs).error == "expired")
        // The same receipt again changes nothing and answers the same.
        let before = (try f.store.lastFeedPosition(of: nil))
        #expect(try f.verify(f.receipt()) == m)
        #expect((try f.store.lastFeedPosition(of: nil)) == before)
    }

    @Test func theReceiptMustBeThisAppsProductInAnAllowedEnvironment() throws {
        let f = try Fixture(environments: ["Production"])
        #expect(reason { () throws(SubscriptionsError) in try f.verify(f.receipt()) } == "environment_mismatch")
        #expect(reason { () throws(SubscriptionsError) in try f.verify(f.receipt(environment: "Production"), product: "premium.yearly") } == "product_mismatch")
        let foreign = f.ca.sign(AppStorePayloads.transaction(id: "1", original: "1", purchase: nov1, expires: nov1 + 30 * dayMs, signed: nov1,
                                                             environment: "Production", bundleId: "com.example.other"))
        #expect(reason { () throws(SubscriptionsError) in try f.verify(foreign) } == "bundle_mismatch")
        #expect(reason { () throws(SubscriptionsError) in try f.verify(f.receipt(environment: "Production", type: "Consumable")) } == "product_mismatch")
        #expect(reason { () throws(SubscriptionsError) in try f.verify(AppStoreTestCA().sign(["x": 1])) } == "untrusted_chain")
        #expect(reason { () throws(SubscriptionsError) in try f.verify(f.ca.sign(["signedDate": .int(nov1)])) } == "malformed_jws")
        // Nothing was stored by any of these.
        #expect(try f.status(at: nov1) == .none)
        let horizon = try f.store.lastFeedPosition(of: nil)
        let entries = try f.store.feed(user: testUser, after: nil, limit: 10, entities: nil).entries
        #expect(horizon == 0 || entries.isEmpty)
        // Without a configured bundle id nothing verifies.
        let unconfigured = try Fixture(bundleId: nil)
        #expect(reason { () throws(SubscriptionsError) in try unconfigured.verify(unconfigured.receipt()) } == "bundle_mismatch")
        // A non-consumable is a membership that never ends.
        let lifetime = try f.verify(f.receipt(original: "2000", environment: "Production", product: "lifetime", type: "Non-Consumable"), product: "lifetime")
        #expect(lifetime.status == "active" && lifetime.currentPeriodEnd == nil)
        #expect(try f.status(at: nov1 + 3650 * dayMs).productId == "lifetime")
    }

    /// The test CA's broken variants, through `subscriptions.verify`: each is refused and stores nothing.
    @Test func chainsTheVerifierRefuses() throws {
        let f = try Fixture()
        let tx = AppStorePayloads.transaction(id: "1", original: "1", purchase: nov1, expires: nov1 + 30 * dayMs, signed: nov1)
        func outcome(_ jws: String) -> String { reason { () throws(SubscriptionsError) in try f.verify(jws) } }
        let (unmarkedLeaf, unmarkedKey) = f.ca.otherLeaf(marker: false)
        let leafOnly = { (c: X509.Certificate) in [AppStoreTestCA.x5c(c), AppStoreTestCA.x5c(f.ca.intermediate), AppStoreTestCA.x5c(f.ca.root)] }
        #expect(outcome(f.ca.sign(tx, x5c: leafOnly(unmarkedLeaf), key: unmarkedKey)) == "untrusted_chain")
        let (unmarkedChain, key) = f.ca.unmarkedIntermediateChain()
        #expect(outcome(f.ca.sign(tx, x5c: unmarkedChain, key: key)) == "untrusted_chain")
        // Valid only after, or only before, the transaction's signedDate (2026-11-01).
        let (late, lateKey) = f.ca.otherLeaf(from: Date(timeIntervalSince1970: 1_798_761_600), to: AppStoreTestCA.end)
        #expect(outcome(f.ca.sign(tx, x5c: leafOnly(late), key: lateKey)) == "untrusted_chain")
        let (early, earlyKey) = f.ca.otherLeaf(from: AppStoreTestCA.start, to: Date(timeIntervalSince1970: 1_767_225_600))
        #expect(outcome(f.ca.sign(tx, x5c: leafOnly(early), key: earlyKey)) == "untrusted_chain")
        // ...while a transaction signed in the early leaf's lifetime still verifies after it expired.
        let old = AppStorePayloads.transaction(id: "2", original: "2", purchase: 1_760_000_000_000, expires: nil, signed: 1_760_000_000_000,
                                               type: "Non-Consumable")
        #expect(reason { () throws(SubscriptionsError) in
            try f.verify(f.ca.sign(old, x5c: leafOnly(early), key: earlyKey))
        } == "accept")
        // Two and four certificates; signed by another key than the leaf's; alg none.
        #expect(outcome(f.ca.sign(tx, x5c: Array(f.ca.chain.prefix(2)))) == "untrusted_chain")
        #expect(outcome(f.ca.sign(tx, x5c: f.ca.chain + [f.ca.chain[2]])) == "untrusted_chain")
        #expect(outcome(f.ca.sign(tx, key: f.ca.intermediateKey)) == "invalid_signature")
        #expect(outcome(f.ca.sign(tx, alg: "none")) == "invalid_signature")
        // Only the one that verified was stored.
        #expect(try f.status(at: nov1).originalTransactionId == "2")
        #expect(try f.service.membership(testUser, originalTransactionId: "1", now: Timestamp(milliseconds: nov1)) == nil)
    }

    @Test func onePurchaseUnlocksOneAccount() throws {
        let f = try Fixture()
        _ = try f.verify(f.receipt())
        #expect(reason { () throws(SubscriptionsError) in try f.verify(f.receipt(), user: otherUser) } == "transaction_owned_by_other_user")
        #expect(try f.status(otherUser, at: nov1) == .none)
        // An appAccountToken names the account the app bought it for.
        #expect(reason { () throws(SubscriptionsError) in try f.verify(f.receipt(original: "3000", token: otherUser)) } == "transaction_owned_by_other_user")
        #expect(try f.verify(f.receipt(original: "3000", token: testUser.uppercased())).status == "active")
        // Deleting the owner releases the purchase.
        var t = Transaction()
        t.deleteUser(testUser)
        try f.store.commit(t)
        #expect(try f.verify(f.receipt(), user: otherUser).status == "active")
    }

    @Test func olderDataNeverRollsBack() throws {
        let f = try Fixture()
        let renewal = f.receipt(2, purchase: nov1 + 30 * dayMs, signed: nov1 + 30 * dayMs)
        _ = try f.verify(renewal, at: nov1 + 31 * dayMs)
        // The first period's receipt, signed earlier, arrives late: the second period stays.
        let late = try f.verify(f.receipt(), at: nov1 + 32 * dayMs)
        #expect(late.transactionId == "1000-2" && late.status == "active")
        // A revoked, later-signed copy of the current transaction ends it.
        let revoked = try f.verify(f.receipt(2, purchase: nov1 + 30 * dayMs, signed: nov1 + 33 * dayMs, revoked: nov1 + 33 * dayMs),
                                   at: nov1 + 33 * dayMs)
        #expect(revoked.status == "inactive" && revoked.error == "revoked")
    }

    @Test func notificationsMoveTheMembership() throws {
        let f = try Fixture()
        _ = try f.verify(f.receipt())
        let end1 = nov1 + 30 * dayMs
        func apply(_ uuid: String, _ type: String, subtype: String? = nil, tx: String?, renewal: JSON? = nil, signed: Int64,
                   status: Int64? = nil) throws -> NotifyReport {
            try f.notify(f.notification(uuid, type, subtype: subtype, transaction: tx, renewal: renewal, signed: signed, status: status), at: signed)
        }
        // Billing fails at the end of the period: grace period, then billing retry, then recovery.
        let grace = try apply("n1", "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", tx: f.receipt(signed: end1),
                              renewal: AppStorePayloads.renewal(original: "1000", grace: end1 + 16 * dayMs, signed: end1), signed: end1)
        #expect(grace == NotifyReport(notificationType: "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", originalTransactionId: "1000",
                                      userId: testUser, status: "grace_period", duplicate: false))
        #expect(try f.status(at: end1 + dayMs).status == "grace_period")
        // The clock ends the grace period even without a notification.
        #expect(try f.status(at: end1 + 17 * dayMs).status == "billing_retry")
        #expect(try apply("n2", "GRACE_PERIOD_EXPIRED", tx: f.receipt(signed: end1 + 16 * dayMs), signed: end1 + 16 * dayMs).status == "billing_retry")
        let renewed = try apply("n3", "DID_RENEW", subtype: "BILLING_RECOVERY",
                                tx: f.receipt(2, purchase: end1 + 20 * dayMs, signed: end1 + 20 * dayMs), signed: end1 + 20 * dayMs)
        #expect(renewed.status == "active")
        #expect(try f.status(at: end1 + 21 * dayMs).transactionId == "1000-2")
        // The same notification again: acknowledged, nothing applied.
        let before = (try f.store.lastFeedPosition(of: nil))
        let again = try apply("n3", "DID_RENEW", subtype: "BILLING_RECOVERY",
                              tx: f.receipt(2, purchase: end1 + 20 * dayMs, signed: end1 + 20 * dayMs), signed: end1 + 20 * dayMs)
        #expect(again.duplicate && again.userId == testUser && again.status == "active")
        #expect((try f.store.lastFeedPosition(of: nil)) == before)
        // An EXPIRED signed before the renewal arrives late: recorded, not applied.
        let stale = try apply("n4", "EXPIRED", subtype: "BILLING_RETRY", tx: f.receipt(signed: end1 + 19 * dayMs), signed: end1 + 19 * dayMs)
        #expect(stale.status == "active" && !stale.duplicate)
        // A refund of the current transaction revokes; its reversal restores.
        let t2 = f.receipt(2, purchase: end1 + 20 * dayMs, signed: end1 + 22 * dayMs, revoked: end1 + 22 * dayMs)
        #expect(try apply("n5", "REFUND", tx: t2, signed: end1 + 22 * dayMs).status == "inactive")
        #expect(try f.status(at: end1 + 22 * dayMs).error == "revoked")
        #expect(try apply("n6", "REFUND_REVERSED", tx: f.receipt(2, purchase: end1 + 20 * dayMs, signed: end1 + 23 * dayMs),
                          signed: end1 + 23 * dayMs).status == "active")
        // Renewal status and preference changes keep access; EXPIRED ends it.
        #expect(try apply("n7", "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED",
                          tx: f.receipt(2, purchase: end1 + 20 * dayMs, signed: end1 + 24 * dayMs),
                          renewal: AppStorePayloads.renewal(original: "1000", autoRenew: 0, signed: end1 + 24 * dayMs),
                          signed: end1 + 24 * dayMs).status == "active")
        #expect(try apply("n8", "EXPIRED", subtype: "VOLUNTARY", tx: f.receipt(2, purchase: end1 + 20 * dayMs, signed: end1 + 50 * dayMs),
                          signed: end1 + 50 * dayMs).status == "inactive")
        #expect(try f.status(at: end1 + 50 * dayMs).error == "expired")
        // Apple's own status, when the notification carries one, decides.
        #expect(try apply("n9", "SUBSCRIBED", subtype: "RESUBSCRIBE", tx: f.receipt(3, purchase: end1 + 60 * dayMs, signed: end1 + 60 * dayMs),
                          signed: end1 + 60 * dayMs, status: 4).status == "grace_period")
        #expect(try apply("n10", "REVOKE", tx: f.receipt(3, purchase: end1 + 60 * dayMs, signed: end1 + 61 * dayMs),
                          signed: end1 + 61 * dayMs, status: 5).status == "inactive")
        // TEST is acknowledged and changes nothing.
        let test = try f.notify(f.ca.sign(["notificationType": "TEST", "notificationUUID": "t1", "signedDate": .int(end1),
                                           "data": ["bundleId": .string(AppStorePayloads.bundleId), "environment": "Sandbox"]]), at: end1)
        #expect(test == NotifyReport(notificationType: "TEST", subtype: nil, originalTransactionId: nil, userId: nil, status: nil, duplicate: false))
    }

    @Test func notificationsForAPurchaseNoOneOwnsWaitForItsOwner() throws {
        let f = try Fixture()
        let end1 = nov1 + 30 * dayMs
        let early = try f.notify(f.notification("p1", "DID_RENEW", transaction: f.receipt(2, purchase: end1, signed: end1), signed: end1),
                                 at: end1)
        #expect(early.userId == nil && early.status == nil && !early.duplicate)
        #expect(try f.notify(f.notification("p1", "DID_RENEW", transaction: f.receipt(2, purchase: end1, signed: end1), signed: end1),
                             at: end1).duplicate)
        // The app sends the first period's receipt: the renewal kept meanwhile applies.
        let m = try f.verify(f.receipt(), at: end1 + dayMs)
        #expect(m.transactionId == "1000-2" && m.status == "active" && m.currentPeriodEnd == end1 + 30 * dayMs)
        // The kept notification now belongs to the owner: a redelivery is a duplicate for them.
        let redelivered = try f.notify(f.notification("p1", "DID_RENEW", transaction: f.receipt(2, purchase: end1, signed: end1), signed: end1),
                                       at: end1 + dayMs)
        #expect(redelivered.duplicate && redelivered.userId == testUser)
    }

    /// Issue "Security and robustness defects", item 14: a REFUND kept before anyone owned the purchase
    /// left its verifier `inactive/expired` (its `data.status`), or even active while the period ran. The
    /// same facts in every order must give the same state: a revoked current transaction is revoked.
    @Test func theSameFactsInEveryOrderGiveTheSameVerdict() throws {
        let refundAt = nov1 + 5 * dayMs
        for dataStatus in [nil, 1, 2] as [Int64?] {
            var verdicts: [String] = []
            for receiptFirst in [true, false] {
                let f = try Fixture()
                let refund = f.notification("r1", "REFUND", transaction: f.receipt(1, signed: refundAt, revoked: refundAt),
                                            signed: refundAt, status: dataStatus)
                if receiptFirst {
                    _ = try f.verify(f.receipt(), at: nov1 + dayMs)
                    _ = try f.notify(refund, at: refundAt + dayMs)
                } else {
                    _ = try f.notify(refund, at: refundAt)
                    _ = try f.verify(f.receipt(), at: refundAt + dayMs)
                }
                let m = try f.status(at: refundAt + 2 * dayMs)
                verdicts.append("\(m.status)/\(m.error ?? "-")")
            }
            #expect(verdicts == ["inactive/revoked", "inactive/revoked"], "data.status \(dataStatus.map(String.init) ?? "absent")")
        }
        // The owner deletes their account; another user verifies the refunded transaction as Apple signed it
        // after the refund: the same verdict.
        let f = try Fixture()
        let revoked = f.receipt(1, signed: refundAt, revoked: refundAt)
        _ = try f.notify(f.notification("r1", "REFUND", transaction: revoked, signed: refundAt, status: 1), at: refundAt)
        _ = try f.verify(revoked, at: refundAt + dayMs)
        var deletion = Transaction()
        deletion.deleteUser(testUser)
        try f.store.commit(deletion)
        let b = try f.verify(revoked, user: otherUser, at: refundAt + dayMs)
        #expect("\(b.status)/\(b.error ?? "-")" == "inactive/revoked")
    }

    @Test func notificationsAreCheckedLikeReceipts() throws {
        let f = try Fixture(environments: ["Production"], appAppleId: 1234)
        let tx = f.receipt(environment: "Production")
        func outcome(_ payload: JSON) -> String {
            do {
                _ = try f.notify(f.ca.sign(payload), at: nov1)
                return "accept"
            } catch {
                if case .verification(let r, _) = error { return r }
                return "\(error)"
            }
        }
        #expect(outcome(AppStorePayloads.notification(uuid: "a", type: "SUBSCRIBED", signed: nov1, transaction: tx, environment: "Production",
                                                      appAppleId: 1234)) == "accept")
        #expect(outcome(AppStorePayloads.notification(uuid: "b", type: "SUBSCRIBED", signed: nov1, transaction: tx, environment: "Production",
                                                      appAppleId: 1235)) == "bundle_mismatch")
        #expect(outcome(AppStorePayloads.notification(uuid: "c", type: "SUBSCRIBED", signed: nov1, transaction: tx,
                                                      environment: "Sandbox")) == "environment_mismatch")
        #expect(outcome(AppStorePayloads.notification(uuid: "d", type: "SUBSCRIBED", signed: nov1, transaction: tx, environment: "Production",
                                                      bundleId: "com.other", appAppleId: 1234)) == "bundle_mismatch")
        // The signed transaction inside must verify and be this app's too.
        let foreign = AppStoreTestCA().sign(AppStorePayloads.transaction(id: "1", original: "1", purchase: nov1, expires: nil, signed: nov1))
        #expect(outcome(AppStorePayloads.notification(uuid: "e", type: "SUBSCRIBED", signed: nov1, transaction: foreign, environment: "Production",
                                                      appAppleId: 1234)) == "untrusted_chain")
        #expect(outcome(AppStorePayloads.notification(uuid: "f", type: "SUBSCRIBED", signed: nov1, transaction: f.receipt(), environment: "Production",
                                                      appAppleId: 1234)) == "environment_mismatch")
        #expect(outcome(["notificationType": "SUBSCRIBED", "signedDate": .int(nov1)]) == "malformed_jws")
    }

    @Test func refreshChecksTheLeastRecentlyCheckedByTheClock() throws {
        let f = try Fixture()
        // Three purchases of three users, ending on days 30, 40 and 50.
        let users = [testUser, otherUser, "cccccccc-cccc-4ccc-8ccc-cccccccccccc"]
        for (i, user) in users.enumerated() {
            _ = try f.verify(f.receipt(original: "\(i)", purchase: nov1 + Int64(i) * 10 * dayMs), user: user, at: nov1 + Int64(i) * 10 * dayMs)
        }
        func refresh(_ limit: Int, at day: Int64) throws -> RefreshReport {
            try f.service.refresh(limit: limit, now: Timestamp(milliseconds: nov1 + day * dayMs))
        }
        // Day 35: the first has ended. Two at a time, least recently checked first.
        var r = try refresh(2, at: 35)
        #expect(r == RefreshReport(checked: 2, expired: 1, renewed: 0, unchanged: 1, failed: 0, remaining: 1, mode: "clock"))
        r = try refresh(2, at: 35)
        #expect(r.checked == 1 && r.remaining == 0 && r.unchanged == 1)
        // Checked within the hour: nothing is due.
        #expect(try refresh(2, at: 35).checked == 0)
        // A renewal applied between checks counts as renewed; the third has ended by day 60.
        _ = try f.notify(f.notification("r1", "DID_RENEW", transaction: f.receipt(2, original: "1", purchase: nov1 + 40 * dayMs, signed: nov1 + 40 * dayMs),
                                        signed: nov1 + 40 * dayMs), at: nov1 + 40 * dayMs)
        r = try refresh(10, at: 60)
        #expect(r == RefreshReport(checked: 3, expired: 1, renewed: 1, unchanged: 1, failed: 0, remaining: 0, mode: "clock"))
        #expect(try f.status(users[2], at: nov1 + 60 * dayMs).error == "expired")
    }

    /// A verify is not a look by refresh: a purchase is due at once, and a period that ends after
    /// refresh looked makes it due then, not an interval later.
    @Test func aMembershipIsDueWhenNeverLookedAtOrWhenItsPeriodEnded() throws {
        let f = try Fixture()
        let bought = nov1 - 30 * dayMs + 2000  // the month ends 2 s after nov1
        _ = try f.verify(f.receipt(original: "7", purchase: bought), at: nov1)
        var r = try f.service.refresh(limit: 10, now: Timestamp(milliseconds: nov1 + 3000))
        #expect(r == RefreshReport(checked: 1, expired: 1, renewed: 0, unchanged: 0, failed: 0, remaining: 0, mode: "clock"))
        // A second purchase, looked at by refresh while active: due again when its period ends.
        _ = try f.verify(f.receipt(original: "8", purchase: nov1), user: otherUser, at: nov1)
        r = try f.service.refresh(limit: 10, now: Timestamp(milliseconds: nov1 + 4000))
        #expect(r.checked == 1 && r.unchanged == 1)
        #expect(try f.service.refresh(limit: 10, now: Timestamp(milliseconds: nov1 + 5000)).checked == 0, "looked at just now")
        r = try f.service.refresh(limit: 10, now: Timestamp(milliseconds: nov1 + 30 * dayMs))
        #expect(r.checked == 2 && r.expired == 1, "the second's period ended; the first is an interval past its look")
    }

    @Test func dueRule() {
        let row = MembershipRow(status: "active", error: nil, productId: "p", transactionId: "t", environment: "Sandbox", purchaseDate: 0,
                                expiresDate: 10_000, gracePeriodEnd: nil, autoRenew: true, signedDate: 0, receipt: "", updatedAt: 0)
        #expect(MembershipRules.dueAt(lastLook: nil, row, interval: 3_600_000) == 0)
        #expect(MembershipRules.dueAt(lastLook: 5_000, row, interval: 3_600_000) == 10_000, "the period ends first")
        #expect(MembershipRules.dueAt(lastLook: 20_000, row, interval: 3_600_000) == 3_620_000, "ended before the look")
        var grace = row
        grace.gracePeriodEnd = 15_000
        #expect(MembershipRules.dueAt(lastLook: 12_000, grace, interval: 3_600_000) == 15_000)
    }

    @Test func clockRules() {
        let row = MembershipRow(status: "active", error: nil, productId: "p", transactionId: "t", environment: "Sandbox", purchaseDate: 0,
                                expiresDate: 100, gracePeriodEnd: nil, autoRenew: true, signedDate: 0, receipt: "", updatedAt: 0)
        #expect(MembershipRules.current(row, now: 99) == ("active", nil))
        #expect(MembershipRules.current(row, now: 100) == ("inactive", "expired"))
        var grace = row
        grace.gracePeriodEnd = 200
        #expect(MembershipRules.current(grace, now: 150) == ("grace_period", nil))
        grace.status = "grace_period"
        #expect(MembershipRules.current(grace, now: 200) == ("billing_retry", nil))
        #expect(MembershipRules.current(grace, now: 100 + MembershipRules.billingRetryMs) == ("inactive", "expired"))
        var revoked = row
        (revoked.status, revoked.error) = ("inactive", "revoked")
        #expect(MembershipRules.current(revoked, now: 0) == ("inactive", "revoked"))
        #expect(MembershipRules.checkOrder(dueAt: 5, key: "k") == "000000000000005|k")
    }
}

/// Apple-signed receipts and notifications (shared/testdata/appstore) through the service, trusting only
/// the bundled Apple Root CA - G3: each gives the answer the vectors' README states.
@Suite struct RealVectorTests {
    static func service(bundleId: String, environments: [String] = ["Production", "Sandbox"], appAppleId: Int64? = nil) throws -> SubscriptionsService {
        var config = AppStoreConfig()
        config.bundleId = bundleId
        config.environments = environments
        config.appAppleId = appAppleId
        let (store, tables) = try testStore { SubscriptionTables($0) }
        return SubscriptionsService(config: config, store: store, tables: tables)
    }

    static func entry(_ id: String) throws -> JSON {
        let entries = try AppStoreVectors.json("real-signed-jws.json")["entries"]?.arrayValue ?? []
        return try #require(entries.first { $0["id"] == .string(id) })
    }

    static func outcome<T>(_ body: () throws(SubscriptionsError) -> T) -> String {
        do {
            _ = try body()
            return "accept"
        } catch {
            if case .verification(let r, _) = error { return r }
            return "\(error)"
        }
    }

    @Test func aRealTransactionVerifiesAtItsSignedDateForItsApp() throws {
        let jws = try #require(try Self.entry("gopay-transaction-sandbox-2022")["jws"]?.stringValue)
        let product = "Com.VoiceRecording.Telephone.103"
        let owner = "207262da-1ac8-4e0a-a399-5aa62a82800f"  // its appAccountToken
        let now = Timestamp(milliseconds: 1_795_392_000_000)
        let s = try Self.service(bundleId: "Com.VoiceRecording.Telephone")
        let m = try s.verify(owner, productId: product, receipt: jws, now: now)
        // Verified at its 2022 signedDate; its period ended in 2022.
        #expect(m.status == "inactive" && m.error == "expired" && m.originalTransactionId == "2000000184445477")
        #expect(Self.outcome { () throws(SubscriptionsError) in try s.verify(testUser, productId: product, receipt: jws, now: now) }
                == "\(SubscriptionsError.ownedByOtherUser)")
        let lower = try Self.service(bundleId: "com.voicerecording.telephone")
        #expect(Self.outcome { () throws(SubscriptionsError) in try lower.verify(owner, productId: product, receipt: jws, now: now) } == "bundle_mismatch")
        let production = try Self.service(bundleId: "Com.VoiceRecording.Telephone", environments: ["Production"])
        #expect(Self.outcome { () throws(SubscriptionsError) in try production.verify(owner, productId: product, receipt: jws, now: now) }
                == "environment_mismatch")
    }

    @Test func realNotificationsAndTheirIdentity() throws {
        let now = Timestamp(milliseconds: 1_795_392_000_000)
        let consumption = try #require(try Self.entry("gopay-consumption-request-production-2023")["jws"]?.stringValue)
        let right = try Self.service(bundleId: "com.jrjj.keysns", appAppleId: 1_601_830_814)
        let r = try right.notify(consumption, now: now)
        // A consumable's consumption request changes no membership: acknowledged, not kept.
        #expect(r.notificationType == "CONSUMPTION_REQUEST" && r.userId == nil && !r.duplicate)
        let wrongId = try Self.service(bundleId: "com.jrjj.keysns", appAppleId: 1_601_830_815)
        #expect(Self.outcome { () throws(SubscriptionsError) in try wrongId.notify(consumption, now: now) } == "bundle_mismatch")
        let sandboxOnly = try Self.service(bundleId: "com.jrjj.keysns", environments: ["Sandbox"])
        #expect(Self.outcome { () throws(SubscriptionsError) in try sandboxOnly.notify(consumption, now: now) } == "environment_mismatch")

        // A real REFUND arrives before the app verified the purchase: kept, then applied. Apple says the
        // subscription is still active (data.status 1), but its transaction carries a revocationDate: the
        // current transaction is revoked, whatever data.status said and whichever came first.
        let refund = try Self.entry("session-refund-sandbox-2025")
        let s = try Self.service(bundleId: "com.loki-project.loki-messenger")
        let kept = try s.notify(try #require(refund["jws"]?.stringValue), now: now)
        #expect(kept.notificationType == "REFUND" && kept.userId == nil && kept.originalTransactionId == "2000001024993299")
        let payload = try SignedDataVerifier.object(try #require(refund["jws"]?.stringValue).split(separator: ".")[1], "payload")
        let transaction = try #require(payload["data"]?["signedTransactionInfo"]?.stringValue)
        let m = try s.verify(testUser, productId: "com.getsession.org.pro_sub", receipt: transaction, now: now)
        #expect(m.transactionId == "2000001032604840" && m.status == "inactive" && m.error == "revoked")
        #expect(try s.notify(try #require(refund["jws"]?.stringValue), now: now).duplicate)
    }
}

/// Monthly subscriptions with a 12-month commitment (App Store Server API 1.21, #40): the transaction's
/// `billingPlanType` and `commitmentInfo`, and renewal info's next commitment, are kept and shown.
@Suite struct CommitmentPlanTests {
    @Test func aCommitmentPlanIsShownInStatusAndItsRenewalAfterANotification() throws {
        let f = try Fixture()
        var tx = AppStorePayloads.transaction(id: "1000-3", original: "1000", purchase: nov1, expires: nov1 + 30 * dayMs, signed: nov1).objectValue!
        tx["billingPlanType"] = "MONTHLY"
        tx["commitmentInfo"] = ["billingPeriodNumber": 3, "totalBillingPeriods": 12, "commitmentExpiresDate": .int(nov1 + 300 * dayMs),
                                "commitmentPrice": 119_880]
        let m = try f.verify(f.ca.sign(.object(tx)))
        #expect(m.billingPlanType == "MONTHLY")
        #expect(m.commitment == Commitment(period: 3, periods: 12, endsAt: nov1 + 300 * dayMs, price: 119_880))
        #expect(m.json["commitment"]?["periods"] == 12)
        #expect(m.json["commitmentRenewal"] == .null)
        var row = MembershipRules.verified(try AppleTransaction.read(tx).get(), receipt: "r", existing: nil, now: nov1)
        row.commitmentRenewal = CommitmentRenewal(renews: true, date: 5, productId: "p", billingPlanType: "MONTHLY", price: 1)
        #expect(try MembershipRow(stored: row.stored) == row, "the stored form keeps the commitment")

        var renewal = AppStorePayloads.renewal(original: "1000", signed: nov1 + dayMs).objectValue!
        renewal["renewalBillingPlanType"] = "MONTHLY"
        renewal["commitmentInfo"] = ["commitmentAutoRenewStatus": 0, "commitmentRenewalDate": .int(nov1 + 300 * dayMs),
                                     "commitmentAutoRenewProductId": "premium.monthly.commitment", "commitmentRenewalPrice": 9_990]
        _ = try f.notify(f.notification("n-1", "DID_CHANGE_RENEWAL_STATUS", transaction: f.ca.sign(.object(tx)), renewal: .object(renewal),
                                        signed: nov1 + dayMs), at: nov1 + dayMs)
        let now = try f.status(at: nov1 + 2 * dayMs)
        #expect(now.commitmentRenewal == CommitmentRenewal(renews: false, date: nov1 + 300 * dayMs, productId: "premium.monthly.commitment",
                                                           billingPlanType: "MONTHLY", price: 9_990))
        #expect(now.commitment == m.commitment, "kept from the transaction")
        // A plain subscription's answer has none of these members.
        let plain = try Fixture()
        #expect(try plain.verify(plain.receipt()).json["billingPlanType"] == nil)
    }
}

/// `RESCIND_CONSENT` (#40): a parent withdrew consent. The notification names the app download
/// (`appData.signedAppTransactionInfo`), not a purchase; the kernel finds the user whose purchase carried
/// that download, marks the account, and acknowledges it whoever it is (never a 4xx: Apple would retry).
@Suite struct RescindConsentTests {
    func rescind(_ f: Fixture, uuid: String, appTransactionId: String, signed: Int64) -> String {
        let app = f.ca.sign(["appTransactionId": .string(appTransactionId), "bundleId": .string(AppStorePayloads.bundleId),
                             "receiptType": "Sandbox", "signedDate": .int(signed), "receiptCreationDate": .int(signed)])
        return f.ca.sign(["notificationType": "RESCIND_CONSENT", "notificationUUID": .string(uuid), "version": "2.0", "signedDate": .int(signed),
                          "appData": ["bundleId": .string(AppStorePayloads.bundleId), "environment": "Sandbox",
                                      "signedAppTransactionInfo": .string(app)]])
    }

    @Test func theAccountWhosePurchaseCarriedTheDownloadIsMarkedOnce() throws {
        let f = try Fixture()
        var tx = AppStorePayloads.transaction(id: "1000-1", original: "1000", purchase: nov1, expires: nov1 + 30 * dayMs, signed: nov1).objectValue!
        tx["appTransactionId"] = "704289572311"
        _ = try f.verify(f.ca.sign(.object(tx)))
        #expect(try f.status(at: nov1 + dayMs).consentRescindedAt == nil)
        #expect(try f.status(at: nov1 + dayMs).json["consentRescindedAt"] == nil)

        let report = try f.notify(rescind(f, uuid: "r-1", appTransactionId: "704289572311", signed: nov1 + 2 * dayMs), at: nov1 + 2 * dayMs)
        #expect(report.notificationType == "RESCIND_CONSENT" && report.userId == testUser && !report.duplicate)
        let status = try f.status(at: nov1 + 3 * dayMs)
        #expect(status.consentRescindedAt == nov1 + 2 * dayMs)
        #expect(status.status == "active", "access is the host's call")
        #expect(status.json["consentRescindedAt"] != nil)
        #expect(try f.notify(rescind(f, uuid: "r-1", appTransactionId: "704289572311", signed: nov1 + 2 * dayMs), at: nov1 + 3 * dayMs).duplicate)

        // A download no user of this kernel bought from: acknowledged, nobody marked.
        let stranger = try f.notify(rescind(f, uuid: "r-2", appTransactionId: "1", signed: nov1 + 2 * dayMs), at: nov1 + 3 * dayMs)
        #expect(stranger.userId == nil && !stranger.duplicate)
        // Signed by anyone else: refused like any forged notification.
        let forged = AppStoreTestCA().sign(["notificationType": "RESCIND_CONSENT", "notificationUUID": "r-3", "signedDate": .int(nov1)])
        #expect(throws: SubscriptionsError.self) { try f.notify(forged, at: nov1) }
    }
}
