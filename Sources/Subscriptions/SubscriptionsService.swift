import Chrono
import DomainSupport
import JSON
import Storage

/// Why a subscriptions call was refused.
public enum SubscriptionsError: Error, Equatable {
    /// Signed data that does not verify, or is not for this app: -32010 with `reason`.
    case verification(reason: String, message: String)
    /// The purchase belongs to another account.
    case ownedByOtherUser
    case storage(StorageError)

    static func failed(_ f: SignedDataFailure) -> SubscriptionsError { .verification(reason: f.reason, message: f.description) }
    static func malformed(_ message: String) -> SubscriptionsError { .verification(reason: "malformed_jws", message: message) }
}

/// A membership as the methods answer it: one purchase's state at the time of the answer.
public struct Membership: Equatable, Sendable {
    public var status: String
    public var productId: String?
    public var currentPeriodEnd: Int64?
    public var transactionId: String?
    public var originalTransactionId: String?
    public var environment: String?
    public var error: String?

    /// Before any purchase.
    public static let none = Membership(status: "none")

    init(status: String, productId: String? = nil, currentPeriodEnd: Int64? = nil, transactionId: String? = nil,
         originalTransactionId: String? = nil, environment: String? = nil, error: String? = nil) {
        self.status = status
        self.productId = productId
        self.currentPeriodEnd = currentPeriodEnd
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.environment = environment
        self.error = error
    }

    init(_ originalTransactionId: String, _ row: MembershipRow, now: Int64) {
        let (status, error) = MembershipRules.current(row, now: now)
        self.init(status: status, productId: row.productId, currentPeriodEnd: row.expiresDate, transactionId: row.transactionId,
                  originalTransactionId: originalTransactionId, environment: row.environment, error: error)
    }
}

/// What `subscriptions.refresh` did.
public struct RefreshReport: Equatable, Sendable {
    public var checked = 0, expired = 0, renewed = 0, unchanged = 0, failed = 0, remaining = 0
    public var mode = "clock"
}

/// What `subscriptions.notify` did with a notification.
public struct NotifyReport: Equatable, Sendable {
    public var notificationType: String
    public var subtype: String?
    public var originalTransactionId: String?
    /// The purchase's owner; nil while no user owns it (the notification is kept until one verifies it).
    public var userId: String?
    /// The owner's membership status for the purchase afterwards.
    public var status: String?
    public var duplicate: Bool
}

/// App Store purchases: StoreKit 2 receipts verified offline, memberships kept current by Server
/// Notifications and a daily clock check. Confined to the serving thread.
public final class SubscriptionsService: @unchecked Sendable {
    let config: AppStoreConfig
    let verifier: SignedDataVerifier
    let store: any Storage
    let tables: SubscriptionTables

    public init(config: AppStoreConfig, store: any Storage, tables: SubscriptionTables) {
        self.config = config
        verifier = config.verifier
        self.store = store
        self.tables = tables
    }

    private func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(SubscriptionsError) -> T {
        do { return try body() } catch { throw .storage(error) }
    }

    // MARK: Verifying signed data

    /// The payload of signed data, verified at its own `signedDate` (Apple's offline rule), else at `now`.
    func verified(_ jws: String, now: Timestamp) throws(SubscriptionsError) -> JSONObject {
        do {
            return try verifier.verify(jws) { payload in
                PayloadReader(payload, "").optionalDate("signedDate").map(Timestamp.init(milliseconds:)) ?? now
            }
        } catch {
            throw .failed(error)
        }
    }

    /// Checks that signed data is for the configured app, in an allowed environment.
    func checkApp(bundleId: String?, environment: String?, appAppleId: Int64?) throws(SubscriptionsError) {
        guard let expected = config.bundleId else {
            throw .verification(reason: "bundle_mismatch", message: "No appStore.bundleId is configured, so no App Store data is accepted")
        }
        guard bundleId == expected else { throw .verification(reason: "bundle_mismatch", message: "The signed data is for another app") }
        guard let environment, config.environments.contains(environment) else {
            throw .verification(reason: "environment_mismatch",
                                message: "The signed data is from the \(environment ?? "unknown") environment, which is not allowed")
        }
        if environment == "Production", let id = config.appAppleId, appAppleId != id {
            throw .verification(reason: "bundle_mismatch", message: "The signed data is for another app (appAppleId)")
        }
    }

