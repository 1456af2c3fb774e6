/// The rules of App Store memberships, as pure functions over rows and verified facts.
public enum MembershipRules {
    /// Apple's billing retry period: after it, a subscription in billing retry has expired.
    public static let billingRetryMs: Int64 = 60 * 86_400_000
    /// `appStore.refreshIntervalSeconds` by default: how long after refresh looked at a membership it is
    /// due again.
    public static let defaultRefreshIntervalMs: Int64 = 3_600_000

    /// Whether a status gives access.
    public static func grantsAccess(_ status: String) -> Bool { status == "active" || status == "grace_period" }

    /// The row's status and error at `now`: the stored state moved on by the clock. An active
    /// subscription past its period is in its grace period until that ends, else expired; a grace period
    /// that ended leaves billing retry (one whose end Apple did not say lasts as long as billing retry);
    /// billing retry ends 60 days after the period did.
    public static func current(_ row: MembershipRow, now: Int64) -> (status: String, error: String?) {
        let grace = row.gracePeriodEnd.map { now < $0 } ?? (row.status == "grace_period")
        switch row.status {
        case "active":
            guard let end = row.expiresDate, now >= end else { return ("active", nil) }
            return grace ? ("grace_period", nil) : ("inactive", "expired")
        case "grace_period":
            let lapsed = retry(row, now: now)
            return grace && lapsed.status != "inactive" ? ("grace_period", nil) : lapsed
        case "billing_retry":
            return retry(row, now: now)
        default:
            return ("inactive", row.error ?? "expired")
        }
    }

    private static func retry(_ row: MembershipRow, now: Int64) -> (status: String, error: String?) {
        if let end = row.expiresDate, now >= end + billingRetryMs { return ("inactive", "expired") }
        return ("billing_retry", nil)
    }

    /// `row` with its stored status brought up to `now`.
    public static func settled(_ row: MembershipRow, now: Int64) -> MembershipRow {
        var row = row
        (row.status, row.error) = current(row, now: now)
        return row
    }

    /// The membership a verified transaction makes, or makes of `existing`. Data signed before the state
    /// already applied changes nothing; a later transaction of the purchase (a renewal, an upgrade)
    /// replaces the period; the same transaction signed again keeps what notifications said of it
    /// (grace period, billing retry) unless it is now revoked.
    public static func verified(_ tx: AppleTransaction, receipt: String, existing: MembershipRow?, now: Int64) -> MembershipRow {
        if let existing, tx.signedDate < existing.signedDate { return existing }
        var row = existing ?? MembershipRow(
            status: "active", error: nil, productId: tx.productId, transactionId: tx.transactionId, environment: tx.environment,
            purchaseDate: tx.purchaseDate, expiresDate: tx.expiresDate, gracePeriodEnd: nil, autoRenew: nil, signedDate: tx.signedDate,
            receipt: receipt, updatedAt: now, billingPlanType: tx.billingPlanType, commitment: tx.commitment)
        let newPeriod = existing != nil && tx.transactionId != row.transactionId && tx.purchaseDate >= row.purchaseDate
        take(tx, receipt: receipt, into: &row)
        if tx.revocationDate != nil {
            (row.status, row.error) = ("inactive", "revoked")
        } else if newPeriod || existing == nil || row.error == "revoked" && tx.transactionId == row.transactionId {
            (row.status, row.error) = ("active", nil)
        }
        row.signedDate = max(row.signedDate, tx.signedDate)
        return stamped(settled(row, now: now), existing, now: now)
    }

    /// `row` marked as changed at `now`, or `existing` itself when nothing changed.
    static func stamped(_ row: MembershipRow, _ existing: MembershipRow?, now: Int64) -> MembershipRow {
        guard let existing else { return row }
        var same = row
        same.updatedAt = existing.updatedAt
        if same == existing { return existing }
        var changed = row
        changed.updatedAt = now
        return changed
    }

    /// Takes the transaction's period and product when it is the purchase's latest transaction; an older
    /// one (a refund of an earlier period) leaves them.
    static func take(_ tx: AppleTransaction, receipt: String, into row: inout MembershipRow) {
        guard tx.purchaseDate >= row.purchaseDate || tx.transactionId == row.transactionId else { return }
        // The same transaction signed at the same instant is the same receipt (ECDSA signs differently each time).
        if tx.transactionId == row.transactionId && tx.signedDate <= row.signedDate { return }
        row.transactionId = tx.transactionId
        row.productId = tx.productId
        row.environment = tx.environment
        row.purchaseDate = tx.purchaseDate
        row.expiresDate = tx.expiresDate
        row.receipt = receipt
        row.billingPlanType = tx.billingPlanType
        row.commitment = tx.commitment
    }

