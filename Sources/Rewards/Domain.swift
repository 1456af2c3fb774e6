import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

/// Earn-to-unlock rewards, as the kernel composes it.
public struct RewardsDomain: Domain {
    public let methods: [RegisteredMethod]

    @inlinable
    public static func tables(_ store: some Storage) -> RewardsTables { RewardsTables(store) }

    public init(config: RewardsConfig, tables: RewardsTables, context: DomainContext) {
        let service = RewardsService(config: config, store: context.store, tables: tables, rewardsLedgerPerUser: context.limits.rewardsLedgerPerUser)
        // Each synced entity as its own read method shows it.
        context.entities.add([
            "rewards.balance": { (user, _, _) throws(RPCError) in try answer { () throws(RewardsError) in try service.balance(user) }.json },
            "rewards.unlock": { (user, id, _) throws(RPCError) in
                guard let at = Timestamp(rfc3339: id) else { return nil }
                return try answer { () throws(RewardsError) in try service.unlock(user, startsAt: at) }.map(\.json)
            },
        ])
        methods = [
            RegisteredMethod(RewardsEarn(service)),
            RegisteredMethod(RewardsRedeem(service)),
            RegisteredMethod(RewardsSpend(service)),
            RegisteredMethod(RewardsBalance(service)),
        ]
    }
}
