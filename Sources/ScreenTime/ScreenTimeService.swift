import Chrono
import DomainSupport
import JSON
import Storage

/// The `screentime` configuration section (its keys are rows of the kernel's settings table).
public struct ScreenTimeConfig: Sendable, Equatable {
    public var toleranceMinutes: Int64 = 5
    public var pointsPerMinute: Int64 = 1
    public init() {}
}

/// Screen Time verification for one kernel: claims, uploads, verdicts, penalties and monitor events. Confined to the serving thread.
public final class ScreenTimeService: @unchecked Sendable {
    /// Events kept per user.
    public static let eventsKept: Int64 = 1000
    static let connectionKey = "connection"
    static let eventCounterKey = "events"

    let config: ScreenTimeConfig
    let store: any Storage
    let tables: ScreenTimeTables
    /// Most bytes of `raw` one user may keep; 0: no limit.
    let rawBytesPerUser: Int64
    /// Most bytes of one answer.
    let maxAnswerBytes: Int

    /// A service over `tables`.
    public init(config: ScreenTimeConfig, store: any Storage, tables: ScreenTimeTables, rawBytesPerUser: Int64 = UserLimits().rawBytesPerUser,
                maxAnswerBytes: Int = 16 << 20) {
        self.config = config
        self.rawBytesPerUser = rawBytesPerUser
        self.maxAnswerBytes = maxAnswerBytes
        self.store = store
        self.tables = tables
    }

    /// Storage reads and commits, their failures answered as this domain's.
    private func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(ScreenTimeError) -> T {
        do { return try body() } catch { throw .storage(error) }
    }

    private func commit(_ tx: Transaction) throws(ScreenTimeError) {
        try storage(try store.commit(tx))
    }

    // MARK: Connection

    func connection(_ user: String) throws(ScreenTimeError) -> ConnectionRow {
        try storage(try tables.connection.get(user: user, key: Self.connectionKey)) ?? ConnectionRow()
    }

    /// Names what `updateConnection` reads, for the batch's read-ahead.
    public func declareConnectionRead(_ user: String) {
        try? store.prefetch([(tables.connection, user, Self.connectionKey)])
    }

    /// Changes the fields given (`selection` `.null` clears it).
    func updateConnection(_ user: String, enabled: Bool?, timezone: Zone?, selection: JSON?) throws(ScreenTimeError) -> ConnectionRow {
        let stored = try storage(try tables.connection.get(user: user, key: Self.connectionKey))
        var row = stored ?? ConnectionRow()
        // A new connection keeps no raw: only uploads keep raw, and they need a connection turned on.
        // Counted from here, no upload scans the user's days to learn it (`keptRawBytes`).
        if stored == nil { row.rawBytes = 0 }
        if let enabled { row.enabled = enabled }
        if let timezone { row.timezone = timezone.identifier }
        if let selection { row.selection = BinaryJSON(selection) }
        if row != stored {
            var tx = Transaction()
            tx.put(tables.connection, user: user, key: Self.connectionKey, row)
            try commit(tx)
        }
        return row
    }

    /// Today in the connection's time zone.
    func today(_ connection: ConnectionRow, now: Timestamp) -> CalendarDate {
        (Zone.named(connection.timezone) ?? Zone.utc).localDate(at: now)
    }

    func checkNotFuture(_ date: CalendarDate, _ connection: ConnectionRow, now: Timestamp) throws(ScreenTimeError) {
        let today = today(connection, now: now)
        guard date <= today else { throw .futureDate(today: today) }
    }

    // MARK: Days

    func verdict(_ day: DayRow) -> Verdict {
        Rules.verdict(claimed: day.claimedMinutes, verified: day.verifiedMinutes,
                      toleranceMinutes: config.toleranceMinutes, pointsPerMinute: config.pointsPerMinute)
    }

    /// Stores `day` and recomputes its one penalty entry (added, changed, kept or removed).
    private func save(_ user: String, _ date: CalendarDate, _ day: DayRow, _ tx: inout Transaction, now: Timestamp) throws(ScreenTimeError) -> Verdict {
        let key = date.description
        tx.put(tables.days, user: user, key: key, day)
        let v = verdict(day)
        let existing = try storage(try tables.penalties.get(user: user, key: key))
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

    /// Names what a claim or an upload of `date` reads, for the batch's read-ahead (`RPCMethod.declareReads`).
    public func declareDayReads(_ user: String, _ date: CalendarDate) {
        try? prefetchDay(user, date)
    }

    /// What a claim or an upload reads of `date`: the connection, the day and its penalty, together.
    private func prefetchDay(_ user: String, _ date: CalendarDate) throws(ScreenTimeError) {
        let key = date.description
        try storage(try store.prefetch([(tables.connection, user, Self.connectionKey), (tables.days, user, key),
                                        (tables.penalties, user, key)]))
    }

    private func storedDay(_ user: String, _ date: CalendarDate) throws(ScreenTimeError) -> DayRow? {
        try storage(try tables.days.get(user: user, key: date.description))
    }

    func claim(_ user: String, date: CalendarDate, minutes: Int64, now: Timestamp) throws(ScreenTimeError) -> DayVerdict {
        try prefetchDay(user, date)
        try checkNotFuture(date, connection(user), now: now)
        var day = try storedDay(user, date) ?? DayRow()
        day.claimedMinutes = minutes
        day.claimedAt = now.milliseconds
        var tx = Transaction()
        let v = try save(user, date, day, &tx, now: now)
        try commit(tx)
        return DayVerdict(date: date, verdict: v)
    }

    func upload(_ user: String, date: CalendarDate, verifiedMinutes: Int64, raw: BinaryJSON, now: Timestamp) throws(ScreenTimeError) -> DayVerdict {
        try prefetchDay(user, date)
        var conn = try connection(user)
        guard conn.enabled else { throw .connectionDisabled }
        try checkNotFuture(date, conn, now: now)
        var day = try storedDay(user, date) ?? DayRow()
        let before: Int64
        if let kept = conn.rawBytes { before = kept } else { before = try keptRawBytes(user) }
        let grows = Self.keptBytes(raw) - Self.keptBytes(day.raw)
        if rawBytesPerUser > 0 && grows > 0 && before + grows > rawBytesPerUser { throw .rawQuota(rawBytesPerUser) }
        day.verifiedMinutes = verifiedMinutes
        day.uploadedAt = now.milliseconds
        day.raw = raw
        var tx = Transaction()
        let v = try save(user, date, day, &tx, now: now)
        conn.rawBytes = before + grows
        conn.lastSyncAt = now.milliseconds
        tx.put(tables.connection, user: user, key: Self.connectionKey, conn)
        try commit(tx)
        return DayVerdict(date: date, verdict: v)
    }

    /// Bytes of `raw` the user's days keep, counted: once per user whose connection predates the count (O(days)).
    private func keptRawBytes(_ user: String) throws(ScreenTimeError) -> Int64 {
        try storage(try tables.days.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max))
            .reduce(0) { $0 + Self.keptBytes($1.row.raw) }
    }