    /// Notification types that change a membership; others are recorded and acknowledged.
    public static let appliedTypes: Set<String> = [
        "SUBSCRIBED", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS", "DID_CHANGE_RENEWAL_PREF", "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED",
        "EXPIRED", "REFUND", "REFUND_REVERSED", "REVOKE", "RENEWAL_EXTENDED", "OFFER_REDEEMED",
    ]

    /// Apple's subscription status (`data.status`) as a membership status.
    static func status(apple: Int64) -> (status: String, error: String?)? {
        switch apple {
        case 1: return ("active", nil)
        case 2: return ("inactive", "expired")
        case 3: return ("billing_retry", nil)
        case 4: return ("grace_period", nil)
        case 5: return ("inactive", "revoked")
        default: return nil
        }
    }

    /// The membership after notification `n`, or nil when it does not apply: a type that changes no
    /// membership, data older than the state already applied, or no membership yet and no transaction
    /// to make one. When Apple says the subscription's status (`data.status`), that decides it.
    public static func notified(_ n: AppleNotification, existing: MembershipRow?, now: Int64) -> MembershipRow? {
        guard appliedTypes.contains(n.type), let order = n.order else { return nil }
        if let existing, order < existing.signedDate { return nil }
        var row: MembershipRow
        if let existing {
            row = existing
            if let tx = n.transaction, let receipt = n.transactionJWS { take(tx, receipt: receipt, into: &row) }
        } else {
            guard let tx = n.transaction, let receipt = n.transactionJWS else { return nil }
            row = MembershipRow(
                status: "active", error: nil, productId: tx.productId, transactionId: tx.transactionId, environment: tx.environment,
                purchaseDate: tx.purchaseDate, expiresDate: tx.expiresDate, gracePeriodEnd: nil, autoRenew: nil, signedDate: order,
                receipt: receipt, updatedAt: now, billingPlanType: tx.billingPlanType, commitment: tx.commitment)
        }
        if let renewal = n.renewal { take(renewal, into: &row) }
        let current = n.transaction.map { $0.transactionId == row.transactionId } ?? true
        switch n.type {
        case "SUBSCRIBED", "DID_RENEW", "OFFER_REDEEMED", "RENEWAL_EXTENDED", "DID_CHANGE_RENEWAL_PREF", "REFUND_REVERSED":
            (row.status, row.error) = ("active", nil)
            if n.type == "DID_RENEW" { row.gracePeriodEnd = nil }
        case "DID_FAIL_TO_RENEW":
            (row.status, row.error) = n.subtype == "GRACE_PERIOD" ? ("grace_period", nil) : ("billing_retry", nil)
        case "GRACE_PERIOD_EXPIRED":
            (row.status, row.error) = ("billing_retry", nil)
        case "EXPIRED":
            (row.status, row.error) = ("inactive", "expired")
        case "REFUND", "REVOKE":
            // A refund of an earlier period's transaction leaves the current period alone.
            if current { (row.status, row.error) = ("inactive", "revoked") }
        default:
            break  // DID_CHANGE_RENEWAL_STATUS: only whether it renews
        }
        return finished(row, apple: n.status, transaction: n.type == "REFUND_REVERSED" ? nil : n.transaction, order: order,
                        existing: existing, now: now)
    }

    /// The renewal info's facts: whether it renews, and the end of its grace period.
    static func take(_ renewal: AppleRenewal, into row: inout MembershipRow) {
        if let s = renewal.autoRenewStatus { row.autoRenew = s == 1 }
        row.gracePeriodEnd = renewal.gracePeriodExpiresDate
        row.commitmentRenewal = renewal.renewal
    }

    /// The last steps of applying signed data signed at `order`: Apple's status when it said one, a
    /// revoked current transaction, the newest signed date, the clock.
    private static func finished(_ row: MembershipRow, apple: Int64?, transaction: AppleTransaction?, order: Int64,
                                 existing: MembershipRow?, now: Int64) -> MembershipRow {
        var row = row
        if let apple, let said = status(apple: apple) { (row.status, row.error) = said }
        // A revoked current transaction is revoked whatever `status` said (a REFUND notification may
        // carry 1 or 2 while its transaction has a revocationDate), so the state never depends on the
        // order the receipt and the notification arrived in.
        if let tx = transaction, tx.revocationDate != nil, tx.transactionId == row.transactionId {
            (row.status, row.error) = ("inactive", "revoked")
        }
        row.signedDate = max(row.signedDate, order)
        return stamped(settled(row, now: now), existing, now: now)
    }

