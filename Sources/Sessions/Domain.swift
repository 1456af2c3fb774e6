import DomainSupport
import JSON
import JSONRPC
import Storage

/// Meditation sessions and the server-side timer, as the kernel composes it.
public struct SessionsDomain: Domain {
    public let methods: [RegisteredMethod]

    @inlinable
    public static func tables(_ store: some Storage) -> SessionTables { SessionTables(store) }

    public init(config: NoConfig, tables: SessionTables, context: DomainContext) {
        let se = SessionsService(store: context.store, tables: tables, cursorSecrets: context.cursorSecrets,
                                  sessionsPerUser: context.limits.sessionsPerUser, random: context.random)
        context.entities.add([
            "sessions.session": { (user, id, _) throws(RPCError) in
                try answer { () throws(SessionsError) in try se.session(user, id) }.map(\.json)
            },
            "sessions.timer": { (user, _, now) throws(RPCError) in
                try answer { () throws(SessionsError) in try se.active(user, now: now) }.map(\.json)
            },
        ])
        methods = [
            RegisteredMethod(SessionsRecord(se)),
            RegisteredMethod(SessionsStart(se)),
            RegisteredMethod(SessionsPause(se)),
            RegisteredMethod(SessionsResume(se)),
            RegisteredMethod(SessionsStop(se)),
            RegisteredMethod(SessionsActive(se)),
            RegisteredMethod(SessionsGet(se)),
            RegisteredMethod(SessionsList(se)),
            RegisteredMethod(SessionsDelete(se)),
            RegisteredMethod(SessionsStats(se)),
        ]
    }
}
