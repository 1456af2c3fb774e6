import Chrono
import Crypto
import DomainSupport
import JSON
import JSONRPC
import Storage

/// Meditation sessions and the server-side timer. Confined to the serving thread.
public final class SessionsService: @unchecked Sendable {
    static let timerKey = "active"
    let store: any Storage
    let tables: SessionTables
    private let cursorKey: SymmetricKey

    /// A service over `tables`; `cursorSecret` signs list cursors so a tampered one is refused.
    public init(store: any Storage, tables: SessionTables, cursorSecret: [UInt8]) {
        self.store = store
        self.tables = tables
        self.cursorKey = SymmetricKey(data: SHA256.hash(data: Array("healthkernel sessions cursor".utf8) + cursorSecret))
    }

    static func sessionJSON(_ id: String, _ s: MeditationRow) -> JSON {
        ["sessionId": .string(id), "startTime": .timestamp(s.startTime), "durationSeconds": .int(s.durationSeconds),
         "endTime": .timestamp(s.endTime), "createdAt": .timestamp(s.createdAt), "clientSessionId": .optional(s.clientSessionId)]
    }

    static func timerJSON(_ t: TimerRow, now: Timestamp) -> JSON {
        let elapsed = SessionRules.elapsedMs(accumulatedMs: t.accumulatedMs, runningSinceMs: t.runningSince, nowMs: now.milliseconds)
        return ["sessionId": .string(t.sessionId), "state": .string(t.runningSince == nil ? "paused" : "running"),
                "startedAt": .timestamp(t.startedAt), "elapsedSeconds": .int(elapsed / 1000)]
    }

    /// The session a client id already made, if any.
    private func existing(_ user: String, clientSessionId: String?) throws(RPCError) -> (String, MeditationRow)? {
        guard let cid = clientSessionId, let link = try tables.clientIds.row(user: user, key: cid),
              let row = try tables.records.row(user: user, key: link.sessionId) else { return nil }
        return (link.sessionId, row)
    }

    func record(_ user: String, start: Timestamp, duration: Int64, end: Timestamp?, clientSessionId: String?,
                now: Timestamp) throws(RPCError) -> JSON {
        if let (id, row) = try existing(user, clientSessionId: clientSessionId) { return Self.sessionJSON(id, row) }
        guard start.milliseconds <= now.milliseconds + SessionRules.futureAllowanceMs else {
            throw RPCError.invalidParams("params.startTime", reason: "future_date",
                                         "params.startTime is more than 5 minutes in the future")
        }
        let minimumEnd = start.milliseconds + duration * 1000
        if let end, end.milliseconds < minimumEnd {
            throw RPCError.invalidParams("params.endTime", reason: "out_of_range",
                                         "params.endTime is earlier than startTime + durationSeconds")
        }
        let row = MeditationRow(startTime: start.milliseconds, durationSeconds: duration, endTime: end?.milliseconds ?? minimumEnd,
                             createdAt: now.milliseconds, clientSessionId: clientSessionId)
        let id = Identifiers.uuid()
        var tx = Transaction()
        tx.put(tables.records, user: user, key: id, row)
        if let cid = clientSessionId { tx.put(tables.clientIds, user: user, key: cid, ClientIDRow(sessionId: id)) }
        try store.apply(tx)
        return Self.sessionJSON(id, row)
    }

    func start(_ user: String, clientSessionId: String?, now: Timestamp) throws(RPCError) -> JSON {
        if let active = try tables.timer.row(user: user, key: Self.timerKey) {
            if let cid = clientSessionId, active.clientSessionId == cid { return Self.timerJSON(active, now: now) }
            throw RPCError.conflict("session_active", "A session timer is already running or paused")
        }
        if try existing(user, clientSessionId: clientSessionId) != nil {
            throw RPCError.conflict("idempotency_key_reused", "This clientSessionId already belongs to a recorded session")
        }
        let timer = TimerRow(sessionId: Identifiers.uuid(), clientSessionId: clientSessionId, startedAt: now.milliseconds,
                             accumulatedMs: 0, runningSince: now.milliseconds)
        var tx = Transaction()
        tx.put(tables.timer, user: user, key: Self.timerKey, timer)
        try store.apply(tx)
        return Self.timerJSON(timer, now: now)
    }

    private func activeTimer(_ user: String) throws(RPCError) -> TimerRow {
        guard let t = try tables.timer.row(user: user, key: Self.timerKey) else {
            throw RPCError.conflict("no_active_session", "No session timer is running or paused")
        }
        return t
    }

    func pause(_ user: String, now: Timestamp) throws(RPCError) -> JSON {
        var t = try activeTimer(user)
        guard let since = t.runningSince else { return Self.timerJSON(t, now: now) }  // already paused
        t.accumulatedMs += max(0, now.milliseconds - since)
        t.runningSince = nil
        var tx = Transaction()
        tx.put(tables.timer, user: user, key: Self.timerKey, t)
        try store.apply(tx)
        return Self.timerJSON(t, now: now)
    }

    func resume(_ user: String, now: Timestamp) throws(RPCError) -> JSON {
        var t = try activeTimer(user)
        guard t.runningSince == nil else { return Self.timerJSON(t, now: now) }  // already running
        t.runningSince = now.milliseconds
        var tx = Transaction()
        tx.put(tables.timer, user: user, key: Self.timerKey, t)
        try store.apply(tx)
        return Self.timerJSON(t, now: now)
    }

