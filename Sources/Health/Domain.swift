import DomainSupport
import JSON
import JSONRPC
import Storage

/// HealthKit sync, as the kernel composes it.
public struct HealthDomain: Domain {
    public let methods: [RegisteredMethod]

    @inlinable
    public static func tables(_ store: some Storage) -> HealthTables { HealthTables(store) }

    public init(config: HealthConfig, tables: HealthTables, context: DomainContext) {
        let service = HealthService(store: context.store, tables: tables, cursorSecrets: context.cursorSecrets,
                                    healthItemsPerUser: context.limits.healthItemsPerUser, unknownTypes: config.unknownTypes,
                                    maxHistoryDays: config.maxHistoryDays, clock: context.clock)
        context.entities.add([
            "health.sample": { (user, id, _) throws(RPCError) in
                try answer { () throws(HealthError) in try service.sample(user, id).map { $0.json(id) } }
            },
            "health.workout": { (user, id, _) throws(RPCError) in
                try answer { () throws(HealthError) in try service.workout(user, id).map { $0.json(id) } }
            },
            "health.sleep": { (user, id, _) throws(RPCError) in
                try answer { () throws(HealthError) in try service.sleep(user, id).map { $0.json(id) } }
            },
            RecordKind.stateOfMind.entity: { (user, id, _) throws(RPCError) in
                try answer { () throws(HealthError) in try service.record(.stateOfMind, user, id).map { $0.json(id) } }
            },
            RecordKind.medicationDose.entity: { (user, id, _) throws(RPCError) in
                try answer { () throws(HealthError) in try service.record(.medicationDose, user, id).map { $0.json(id) } }
            },
            "health.sourceOrder": { (user, id, _) throws(RPCError) in
                try answer { () throws(HealthError) in try service.sourceOrders(user, types: [id]).first.map { $0.row.json(type: id) } }
            },
            "health.day": { (user, id, _) throws(RPCError) in
                try answer { () throws(HealthError) in
                    try service.day(user, id).map { $0.json(date: id) }
                }
            },
        ])
        methods = [
            RegisteredMethod(HealthIngest(service)),
            RegisteredMethod(HealthDelete(service)),
            RegisteredMethod(HealthSummary(service)),
            RegisteredMethod(HealthWeekly(service)),
            RegisteredMethod(HealthWorkouts(service)),
            RegisteredMethod(HealthSetSourceOrder(service)),
            RegisteredMethod(HealthSourceOrder(service)),
        ]
    }
}