    /// The transaction a verified payload holds, if it is of this app.
    func appTransaction(_ payload: JSONObject) throws(SubscriptionsError) -> AppleTransaction {
        let tx: AppleTransaction
        switch AppleTransaction.read(payload) {
        case .success(let t): tx = t
        case .failure(let e): throw .malformed(e.message)
        }
        // A transaction carries no appAppleId; the notification around it does.
        try checkApp(bundleId: tx.bundleId, environment: tx.environment, appAppleId: config.appAppleId)
        return tx
    }

    // MARK: Methods

    func verify(_ user: String, productId: String, receipt: String, now: Timestamp) throws(SubscriptionsError) -> Membership {
        let tx = try appTransaction(try verified(receipt, now: now))
        guard tx.productId == productId else {
            throw .verification(reason: "product_mismatch", message: "The receipt is for another product")
        }
        guard tx.type != "Consumable" else {
            throw .verification(reason: "product_mismatch", message: "A consumable purchase is not a membership")
        }
        if let token = tx.appAccountToken, token.lowercased() != user { throw .ownedByOtherUser }
        let otid = tx.originalTransactionId
        let owner = try storage(try store.holder(of: SubscriptionKeys.purchase(otid)))
        if let owner, owner != user { throw .ownedByOtherUser }
        let existing = try storage(try tables.memberships.get(user: user, key: otid))
        var row = MembershipRules.verified(tx, receipt: receipt, existing: existing, now: now.milliseconds)
        var t = Transaction()
        if owner == nil {
            t.claim(SubscriptionKeys.purchase(otid), for: user)
            row = try adoptPending(otid, user: user, row: row, now: now, into: &t)
        }
        if row != existing {
            t.put(tables.memberships, user: user, key: otid, row)
            try reschedule(user, otid, row, into: &t)
        }
        if !t.isEmpty { try commit(t) }
        return Membership(otid, row, now: now.milliseconds)
    }

    /// Writes a changed membership's next due time for refresh, keeping refresh's last look (a verify or
    /// a notification is not one): a period that now ends sooner makes it due sooner.
    private func reschedule(_ user: String, _ otid: String, _ row: MembershipRow, into t: inout Transaction) throws(SubscriptionsError) {
        let check = try storage(try tables.checks.get(user: user, key: otid))
        let next = CheckRow(checkedAt: check?.checkedAt, expiresDate: check?.expiresDate ?? row.expiresDate,
                            dueAt: MembershipRules.dueAt(lastLook: check?.checkedAt, row, interval: intervalMs))
        if next != check { t.put(tables.checks, user: user, key: otid, next) }
    }

    private var intervalMs: Int64 { config.refreshIntervalSeconds * 1000 }

    /// Applies the notifications kept for a purchase no one owned, oldest first, and moves them to the
    /// user who now owns it.
    private func adoptPending(_ otid: String, user: String, row: MembershipRow, now: Timestamp,
                              into t: inout Transaction) throws(SubscriptionsError) -> MembershipRow {
        let partition = SubscriptionKeys.pending(otid)
        let kept = try storage(try tables.notifications.rows(of: partition))
        var row = row
        for (uuid, n) in kept.sorted(by: { ($0.row.signedDate ?? 0, $0.key) < ($1.row.signedDate ?? 0, $1.key) }) {
            let next = MembershipRules.notified(Self.facts(uuid, n), existing: row, now: now.milliseconds)
            row = next ?? row
            t.delete(tables.notifications, user: partition, key: uuid)
            t.release(SubscriptionKeys.notification(uuid), of: partition)
            t.claim(SubscriptionKeys.notification(uuid), for: user)
            t.put(tables.notifications, user: user, key: uuid,
                  NotificationRow(type: n.type, subtype: n.subtype, originalTransactionId: otid, signedDate: n.signedDate,
                                  receivedAt: n.receivedAt, applied: next != nil))
        }
        return row
    }