    /// The membership after Apple's App Store Server API answered for it (Get All Subscription Statuses:
    /// the purchase's status, latest transaction and renewal info, all verified): Apple's word, unless it
    /// was signed before the state already applied, which it never rolls back.
    public static func lookedUp(_ s: AppleStatus, existing: MembershipRow, now: Int64) -> MembershipRow {
        let order = s.transaction.signedDate
        if order < existing.signedDate { return existing }
        var row = existing
        take(s.transaction, receipt: s.transactionJWS, into: &row)
        if let renewal = s.renewal { take(renewal, into: &row) }
        return finished(row, apple: s.status, transaction: s.transaction, order: order, existing: existing, now: now)
    }

    /// What one look by `subscriptions.refresh` in api mode found, from the membership before and after
    /// Apple's answer: a later period is `renewed`, access lost is `expired`.
    public static func outcome(before: MembershipRow, after: MembershipRow, now: Int64) -> Check {
        if let end = after.expiresDate, end > (before.expiresDate ?? .max) { return .renewed }
        if grantsAccess(current(before, now: now).status) && !grantsAccess(current(after, now: now).status) { return .expired }
        return .unchanged
    }

    /// Which of a user's memberships `subscriptions.status` shows: one that gives access, the latest
    /// period first (a purchase that never ends is the latest); else the most recently signed.
    public static func shown(_ rows: [(key: String, row: MembershipRow)], now: Int64) -> (key: String, row: MembershipRow)? {
        let settled = rows.map { (key: $0.key, row: Self.settled($0.row, now: now)) }
        let access = settled.filter { grantsAccess($0.row.status) }
        if !access.isEmpty { return access.max { ($0.row.expiresDate ?? .max, $0.key) < ($1.row.expiresDate ?? .max, $1.key) } }
        return settled.max { ($0.row.signedDate, $0.key) < ($1.row.signedDate, $1.key) }
    }

    /// What one check by `subscriptions.refresh` found.
    public enum Check: Equatable { case expired, renewed, unchanged }

    /// Checks `row` at `now` against its last check: a status the clock moved (access lost) is
    /// `expired`; a later period than at the last check (a renewal applied since) is `renewed`. Returns
    /// the row as checked (itself when unchanged) and the new check, due `interval` later or when a
    /// period ends first.
    public static func check(_ row: MembershipRow, last: CheckRow?, now: Int64, interval: Int64) -> (MembershipRow, CheckRow, Check) {
        let next = stamped(settled(row, now: now), row, now: now)
        let outcome: Check
        if next.status != row.status || next.error != row.error {
            outcome = .expired
        } else if let end = row.expiresDate, end > (last?.expiresDate ?? .min) {
            outcome = .renewed
        } else {
            outcome = .unchanged
        }
        return (next, CheckRow(checkedAt: now, expiresDate: row.expiresDate, dueAt: dueAt(lastLook: now, next, interval: interval)), outcome)
    }

    /// When a membership is next due for refresh: `interval` after refresh last looked at it, or as soon
    /// as its period, grace period or billing retry ends after that look, whichever comes first; at once
    /// when refresh never looked at it. A verify or a notification is not a look: they keep the last one.
    public static func dueAt(lastLook: Int64?, _ row: MembershipRow, interval: Int64) -> Int64 {
        guard let last = lastLook else { return 0 }
        var due = last + interval
        let ends = [row.expiresDate, row.gracePeriodEnd, row.expiresDate.map { $0 + billingRetryMs }]
        for end in ends.compactMap({ $0 }) where end > last { due = min(due, end) }
        return due
    }

    /// The refresh order of a membership: soonest due first, then by key. Fixed-width, so that string
    /// order is time order.
    public static func checkOrder(dueAt: Int64, key: String) -> String {
        checkOrderHead(dueAt: dueAt) + key
    }

    /// What precedes the key in `checkOrder`: the store's second order of checks.
    public static func checkOrderHead(dueAt: Int64) -> String {
        let digits = String(max(dueAt, 0))
        return String(repeating: "0", count: max(0, 15 - digits.count)) + digits + "|"
    }
}
