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
    /// A monthly subscription under a 12-month commitment: `MONTHLY`, the commitment, and the next one.
    public var billingPlanType: String?
    public var commitment: Commitment?
    public var commitmentRenewal: CommitmentRenewal?
    /// When a parent withdrew consent (`RESCIND_CONSENT`), if one did.
    public var consentRescindedAt: Int64?

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
        billingPlanType = row.billingPlanType
        commitment = row.commitment
        commitmentRenewal = row.commitmentRenewal
    }
}

/// What `subscriptions.refresh` did.
public struct RefreshReport: Equatable, Sendable {
    public var checked = 0, expired = 0, renewed = 0, unchanged = 0, failed = 0, remaining = 0
    /// Consumption answers Apple took, and those it did not (api mode).
    public var consumptionSent = 0, consumptionFailed = 0
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
    let apple: AppleData
    let store: any Storage
    let tables: SubscriptionTables
    /// The App Store Server API, when a key is configured (api mode); nil in clock mode.
    let api: ServerAPILookups?

    /// A service; with `transport` and `appStore.serverApi` configured, refresh asks Apple.
    public init(config: AppStoreConfig, store: any Storage, tables: SubscriptionTables, transport: (any ServerAPITransport)? = CurlTransport()) {
        self.config = config
        apple = AppleData(config: config)
        self.store = store
        self.tables = tables
        // The key was checked when the configuration was read.
        if let settings = config.serverApi, let bundleId = config.bundleId, let transport,
           let client = try? ServerAPIClient(settings: settings, bundleId: bundleId, transport: transport) {
            api = ServerAPILookups(client: client, apple: apple)
        } else {
            api = nil
        }
    }

    func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(SubscriptionsError) -> T {
        do { return try body() } catch { throw .storage(error) }
    }

    // MARK: Methods

    func verify(_ user: String, productId: String, receipt: String, now: Timestamp) throws(SubscriptionsError) -> Membership {
        let tx = try apple.appTransaction(try apple.verified(receipt, now: now))
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
        try claimAppTransaction(tx, user: user, into: &t)
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

    var intervalMs: Int64 { config.refreshIntervalSeconds * 1000 }

    /// Remembers the first user whose purchase carried `tx`'s app transaction, for `RESCIND_CONSENT`. A
    /// download another user already holds stays theirs (family sharing, a second account on one phone).
    private func claimAppTransaction(_ tx: AppleTransaction, user: String, into t: inout Transaction) throws(SubscriptionsError) {
        guard let id = tx.appTransactionId, try storage(try store.holder(of: SubscriptionKeys.appTransaction(id))) == nil else { return }
        t.claim(SubscriptionKeys.appTransaction(id), for: user)
    }

    /// Records a withdrawn consent for the user the app transaction belongs to, once per notification.
    private func rescind(_ n: ReceivedNotification, report: inout NotifyReport, now: Timestamp) throws(SubscriptionsError) -> NotifyReport {
        guard let id = n.facts.appTransactionId, let user = try storage(try store.holder(of: SubscriptionKeys.appTransaction(id))) else {
            return report  // no user of ours made a purchase from that download: acknowledged, for the host to see
        }
        report.userId = user
        if try storage(try store.holder(of: SubscriptionKeys.notification(n.notificationUUID))) != nil {
            report.duplicate = true
            return report
        }
        var t = Transaction()
        t.claim(SubscriptionKeys.notification(n.notificationUUID), for: user)
        t.put(tables.consent, user: user, key: SubscriptionKeys.consentKey,
              ConsentRow(rescindedAt: n.facts.signedDate ?? now.milliseconds, notificationUUID: n.notificationUUID))
        try commit(t)
        return report
    }

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

    func commit(_ t: Transaction) throws(SubscriptionsError) {
        do { try store.commit(t) } catch {
            if case .taken = error { throw .ownedByOtherUser }
            throw .storage(error)
        }
    }

    /// The user's membership: the one purchase `MembershipRules.shown` picks, else `none`.
    func status(_ user: String, now: Timestamp) throws(SubscriptionsError) -> Membership {
        let rows = try storage(try tables.memberships.rows(of: user))
        var shown = MembershipRules.shown(rows, now: now.milliseconds).map { Membership($0.key, $0.row, now: now.milliseconds) } ?? .none
        shown.consentRescindedAt = try storage(try tables.consent.get(user: user, key: SubscriptionKeys.consentKey))?.rescindedAt
        return shown
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
        try record(try apple.notification(signedPayload, now: now), now: now)
    }

    /// Applies a verified notification once per `notificationUUID` (a duplicate changes nothing), or
    /// keeps it for the purchase's future owner.
    func record(_ n: ReceivedNotification, now: Timestamp) throws(SubscriptionsError) -> NotifyReport {
        var report = NotifyReport(notificationType: n.type, subtype: n.subtype, originalTransactionId: n.originalTransactionId,
                                  userId: nil, status: nil, duplicate: false)
        if n.type == "RESCIND_CONSENT" { return try rescind(n, report: &report, now: now) }
        if n.type == "CONSUMPTION_REQUEST" { return try consumptionRequest(n, report: &report, now: now) }
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
        if let tx = n.facts.transaction { try claimAppTransaction(tx, user: owner, into: &t) }
        try commit(t)
        report.status = current.map { MembershipRules.current($0, now: now.milliseconds).status }
        return report
    }
}

/// A verified notification, with the payloads kept for a purchase no one owns yet.
struct ReceivedNotification: Sendable {
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