    /// What a day's `raw` counts toward the quota: its stored bytes, none when there is none.
    static func keptBytes(_ raw: BinaryJSON) -> Int64 { raw == .null ? 0 : Int64(raw.bytes.count) }

    /// Day `date`, if it has data.
    func record(_ user: String, date: CalendarDate) throws(ScreenTimeError) -> DayRecord? {
        try storedDay(user, date).map { DayRecord(date: date, day: $0, verdict: verdict($0)) }
    }

    func day(_ user: String, date: CalendarDate) throws(ScreenTimeError) -> DayRecord {
        guard let record = try record(user, date: date) else { throw .noData(date) }
        return record
    }

    func history(_ user: String, from: CalendarDate, to: CalendarDate) throws(ScreenTimeError) -> [DayRecord] {
        let days = try storage(try tables.days.scan(user: user, from: from.description, to: to.description, after: nil, reverse: false, limit: .max))
        return try days.map { (day) throws(ScreenTimeError) in
            guard let date = CalendarDate(day.key) else { throw .storage(.corrupt("screentime.days key \(JSON.string(day.key).serialized) is not a date")) }
            return DayRecord(date: date, day: day.row, verdict: verdict(day.row))
        }
    }

    func penalties(_ user: String, from: CalendarDate?, to: CalendarDate?) throws(ScreenTimeError) -> [Penalty] {
        try storage(try tables.penalties.scan(user: user, from: from?.description, to: to?.description, after: nil, reverse: false, limit: .max)).map { Penalty(date: $0.key, row: $0.row) }
    }

    /// The penalty of day `date`, if any.
    func penalty(_ user: String, date: String) throws(ScreenTimeError) -> Penalty? {
        try storage(try tables.penalties.get(user: user, key: date)).map { Penalty(date: date, row: $0) }
    }

    // MARK: Events

    func logEvent(_ user: String, type: String, activity: String, event: String?, at: Timestamp, now: Timestamp) throws(ScreenTimeError) {
        let seq = (try storage(try tables.counters.get(user: user, key: Self.eventCounterKey))?.value ?? 0) + 1
        var tx = Transaction()
        tx.put(tables.counters, user: user, key: Self.eventCounterKey, CounterRow(value: seq))
        tx.put(tables.events, user: user, key: padded(seq),
               EventRow(type: type, activity: activity, event: event, at: at.milliseconds, receivedAt: now.milliseconds))
        if seq > Self.eventsKept { tx.delete(tables.events, user: user, key: padded(seq - Self.eventsKept)) }
        try commit(tx)
    }

    /// The newest events first.
    func events(_ user: String, limit: Int) throws(ScreenTimeError) -> [EventRow] {
        try storage(try tables.events.scan(user: user, from: nil, to: nil, after: nil, reverse: true, limit: limit)).map(\.row)
    }

    /// Event number `seq`, if still kept.
    func event(_ user: String, seq: Int64) throws(ScreenTimeError) -> EventRow? {
        try storage(try tables.events.get(user: user, key: padded(seq)))
    }
}

// MARK: What the service answers

/// Why the service refuses a request; the method layer says it on the wire.
enum ScreenTimeError: Error, Equatable {
    /// The date is after today in the connection's time zone.
    case futureDate(today: CalendarDate)
    /// Uploads are refused while the connection is disabled.
    case connectionDisabled
    /// No claim or upload for that day.
    case noData(CalendarDate)
    /// The upload's `raw` would take the user past this many bytes kept.
    case rawQuota(Int64)
    /// Storage failed; nothing changed.
    case storage(StorageError)
}

/// A day's verdict.
public struct DayVerdict: Sendable {
    let date: CalendarDate
    let verdict: Verdict
}

/// A day's claim, upload and verdict.
public struct DayRecord: Sendable {
    let date: CalendarDate
    let day: DayRow
    let verdict: Verdict
}

/// One day's penalty.
public struct Penalty: Sendable {
    let date: String
    let row: PenaltyRow
}

