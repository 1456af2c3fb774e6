import Chrono
import Foundation
import JSON
import Storage
import Testing
import TestSupport
@testable import Subscriptions

/// `CONSUMPTION_REQUEST` (#40): the answer the kernel would give (a pure rule), recorded for the host, and
/// sent through Send Consumption Information v2 on the next api-mode refresh when the deployment opts in.
@Suite struct ConsumptionRulesTests {
    func policy(_ refund: String? = nil, delivery: String = "DELIVERED", sample: Bool = false) -> ConsumptionPolicy {
        var p = ConsumptionPolicy()
        (p.refundPreference, p.deliveryStatus, p.sampleContentProvided) = (refund, delivery, sample)
        return p
    }

    @Test func theAnswerSaysWhatTheKernelKnowsAndThePolicyStates() {
        // A subscription a user verified: delivered; Apple takes no percentage for auto-renewables.
        #expect(ConsumptionRules.body(productType: "Auto-Renewable Subscription", purchaseDate: nov1, expiresDate: nov1 + 30 * dayMs,
                                      verifiedByUser: true, policy: policy("DECLINE", sample: true), now: nov1 + dayMs)
                == JSONObject([("customerConsented", true), ("deliveryStatus", "DELIVERED"), ("refundPreference", "DECLINE"),
                               ("sampleContentProvided", true)]))
        // A non-renewing subscription a quarter used: 25,000 milliunits, so a prorated refund can be asked.
        let quarter = ConsumptionRules.body(productType: "Non-Renewing Subscription", purchaseDate: nov1, expiresDate: nov1 + 40 * dayMs,
                                            verifiedByUser: true, policy: policy("GRANT_PRORATED"), now: nov1 + 10 * dayMs)
        #expect(quarter["consumptionPercentage"] == 25_000 && quarter["refundPreference"] == "GRANT_PRORATED")
        // Past its end: 100%, never more.
        #expect(ConsumptionRules.body(productType: "Non-Renewing Subscription", purchaseDate: nov1, expiresDate: nov1 + dayMs,
                                      verifiedByUser: true, policy: policy(), now: nov1 + 9 * dayMs)["consumptionPercentage"] == 100_000)
        // Not delivered by the policy's word: percentage 0 (Apple requires it), so no prorated preference.
        let undelivered = ConsumptionRules.body(productType: "Consumable", purchaseDate: nov1, expiresDate: nil, verifiedByUser: false,
                                                policy: policy("GRANT_PRORATED", delivery: "UNDELIVERED_SERVER_OUTAGE"), now: nov1)
        #expect(undelivered == JSONObject([("customerConsented", true), ("deliveryStatus", "UNDELIVERED_SERVER_OUTAGE"),
                                           ("consumptionPercentage", 0), ("sampleContentProvided", false)]))
        // A consumable: the kernel cannot measure use, so no percentage and no prorated preference.
        #expect(ConsumptionRules.body(productType: "Consumable", purchaseDate: nov1, expiresDate: nil, verifiedByUser: false,
                                      policy: policy("GRANT_PRORATED"), now: nov1)["refundPreference"] == nil)
    }

    @Test func failuresAreSentAgainOnlyWhereItCanHelpAndBeforeTheDeadline() {
        #expect(ConsumptionRules.retryAt(after: .unavailable("HTTP 503"), receivedAt: nov1, now: nov1) == nov1 + 60_000)
        #expect(ConsumptionRules.retryAt(after: .throttled(retryAfterSeconds: 30), receivedAt: nov1, now: nov1) == nov1 + 30_000)
        #expect(ConsumptionRules.retryAt(after: .invalid("HTTP 400"), receivedAt: nov1, now: nov1) == nil)
        #expect(ConsumptionRules.retryAt(after: .unavailable("HTTP 503"), receivedAt: nov1, now: nov1 + ConsumptionRules.deadlineMs - 30_000) == nil)
    }
}

@Suite(.serialized) struct ConsumptionRequestTests {
    let apple: FakeAppStoreServer

    init() throws {
        apple = try FakeAppStoreServer(bundleId: AppStorePayloads.bundleId)
    }

    /// A purchase with a numeric transaction id, as Apple's are (the path takes nothing else).
    func purchase(_ f: Fixture) -> String {
        f.ca.sign(AppStorePayloads.transaction(id: "2000000001", original: "2000000000", purchase: nov1, expires: nov1 + 30 * dayMs, signed: nov1))
    }

    func request(_ f: Fixture, _ uuid: String, reason: String = "UNSATISFIED_WITH_PURCHASE", signed: Int64 = nov1 + 2 * dayMs) -> String {
        var payload = AppStorePayloads.notification(uuid: uuid, type: "CONSUMPTION_REQUEST", signed: signed, transaction: purchase(f)).objectValue!
        var data = payload["data"]!.objectValue!
        data["consumptionRequestReason"] = .string(reason)
        payload["data"] = .object(data)
        return f.ca.sign(.object(payload))
    }

