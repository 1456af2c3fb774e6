import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

/// The `screentime` and `rewards` configuration sections.
public struct ScreenTimeConfig: Sendable, Equatable {
    public var toleranceMinutes: Int64 = 5
    public var pointsPerMinute: Int64 = 1
    public var xpPerMinute: Int64 = 10
    public init() {}

    /// Reads `screentime: {toleranceMinutes, pointsPerMinute}`.
    public mutating func readScreenTime(_ r: inout ObjectReader) throws(FieldError) {
        if let v = try r.optional("toleranceMinutes", in: 0...1440) { toleranceMinutes = v }
        if let v = try r.optional("pointsPerMinute", in: 0...1_000_000) { pointsPerMinute = v }
        try r.finish()
    }

    /// Reads `rewards: {xpPerMinute}`.
    public mutating func readRewards(_ r: inout ObjectReader) throws(FieldError) {
        if let v = try r.optional("xpPerMinute", in: 1...1_000_000) { xpPerMinute = v }
        try r.finish()
    }
}

/// Screen Time verification and earn-to-unlock rewards for one kernel. Confined to the serving thread.
public final class ScreenTimeService: @unchecked Sendable {
    /// Events kept per user.
    public static let eventsKept: Int64 = 1000
    static let connectionKey = "connection"
    static let balanceKey = "balance"
    static let eventCounterKey = "events"

    let config: ScreenTimeConfig
    let store: any Storage
    let tables: ScreenTimeTables

    /// A service over `tables`.
    public init(config: ScreenTimeConfig, store: any Storage, tables: ScreenTimeTables) {
        self.config = config
        self.store = store
        self.tables = tables
    }

    // MARK: Connection

    func connection(_ user: String) throws(RPCError) -> ConnectionRow {
        try tables.connection.row(user: user, key: Self.connectionKey) ?? ConnectionRow()
    }

    func updateConnection(_ user: String, enabled: Bool?, timezone: Zone?, selection: JSON?) throws(RPCError) -> JSON {
        var row = try connection(user)
        let before = row
        if let enabled { row.enabled = enabled }
        if let timezone { row.timezone = timezone.identifier }
        if let selection { row.selection = BinaryJSON(selection) }
        let stored = try tables.connection.row(user: user, key: Self.connectionKey)
        if row != before || stored == nil {
            var tx = Transaction()
            tx.put(tables.connection, user: user, key: Self.connectionKey, row)
            try store.apply(tx)
        }
        return row.json
    }

    /// Today in the connection's time zone.
    func today(_ connection: ConnectionRow, now: Timestamp) -> CalendarDate {
        (Zone.named(connection.timezone) ?? Zone.utc).localDate(at: now)
    }

    func checkNotFuture(_ date: CalendarDate, _ connection: ConnectionRow, now: Timestamp) throws(RPCError) {
        let today = today(connection, now: now)
        guard date <= today else {
            throw RPCError.invalidParams("params.date", reason: "future_date",
                                         "params.date is later than today (\(today)) in the connection's time zone")
        }
    }

    // MARK: Days

    func verdict(_ day: DayRow) -> Verdict {
        Rules.verdict(claimed: day.claimedMinutes, verified: day.verifiedMinutes,
                      toleranceMinutes: config.toleranceMinutes, pointsPerMinute: config.pointsPerMinute)
    }

    /// Stores `day` and recomputes its one penalty entry (added, changed, kept or removed).
    private func save(_ user: String, _ date: CalendarDate, _ day: DayRow, _ tx: inout Transaction, now: Timestamp) throws(RPCError) -> Verdict {
        let key = date.description
        tx.put(tables.days, user: user, key: key, day)
        let v = verdict(day)
        let existing = try tables.penalties.row(user: user, key: key)
        if v.penaltyPoints > 0, let delta = v.deltaMinutes {
            if existing?.points != v.penaltyPoints || existing?.deltaMinutes != delta {
                tx.put(tables.penalties, user: user, key: key,
                       PenaltyRow(points: v.penaltyPoints, deltaMinutes: delta, appliedAt: now.milliseconds))
            }
        } else if existing != nil {
            tx.delete(tables.penalties, user: user, key: key)
        }
        return v
    }

    func claim(_ user: String, date: CalendarDate, minutes: Int64, now: Timestamp) throws(RPCError) -> JSON {
        try checkNotFuture(date, connection(user), now: now)
        var day = try tables.days.row(user: user, key: date.description) ?? DayRow()
        day.claimedMinutes = minutes
        day.claimedAt = now.milliseconds
        var tx = Transaction()
        let v = try save(user, date, day, &tx, now: now)
        try store.apply(tx)
        return Self.verdictJSON(date, v)
    }

