/// The SQL the kernel sends (`Postgres`: `PostgresStore`, `CommitPlan`, `PostgresTable`, `Schema`,
/// `ChangeListener`, `DetachedCommits`, `Moving`), run against the model's tables. Statements are
/// recognised by their text with whitespace collapsed; anything else fails with 42601.
struct ModelSQL {
    let pid: Int32

    init(pid: Int32) { self.pid = pid }

    // MARK: Session and transaction

    private func session(_ s: inout ModelServer.State) -> ModelServer.Session { s.sessions[pid]! }

    private func tx(_ s: ModelServer.State) -> ModelServer.Transaction { s.sessions[pid]!.tx! }

    /// The schema this statement works in: the session's search path (a transaction stays in the one it began in).
    private func schema(_ s: ModelServer.State) -> String { s.sessions[pid]!.tx!.schema }

    private func view(_ s: ModelServer.State) -> View {
        let t = tx(s)
        return View(data: s.schemas[t.schema] ?? SchemaData(), writes: t.writes)
    }

    /// Takes row lock `lock` for the transaction, or throws `Blocked` when another session holds it.
    private func lock(_ s: inout ModelServer.State, _ lock: RowLock) throws {
        let schema = schema(s)
        if let holder = s.rowLocks[schema]?[lock], holder != pid { throw Blocked(holder: holder) }
        s.rowLocks[schema, default: [:]][lock] = pid
        s.sessions[pid]!.tx!.writes.locks.insert(lock)
    }

    private func write(_ s: inout ModelServer.State, _ body: (inout Writes) -> Void) {
        body(&s.sessions[pid]!.tx!.writes)
    }

    private func setRow(_ s: inout ModelServer.State, _ pair: Pair, _ key: String, _ row: Row?) throws {
        try lock(&s, .row(pair, key))
        write(&s) { $0.rows[pair, default: [:]][key] = .some(row) }
    }

    private func setTombstone(_ s: inout ModelServer.State, _ pair: Pair, _ key: String, _ t: Tombstone?) throws {
        try lock(&s, .tombstone(pair, key))
        write(&s) { $0.tombstones[pair, default: [:]][key] = .some(t) }
    }

    private func setUser(_ s: inout ModelServer.State, _ usr: String, _ row: UserRow?) throws {
        try lock(&s, .user(usr))
        write(&s) { $0.users[usr] = .some(row) }
    }

    private func setUnique(_ s: inout ModelServer.State, _ key: UniqueKeyID, _ usr: String?) throws {
        try lock(&s, .unique(key))
        write(&s) { $0.unique[key] = .some(usr) }
    }

    /// Takes advisory lock `name` for the transaction (or, `session`, until unlocked); with `try`,
    /// returns false instead of waiting.
    private func advisory(_ s: inout ModelServer.State, _ name: String, session: Bool = false, try attempt: Bool = false) throws -> Bool {
        if let held = s.advisory[name], held.pid != pid {
            if attempt { return false }
            throw Blocked(holder: held.pid)
        }
        s.advisory[name] = (pid, (s.advisory[name]?.count ?? 0) + 1)
        if session {
            s.sessions[pid]!.sessionLocks[name, default: 0] += 1
        } else {
            s.sessions[pid]!.tx!.writes.advisory.insert(name)
        }
        return true
    }

    private static let ok: [[String?]] = []