    func stop(_ user: String, now: Timestamp) throws(RPCError) -> JSON {
        let t = try activeTimer(user)
        let elapsed = SessionRules.elapsedMs(accumulatedMs: t.accumulatedMs, runningSinceMs: t.runningSince, nowMs: now.milliseconds)
        let row = MeditationRow(startTime: t.startedAt, durationSeconds: SessionRules.recordedDuration(elapsedMs: elapsed),
                             endTime: max(now.milliseconds, t.startedAt + SessionRules.recordedDuration(elapsedMs: elapsed) * 1000),
                             createdAt: now.milliseconds, clientSessionId: t.clientSessionId)
        var tx = Transaction()
        tx.delete(tables.timer, user: user, key: Self.timerKey)
        tx.put(tables.records, user: user, key: t.sessionId, row)
        if let cid = t.clientSessionId { tx.put(tables.clientIds, user: user, key: cid, ClientIDRow(sessionId: t.sessionId)) }
        try store.apply(tx)
        return Self.sessionJSON(t.sessionId, row)
    }

    func active(_ user: String, now: Timestamp) throws(RPCError) -> JSON {
        try tables.timer.row(user: user, key: Self.timerKey).map { Self.timerJSON($0, now: now) } ?? .null
    }

    func get(_ user: String, sessionId: String) throws(RPCError) -> JSON {
        guard let row = try tables.records.row(user: user, key: sessionId) else { throw RPCError.notFound("No such session") }
        return Self.sessionJSON(sessionId, row)
    }

    func delete(_ user: String, sessionId: String) throws(RPCError) {
        guard let row = try tables.records.row(user: user, key: sessionId) else { throw RPCError.notFound("No such session") }
        var tx = Transaction()
        tx.delete(tables.records, user: user, key: sessionId)
        if let cid = row.clientSessionId { tx.delete(tables.clientIds, user: user, key: cid) }
        try store.apply(tx)
    }

    /// How `sync.changes` shows this domain's synced entities: as their read methods do.
    public var renderers: [String: EntityRenderer] {
        let tables = self.tables
        return [
            "sessions.session": { (user, id, _) throws(RPCError) in
                try tables.records.row(user: user, key: id).map { Self.sessionJSON(id, $0) }
            },
            "sessions.timer": { (user, _, now) throws(RPCError) in
                try tables.timer.row(user: user, key: Self.timerKey).map { Self.timerJSON($0, now: now) }
            },
        ]
    }

    // MARK: Listing

    /// The position after which a page continues: newest first by start time, then session id.
    struct Position: Equatable {
        let startTime: Int64
        let sessionId: String
    }

    func encodeCursor(_ p: Position) -> String {
        let payload = Array("\(p.startTime):\(p.sessionId)".utf8)
        let tag = HMAC<SHA256>.authenticationCode(for: payload, using: cursorKey).prefix(16)
        return Base64URL.encode(payload + [0x7C] + tag)
    }

    func decodeCursor(_ text: String) -> Position? {
        guard text.utf8.count <= 512, let bytes = Base64URL.decode(Array(text.utf8)), bytes.count > 17,
              bytes[bytes.count - 17] == 0x7C else { return nil }
        let payload = Array(bytes[..<(bytes.count - 17)])
        guard HMAC<SHA256>.authenticationCode(for: payload, using: cursorKey).prefix(16).elementsEqual(bytes.suffix(16)) else { return nil }
        let text = String(decoding: payload, as: UTF8.self)
        guard let colon = text.firstIndex(of: ":"), let t = Int64(text[..<colon]) else { return nil }
        return Position(startTime: t, sessionId: String(text[text.index(after: colon)...]))
    }

    func list(_ user: String, from: Timestamp?, to: Timestamp?, limit: Int, after: Position?) throws(RPCError) -> JSON {
        // Newest first: a reverse scan of the start-time order, from `to` (exclusive: every session at that
        // time sorts after its bare bound) down to `from`, one more than the page to know if more follow.
        let candidates = try tables.records.rowsOrdered(user: user, from: from.map { SessionRules.listOrder(startTime: $0.milliseconds) },
            to: to.map { SessionRules.listOrder(startTime: $0.milliseconds) },
            after: after.map { SessionRules.listOrder(startTime: $0.startTime, sessionId: $0.sessionId) },
            reverse: true, limit: limit + 1)
        let page = candidates.prefix(limit)
        let next = candidates.count > limit ? page.last.map { encodeCursor(Position(startTime: $0.row.startTime, sessionId: $0.key)) } : nil
        return ["sessions": .array(page.map { Self.sessionJSON($0.key, $0.row) }), "nextCursor": .optional(next)]
    }

    // MARK: Stats

    func stats(_ user: String, zone: Zone, now: Timestamp) throws(RPCError) -> JSON {
        let rows = try tables.records.rows(user: user).map(\.row)
        let today = zone.localDate(at: now)
        var days = Set<CalendarDate>()
        var total: Int64 = 0, last7: Int64 = 0, last30: Int64 = 0
        for s in rows {
            let day = zone.localDate(at: Timestamp(milliseconds: s.startTime))
            days.insert(day)
            total += s.durationSeconds
            let age = today.daysSinceEpoch - day.daysSinceEpoch
            if age >= 0 && age < 7 { last7 += s.durationSeconds }
            if age >= 0 && age < 30 { last30 += s.durationSeconds }
        }
        let (current, longest) = SessionRules.streaks(days: days, today: today)
        return ["totalSessions": .int(Int64(rows.count)), "totalSeconds": .int(total), "currentStreakDays": .int(Int64(current)),
                "longestStreakDays": .int(Int64(longest)), "last7DaysSeconds": .int(last7), "last30DaysSeconds": .int(last30)]
    }
}
