import DomainSupport
import JSON
import JSONRPC
import Storage

/// Screen Time verification and earn-to-unlock rewards, as the kernel composes it.
public struct ScreenTimeDomain: Domain {
    public let methods: [RegisteredMethod]

    @inlinable
    public static func tables(_ store: some Storage) -> ScreenTimeTables { ScreenTimeTables(store) }

    public init(config: ScreenTimeConfig, tables: ScreenTimeTables, context: DomainContext) {
        let st = ScreenTimeService(config: config, store: context.store, tables: tables)
        context.entities.add(st.renderers)
        methods = [
            RegisteredMethod(ScreenTimeGetConnection(st)),
            RegisteredMethod(ScreenTimeUpdateConnection(st)),
            RegisteredMethod(ScreenTimeClaim(st)),
            RegisteredMethod(ScreenTimeUpload(st)),
            RegisteredMethod(ScreenTimeDay(st)),
            RegisteredMethod(ScreenTimeHistory(st)),
            RegisteredMethod(ScreenTimePenalties(st)),
            RegisteredMethod(ScreenTimeLogEvent(st)),
            RegisteredMethod(ScreenTimeEvents(st)),
            RegisteredMethod(RewardsEarn(st)),
            RegisteredMethod(RewardsRedeem(st)),
            RegisteredMethod(RewardsSpend(st)),
            RegisteredMethod(RewardsBalance(st)),
        ]
    }
}

extension ScreenTimeConfig: DomainConfig {
    public static var sections: [String] { ["screentime", "rewards"] }

    public mutating func read(section name: String, _ reader: inout ObjectReader) throws(FieldError) {
        if name == "rewards" { try readRewards(&reader) } else { try readScreenTime(&reader) }
    }
}
