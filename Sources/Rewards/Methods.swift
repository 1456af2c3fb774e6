import DomainSupport
import JSON
import JSONRPC

// MARK: The wire form of what the service answers

extension RewardsError {
    var rpc: RPCError {
        switch self {
        case .keyReused: return .conflict("idempotency_key_reused", "This key was already used with a different xp")
        case .balanceLimit:
            return .invalidParams("params.xp", reason: "out_of_range", "params.xp would take the balance past \(RewardsService.maxXP)")
        case .notAMultiple(let rate):
            return .invalidParams("params.xp", reason: "out_of_range", "params.xp must be a positive multiple of \(rate)")
        case .notEnoughXP: return .conflict("insufficient_balance", "Not enough XP")
        case .notEnoughMinutes: return .conflict("insufficient_balance", "Not enough unlocked minutes")
        case .ledgerQuota(let limit): return .quotaExceeded("rewards ledger entries (credits and unlock windows)", limit: limit)
        case .storage(let error): return .from(error)
        }
    }
}

/// `rewards.earn`.
public struct RewardsEarn: RPCMethod {
    public struct Params: RPCParams {
        let xp: Int64
        let reason: String
        let key: String
        public static let declaration = ParamList(
            required("xp", in: 1...1_000_000),
            required("reason", maxBytes: RewardsService.textBytes),
            required("key", maxBytes: RewardsService.textBytes).described("idempotency key: the same key again credits nothing"))
        public init(_ v: (Int64, String, String)) { (xp, reason, key) = v }
    }
    public static let name = "rewards.earn"
    public static let summary = "Credits XP once per idempotency key; the same key again credits nothing."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let errors = [ErrorDoc(.conflict, "idempotency_key_reused"), ErrorDoc(.limited, "quota_exceeded: past limits.rewardsLedgerPerUser entries")]
    let service: RewardsService
    public init(_ service: RewardsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> BalanceRow {
        let user = try c.userID()
        return try answer { () throws(RewardsError) in try service.earn(user, xp: p.xp, reason: p.reason, key: p.key, now: c.now) }
    }
    public static let readsAhead = true
    public func declareReads(_ p: Params, _ c: CallContext) {
        if let user = c.identity?.userId { service.declareEarnReads(user, key: p.key) }
    }
}

/// `rewards.redeem`.
public struct RewardsRedeem: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            required("xp", in: 1...RewardsService.maxXP).described("a positive multiple of the XP-per-minute rate"))
        let xp: Int64
        public init(_ xp: Int64) { self.xp = xp }
    }
    public static let name = "rewards.redeem"
    public static let summary = "Turns XP into unlock minutes (10 XP per minute by default)."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let errors = [ErrorDoc(.conflict, "insufficient_balance")]
    let service: RewardsService
    public init(_ service: RewardsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> BalanceRow {
        let user = try c.userID()
        return try answer { () throws(RewardsError) in try service.redeem(user, xp: p.xp) }
    }
}

/// `rewards.spend`.
public struct RewardsSpend: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(required("minutes", in: 1...1440))
        let minutes: Int64
        public init(_ minutes: Int64) { self.minutes = minutes }
    }
    public static let name = "rewards.spend"
    public static let summary = "Spends unlock minutes on a window of unlocked screen time, starting now or when the current window ends."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let errors = [ErrorDoc(.conflict, "insufficient_balance"), ErrorDoc(.limited, "quota_exceeded: past limits.rewardsLedgerPerUser entries")]
    let service: RewardsService
    public init(_ service: RewardsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Unlock {
        let user = try c.userID()
        return try answer { () throws(RewardsError) in try service.spend(user, minutes: p.minutes, now: c.now) }
    }
}

/// `rewards.balance`.
public struct RewardsBalance: RPCMethod {
    public static let name = "rewards.balance"
    public static let summary = "XP and unlock minutes held."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: RewardsService
    public init(_ service: RewardsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> BalanceRow {
        let user = try c.userID()
        return try answer { () throws(RewardsError) in try service.balance(user) }
    }
}