    /// Runs `sql` with `params` ($1 is `params[0]`) for session `pid`; its rows as text.
    mutating func execute(_ text: String, _ params: [String?], _ s: inout ModelServer.State) throws -> [[String?]] {
        let sql = Self.collapse(text)
        func p(_ n: Int) -> String { params[n - 1] ?? "" }
        func int(_ n: Int) -> Int64 { Int64(p(n)) ?? 0 }

        // Transaction control.
        switch sql {
        // A read-only batch's snapshot (`PostgresStore.readAhead`) runs at read committed here: every
        // execution a snapshot allows (no commit between its statements) is one read committed allows,
        // so the simulation checks the kernel against more interleavings than the server has, not fewer.
        case "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY":
            s.sessions[pid]!.tx!.explicit = true
            return Self.ok
        case "COMMIT", "ROLLBACK":
            ModelServer.end(&s, pid, commit: sql == "COMMIT")
            return Self.ok
        case "SAVEPOINT request", "SAVEPOINT bulk":
            let name = String(sql.dropFirst("SAVEPOINT ".count))
            s.sessions[pid]!.tx!.savepoints.append((name, tx(s).writes))
            return Self.ok
        case "RELEASE SAVEPOINT request", "RELEASE SAVEPOINT bulk":
            let name = String(sql.dropFirst("RELEASE SAVEPOINT ".count))
            guard let i = tx(s).savepoints.lastIndex(where: { $0.name == name }) else { throw SQLError("3B001", "savepoint \"\(name)\" does not exist") }
            s.sessions[pid]!.tx!.savepoints.removeSubrange(i...)
            return Self.ok
        case "ROLLBACK TO SAVEPOINT request", "ROLLBACK TO SAVEPOINT bulk":
            let name = String(sql.dropFirst("ROLLBACK TO SAVEPOINT ".count))
            guard let i = tx(s).savepoints.lastIndex(where: { $0.name == name }) else { throw SQLError("3B001", "savepoint \"\(name)\" does not exist") }
            let saved = tx(s).savepoints[i].writes
            var restored = tx(s)
            restored.savepoints.removeSubrange((i + 1)...)
            restored.writes = saved
            restored.failed = false
            ModelSession.undo(&s, pid, to: restored)
            s.generation += 1
            return Self.ok
        default:
            break
        }
        if tx(s).failed { throw SQLError("25P02", "current transaction is aborted, commands ignored until end of transaction block") }

        // Session settings and server functions.
        if sql == "SET application_name TO 'healthkernel'" || sql.hasPrefix("SET LOCAL enable_sort = ") { return Self.ok }
        if let value = Self.after(sql, "SET idle_in_transaction_session_timeout TO '"), value.hasSuffix("s'"), let seconds = UInt64(value.dropLast(2)) {
            s.sessions[pid]!.idleTimeoutMicros = seconds * 1_000_000
            return Self.ok
        }
        if sql.hasPrefix("SET search_path TO ") || sql.hasPrefix("SET LOCAL search_path TO ") {
            let name = Self.unquote(String(sql.split(separator: " ").last!))
            s.sessions[pid]!.schema = name
            if tx(s).writes.isEmpty && tx(s).writes.locks.isEmpty { s.sessions[pid]!.tx!.schema = name }
            return Self.ok
        }
        if sql == "SELECT pg_backend_pid()" { return [[String(pid)]] }
        if sql == "SELECT pg_current_xact_id()::text, pg_postmaster_start_time()::text" {
            if tx(s).xid == nil {
                s.nextXID += 1
                s.sessions[pid]!.tx!.xid = s.nextXID
            }
            return [[String(tx(s).xid!), String(s.incarnation)]]
        }
        if sql == "SELECT pg_xact_status($1::xid8), pg_postmaster_start_time()::text" {
            guard let xid = Int64(p(1)) else { throw SQLError("22P02", "invalid xid8") }
            if xid > s.nextXID { throw SQLError("22023", "transaction ID \(xid) is in the future") }
            let live = s.sessions.values.contains { $0.tx?.xid == xid }
            let status = s.finished[xid].map { $0 ? "committed" : "aborted" } ?? (live ? "in progress" : "aborted")
            return [[status, String(s.incarnation)]]
        }
        if sql == "SELECT pg_terminate_backend($1::int)" {
            guard let other = Int32(p(1)) else { throw SQLError("22P02", "invalid pid") }
            let known = s.sessions[other] != nil
            if known { ModelServer.terminate(&s, other) }
            return [[known ? "t" : "f"]]
        }
        if sql == "SELECT pg_advisory_xact_lock(7230450331)" {
            _ = try advisory(&s, "7230450331")
            return [[""]]
        }
        if let rest = Self.after(sql, "SELECT pg_advisory_xact_lock(hashtextextended($1, ") {
            _ = try advisory(&s, rest + "/" + p(1))
            return [[""]]
        }
        if let rest = Self.after(sql, "SELECT lock_or_busy(hashtextextended($1, ") {
            guard try advisory(&s, rest + "/" + p(1), try: true) else { throw SQLError("HK002", "the user is busy on another kernel") }
            return [[""]]
        }

        // Schema set-up (`Schema.migrate`).
        if sql.hasPrefix("CREATE SCHEMA IF NOT EXISTS ") {
            let name = Self.unquote(String(sql.dropFirst("CREATE SCHEMA IF NOT EXISTS ".count)))
            if s.schemas[name] == nil { s.schemas[name] = SchemaData() }
            return Self.ok
        }
        if sql.hasPrefix("CREATE TABLE IF NOT EXISTS ") || sql.hasPrefix("ALTER TABLE ") && sql.hasSuffix(" ENABLE ROW LEVEL SECURITY") {
            return Self.ok
        }
        if sql.hasPrefix("SELECT max(version) FROM ") {
            let name = Self.unquote(String(sql.dropFirst("SELECT max(version) FROM ".count).dropLast(".schema_version".count)))
            let data = s.schemas[name] ?? SchemaData()
            let own = tx(s).schema == name ? tx(s).writes.version : nil
            return [[(own.map { max($0, data.version ?? 0) } ?? data.version).map(String.init)]]
        }
        if sql.hasPrefix("CREATE TABLE rows ") {
            try lock(&s, .version)
            write(&s) { $0.created = true }
            return Self.ok
        }
        if sql.hasPrefix("CREATE ") || sql.hasPrefix("UPDATE rows SET ord = lpad(") { return Self.ok }
        if let v = Self.after(sql, "INSERT INTO schema_version VALUES ("), let version = Int(v) {
            try lock(&s, .version)
            write(&s) { $0.version = version }
            return Self.ok
        }
        guard view(s).created else { throw SQLError("42P01", "relation does not exist (the schema was not migrated)") }

        return try data(sql, params, &s)
    }

