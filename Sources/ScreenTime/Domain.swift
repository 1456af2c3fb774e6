import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

/// Screen Time verification, as the kernel composes it.
public struct ScreenTimeDomain: Domain {
    public let methods: [RegisteredMethod]

    @inlinable
    public static func tables(_ store: some Storage) -> ScreenTimeTables { ScreenTimeTables(store) }

    public init(config: ScreenTimeConfig, tables: ScreenTimeTables, context: DomainContext) {
        let st = ScreenTimeService(config: config, store: context.store, tables: tables,
                                   rawBytesPerUser: context.limits.rawBytesPerUser,
                                   maxAnswerBytes: context.maxAnswerBytes)
        // Each synced entity as its own read method shows it.
        context.entities.add([
            "screentime.connection": { (user, _, _) throws(RPCError) in try answer { () throws(ScreenTimeError) in try st.connection(user) }.json },
            "screentime.day": { (user, id, _) throws(RPCError) in
                guard let date = CalendarDate(id) else { return nil }
                return try answer { () throws(ScreenTimeError) in try st.record(user, date: date) }.map(\.json)
            },
            "screentime.penalty": { (user, id, _) throws(RPCError) in try answer { () throws(ScreenTimeError) in try st.penalty(user, date: id) }.map(\.json) },
            "screentime.event": { (user, id, _) throws(RPCError) in
                guard let seq = Int64(id) else { return nil }
                return try answer { () throws(ScreenTimeError) in try st.event(user, seq: seq) }.map(\.json)
            },
        ])
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
        ]
    }
}

extension ScreenTimeConfig: DomainConfig {
    /// Read through the kernel's settings table (`screentime.toleranceMinutes`, `screentime.pointsPerMinute`).
    public static var sections: [String] { [] }
    public mutating func read(section name: String, _ reader: inout ObjectReader, files: ConfigFiles) throws(FieldError) {}
}