    func upload(_ user: String, date: CalendarDate, verifiedMinutes: Int64, raw: BinaryJSON, now: Timestamp) throws(RPCError) -> JSON {
        var conn = try connection(user)
        guard conn.enabled else {
            throw RPCError.forbidden("connection_disabled", "Uploads are refused while the Screen Time connection is disabled")
        }
        try checkNotFuture(date, conn, now: now)
        var day = try tables.days.row(user: user, key: date.description) ?? DayRow()
        day.verifiedMinutes = verifiedMinutes
        day.uploadedAt = now.milliseconds
        day.raw = raw
        var tx = Transaction()
        let v = try save(user, date, day, &tx, now: now)
        conn.lastSyncAt = now.milliseconds
        tx.put(tables.connection, user: user, key: Self.connectionKey, conn)
        try store.apply(tx)
        return Self.verdictJSON(date, v)
    }

    func day(_ user: String, date: CalendarDate) throws(RPCError) -> JSON {
        guard let day = try tables.days.row(user: user, key: date.description) else {
            throw RPCError.notFound("No Screen Time data for \(date)")
        }
        return record(date, day, includeRaw: true)
    }

    func history(_ user: String, from: CalendarDate, to: CalendarDate, includeRaw: Bool) throws(RPCError) -> JSON {
        let days = try tables.days.rows(user: user, from: from.description, to: to.description)
        return ["days": .array(days.map { record(CalendarDate($0.key)!, $0.row, includeRaw: includeRaw) })]
    }

    func penalties(_ user: String, from: CalendarDate?, to: CalendarDate?) throws(RPCError) -> JSON {
        let rows = try tables.penalties.rows(user: user, from: from?.description, to: to?.description)
        let entries: [JSON] = rows.map { Self.penaltyJSON($0.key, $0.row) }
        return ["totalPoints": .int(rows.reduce(0) { $0 + $1.row.points }), "entries": .array(entries)]
    }

    static func penaltyJSON(_ date: String, _ p: PenaltyRow) -> JSON {
        ["date": .string(date), "points": .int(p.points), "deltaMinutes": .int(p.deltaMinutes), "appliedAt": .timestamp(p.appliedAt)]
    }

    static func eventJSON(_ e: EventRow) -> JSON {
        ["type": .string(e.type), "activity": .string(e.activity), "event": .optional(e.event),
         "at": .timestamp(e.at), "receivedAt": .timestamp(e.receivedAt)]
    }

    static func windowJSON(_ u: UnlockRow) -> JSON {
        ["startsAt": .timestamp(u.startsAt), "endsAt": .timestamp(u.endsAt), "minutes": .int(u.minutes)]
    }

    /// How `sync.changes` shows this domain's synced entities: as their read methods do.
    public var renderers: [String: EntityRenderer] {
        let tables = self.tables
        return [
            "screentime.connection": { (user, _, _) throws(RPCError) in try self.connection(user).json },
            "screentime.day": { (user, id, _) throws(RPCError) in
                guard let date = CalendarDate(id), let day = try tables.days.row(user: user, key: id) else { return nil }
                return self.record(date, day, includeRaw: true)
            },
            "screentime.penalty": { (user, id, _) throws(RPCError) in
                try tables.penalties.row(user: user, key: id).map { Self.penaltyJSON(id, $0) }
            },
            "screentime.event": { (user, id, _) throws(RPCError) in
                guard let seq = Int64(id) else { return nil }
                return try tables.events.row(user: user, key: padded(seq)).map(Self.eventJSON)
            },
            "rewards.balance": { (user, _, _) throws(RPCError) in try self.balance(user).json },
            "rewards.unlock": { (user, id, _) throws(RPCError) in
                guard let at = Timestamp(rfc3339: id) else { return nil }
                return try tables.unlocks.row(user: user, key: padded(at.milliseconds)).map(Self.windowJSON)
            },
        ]
    }

    static func verdictJSON(_ date: CalendarDate, _ v: Verdict) -> JSON {
        ["date": .string(date.description), "status": .string(v.status.rawValue),
         "deltaMinutes": .optionalInt(v.deltaMinutes), "penaltyPoints": .int(v.penaltyPoints)]
    }

