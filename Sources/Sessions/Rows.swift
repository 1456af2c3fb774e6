import DomainSupport
import JSON
import Storage

/// A recorded session (`sessions.records`, key: session id).
public struct MeditationRow: StoredRow {
    public let startTime: Int64
    public let durationSeconds: Int64
    public let endTime: Int64
    public let createdAt: Int64
    public let clientSessionId: String?

    public init(startTime: Int64, durationSeconds: Int64, endTime: Int64, createdAt: Int64, clientSessionId: String?) {
        self.startTime = startTime
        self.durationSeconds = durationSeconds
        self.endTime = endTime
        self.createdAt = createdAt
        self.clientSessionId = clientSessionId
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "session")
        startTime = try f.instant("startTime")
        durationSeconds = try f.int("durationSeconds", in: 1...86_400)
        endTime = try f.instant("endTime")
        createdAt = try f.instant("createdAt")
        clientSessionId = f.optionalString("clientSessionId")
    }
    public var stored: JSON {
        ["startTime": .int(startTime), "durationSeconds": .int(durationSeconds), "endTime": .int(endTime),
         "createdAt": .int(createdAt), "clientSessionId": .optional(clientSessionId)]
    }
}

/// The running or paused timer (`sessions.timer`, key `active`). Times are the instants the kernel saw,
/// so replaying the log rebuilds the same timer.
public struct TimerRow: StoredRow {
    public let sessionId: String
    public let clientSessionId: String?
    public let startedAt: Int64
    /// Run time before the current run.
    public var accumulatedMs: Int64
    /// When the current run began; nil while paused.
    public var runningSince: Int64?

    public init(sessionId: String, clientSessionId: String?, startedAt: Int64, accumulatedMs: Int64, runningSince: Int64?) {
        self.sessionId = sessionId
        self.clientSessionId = clientSessionId
        self.startedAt = startedAt
        self.accumulatedMs = accumulatedMs
        self.runningSince = runningSince
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "timer")
        sessionId = try f.string("sessionId")
        clientSessionId = f.optionalString("clientSessionId")
        startedAt = try f.instant("startedAt")
        accumulatedMs = try f.int("accumulatedMs", in: 0...(1 << 53))
        runningSince = try f.optionalInstant("runningSince")
    }
    public var stored: JSON {
        ["sessionId": .string(sessionId), "clientSessionId": .optional(clientSessionId), "startedAt": .int(startedAt),
         "accumulatedMs": .int(accumulatedMs), "runningSince": .optionalInt(runningSince)]
    }
}

/// A client's idempotency id -> the session it made (`sessions.clientIds`).
public struct ClientIDRow: StoredRow {
    public let sessionId: String
    public init(sessionId: String) { self.sessionId = sessionId }
    public init(stored: JSON) throws(StorageError) { sessionId = try StoredFields(stored, "client id").string("sessionId") }
    public var stored: JSON { ["sessionId": .string(sessionId)] }
}

/// How many sessions a user keeps (`sessions.count`, key `sessions`), for `limits.sessionsPerUser`.
public struct SessionCountRow: StoredRow {
    public let count: Int64
    public init(count: Int64) { self.count = count }
    public init(stored: JSON) throws(StorageError) { count = try StoredFields(stored, "session count").int("count") }
    public var stored: JSON { ["count": .int(count)] }
}

/// The sessions tables, registered with the store before it recovers.
public struct SessionTables: Sendable {
    public let records: any StorageTable<MeditationRow>
    public let timer: any StorageTable<TimerRow>
    public let clientIds: any StorageTable<ClientIDRow>
    public let count: any StorageTable<SessionCountRow>

    /// Registers the tables. Inlinable, so that the composition root's call is specialised for its
    /// storage and each table's row operations are compiled for their row type.
    @inlinable
    public init(_ store: some Storage) {
        records = store.table("sessions.records", of: MeditationRow.self,
                              orderedBy: { row in SessionRules.listOrder(startTime: row.startTime) + "|" },
                              entity: Entity("sessions.session"))
        timer = store.table("sessions.timer", of: TimerRow.self, entity: Entity("sessions.timer", id: { _ in "timer" }))
        clientIds = store.table("sessions.clientIds", of: ClientIDRow.self)
        count = store.table("sessions.count", of: SessionCountRow.self)
    }
}