    /// Statements over the kernel's tables.
    private mutating func data(_ sql: String, _ params: [String?], _ s: inout ModelServer.State) throws -> [[String?]] {
        func p(_ n: Int) -> String { params[n - 1] ?? "" }
        func int(_ n: Int) -> Int64 { Int64(p(n)) ?? 0 }
        let v = view(s)

        switch sql {
        case "SELECT body FROM rows WHERE tbl = $1 AND usr = $2 AND key = $3":
            return v.row(Pair(tbl: p(1), usr: p(2)), p(3)).map { [[$0.body]] } ?? []
        case "SELECT r.key, r.body FROM unnest($3::text[]) AS k(key) JOIN rows r ON r.tbl = $1 AND r.usr = $2 AND r.key = k.key":
            let pair = Pair(tbl: p(1), usr: p(2))
            return try Self.array(p(3)).compactMap { key in key.flatMap { k in v.row(pair, k).map { [k, $0.body] } } }
        case "SELECT count(DISTINCT usr) FROM rows WHERE tbl = $1":
            return [[String(v.pairs(tbl: p(1)).filter { !v.rows($0).isEmpty }.count)]]
        case "SELECT usr FROM unique_keys WHERE namespace = $1 AND value = $2":
            return v.unique(UniqueKeyID(namespace: p(1), value: p(2))).map { [[$0]] } ?? []
        case "SELECT version FROM users WHERE usr = $1":
            return v.user(p(1)).map { [[String($0.version)]] } ?? []
        case "SELECT feed_seq FROM users WHERE usr = $1":
            return v.user(p(1)).map { [[String($0.feedSeq)]] } ?? []
        case "SELECT coalesce(max(feed_seq), 0) FROM users":
            return [[String(v.allUsers.values.map(\.feedSeq).max() ?? 0)]]
        case "SELECT 1 / (coalesce((SELECT version FROM users WHERE usr = $1), 0) = $2::bigint)::int":
            guard (v.user(p(1))?.version ?? 0) == int(2) else { throw SQLError("22012", "division by zero") }
            return [["1"]]
        case "SELECT coalesce(max(seq), 0) FROM tombstones WHERE usr = $1 AND key = '' AND tbl = ANY($2::text[])":
            let tables = Set(try Self.array(p(2)).compactMap { $0 })
            let floor = v.tombstonePairs(usr: p(1)).filter { tables.contains($0.tbl) }.compactMap { v.tombstone($0, "")?.seq }.max() ?? 0
            return [[String(floor)]]
        case "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass($1)":
            return [[String(v.pairs(tbl: nil).reduce(0) { $0 + v.rows($1).count })]]
        case "SELECT EXISTS (SELECT 1 FROM rows) OR EXISTS (SELECT 1 FROM unique_keys)":
            let any = v.pairs(tbl: nil).contains { !v.rows($0).isEmpty } || !v.allUnique.isEmpty
            return [[any ? "t" : "f"]]
        case "INSERT INTO shared (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING":
            if v.shared(p(1)) == nil {
                try lock(&s, .shared(p(1)))
                write(&s) { $0.shared[p(1)] = .some(p(2)) }
            }
            return Self.ok
        case "SELECT value FROM shared WHERE name = $1":
            return v.shared(p(1)).map { [[$0]] } ?? []
        case "DELETE FROM listeners WHERE pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)":
            for gone in v.listeners where s.sessions[gone] == nil {
                try lock(&s, .listener(gone))
                write(&s) { $0.listeners[gone] = false }
            }
            return Self.ok
        case "INSERT INTO listeners (pid) VALUES (pg_backend_pid()) ON CONFLICT DO NOTHING":
            try lock(&s, .listener(pid))
            write(&s) { $0.listeners[pid] = true }
            return Self.ok
        case "DELETE FROM listeners WHERE pid = pg_backend_pid()":
            try lock(&s, .listener(pid))
            write(&s) { $0.listeners[pid] = false }
            return Self.ok
        case "UNLISTEN *":
            s.sessions[pid]!.listening.removeAll()
            return Self.ok
        case "DELETE FROM rows WHERE usr = $1":
            for pair in v.pairs(tbl: nil, usr: p(1)) { for key in v.rows(pair).keys { try setRow(&s, pair, key, nil) } }
            return Self.ok
        case "DELETE FROM tombstones WHERE usr = $1":
            for pair in v.tombstonePairs(usr: p(1)) { for key in v.tombstones(pair).keys { try setTombstone(&s, pair, key, nil) } }
            return Self.ok
        case "DELETE FROM unique_keys WHERE usr = $1":
            for (key, holder) in v.allUnique where holder == p(1) { try setUnique(&s, key, nil) }
            return Self.ok
        case "SELECT claim($1, $2, $3)":
            let key = UniqueKeyID(namespace: p(1), value: p(2))
            try lock(&s, .unique(key))  // an insert waits for another transaction's insert of the key
            let holder = view(s).unique(key)
            if holder == nil {
                try setUnique(&s, key, p(3))
            } else if holder != p(3) {
                throw SQLError("HK001", p(1))
            }
            return [[""]]
        case "DELETE FROM unique_keys WHERE namespace = $1 AND value = $2 AND usr = $3":
            let key = UniqueKeyID(namespace: p(1), value: p(2))
            if v.unique(key) == p(3) { try setUnique(&s, key, nil) }
            return Self.ok
        case "INSERT INTO users (usr, feed_seq, version) VALUES ($1, $2, 1) ON CONFLICT (usr) DO UPDATE SET feed_seq = users.feed_seq + $2, version = users.version + 1 RETURNING feed_seq":
            try lock(&s, .user(p(1)))
            let old = view(s).user(p(1))
            let new = old.map { UserRow(feedSeq: $0.feedSeq + int(2), version: $0.version + 1) } ?? UserRow(feedSeq: int(2), version: 1)
            try setUser(&s, p(1), new)
            return [[String(new.feedSeq)]]
        case "DELETE FROM rows r USING unnest($3::text[]) AS k(key) WHERE r.tbl = $1 AND r.usr = $2 AND r.key = k.key":
            let pair = Pair(tbl: p(1), usr: p(2))
            for case let key? in try Self.array(p(3)) where view(s).row(pair, key) != nil { try setRow(&s, pair, key, nil) }
            return Self.ok
        case "DELETE FROM tombstones t USING unnest($3::text[]) AS k(key) WHERE t.tbl = $1 AND t.usr = $2 AND t.key = k.key":
            let pair = Pair(tbl: p(1), usr: p(2))
            for case let key? in try Self.array(p(3)) where view(s).tombstone(pair, key) != nil { try setTombstone(&s, pair, key, nil) }
            return Self.ok
        case """
            INSERT INTO rows (tbl, usr, key, ord, body) SELECT $1, $2, t.k, t.o, t.b FROM unnest($3::text[], $4::text[], $5::text[]) AS t(k, o, b) \
            ON CONFLICT (tbl, usr, key) DO UPDATE SET ord = excluded.ord, body = excluded.body
            """:
            let pair = Pair(tbl: p(1), usr: p(2))
            let keys = try Self.array(p(3)), orders = try Self.array(p(4)), bodies = try Self.array(p(5))
            for i in keys.indices {
                try lock(&s, .row(pair, keys[i] ?? ""))
                let old = view(s).row(pair, keys[i] ?? "")
                try setRow(&s, pair, keys[i] ?? "", Row(ord: orders[i], body: bodies[i] ?? "", seq: old?.seq, at: old?.at))
            }
            return Self.ok
        case """
            INSERT INTO rows (tbl, usr, key, ord, body, seq, at) SELECT $1, $2, t.k, t.o, t.b, (SELECT feed_seq FROM users WHERE usr = $2) - $5 + t.i, $6 \
            FROM unnest($3::text[], $4::bigint[], $7::text[], $8::text[]) AS t(k, i, o, b) \
            ON CONFLICT (tbl, usr, key) DO UPDATE SET ord = excluded.ord, body = excluded.body, seq = excluded.seq, at = excluded.at
            """:
            let pair = Pair(tbl: p(1), usr: p(2))
            let base = (v.user(p(2))?.feedSeq ?? 0) - int(5)
            let keys = try Self.array(p(3)), offsets = try Self.array(p(4)), orders = try Self.array(p(7)), bodies = try Self.array(p(8))
            for i in keys.indices {
                try setRow(&s, pair, keys[i] ?? "", Row(ord: orders[i], body: bodies[i] ?? "", seq: base + (Int64(offsets[i] ?? "") ?? 0), at: int(6)))
            }
            return Self.ok
        case """
            WITH d AS (DELETE FROM rows r USING unnest($3::text[]) AS k(key) WHERE r.tbl = $1 AND r.usr = $2 AND r.key = k.key RETURNING r.key) \
            INSERT INTO tombstones (tbl, usr, key, seq, at) SELECT $1, $2, t.k, (SELECT feed_seq FROM users WHERE usr = $2) - $5 + t.i, $6 \
            FROM unnest($3::text[], $4::bigint[]) AS t(k, i) JOIN d ON d.key = t.k ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = excluded.seq, at = excluded.at
            """:
            let pair = Pair(tbl: p(1), usr: p(2))
            let base = (v.user(p(2))?.feedSeq ?? 0) - int(5)
            let keys = try Self.array(p(3)), offsets = try Self.array(p(4))
            for i in keys.indices {
                let key = keys[i] ?? ""
                guard view(s).row(pair, key) != nil else { continue }
                try setRow(&s, pair, key, nil)
                try setTombstone(&s, pair, key, Tombstone(seq: base + (Int64(offsets[i] ?? "") ?? 0), at: int(6)))
            }
            return Self.ok
        case """
            SELECT pg_notify($1, u.feed_seq || ' ' || $2 || ' ' || $4 || ' ' || u.usr) FROM users u WHERE u.usr = $3 AND EXISTS (SELECT 1 FROM listeners)
            """:
            guard let user = v.user(p(3)), !v.listeners.isEmpty else { return [] }
            write(&s) { $0.notifies.append((p(1), "\(user.feedSeq) \(p(2)) \(p(4)) \(p(3))")) }
            return [[""]]
        case """
            WITH doomed AS ( SELECT key FROM tombstones WHERE tbl = $1 AND usr = $2 AND key <> '' \
            AND (SELECT count(*) FROM (SELECT 1 FROM tombstones WHERE tbl = $1 AND usr = $2 AND key <> '' LIMIT $3 + 1) c) > $3 \
            ORDER BY seq DESC OFFSET $4), gone AS (DELETE FROM tombstones t USING doomed d WHERE t.tbl = $1 AND t.usr = $2 AND t.key = d.key RETURNING t.seq) \
            INSERT INTO tombstones (tbl, usr, key, seq, at) SELECT $1, $2, '', max(seq), $5 FROM gone HAVING count(*) > 0 \
            ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = greatest(tombstones.seq, excluded.seq), at = excluded.at
            """:
            let pair = Pair(tbl: p(1), usr: p(2))
            let kept = v.tombstones(pair).filter { $0.key != "" }
            guard kept.count > int(3) else { return Self.ok }
            let doomed = kept.sorted { ($0.value.seq, $0.key) > ($1.value.seq, $1.key) }.dropFirst(Int(int(4)))
            guard let top = doomed.map(\.value.seq).max() else { return Self.ok }
            for (key, _) in doomed { try setTombstone(&s, pair, key, nil) }
            let floor = view(s).tombstone(pair, "")
            try setTombstone(&s, pair, "", Tombstone(seq: max(floor?.seq ?? top, top), at: int(5)))
            return Self.ok
        default:
            break
        }
        if let moved = try moving(sql, params, &s) { return moved }
        if let channel = Self.after(sql, "LISTEN ") {
            s.sessions[pid]!.listening.insert(Self.unquote(channel))
            return Self.ok
        }
        if sql.hasPrefix("SELECT key, body FROM rows WHERE tbl = $1 AND usr = $2") { return try scan(sql, params, &s) }
        if sql.hasPrefix("SELECT usr, key, body FROM rows WHERE tbl = $1 AND ord IS NOT NULL AND ord <= $2 ORDER BY ord, usr LIMIT ") {
            var rest = sql.dropFirst("SELECT usr, key, body FROM rows WHERE tbl = $1 AND ord IS NOT NULL AND ord <= $2 ORDER BY ord, usr LIMIT ".count)
            let skipLocked = rest.hasSuffix(" FOR UPDATE SKIP LOCKED")
            if skipLocked { rest = rest.dropLast(" FOR UPDATE SKIP LOCKED".count) }
            guard let limit = Int(rest) else { throw SQLError("42601", "syntax error: \(sql)") }
            var found: [(ord: String, usr: String, key: String, body: String)] = []
            for pair in v.pairs(tbl: p(1)) {
                for (key, row) in v.rows(pair) where row.ord != nil && row.ord! <= p(2) { found.append((row.ord!, pair.usr, key, row.body)) }
            }
            found.sort { ($0.ord, $0.usr) < ($1.ord, $1.usr) }
            var out: [[String?]] = []
            for f in found where out.count < limit {
                let lock = RowLock.row(Pair(tbl: p(1), usr: f.usr), f.key)
                if skipLocked {
                    if let holder = s.rowLocks[schema(s)]?[lock], holder != pid { continue }
                    try self.lock(&s, lock)
                }
                out.append([f.usr, f.key, f.body])
            }
            return out
        }
        if sql == "SELECT count(*) FROM rows WHERE tbl = $1 AND ord IS NOT NULL AND ord <= $2" {
            return [[String(v.pairs(tbl: p(1)).reduce(0) { n, pair in n + v.rows(pair).values.filter { $0.ord != nil && $0.ord! <= p(2) }.count })]]
        }
        if sql.hasPrefix("(SELECT tbl, key, seq, at, false FROM rows WHERE usr = $1 AND seq > $2 AND tbl = ANY($3::text[]) ORDER BY seq LIMIT ") {
            let limitText = sql.split(separator: " ").last!
            let limit = limitText == "ALL" ? Int.max : Int(limitText) ?? 0
            let tables = Set(try Self.array(p(3)).compactMap { $0 })
            var entries: [(seq: Int64, row: [String?])] = []
            for pair in v.pairs(tbl: nil, usr: p(1)) where tables.contains(pair.tbl) {
                for (key, row) in v.rows(pair) { if let seq = row.seq, seq > int(2) { entries.append((seq, [pair.tbl, key, String(seq), row.at.map(String.init), "f"])) } }
            }
            for pair in v.tombstonePairs(usr: p(1)) where tables.contains(pair.tbl) {
                for (key, t) in v.tombstones(pair) where key != "" && t.seq > int(2) { entries.append((t.seq, [pair.tbl, key, String(t.seq), String(t.at), "t"])) }
            }
            entries.sort { $0.seq < $1.seq }
            return entries.prefix(limit).map(\.row)
        }
        throw SQLError("42601", "the model of PostgreSQL does not know this statement: \(sql)")
    }

