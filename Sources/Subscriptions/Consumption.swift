import Chrono
import DomainSupport
import JSON
import Logging
import Storage
import Threads

/// `appStore.consumptionRequests`: whether the kernel answers Apple's `CONSUMPTION_REQUEST`s itself
/// (Send Consumption Information, v2) and with what the deployment states of its purchases.
public struct ConsumptionPolicy: Sendable, Equatable {
    /// Answer through the App Store Server API (needs `appStore.serverApi`). Turning it on states that the
    /// app's terms obtain the customer's consent to share consumption data: Apple refuses answers
    /// without `customerConsented: true`. Off, requests are only recorded for the host.
    public var answer = false
    /// Sent for a purchase no user of this kernel verified (a consumable, or one the app never reported).
    public var deliveryStatus = "DELIVERED"
    /// `DECLINE`, `GRANT_FULL` or `GRANT_PRORATED`; nil: no preference is sent.
    public var refundPreference: String?
    /// Whether the app offered a free sample, trial or description of the content before purchase.
    public var sampleContentProvided = false

    static let deliveryStatuses = ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER"]
    static let refundPreferences = ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"]

    public init() {}

    /// Reads `{answer, deliveryStatus, refundPreference, sampleContentProvided}`.
    init(_ r: inout ObjectReader) throws(FieldError) {
        if let v: Bool = try r.optional("answer") { answer = v }
        if let v: String = try r.optional("deliveryStatus") {
            guard Self.deliveryStatuses.contains(v) else { throw .outOfRange(r.path("deliveryStatus"), "must be one of \(Self.deliveryStatuses.joined(separator: ", "))") }
            deliveryStatus = v
        }
        if case .some(.some(let v)) = try r.nullable("refundPreference", as: String.self) {
            guard Self.refundPreferences.contains(v) else {
                throw .outOfRange(r.path("refundPreference"), "must be null or one of \(Self.refundPreferences.joined(separator: ", "))")
            }
            refundPreference = v
        }
        if let v: Bool = try r.optional("sampleContentProvided") { sampleContentProvided = v }
        try r.finish()
    }
}

/// What the kernel answers to a consumption request, from what it knows of the purchase. Pure.
public enum ConsumptionRules {
    /// Apple takes answers for 12 hours after it sent the request; later ones are not sent.
    public static let deadlineMs: Int64 = 12 * 3_600_000

    /// The `ConsumptionRequest` body. A purchase a user of this kernel verified was delivered; others are
    /// as the policy says. `consumptionPercentage` (milliunits of a percent) is sent only where the
    /// kernel can measure it: the elapsed share of a non-renewing subscription's period, 0 when not
    /// delivered (Apple requires it then). A prorated preference without a share above 0 is left out,
    /// as Apple refuses it.
    public static func body(productType: String?, purchaseDate: Int64?, expiresDate: Int64?, verifiedByUser: Bool,
                            policy: ConsumptionPolicy, now: Int64) -> JSONObject {
        let delivery = verifiedByUser ? "DELIVERED" : policy.deliveryStatus
        var percentage: Int64?
        if delivery != "DELIVERED" {
            percentage = 0
        } else if productType == "Non-Renewing Subscription", let start = purchaseDate, let end = expiresDate, end > start {
            percentage = min(100_000, max(0, (now - start) * 100_000 / (end - start)))
        }
        var o = JSONObject([("customerConsented", .bool(true)), ("deliveryStatus", .string(delivery))])
        if let percentage { o["consumptionPercentage"] = .int(percentage) }
        if let preference = policy.refundPreference, preference != "GRANT_PRORATED" || (percentage ?? 0) > 0 {
            o["refundPreference"] = .string(preference)
        }
        o["sampleContentProvided"] = .bool(policy.sampleContentProvided)
        return o
    }

    /// When to send again after `failure`, or nil when sending again would get the same answer (or
    /// miss Apple's deadline).
    static func retryAt(after failure: ServerAPIFailure, receivedAt: Int64, now: Int64) -> Int64? {
        let next: Int64
        switch failure {
        case .throttled(let seconds): next = now + Int64(seconds) * 1000
        case .unavailable, .keyRejected: next = now + 60_000
        case .notFound, .invalid: return nil
        }
        return next < receivedAt + deadlineMs ? next : nil
    }
}

