import Chrono
import DomainSupport
import Storage

/// Meditation sessions and the server-side timer. Confined to the serving thread.
public final class SessionsService: @unchecked Sendable {
    static let timerKey = "active"
    let store: any Storage
    let tables: SessionTables
    private let cursors: CursorSeal
    /// Sessions kept per user (0: no limit).
    let sessionsPerUser: Int64
    /// Where session and timer ids are drawn from.
    let random: RandomSource
    static let countKey = "sessions"

    /// A service over `tables`; `cursorSecrets` (the first signs, all open) list cursors so a tampered one is refused.
    public init(store: any Storage, tables: SessionTables, cursorSecrets: [[UInt8]], sessionsPerUser: Int64 = UserLimits().sessionsPerUser,
                random: RandomSource = SystemRandom()) {
        self.random = random
        self.store = store
        self.tables = tables
        self.sessionsPerUser = sessionsPerUser
        cursors = CursorSeal(purpose: "sessions", secrets: cursorSecrets)
    }

    /// Storage reads and commits, their failures answered as this domain's.
    private func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(SessionsError) -> T {
        do { return try body() } catch { throw .storage(error) }
    }

    /// The session a client id already made, if any.
    private func existing(_ user: String, clientSessionId: String?) throws(SessionsError) -> Session? {
        guard let cid = clientSessionId, let link = try storage(try tables.clientIds.get(user: user, key: cid)) else { return nil }
        return try session(user, link.sessionId)
    }

    /// Session `id` of `user`, if it exists.
    func session(_ user: String, _ id: String) throws(SessionsError) -> Session? {
        try storage(try tables.records.get(user: user, key: id)).map { Session(id: id, row: $0) }
    }

    /// The running or paused timer, if any.
    func timer(_ user: String) throws(SessionsError) -> TimerRow? {
        try storage(try tables.timer.get(user: user, key: Self.timerKey))
    }

    func record(_ user: String, start: Timestamp, duration: Int64, end: Timestamp?, clientSessionId: String?,
                now: Timestamp) throws(SessionsError) -> Session {
        if let done = try existing(user, clientSessionId: clientSessionId) { return done }
        guard start.milliseconds <= now.milliseconds + SessionRules.futureAllowanceMs else { throw .startInTheFuture }
        let minimumEnd = start.milliseconds + duration * 1000
        if let end, end.milliseconds < minimumEnd { throw .endBeforeDuration }
        let row = MeditationRow(startTime: start.milliseconds, durationSeconds: duration, endTime: end?.milliseconds ?? minimumEnd,
                             createdAt: now.milliseconds, clientSessionId: clientSessionId)
        let id = random.uuid()
        var tx = Transaction()
        try count(user, adding: 1, &tx)
        tx.put(tables.records, user: user, key: id, row)
        if let cid = clientSessionId { tx.put(tables.clientIds, user: user, key: cid, ClientIDRow(sessionId: id)) }
        try storage(try store.commit(tx))
        return Session(id: id, row: row)
    }

    func start(_ user: String, clientSessionId: String?, now: Timestamp) throws(SessionsError) -> SessionTimer {
        if let active = try timer(user) {
            if let cid = clientSessionId, active.clientSessionId == cid { return SessionTimer(active, now: now) }
            throw .sessionActive
        }
        if try existing(user, clientSessionId: clientSessionId) != nil { throw .clientSessionIdUsed }
        var unused = Transaction()
        try count(user, adding: 1, &unused)  // only checks: the count moves when the timer stops
        let timer = TimerRow(sessionId: random.uuid(), clientSessionId: clientSessionId, startedAt: now.milliseconds,
                             accumulatedMs: 0, runningSince: now.milliseconds)
        try save(user, timer)
        return SessionTimer(timer, now: now)
    }

    private func activeTimer(_ user: String) throws(SessionsError) -> TimerRow {
        guard let t = try timer(user) else { throw .noActiveSession }
        return t
    }

    private func save(_ user: String, _ timer: TimerRow) throws(SessionsError) {
        var tx = Transaction()
        tx.put(tables.timer, user: user, key: Self.timerKey, timer)
        try storage(try store.commit(tx))
    }

    func pause(_ user: String, now: Timestamp) throws(SessionsError) -> SessionTimer {
        var t = try activeTimer(user)
        guard let since = t.runningSince else { return SessionTimer(t, now: now) }  // already paused
        t.accumulatedMs += max(0, now.milliseconds - since)
        t.runningSince = nil
        try save(user, t)
        return SessionTimer(t, now: now)
    }

    func resume(_ user: String, now: Timestamp) throws(SessionsError) -> SessionTimer {
        var t = try activeTimer(user)
        guard t.runningSince == nil else { return SessionTimer(t, now: now) }  // already running
        t.runningSince = now.milliseconds
        try save(user, t)
        return SessionTimer(t, now: now)
    }