    /// `Moving`'s statements: a deployment exported in key order, and restored with its feed positions.
    private func moving(_ sql: String, _ params: [String?], _ s: inout ModelServer.State) throws -> [[String?]]? {
        func p(_ n: Int) -> String { params[n - 1] ?? "" }
        func int(_ n: Int) -> Int64 { Int64(p(n)) ?? 0 }
        let v = view(s)
        func limit() -> Int { Int(sql.split(separator: " ").last ?? "") ?? 0 }
        func tripleAfter(_ a: [String?]) -> Bool { Self.bytes3(a[0] ?? "", a[1] ?? "", a[2] ?? "") > Self.bytes3(p(1), p(2), p(3)) }
        if sql.hasPrefix("SELECT tbl, usr, key, body, seq, at FROM rows WHERE (tbl, usr, key) > ($1, $2, $3) ORDER BY tbl, usr, key LIMIT ") {
            var out: [[String?]] = []
            for pair in v.pairs(tbl: nil) {
                for (key, row) in v.rows(pair) { out.append([pair.tbl, pair.usr, key, row.body, row.seq.map(String.init), row.at.map(String.init)]) }
            }
            return Array(out.filter(tripleAfter).sorted { Self.bytes3($0[0]!, $0[1]!, $0[2]!) < Self.bytes3($1[0]!, $1[1]!, $1[2]!) }.prefix(limit()))
        }
        if sql.hasPrefix("SELECT tbl, usr, key, NULL, seq, at FROM tombstones WHERE (tbl, usr, key) > ($1, $2, $3) ORDER BY tbl, usr, key LIMIT ") {
            var out: [[String?]] = []
            for pair in v.tombstonePairs() {
                for (key, t) in v.tombstones(pair) { out.append([pair.tbl, pair.usr, key, nil, String(t.seq), String(t.at)]) }
            }
            return Array(out.filter(tripleAfter).sorted { Self.bytes3($0[0]!, $0[1]!, $0[2]!) < Self.bytes3($1[0]!, $1[1]!, $1[2]!) }.prefix(limit()))
        }
        if sql.hasPrefix("SELECT namespace, value, usr FROM unique_keys WHERE (namespace, value) > ($1, $2) ORDER BY namespace, value LIMIT ") {
            var keys: [(id: UniqueKeyID, usr: String)] = []
            for (id, usr) in v.allUnique { if Self.bytes(id.namespace, id.value) > Self.bytes(p(1), p(2)) { keys.append((id, usr)) } }
            keys.sort { Self.bytes($0.id.namespace, $0.id.value) < Self.bytes($1.id.namespace, $1.id.value) }
            return keys.prefix(limit()).map { [$0.id.namespace, $0.id.value, $0.usr] }
        }
        if sql.hasPrefix("SELECT usr, feed_seq FROM users WHERE usr > $1 ORDER BY usr LIMIT ") {
            let users = v.allUsers.filter { Self.bytes($0.key, "") > Self.bytes(p(1), "") }.sorted { Self.bytes($0.key, "") < Self.bytes($1.key, "") }
            return users.prefix(limit()).map { [$0.key, String($0.value.feedSeq)] }
        }
        switch sql {
        case "INSERT INTO rows (tbl, usr, key, ord, body) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tbl, usr, key) DO UPDATE SET ord = excluded.ord, body = excluded.body":
            let pair = Pair(tbl: p(1), usr: p(2))
            try lock(&s, .row(pair, p(3)))
            let old = view(s).row(pair, p(3))
            try setRow(&s, pair, p(3), Row(ord: params[3], body: p(5), seq: old?.seq, at: old?.at))
        case """
            INSERT INTO rows (tbl, usr, key, ord, body, seq, at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tbl, usr, key) \
            DO UPDATE SET ord = excluded.ord, body = excluded.body, seq = excluded.seq, at = excluded.at
            """:
            try setRow(&s, Pair(tbl: p(1), usr: p(2)), p(3), Row(ord: params[3], body: p(5), seq: int(6), at: int(7)))
        case "DELETE FROM tombstones WHERE tbl = $1 AND usr = $2 AND key = $3":
            let pair = Pair(tbl: p(1), usr: p(2))
            if v.tombstone(pair, p(3)) != nil { try setTombstone(&s, pair, p(3), nil) }
        case "DELETE FROM rows WHERE tbl = $1 AND usr = $2 AND key = $3":
            let pair = Pair(tbl: p(1), usr: p(2))
            if v.row(pair, p(3)) != nil { try setRow(&s, pair, p(3), nil) }
        case """
            WITH d AS (DELETE FROM rows WHERE tbl = $1 AND usr = $2 AND key = $3 RETURNING key) INSERT INTO tombstones (tbl, usr, key, seq, at) \
            SELECT $1, $2, key, $4, $5 FROM d ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = excluded.seq, at = excluded.at
            """:
            let pair = Pair(tbl: p(1), usr: p(2))
            guard v.row(pair, p(3)) != nil else { return [] }
            try setRow(&s, pair, p(3), nil)
            try setTombstone(&s, pair, p(3), Tombstone(seq: int(4), at: int(5)))
        case "INSERT INTO unique_keys VALUES ($1, $2, $3) ON CONFLICT (namespace, value) DO UPDATE SET usr = excluded.usr":
            try setUnique(&s, UniqueKeyID(namespace: p(1), value: p(2)), p(3))
        case """
            INSERT INTO tombstones (tbl, usr, key, seq, at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = excluded.seq, at = excluded.at
            """:
            try setTombstone(&s, Pair(tbl: p(1), usr: p(2)), p(3), Tombstone(seq: int(4), at: int(5)))
        case """
            INSERT INTO users (usr, feed_seq, version) VALUES ($1, $2, 1) ON CONFLICT (usr) DO UPDATE SET feed_seq = greatest(users.feed_seq, $2), \
            version = users.version + 1
            """:
            try lock(&s, .user(p(1)))
            let old = view(s).user(p(1))
            try setUser(&s, p(1), old.map { UserRow(feedSeq: max($0.feedSeq, int(2)), version: $0.version + 1) } ?? UserRow(feedSeq: int(2), version: 1))
        default:
            return nil
        }
        return Self.ok
    }

