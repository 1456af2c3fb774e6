import Chrono
import DomainSupport
import JSON
import Storage

/// The `rewards` configuration section (its key is a row of the kernel's settings table).
public struct RewardsConfig: Sendable, Equatable {
    public var xpPerMinute: Int64 = 10
    public init() {}
}

extension RewardsConfig: DomainConfig {
    /// Read through the kernel's settings table (`rewards.xpPerMinute`).
    public static var sections: [String] { [] }
    public mutating func read(section name: String, _ r: inout ObjectReader, files: ConfigFiles) throws(FieldError) {}
}

/// Earn-to-unlock rewards for one kernel: XP credited once per key, redeemed for minutes, spent on
/// windows of unlocked screen time. Confined to the serving thread.
public final class RewardsService: @unchecked Sendable {
    static let balanceKey = "balance"
    /// The counter of rewards ledger entries (credits and unlock windows).
    static let ledgerCounterKey = "ledger"
    /// Longest reason and idempotency key.
    static let textBytes = 200

    let config: RewardsConfig
    let store: any Storage
    let tables: RewardsTables
    /// Most rewards ledger entries one user may keep; 0: no limit.
    let rewardsLedgerPerUser: Int64

    public init(config: RewardsConfig, store: any Storage, tables: RewardsTables, rewardsLedgerPerUser: Int64 = UserLimits().rewardsLedgerPerUser) {
        self.config = config
        self.store = store
        self.tables = tables
        self.rewardsLedgerPerUser = rewardsLedgerPerUser
    }

    /// Storage reads and commits, their failures answered as this domain's.
    private func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(RewardsError) -> T {
        do { return try body() } catch { throw .storage(error) }
    }

    private func commit(_ tx: Transaction) throws(RewardsError) {
        do { try store.commit(tx) } catch { throw .storage(error) }
    }

    func balance(_ user: String) throws(RewardsError) -> BalanceRow {
        try storage(try tables.balance.get(user: user, key: Self.balanceKey)) ?? BalanceRow()
    }

    /// Names what `earn` reads, for the batch's read-ahead.
    public func declareEarnReads(_ user: String, key: String) {
        try? prefetchEarn(user, key: key)
    }

    /// What `earn` reads: the balance, the key's earlier credit and the ledger's count, together.
    private func prefetchEarn(_ user: String, key: String) throws(RewardsError) {
        try storage(try store.prefetch([(tables.balance, user, Self.balanceKey), (tables.earned, user, key),
                                        (tables.counters, user, Self.ledgerCounterKey)]))
    }

    func earn(_ user: String, xp: Int64, reason: String, key: String, now: Timestamp) throws(RewardsError) -> BalanceRow {
        try prefetchEarn(user, key: key)
        var b = try balance(user)
        if let earlier = try storage(try tables.earned.get(user: user, key: key)) {
            guard earlier.xp == xp else { throw .keyReused }
            return b  // credited once already
        }
        let (sum, overflow) = b.xp.addingReportingOverflow(xp)
        guard !overflow, sum <= Self.maxXP else { throw .balanceLimit }
        b.xp = sum
        var tx = Transaction()
        try countLedger(user, &tx)
        tx.put(tables.earned, user: user, key: key, EarnRow(xp: xp, reason: reason, at: now.milliseconds))
        tx.put(tables.balance, user: user, key: Self.balanceKey, b)
        try commit(tx)
        return b
    }

    /// Largest balance in XP (a bound that keeps every sum far from overflow).
    static let maxXP: Int64 = 1_000_000_000_000

    func redeem(_ user: String, xp: Int64) throws(RewardsError) -> BalanceRow {
        guard let minutes = RewardsRules.minutes(forXP: xp, xpPerMinute: config.xpPerMinute) else {
            throw .notAMultiple(xpPerMinute: config.xpPerMinute)
        }
        var b = try balance(user)
        guard b.xp >= xp else { throw .notEnoughXP }
        b.xp -= xp
        b.minutes += minutes
        var tx = Transaction()
        tx.put(tables.balance, user: user, key: Self.balanceKey, b)
        try commit(tx)
        return b
    }

    func spend(_ user: String, minutes: Int64, now: Timestamp) throws(RewardsError) -> Unlock {
        var b = try balance(user)
        guard b.minutes >= minutes else { throw .notEnoughMinutes }
        let window = RewardsRules.unlockWindow(minutes: minutes, nowMs: now.milliseconds, unlockedUntilMs: b.unlockedUntil)
        b.minutes -= minutes
        b.unlockedUntil = window.endsAt
        let unlock = UnlockRow(startsAt: window.startsAt, endsAt: window.endsAt, minutes: minutes)
        var tx = Transaction()
        try countLedger(user, &tx)
        tx.put(tables.balance, user: user, key: Self.balanceKey, b)
        tx.put(tables.unlocks, user: user, key: padded(window.startsAt), unlock)
        try commit(tx)
        return Unlock(window: unlock, balance: b)
    }

    /// Counts one more ledger entry (a credit or an unlock window) into `tx`; past
    /// `limits.rewardsLedgerPerUser` the write is refused and nothing is stored.
    private func countLedger(_ user: String, _ tx: inout Transaction) throws(RewardsError) {
        let stored = try storage(try tables.counters.get(user: user, key: Self.ledgerCounterKey))?.value
        guard let after = try Quota.after(stored: stored, adding: 1, limit: rewardsLedgerPerUser, recount: { () throws(RewardsError) in
            let earned = try storage(try tables.earned.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)).count
            let unlocks = try storage(try tables.unlocks.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)).count
            return Int64(earned + unlocks)
        }) else { throw .ledgerQuota(rewardsLedgerPerUser) }
        tx.put(tables.counters, user: user, key: Self.ledgerCounterKey, LedgerCountRow(value: after))
    }

    /// The unlock window starting at `startsAt`, if any.
    func unlock(_ user: String, startsAt: Timestamp) throws(RewardsError) -> UnlockRow? {
        try storage(try tables.unlocks.get(user: user, key: padded(startsAt.milliseconds)))
    }
}

/// Why the service refuses a request; the method layer says it on the wire.
enum RewardsError: Error, Equatable {
    /// An idempotency key already used with a different amount.
    case keyReused
    /// The credit would take the balance past `RewardsService.maxXP`.
    case balanceLimit
    /// XP to redeem must be a positive multiple of the rate.
    case notAMultiple(xpPerMinute: Int64)
    case notEnoughXP
    case notEnoughMinutes
    /// The user keeps `limits.rewardsLedgerPerUser` credits and unlock windows already.
    case ledgerQuota(Int64)
    /// Storage failed; nothing changed.
    case storage(StorageError)
}

/// A window of unlocked screen time bought with minutes, and the balance after.
public struct Unlock: Sendable {
    let window: UnlockRow
    let balance: BalanceRow
}
