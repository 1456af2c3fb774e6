import DomainSupport
import Chrono
import JSON
import Logging
import Storage

/// `subscriptions.refresh` in api mode and `subscriptions.recoverNotifications`: the parts on the
/// serving thread. Each runs in two steps around the calls to Apple (on worker threads): `begin…` reads
/// (and leases) what to ask about, `finish…` applies the verified answers to the state as it is then.
extension SubscriptionsService {
    /// How long memberships being asked about stay out of other refreshes' way (on PostgreSQL, other
    /// kernels'): longer than a batch's calls may take (`lookupBudgetSeconds` plus one call's timeout),
    /// short enough that a kernel that died mid-call leaves them due again soon.
    static let leaseMs: Int64 = 15 * 60_000
    /// Calls not started this long after a batch's first are counted failed.
    static let lookupBudgetSeconds: Int64 = 5 * 60

    private static let logger = Logger(label: "healthkernel.subscriptions")

    /// Takes up to `limit` due memberships, soonest due first, and leases them: each is due again only
    /// when the lease ends, so a concurrent refresh (another kernel's too) never asks about it; the
    /// answer's `finishLookups` sets when it is really due. The scan itself skips rows another kernel's
    /// request holds. Also answers how many due ones are left.
    func beginLookups(limit: Int, now: Timestamp) throws(SubscriptionsError) -> (lookups: [Lookup], remaining: Int) {
        let due = MembershipRules.checkOrder(dueAt: now.milliseconds, key: "~")
        let (checks, total) = try storage(try tables.checks.scanAllOrdered(through: due, limit: limit))
        var lookups: [Lookup] = []
        var t = Transaction()
        for (user, otid, check) in checks {
            guard let row = try storage(try tables.memberships.get(user: user, key: otid)) else {
                t.delete(tables.checks, user: user, key: otid)  // cannot happen: both go together
                continue
            }
            var leased = check
            leased.dueAt = now.milliseconds + Self.leaseMs
            t.put(tables.checks, user: user, key: otid, leased)
            lookups.append(Lookup(user: user, originalTransactionId: otid, environment: row.environment))
        }
        if !t.isEmpty { try commit(t) }
        return (lookups, total - checks.count)
    }

    /// Applies Apple's answers: each membership follows its verified answer (never rolled back by an older
    /// one) and is due again after the refresh interval; a failed lookup changes nothing and is due again
    /// after `LookupResult.problem`.
    func finishLookups(_ lookups: [Lookup], _ results: [LookupResult], remaining: Int, now: Timestamp) throws(SubscriptionsError) -> RefreshReport {
        var report = RefreshReport()
        report.mode = "api"
        report.remaining = remaining
        var firstProblem: String?
        var t = Transaction()
        for (lookup, result) in zip(lookups, results) {
            let (user, otid) = (lookup.user, lookup.originalTransactionId)
            report.checked += 1
            guard let row = try storage(try tables.memberships.get(user: user, key: otid)),
                  let check = try storage(try tables.checks.get(user: user, key: otid)) else {
                report.unchanged += 1  // deleted while Apple was asked (the user was deleted)
                continue
            }
            let next: MembershipRow
            switch result {
            case .status(let status): next = MembershipRules.lookedUp(status, existing: row, now: now.milliseconds)
            case .transaction(let tx, let jws): next = MembershipRules.verified(tx, receipt: jws, existing: row, now: now.milliseconds)
            case .failed, .rejected:
                let (why, retrySeconds) = result.problem(interval: config.refreshIntervalSeconds)
                report.failed += 1
                firstProblem = firstProblem ?? why
                var retry = check
                retry.dueAt = now.milliseconds + retrySeconds * 1000
                t.put(tables.checks, user: user, key: otid, retry)
                continue
            }
            switch MembershipRules.outcome(before: row, after: next, now: now.milliseconds) {
            case .expired: report.expired += 1
            case .renewed: report.renewed += 1
            case .unchanged: report.unchanged += 1
            }
            if next != row { t.put(tables.memberships, user: user, key: otid, next) }
            t.put(tables.checks, user: user, key: otid,
                  CheckRow(checkedAt: now.milliseconds, expiresDate: next.expiresDate,
                           dueAt: MembershipRules.dueAt(lastLook: now.milliseconds, next, interval: intervalMs)))
        }
        if !t.isEmpty { try commit(t) }
        if let firstProblem {
            Self.logger.warning("subscriptions.refresh: \(report.failed) of \(report.checked) App Store lookups failed; the first: \(firstProblem)")
        }
        return report
    }

    /// `kernel.info`'s `appStore.serverApi`.
    var apiState: JSON {
        let record = api?.client.lately ?? ServerAPIRecord()
        return ["configured": .bool(api != nil), "lastSuccessAt": .timestamp(record.lastSuccessAt?.milliseconds),
                "lastFailureAt": .timestamp(record.lastFailureAt?.milliseconds), "lastFailure": .optional(record.lastFailure)]
    }

    // MARK: Recovery

    /// Where a recovery page starts: the environment, and Apple's token in it (nil: its first page).
    /// Production's history comes first, then Sandbox's, when both are allowed.
    func recoveryStart(_ token: String?) -> (environment: String, appleToken: String?)? {
        let environments = Self.recoveryOrder(config.environments)
        guard let token else { return (environments[0], nil) }
        let (tag, rest) = (token.prefix(2), String(token.dropFirst(2)))
        guard let environment = environments.first(where: { $0.prefix(1) + ":" == tag }) else { return nil }
        return (environment, rest.isEmpty ? nil : rest)
    }

    /// The token of the page after one of `environment` whose Apple token for the next page is `next`.
    func recoveryToken(after environment: String, next: String?) -> String? {
        if let next { return environment.prefix(1) + ":" + next }
        let environments = Self.recoveryOrder(config.environments)
        guard let i = environments.firstIndex(of: environment), i + 1 < environments.count else { return nil }
        return environments[i + 1].prefix(1) + ":"
    }

    private static func recoveryOrder(_ allowed: [String]) -> [String] {
        AppStoreConfig.knownEnvironments.filter(allowed.contains)
    }

    /// Applies a page of notification history as `subscriptions.notify` would, each once.
    func finishRecovery(_ notifications: [Result<ReceivedNotification, SubscriptionsError>], environment: String, next: String?,
                        now: Timestamp) throws(SubscriptionsError) -> RecoveryReport {
        var report = RecoveryReport(fetched: notifications.count, paginationToken: recoveryToken(after: environment, next: next))
        var firstProblem: String?
        for notification in notifications {
            switch notification {
            case .success(let n):
                if try record(n, now: now).duplicate { report.duplicates += 1 } else { report.applied += 1 }
            case .failure(let error):
                report.failed += 1
                firstProblem = firstProblem ?? error.rpcMessage
            }
        }
        if let firstProblem {
            Self.logger.warning("subscriptions.recoverNotifications: \(report.failed) notifications did not verify; the first: \(firstProblem)")
        }
        return report
    }
}

/// What `subscriptions.recoverNotifications` did with one page of notification history.
public struct RecoveryReport: Equatable, Sendable {
    public var fetched = 0, applied = 0, duplicates = 0, failed = 0
    /// Where the next page starts; nil after the last.
    public var paginationToken: String?

    init(fetched: Int, paginationToken: String?) {
        self.fetched = fetched
        self.paginationToken = paginationToken
    }
}