/// A consumption request Apple sent (`subscriptions.consumptionRequests`, key: its notification UUID),
/// in the owner's partition, or the purchase's pending one when no user verified it. Its state:
/// `recorded` (the deployment answers itself), `pending` (to send, from `dueAt`), `sent`, or `failed`
/// (with why: Apple refused it, or the deadline passed).
public struct ConsumptionRow: StoredRow {
    public var transactionId: String
    public var originalTransactionId: String
    public var environment: String
    public var productId: String
    public var reason: String?
    public var receivedAt: Int64
    /// What is (or would be) sent.
    public var body: JSONObject
    public var state: String
    public var dueAt: Int64?
    public var attempts: Int64 = 0
    public var sentAt: Int64?
    public var lastFailure: String?

    /// The second order: pending requests by when they are due; others after every due time.
    public static func order(_ row: ConsumptionRow) -> String {
        row.state == "pending" ? MembershipRules.checkOrderHead(dueAt: row.dueAt ?? 0) : "~"
    }

    public init(transactionId: String, originalTransactionId: String, environment: String, productId: String, reason: String?,
                receivedAt: Int64, body: JSONObject, state: String, dueAt: Int64?) {
        (self.transactionId, self.originalTransactionId, self.environment, self.productId) = (transactionId, originalTransactionId, environment, productId)
        (self.reason, self.receivedAt, self.body, self.state, self.dueAt) = (reason, receivedAt, body, state, dueAt)
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "consumption request")
        transactionId = try f.string("transactionId")
        originalTransactionId = try f.string("originalTransactionId")
        environment = try f.string("environment")
        productId = try f.string("productId")
        reason = f.optionalString("reason")
        receivedAt = try f.instant("receivedAt")
        guard let body = f.object["body"]?.objectValue else { throw StorageError.corrupt("consumption request without body") }
        self.body = body
        state = try f.string("state")
        dueAt = try f.optionalInstant("dueAt")
        attempts = try f.optionalInt("attempts") ?? 0
        sentAt = try f.optionalInstant("sentAt")
        lastFailure = f.optionalString("lastFailure")
    }

    public var stored: JSON {
        ["transactionId": .string(transactionId), "originalTransactionId": .string(originalTransactionId), "environment": .string(environment),
         "productId": .string(productId), "reason": .optional(reason), "receivedAt": .int(receivedAt), "body": .object(body),
         "state": .string(state), "dueAt": .optionalInt(dueAt), "attempts": .int(attempts), "sentAt": .optionalInt(sentAt),
         "lastFailure": .optional(lastFailure)]
    }

    /// As the feed shows it.
    var json: JSON {
        ["transactionId": .string(transactionId), "originalTransactionId": .string(originalTransactionId), "environment": .string(environment),
         "productId": .string(productId), "reason": .optional(reason), "receivedAt": .timestamp(receivedAt), "state": .string(state),
         "answer": .object(body), "attempts": .int(attempts), "sentAt": .timestamp(sentAt), "lastFailure": .optional(lastFailure)]
    }
}

/// A consumption answer a refresh sends.
struct ConsumptionAnswer: Sendable {
    let partition: String
    let notificationUUID: String
    let transactionId: String
    let environment: String
    let body: JSONObject
}

extension SubscriptionsService {
    private static let consumptionLogger = Logger(label: "healthkernel.subscriptions")

    /// Records a `CONSUMPTION_REQUEST` once per notification, with the answer the kernel would give, to
    /// send on the next api-mode `subscriptions.refresh` when the deployment answers them.
    func consumptionRequest(_ n: ReceivedNotification, report: inout NotifyReport, now: Timestamp) throws(SubscriptionsError) -> NotifyReport {
        guard let tx = n.facts.transaction else { return report }
        let otid = tx.originalTransactionId
        let owner = try storage(try store.holder(of: SubscriptionKeys.purchase(otid)))
        report.userId = owner
        if let holder = try storage(try store.holder(of: SubscriptionKeys.notification(n.notificationUUID))) {
            report.duplicate = true
            report.userId = holder.hasPrefix(SubscriptionKeys.pendingPrefix) ? nil : holder
            return report
        }
        let membership = try owner.flatMap { (user) throws(SubscriptionsError) in try storage(try tables.memberships.get(user: user, key: otid)) }
        let policy = config.consumptionRequests
        let body = ConsumptionRules.body(productType: tx.type, purchaseDate: tx.purchaseDate, expiresDate: tx.expiresDate ?? membership?.expiresDate,
                                         verifiedByUser: membership != nil, policy: policy, now: now.milliseconds)
        let sending = policy.answer && api != nil
        let row = ConsumptionRow(transactionId: tx.transactionId, originalTransactionId: otid, environment: tx.environment, productId: tx.productId,
                                 reason: n.facts.consumptionRequestReason, receivedAt: now.milliseconds, body: body,
                                 state: sending ? "pending" : "recorded", dueAt: sending ? now.milliseconds : nil)
        let partition = owner ?? SubscriptionKeys.pending(otid)
        var t = Transaction()
        t.claim(SubscriptionKeys.notification(n.notificationUUID), for: partition)
        t.put(tables.consumption, user: partition, key: n.notificationUUID, row)
        try commit(t)
        report.status = membership.map { MembershipRules.current($0, now: now.milliseconds).status }
        return report
    }