    static func bytes3(_ a: String, _ b: String, _ c: String) -> BytesKey { BytesKey(a: Array(a.utf8) + [0] + Array(b.utf8), b: Array(c.utf8)) }

    /// `PostgresTable`'s range scans: `SELECT key, body FROM rows WHERE tbl = $1 AND usr = $2 [AND ord IS NOT NULL]
    /// [AND col >= $n] [AND col <= $n] [AND col > $n | AND col < $n] ORDER BY col [DESC] [LIMIT n]`.
    private func scan(_ sql: String, _ params: [String?], _ s: inout ModelServer.State) throws -> [[String?]] {
        let v = view(s)
        var words = sql.split(separator: " ").map(String.init)[...]
        words = words.dropFirst(13)  // through "usr = $2"
        var bounds: [(op: String, value: String)] = []
        var column = "key", descending = false, limit = Int.max
        while let w = words.popFirst() {
            switch w {
            case "AND":
                guard let col = words.popFirst(), let op = words.popFirst(), let arg = words.popFirst() else { throw SQLError("42601", sql) }
                column = col
                if op == "IS" { _ = words.popFirst(); continue }  // "ord IS NOT NULL"
                guard arg.hasPrefix("$"), let n = Int(arg.dropFirst()), n <= params.count else { throw SQLError("42601", sql) }
                bounds.append((op, params[n - 1] ?? ""))
            case "ORDER":
                _ = words.popFirst()
                column = words.popFirst() ?? column
            case "DESC": descending = true
            case "LIMIT": limit = Int(words.popFirst() ?? "") ?? 0
            default: throw SQLError("42601", "the model of PostgreSQL does not know this statement: \(sql)")
            }
        }
        let byOrder = column == "ord"
        var found: [(sort: String, key: String, body: String)] = []
        for (key, row) in v.rows(Pair(tbl: params[0] ?? "", usr: params[1] ?? "")) {
            guard let value = byOrder ? row.ord : key else { continue }
            let keep = bounds.allSatisfy { b in
                switch b.op {
                case ">=": return value >= b.value
                case "<=": return value <= b.value
                case ">": return value > b.value
                case "<": return value < b.value
                default: return false
                }
            }
            if keep { found.append((value, key, row.body)) }
        }
        found.sort { Self.bytes($0.sort, $0.key) < Self.bytes($1.sort, $1.key) }
        if descending { found.reverse() }
        return found.prefix(limit).map { [$0.key, $0.body] }
    }

