import DomainSupport
import JSON
import JSONRPC
import Storage

/// App Store subscriptions, as the kernel composes it.
public struct SubscriptionsDomain: Domain {
    public let methods: [RegisteredMethod]

    @inlinable
    public static func tables(_ store: some Storage) -> SubscriptionTables { SubscriptionTables(store) }

    public init(config: AppStoreConfig, tables: SubscriptionTables, context: DomainContext) {
        let service = SubscriptionsService(config: config, store: context.store, tables: tables)
        context.entities.add([
            "subscriptions.membership": { (user, id, now) throws(RPCError) in
                try answer { () throws(SubscriptionsError) in try service.membership(user, originalTransactionId: id, now: now) }.map(\.json)
            },
            "subscriptions.consumptionRequest": { (user, id, _) throws(RPCError) in
                try answer { () throws(SubscriptionsError) in try service.consumptionRequest(user, notificationUUID: id) }?.json
            },
        ])
        context.info.add("appStore") { ["serverApi": service.apiState] }
        methods = [
            RegisteredMethod(SubscriptionsVerify(service)),
            RegisteredMethod(SubscriptionsStatus(service)),
            RegisteredMethod(SubscriptionsRefresh(service)),
            RegisteredMethod(SubscriptionsRecoverNotifications(service)),
            RegisteredMethod(SubscriptionsNotify(service)),
        ]
    }
}