    func refresh(_ f: Fixture, at now: Int64) throws -> (sent: Int, failed: Int) {
        let t = Timestamp(milliseconds: now)
        let answers = try f.service.beginConsumption(limit: 50, now: t)
        return try f.service.finishConsumption(answers, try #require(f.service.api).send(answers), now: t)
    }

    @Test func withoutOptingInTheRequestIsRecordedForTheHostAndNothingIsSent() throws {
        let f = try Fixture(api: apple)
        _ = try f.verify(purchase(f))
        let report = try f.notify(request(f, "c-1"), at: nov1 + 2 * dayMs)
        #expect(report.notificationType == "CONSUMPTION_REQUEST" && report.userId == testUser && report.status == "active" && !report.duplicate)
        let row = try #require(try f.service.consumptionRequest(testUser, notificationUUID: "c-1"))
        #expect(row.state == "recorded" && row.reason == "UNSATISFIED_WITH_PURCHASE" && row.transactionId == "2000000001")
        #expect(row.json["answer"]?["deliveryStatus"] == "DELIVERED", "what the kernel would have sent, for the host")
        #expect(try f.notify(request(f, "c-1"), at: nov1 + 3 * dayMs).duplicate)
        #expect(try refresh(f, at: nov1 + 3 * dayMs) == (0, 0))
        #expect(apple.received.isEmpty)
    }

    @Test func optedInTheAnswerIsSentOnceOnTheNextRefresh() throws {
        var policy = ConsumptionPolicy()
        (policy.answer, policy.refundPreference) = (true, "DECLINE")
        let f = try Fixture(api: apple, consumption: policy)
        _ = try f.verify(purchase(f))
        apple.answer { _ in FakeAppStoreServer.Response(status: 202) }
        _ = try f.notify(request(f, "c-2"), at: nov1 + 2 * dayMs)
        #expect(try f.service.consumptionRequest(testUser, notificationUUID: "c-2")?.state == "pending")
        #expect(try refresh(f, at: nov1 + 2 * dayMs + 1000) == (1, 0))
        let call = try #require(apple.received.first)
        #expect(call.method == "PUT" && call.path == "/sandbox/inApps/v2/transactions/consumption/2000000001")
        #expect(call.body == ["customerConsented": true, "deliveryStatus": "DELIVERED", "refundPreference": "DECLINE", "sampleContentProvided": false])
        let row = try #require(try f.service.consumptionRequest(testUser, notificationUUID: "c-2"))
        #expect(row.state == "sent" && row.sentAt == nov1 + 2 * dayMs + 1000 && row.attempts == 1)
        #expect(try refresh(f, at: nov1 + 3 * dayMs) == (0, 0))
        #expect(apple.received.count == 1)
    }

    @Test func anUnavailableAppleIsAskedAgainARefusalIsNotAndTheDeadlineEndsIt() throws {
        var policy = ConsumptionPolicy()
        policy.answer = true
        let f = try Fixture(api: apple, consumption: policy)
        let at = nov1 + 2 * dayMs
        apple.answer { _ in .error(503, code: 5000000, "Unavailable") }
        _ = try f.notify(request(f, "c-3", signed: at), at: at)
        #expect(try refresh(f, at: at) == (0, 1))
        let retry = try #require(try f.service.consumptionRequest(SubscriptionKeys.pending("2000000000"), notificationUUID: "c-3"))
        #expect(retry.state == "pending" && retry.dueAt == at + 60_000 && retry.lastFailure?.contains("503") == true)
        #expect(try refresh(f, at: at + 1000) == (0, 0), "not due yet")
        // Apple refuses it (an invalid request): not sent again.
        apple.answer { _ in .error(400, code: 4000023, "Invalid request") }
        #expect(try refresh(f, at: at + 61_000) == (0, 1))
        #expect(try f.service.consumptionRequest(SubscriptionKeys.pending("2000000000"), notificationUUID: "c-3")?.state == "failed")
        // Another, never sent within 12 hours: failed without a call.
        apple.answer { _ in .error(503, code: 5000000, "Unavailable") }
        _ = try f.notify(request(f, "c-4", signed: at), at: at)
        let calls = apple.received.count
        #expect(try refresh(f, at: at + ConsumptionRules.deadlineMs) == (0, 0))
        #expect(apple.received.count == calls)
        #expect(try f.service.consumptionRequest(SubscriptionKeys.pending("2000000000"), notificationUUID: "c-4")?.lastFailure == "not sent within 12 hours of the request")
    }
}