    /// Text compared as PostgreSQL compares `COLLATE "C"` text: by bytes.
    static func bytes(_ a: String, _ b: String) -> BytesKey { BytesKey(a: Array(a.utf8), b: Array(b.utf8)) }

    struct BytesKey: Comparable {
        let a: [UInt8], b: [UInt8]
        static func < (x: BytesKey, y: BytesKey) -> Bool {
            x.a.lexicographicallyPrecedes(y.a) || x.a == y.a && x.b.lexicographicallyPrecedes(y.b)
        }
    }

    /// `COPY rows (tbl, usr, key, ord, body, seq, at) FROM STDIN` with `data` in COPY's text format:
    /// inserts only; a key already there fails the whole COPY with 23505.
    mutating func copy(_ sql: String, _ data: [UInt8], _ s: inout ModelServer.State) throws -> [[String?]] {
        if tx(s).failed { throw SQLError("25P02", "current transaction is aborted") }
        guard Self.collapse(sql) == "COPY rows (tbl, usr, key, ord, body, seq, at) FROM STDIN" else {
            throw SQLError("42601", "the model of PostgreSQL does not know this COPY: \(sql)")
        }
        for line in data.split(separator: UInt8(ascii: "\n")) {
            let f = line.split(separator: UInt8(ascii: "\t"), omittingEmptySubsequences: false).map(Self.unescapeCopy)
            guard f.count == 7 else { throw SQLError("22P04", "missing data for column") }
            let pair = Pair(tbl: f[0] ?? "", usr: f[1] ?? "")
            try lock(&s, .row(pair, f[2] ?? ""))
            if view(s).row(pair, f[2] ?? "") != nil { throw SQLError("23505", "duplicate key value violates unique constraint \"rows_pkey\"") }
            try setRow(&s, pair, f[2] ?? "", Row(ord: f[3], body: f[4] ?? "", seq: f[5].flatMap { Int64($0) }, at: f[6].flatMap { Int64($0) }))
        }
        return Self.ok
    }