    /// The notification a kept row describes.
    static func facts(_ uuid: String, _ n: NotificationRow) -> AppleNotification {
        var tx: AppleTransaction?
        if let payload = n.transaction, case .success(let t) = AppleTransaction.read(payload) { tx = t }
        var renewal: AppleRenewal?
        if let payload = n.renewal, case .success(let r) = AppleRenewal.read(payload) { renewal = r }
        return AppleNotification(notificationUUID: uuid, type: n.type, subtype: n.subtype, signedDate: n.signedDate, status: n.status,
                                 transaction: tx, transactionJWS: n.transactionJWS, renewal: renewal)
    }

    private func commit(_ t: Transaction) throws(SubscriptionsError) {
        do { try store.commit(t) } catch {
            if case .taken = error { throw .ownedByOtherUser }
            throw .storage(error)
        }
    }

    /// The user's membership: the one purchase `MembershipRules.shown` picks, else `none`.
    func status(_ user: String, now: Timestamp) throws(SubscriptionsError) -> Membership {
        let rows = try storage(try tables.memberships.rows(of: user))
        guard let shown = MembershipRules.shown(rows, now: now.milliseconds) else { return .none }
        return Membership(shown.key, shown.row, now: now.milliseconds)
    }

    /// One purchase's membership, for the change feed.
    func membership(_ user: String, originalTransactionId: String, now: Timestamp) throws(SubscriptionsError) -> Membership? {
        try storage(try tables.memberships.get(user: user, key: originalTransactionId)).map {
            Membership(originalTransactionId, $0, now: now.milliseconds)
        }
    }

    /// Checks up to `limit` due memberships against the clock, soonest due first (`MembershipRules.dueAt`).
    func refresh(limit: Int, now: Timestamp) throws(SubscriptionsError) -> RefreshReport {
        let due = MembershipRules.checkOrder(dueAt: now.milliseconds, key: "~")
        let (checks, total) = try storage(try tables.checks.scanAllOrdered(through: due, limit: limit))
        var report = RefreshReport()
        var t = Transaction()
        for (user, otid, last) in checks {
            report.checked += 1
            guard let row = try storage(try tables.memberships.get(user: user, key: otid)) else {
                t.delete(tables.checks, user: user, key: otid)  // cannot happen: both go together
                report.unchanged += 1
                continue
            }
            let (next, check, outcome) = MembershipRules.check(row, last: last, now: now.milliseconds, interval: intervalMs)
            switch outcome {
            case .expired: report.expired += 1
            case .renewed: report.renewed += 1
            case .unchanged: report.unchanged += 1
            }
            if next != row { t.put(tables.memberships, user: user, key: otid, next) }
            t.put(tables.checks, user: user, key: otid, check)
        }
        if !t.isEmpty { try commit(t) }
        report.remaining = total - checks.count
        return report
    }

    func notify(_ signedPayload: String, now: Timestamp) throws(SubscriptionsError) -> NotifyReport {
        let n = try notification(signedPayload, now: now)
        var report = NotifyReport(notificationType: n.type, subtype: n.subtype, originalTransactionId: n.originalTransactionId,
                                  userId: nil, status: nil, duplicate: false)
        // TEST and notifications without a purchase (summaries, external tokens) change nothing: acknowledged.
        guard n.type != "TEST", let otid = n.originalTransactionId else { return report }
        let owner = try storage(try store.holder(of: SubscriptionKeys.purchase(otid)))
        report.userId = owner
        if let holder = try storage(try store.holder(of: SubscriptionKeys.notification(n.notificationUUID))) {
            report.duplicate = true
            report.userId = holder.hasPrefix(SubscriptionKeys.pendingPrefix) ? nil : holder
            if let user = report.userId { report.status = try membership(user, originalTransactionId: otid, now: now)?.status }
            return report
        }
        var t = Transaction()
        let record = NotificationRow(type: n.type, subtype: n.subtype, originalTransactionId: otid, signedDate: n.order,
                                     receivedAt: now.milliseconds, applied: false)
        guard let owner else {
            // Kept until a user verifies the purchase; a type that changes nothing is not kept.
            guard MembershipRules.appliedTypes.contains(n.type) else { return report }
            var kept = record
            kept.status = n.status
            kept.transaction = n.transactionPayload
            kept.transactionJWS = n.transactionJWS
            kept.renewal = n.renewalPayload
            let partition = SubscriptionKeys.pending(otid)
            t.claim(SubscriptionKeys.notification(n.notificationUUID), for: partition)
            t.put(tables.notifications, user: partition, key: n.notificationUUID, kept)
            try commit(t)
            return report
        }
        let existing = try storage(try tables.memberships.get(user: owner, key: otid))
        var done = record
        var current = existing
        if let next = MembershipRules.notified(n.facts, existing: existing, now: now.milliseconds) {
            done.applied = true
            if next != existing {
                t.put(tables.memberships, user: owner, key: otid, next)
                try reschedule(owner, otid, next, into: &t)
            }
            current = next
        }
        t.claim(SubscriptionKeys.notification(n.notificationUUID), for: owner)
        t.put(tables.notifications, user: owner, key: n.notificationUUID, done)
        try commit(t)
        report.status = current.map { MembershipRules.current($0, now: now.milliseconds).status }
        return report
    }