    /// Leases up to `limit` due consumption answers (like `beginLookups`): each is due again only when
    /// the lease ends, unless `finishConsumption` settles it first.
    func beginConsumption(limit: Int, now: Timestamp) throws(SubscriptionsError) -> [ConsumptionAnswer] {
        let due = MembershipRules.checkOrder(dueAt: now.milliseconds, key: "~")
        let (rows, _) = try storage(try tables.consumption.scanAllOrdered(through: due, limit: limit))
        var answers: [ConsumptionAnswer] = []
        var t = Transaction()
        for (partition, uuid, row) in rows {
            var leased = row
            if now.milliseconds >= row.receivedAt + ConsumptionRules.deadlineMs {
                (leased.state, leased.dueAt, leased.lastFailure) = ("failed", nil, "not sent within 12 hours of the request")
            } else {
                leased.dueAt = now.milliseconds + Self.leaseMs
                answers.append(ConsumptionAnswer(partition: partition, notificationUUID: uuid, transactionId: row.transactionId,
                                                 environment: row.environment, body: row.body))
            }
            t.put(tables.consumption, user: partition, key: uuid, leased)
        }
        if !t.isEmpty { try commit(t) }
        return answers
    }

    /// Applies what Apple answered: sent, due again later, or failed for good. Answers how many were sent
    /// and how many failed this time.
    func finishConsumption(_ answers: [ConsumptionAnswer], _ results: [ServerAPIFailure?], now: Timestamp) throws(SubscriptionsError) -> (sent: Int, failed: Int) {
        var (sent, failed) = (0, 0)
        var t = Transaction()
        for (answer, failure) in zip(answers, results) {
            guard var row = try storage(try tables.consumption.get(user: answer.partition, key: answer.notificationUUID)) else { continue }
            row.attempts += 1
            if let failure {
                failed += 1
                row.lastFailure = failure.description
                if let retry = ConsumptionRules.retryAt(after: failure, receivedAt: row.receivedAt, now: now.milliseconds) {
                    row.dueAt = retry
                } else {
                    (row.state, row.dueAt) = ("failed", nil)
                }
            } else {
                sent += 1
                (row.state, row.dueAt, row.sentAt, row.lastFailure) = ("sent", nil, now.milliseconds, nil)
            }
            t.put(tables.consumption, user: answer.partition, key: answer.notificationUUID, row)
        }
        if !t.isEmpty { try commit(t) }
        if failed > 0 { Self.consumptionLogger.warning("subscriptions.refresh: \(failed) of \(answers.count) consumption answers were not taken by Apple") }
        return (sent, failed)
    }

    /// A user's consumption request, for the change feed.
    func consumptionRequest(_ user: String, notificationUUID: String) throws(SubscriptionsError) -> ConsumptionRow? {
        try storage(try tables.consumption.get(user: user, key: notificationUUID))
    }
}

extension ServerAPILookups {
    /// Sends each answer (on worker threads, like `run`); nil where Apple took it.
    func send(_ answers: [ConsumptionAnswer]) -> [ServerAPIFailure?] {
        let client = client
        return concurrentMap(answers, width: client.settings.maxConcurrentCalls, makeState: { client.transport.connect() }) { connection, answer in
            guard let path = ServerAPI.consumptionPath(transactionId: answer.transactionId) else { return .invalid("not an App Store transaction id") }
            switch client.call("PUT", path, environment: answer.environment, body: .object(answer.body), on: connection) {
            case .success: return nil
            case .failure(let failure): return failure
            }
        }
    }
}