    static func unescapeCopy(_ field: ArraySlice<UInt8>) -> String? {
        if field.elementsEqual("\\N".utf8) { return nil }
        var out: [UInt8] = []
        var escaped = false
        for b in field {
            if escaped {
                switch b {
                case UInt8(ascii: "t"): out.append(9)
                case UInt8(ascii: "n"): out.append(10)
                case UInt8(ascii: "r"): out.append(13)
                default: out.append(b)
                }
                escaped = false
            } else if b == UInt8(ascii: "\\") {
                escaped = true
            } else {
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: Text

    /// `text` with each run of whitespace one space, and none at its ends or inside parentheses' edges.
    static func collapse(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        var space = false
        for c in text.unicodeScalars {
            if c == " " || c == "\n" || c == "\t" || c == "\r" {
                space = true
                continue
            }
            if space && !out.isEmpty { out.unicodeScalars.append(" ") }
            space = false
            out.unicodeScalars.append(c)
        }
        return out
    }

    /// What follows `prefix` in `sql` up to its closing `)`s, or nil when `sql` does not start so.
    static func after(_ sql: String, _ prefix: String) -> String? {
        guard sql.hasPrefix(prefix) else { return nil }
        var rest = Substring(sql.dropFirst(prefix.count))
        while rest.last == ")" { rest.removeLast() }
        return String(rest)
    }

    static func unquote(_ name: String) -> String {
        guard name.hasPrefix("\""), name.hasSuffix("\""), name.count >= 2 else { return name }
        return String(name.dropFirst().dropLast()).replacing("\"\"", with: "\"")
    }

    /// A PostgreSQL array literal of text (`PostgresStore.array`) or numbers.
    static func array(_ literal: String) throws -> [String?] {
        var bytes = Array(literal.utf8)[...]
        guard bytes.popFirst() == UInt8(ascii: "{"), bytes.popLast() == UInt8(ascii: "}") else { throw SQLError("22P02", "malformed array literal") }
        var out: [String?] = []
        guard !bytes.isEmpty else { return out }
        while true {
            if bytes.first == UInt8(ascii: "\"") {
                bytes.removeFirst()
                var value: [UInt8] = []
                while let b = bytes.popFirst(), b != UInt8(ascii: "\"") {
                    if b == UInt8(ascii: "\\"), let next = bytes.popFirst() { value.append(next) } else { value.append(b) }
                }
                out.append(String(decoding: value, as: UTF8.self))
            } else {
                let value = bytes.prefix { $0 != UInt8(ascii: ",") }
                bytes = bytes.dropFirst(value.count)
                let text = String(decoding: value, as: UTF8.self)
                out.append(text == "NULL" ? nil : text)
            }
            guard let comma = bytes.popFirst() else { return out }
            guard comma == UInt8(ascii: ",") else { throw SQLError("22P02", "malformed array literal") }
        }
    }
}
