import Chrono
import DomainSupport
import JSON
import Storage

/// XP and minutes held (`rewards.balance`, key `balance`), and when the last unlock window ends.
public struct BalanceRow: StoredRow {
    public var xp: Int64 = 0
    public var minutes: Int64 = 0
    public var unlockedUntil: Int64?
    public init() {}
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "balance")
        xp = try f.int("xp")
        minutes = try f.int("minutes")
        unlockedUntil = try f.optionalInstant("unlockedUntil")
    }
    public var stored: JSON { ["xp": .int(xp), "minutes": .int(minutes), "unlockedUntil": .optionalInt(unlockedUntil)] }
}

/// An XP credit, kept by its idempotency key (`rewards.earned`).
public struct EarnRow: StoredRow {
    public let xp: Int64
    public let reason: String
    public let at: Int64
    public init(xp: Int64, reason: String, at: Int64) {
        self.xp = xp
        self.reason = reason
        self.at = at
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "earning")
        xp = try f.int("xp")
        reason = try f.string("reason")
        at = try f.instant("at")
    }
    public var stored: JSON { ["xp": .int(xp), "reason": .string(reason), "at": .int(at)] }
}

/// An unlock window bought with minutes (`rewards.unlocks`, key: its start in ms, 20 digits).
public struct UnlockRow: StoredRow {
    public let startsAt: Int64
    public let endsAt: Int64
    public let minutes: Int64
    public init(startsAt: Int64, endsAt: Int64, minutes: Int64) {
        self.startsAt = startsAt
        self.endsAt = endsAt
        self.minutes = minutes
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "unlock")
        startsAt = try f.instant("startsAt")
        endsAt = try f.instant("endsAt")
        minutes = try f.int("minutes", in: 0...1440)
    }
    public var stored: JSON { ["startsAt": .int(startsAt), "endsAt": .int(endsAt), "minutes": .int(minutes)] }
}

/// How many ledger entries (credits and unlock windows) a user keeps (`rewards.counters`, key `ledger`),
/// for `limits.rewardsLedgerPerUser`. Rows of data dirs written before this table are counted once.
public struct LedgerCountRow: StoredRow {
    public let value: Int64
    public init(value: Int64) { self.value = value }
    public init(stored: JSON) throws(StorageError) { value = try StoredFields(stored, "ledger count").int("value") }
    public var stored: JSON { ["value": .int(value)] }
}

/// The rewards tables, registered with the store before it recovers.
public struct RewardsTables: Sendable {
    public let balance: any StorageTable<BalanceRow>
    public let earned: any StorageTable<EarnRow>
    public let unlocks: any StorageTable<UnlockRow>
    public let counters: any StorageTable<LedgerCountRow>

    /// Registers the tables (inlinable, as the other domains' are, so each is compiled for its row type).
    @inlinable
    public init(_ store: some Storage) {
        balance = store.table("rewards.balance", of: BalanceRow.self, entity: Entity("rewards.balance"))
        earned = store.table("rewards.earned", of: EarnRow.self)
        // Unlock rows are keyed by their start, zero-padded; their ids are that start as the wire shows it.
        unlocks = store.table("rewards.unlocks", of: UnlockRow.self,
                              entity: Entity("rewards.unlock", id: { Timestamp(milliseconds: Int64($0) ?? 0).description }))
        counters = store.table("rewards.counters", of: LedgerCountRow.self)
    }
}