    /// A verified notification with its verified transaction and renewal info, for this app.
    func notification(_ signedPayload: String, now: Timestamp) throws(SubscriptionsError) -> ReceivedNotification {
        let payload = try verified(signedPayload, now: now)
        let p = PayloadReader(payload, "notification")
        guard let uuid = p.optionalString("notificationUUID"), !uuid.isEmpty else { throw .malformed("the notification has no notificationUUID") }
        guard let type = p.optionalString("notificationType"), !type.isEmpty else { throw .malformed("the notification has no notificationType") }
        // Whose notification it is: `data`, else `summary`, else `externalPurchaseToken`, else `appData`.
        let data = payload["data"]?.objectValue
        if let identity = data ?? payload["summary"]?.objectValue ?? payload["appData"]?.objectValue {
            let i = PayloadReader(identity, "notification data")
            try checkApp(bundleId: i.optionalString("bundleId"), environment: i.optionalString("environment"),
                         appAppleId: i.optionalDate("appAppleId"))
        } else if let token = payload["externalPurchaseToken"]?.objectValue {
            let i = PayloadReader(token, "external purchase token")
            let environment = (i.optionalString("externalPurchaseId") ?? "").hasPrefix("SANDBOX") ? "Sandbox" : "Production"
            try checkApp(bundleId: i.optionalString("bundleId"), environment: environment, appAppleId: i.optionalDate("appAppleId"))
        } else if type != "TEST" {
            throw .malformed("the notification names no app (no data, summary, externalPurchaseToken or appData)")
        }
        var received = ReceivedNotification(
            facts: AppleNotification(notificationUUID: uuid, type: type, subtype: p.optionalString("subtype"),
                                     signedDate: p.optionalDate("signedDate"), status: data.flatMap { PayloadReader($0, "").optionalDate("status") },
                                     transaction: nil, transactionJWS: nil, renewal: nil),
            transactionPayload: nil, renewalPayload: nil)
        if let jws = data?["signedTransactionInfo"]?.stringValue {
            let payload = try verified(jws, now: now)
            received.facts.transaction = try appTransaction(payload)
            received.facts.transactionJWS = jws
            received.transactionPayload = payload
        }
        if let jws = data?["signedRenewalInfo"]?.stringValue {
            let renewalPayload = try verified(jws, now: now)
            switch AppleRenewal.read(renewalPayload) {
            case .success(let r):
                if let environment = r.environment, !config.environments.contains(environment) {
                    throw .verification(reason: "environment_mismatch", message: "The renewal info is from an environment that is not allowed")
                }
                received.facts.renewal = r
            case .failure(let e): throw .malformed(e.message)
            }
            received.renewalPayload = renewalPayload
        }
        return received
    }
}

/// A verified notification, with the payloads kept for a purchase no one owns yet.
struct ReceivedNotification {
    var facts: AppleNotification
    var transactionPayload: JSONObject?
    var renewalPayload: JSONObject?

    var type: String { facts.type }
    var subtype: String? { facts.subtype }
    var notificationUUID: String { facts.notificationUUID }
    var originalTransactionId: String? { facts.originalTransactionId }
    var order: Int64? { facts.order }
    var status: Int64? { facts.status }
    var transactionJWS: String? { facts.transactionJWS }
}