    func stop(_ user: String, now: Timestamp) throws(SessionsError) -> Session {
        let t = try activeTimer(user)
        let elapsed = SessionRules.elapsedMs(accumulatedMs: t.accumulatedMs, runningSinceMs: t.runningSince, nowMs: now.milliseconds)
        let row = MeditationRow(startTime: t.startedAt, durationSeconds: SessionRules.recordedDuration(elapsedMs: elapsed),
                             endTime: max(now.milliseconds, t.startedAt + SessionRules.recordedDuration(elapsedMs: elapsed) * 1000),
                             createdAt: now.milliseconds, clientSessionId: t.clientSessionId)
        var tx = Transaction()
        // The limit was checked when the timer started: stopping it is never refused.
        try count(user, adding: 1, &tx, refusing: false)
        tx.delete(tables.timer, user: user, key: Self.timerKey)
        tx.put(tables.records, user: user, key: t.sessionId, row)
        if let cid = t.clientSessionId { tx.put(tables.clientIds, user: user, key: cid, ClientIDRow(sessionId: t.sessionId)) }
        try storage(try store.commit(tx))
        return Session(id: t.sessionId, row: row)
    }

    /// Puts the user's session count after adding `added` into `tx`; past `limits.sessionsPerUser`
    /// (when `refusing`) the write is refused and nothing is stored.
    private func count(_ user: String, adding added: Int64, _ tx: inout Transaction, refusing: Bool = true) throws(SessionsError) {
        let stored = try storage(try tables.count.get(user: user, key: Self.countKey))?.count
        guard let after = try Quota.after(stored: stored, adding: added, limit: refusing ? sessionsPerUser : 0, recount: { () throws(SessionsError) in
            Int64(try storage(try tables.records.scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)).count)
        }) else { throw .quota(sessionsPerUser) }
        tx.put(tables.count, user: user, key: Self.countKey, SessionCountRow(count: max(0, after)))
    }

    func active(_ user: String, now: Timestamp) throws(SessionsError) -> SessionTimer? {
        try timer(user).map { SessionTimer($0, now: now) }
    }

    func get(_ user: String, sessionId: String) throws(SessionsError) -> Session {
        guard let found = try session(user, sessionId) else { throw .notFound }
        return found
    }

    func delete(_ user: String, sessionId: String) throws(SessionsError) {
        let found = try get(user, sessionId: sessionId)
        var tx = Transaction()
        try count(user, adding: -1, &tx)
        tx.delete(tables.records, user: user, key: sessionId)
        if let cid = found.clientSessionId { tx.delete(tables.clientIds, user: user, key: cid) }
        try storage(try store.commit(tx))
    }

    // MARK: Listing

    /// The position after which a page continues: newest first by start time, then session id.
    struct Position: Equatable {
        let startTime: Int64
        let sessionId: String
    }

    /// A cursor sealed and bound to `user`, as the change feed's and workouts' are: another user's
    /// cursor does not open.
    func encodeCursor(_ p: Position, user: String) -> String {
        cursors.seal("\(p.startTime):\(p.sessionId)", user: user)
    }

    func decodeCursor(_ cursor: String, user: String) -> Position? {
        guard let text = cursors.open(cursor, user: user), let colon = text.firstIndex(of: ":"), let t = Int64(text[..<colon]) else { return nil }
        return Position(startTime: t, sessionId: String(text[text.index(after: colon)...]))
    }

    func list(_ user: String, from: Timestamp?, to: Timestamp?, limit: Int, after: Position?) throws(SessionsError) -> SessionPage {
        let scan = Self.listScan(from: from, to: to, limit: limit, after: after)
        let candidates = try storage(try tables.records.scanOrdered(user: user, from: scan.from, to: scan.to, after: scan.after,
                                                                    reverse: true, limit: scan.limit))
        let page = candidates.prefix(limit).map { Session(id: $0.key, row: $0.row) }
        let next = candidates.count > limit ? page.last.map { encodeCursor(Position(startTime: $0.startTime.milliseconds, sessionId: $0.id), user: user) } : nil
        return SessionPage(sessions: page, nextCursor: next)
    }

    /// Names what `list` reads, for the batch's read-ahead.
    func declareList(_ user: String, from: Timestamp?, to: Timestamp?, limit: Int, after: Position?) {
        let scan = Self.listScan(from: from, to: to, limit: limit, after: after)
        tables.records.prefetchScanOrdered(user: user, from: scan.from, to: scan.to, after: scan.after, reverse: true, limit: scan.limit)
    }

    /// A page's scan, newest first: a reverse scan of the start-time order, from `to` (exclusive: every
    /// session at that time sorts after its bare bound) down to `from`, one more than the page to know
    /// if more follow.
    private static func listScan(from: Timestamp?, to: Timestamp?, limit: Int, after: Position?) -> (from: String?, to: String?, after: String?, limit: Int) {
        (from.map { SessionRules.listOrder(startTime: $0.milliseconds) }, to.map { SessionRules.listOrder(startTime: $0.milliseconds) },
         after.map { SessionRules.listOrder(startTime: $0.startTime, sessionId: $0.sessionId) }, limit + 1)
    }

    // MARK: Stats

    /// The user's totals, and with `range` each of its local days' (so a dashboard reads a year of days
    /// in one answer, not every session). O(the user's sessions).
    func stats(_ user: String, zone: Zone, days range: (CalendarDate, CalendarDate)? = nil, now: Timestamp) throws(SessionsError) -> SessionStats {
        let rows = try storage(try tables.records.rows(of: user)).map(\.row)
        let today = zone.localDate(at: now)
        var days = Set<CalendarDate>()
        var perDay: [CalendarDate: SessionStats.Day] = [:]
        var stats = SessionStats()
        for s in rows {
            let day = zone.localDate(at: Timestamp(milliseconds: s.startTime))
            days.insert(day)
            stats.totalSeconds += s.durationSeconds
            let age = today.daysSinceEpoch - day.daysSinceEpoch
            if age >= 0 && age < 7 { stats.last7DaysSeconds += s.durationSeconds }
            if age >= 0 && age < 30 { stats.last30DaysSeconds += s.durationSeconds }
            if let (from, to) = range, day >= from, day <= to {
                perDay[day, default: SessionStats.Day(date: day)].add(seconds: s.durationSeconds)
            }
        }
        stats.totalSessions = rows.count
        (stats.currentStreakDays, stats.longestStreakDays) = SessionRules.streaks(days: days, today: today)
        if range != nil { stats.days = perDay.values.sorted { $0.date < $1.date } }
        return stats
    }
}