    func record(_ date: CalendarDate, _ day: DayRow, includeRaw: Bool) -> JSON {
        guard case .object(var o) = Self.verdictJSON(date, verdict(day)) else { return .null }
        o["claimedMinutes"] = .optionalInt(day.claimedMinutes)
        o["verifiedMinutes"] = .optionalInt(day.verifiedMinutes)
        o["claimedAt"] = .timestamp(day.claimedAt)
        o["uploadedAt"] = .timestamp(day.uploadedAt)
        if includeRaw { o["raw"] = day.raw.json }
        return .object(o)
    }

    // MARK: Events

    func logEvent(_ user: String, type: String, activity: String, event: String?, at: Timestamp, now: Timestamp) throws(RPCError) {
        let seq = (try tables.counters.row(user: user, key: Self.eventCounterKey)?.value ?? 0) + 1
        var tx = Transaction()
        tx.put(tables.counters, user: user, key: Self.eventCounterKey, CounterRow(value: seq))
        tx.put(tables.events, user: user, key: padded(seq),
               EventRow(type: type, activity: activity, event: event, at: at.milliseconds, receivedAt: now.milliseconds))
        if seq > Self.eventsKept { tx.delete(tables.events, user: user, key: padded(seq - Self.eventsKept)) }
        try store.apply(tx)
    }

    func events(_ user: String, limit: Int) throws(RPCError) -> JSON {
        let rows = try tables.events.rows(user: user, reverse: true, limit: limit)
        return ["events": .array(rows.map { Self.eventJSON($0.row) })]
    }

    // MARK: Rewards

    func balance(_ user: String) throws(RPCError) -> BalanceRow {
        try tables.balance.row(user: user, key: Self.balanceKey) ?? BalanceRow()
    }

    func earn(_ user: String, xp: Int64, reason: String, key: String, now: Timestamp) throws(RPCError) -> JSON {
        var b = try balance(user)
        if let earlier = try tables.earned.row(user: user, key: key) {
            guard earlier.xp == xp else {
                throw RPCError.conflict("idempotency_key_reused", "This key was already used with a different xp")
            }
            return b.json  // credited once already
        }
        let (sum, overflow) = b.xp.addingReportingOverflow(xp)
        guard !overflow, sum <= Self.maxXP else {
            throw RPCError.invalidParams("params.xp", reason: "out_of_range", "params.xp would take the balance past \(Self.maxXP)")
        }
        b.xp = sum
        var tx = Transaction()
        tx.put(tables.earned, user: user, key: key, EarnRow(xp: xp, reason: reason, at: now.milliseconds))
        tx.put(tables.balance, user: user, key: Self.balanceKey, b)
        try store.apply(tx)
        return b.json
    }

    /// Largest balance in XP (a bound that keeps every sum far from overflow).
    static let maxXP: Int64 = 1_000_000_000_000

    func redeem(_ user: String, xp: Int64) throws(RPCError) -> JSON {
        guard let minutes = Rules.minutes(forXP: xp, xpPerMinute: config.xpPerMinute) else {
            throw RPCError.invalidParams("params.xp", reason: "out_of_range",
                                         "params.xp must be a positive multiple of \(config.xpPerMinute)")
        }
        var b = try balance(user)
        guard b.xp >= xp else { throw RPCError.conflict("insufficient_balance", "Not enough XP") }
        b.xp -= xp
        b.minutes += minutes
        var tx = Transaction()
        tx.put(tables.balance, user: user, key: Self.balanceKey, b)
        try store.apply(tx)
        return b.json
    }

    func spend(_ user: String, minutes: Int64, now: Timestamp) throws(RPCError) -> JSON {
        var b = try balance(user)
        guard b.minutes >= minutes else { throw RPCError.conflict("insufficient_balance", "Not enough unlocked minutes") }
        let window = Rules.unlockWindow(minutes: minutes, nowMs: now.milliseconds, unlockedUntilMs: b.unlockedUntil)
        b.minutes -= minutes
        b.unlockedUntil = window.endsAt
        var tx = Transaction()
        tx.put(tables.balance, user: user, key: Self.balanceKey, b)
        tx.put(tables.unlocks, user: user, key: padded(window.startsAt),
               UnlockRow(startsAt: window.startsAt, endsAt: window.endsAt, minutes: minutes))
        try store.apply(tx)
        return ["startsAt": .timestamp(window.startsAt), "endsAt": .timestamp(window.endsAt), "balance": b.json]
    }
}