// MARK: What the service answers

/// Why the service refuses a request; the method layer says it on the wire.
enum SessionsError: Error, Equatable {
    /// `startTime` is more than 5 minutes ahead of the server's clock.
    case startInTheFuture
    /// `endTime` is earlier than `startTime + durationSeconds`.
    case endBeforeDuration
    /// A timer is already running or paused.
    case sessionActive
    /// The client id already names a recorded session.
    case clientSessionIdUsed
    /// No timer is running or paused.
    case noActiveSession
    /// No such session of this user.
    case notFound
    /// The user keeps `limits.sessionsPerUser` sessions already.
    case quota(Int64)
    /// Storage failed; nothing changed.
    case storage(StorageError)
}

/// A recorded meditation session.
public struct Session: Equatable, Sendable {
    let id: String
    let startTime: Timestamp
    let durationSeconds: Int64
    let endTime: Timestamp
    let createdAt: Timestamp
    let clientSessionId: String?

    init(id: String, row: MeditationRow) {
        self.id = id
        startTime = Timestamp(milliseconds: row.startTime)
        durationSeconds = row.durationSeconds
        endTime = Timestamp(milliseconds: row.endTime)
        createdAt = Timestamp(milliseconds: row.createdAt)
        clientSessionId = row.clientSessionId
    }
}

/// The server-side timer as of an instant.
public struct SessionTimer: Equatable, Sendable {
    let sessionId: String
    let running: Bool
    let startedAt: Timestamp
    let elapsedSeconds: Int64

    init(_ t: TimerRow, now: Timestamp) {
        sessionId = t.sessionId
        running = t.runningSince != nil
        startedAt = Timestamp(milliseconds: t.startedAt)
        elapsedSeconds = SessionRules.elapsedMs(accumulatedMs: t.accumulatedMs, runningSinceMs: t.runningSince, nowMs: now.milliseconds) / 1000
    }
}

/// A page of sessions, newest first, and where the next one starts.
public struct SessionPage: Sendable {
    let sessions: [Session]
    let nextCursor: String?
}

/// Totals and streaks over every session of a user.
public struct SessionStats: Equatable, Sendable {
    var totalSessions = 0
    var totalSeconds: Int64 = 0
    var currentStreakDays = 0
    var longestStreakDays = 0
    var last7DaysSeconds: Int64 = 0
    var last30DaysSeconds: Int64 = 0
    /// The days asked for that have sessions, oldest first; nil when none were asked for.
    var days: [Day]?

    /// One local day's totals.
    public struct Day: Equatable, Sendable {
        let date: CalendarDate
        var sessions = 0
        var seconds: Int64 = 0

        mutating func add(seconds more: Int64) {
            sessions += 1
            seconds += more
        }
    }
}
