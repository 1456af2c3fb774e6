import Storage

/// A unit of work as the statements of one pipeline. Consecutive puts (and deletes) of one table and
/// user become one statement over arrays, so a month of samples is a handful of statements, not 43,200.
///
/// Feed positions: every user the work touches has its `users` row moved first (`feed_seq` by the
/// number of synced changes, `version` by one), under the user's lock; change k of the user (from 1)
/// then gets `feed_seq - n + k`, computed by the server in the same pipeline.
struct CommitPlan {
    /// Commit time (milliseconds since 1970), a parameter of the statements that stamp rows.
    private(set) var at: Int64
    /// Where `at` is a parameter: statement and parameter index.
    private var atParams: [(statement: Int, param: Int)] = []
    private(set) var statements: [Statement] = []
    /// Users in the order first touched, and their synced change counts.
    private(set) var users: [String] = []
    private var counts: [String: Int] = [:]
    /// For each statement that claims a unique key, the key (to report `taken`).
    private(set) var claims: [Int: UniqueKey] = [:]
    /// The open group of puts or deletes: table, user, whether deleting, keys, bodies, orders, offsets.
    private var group: Group?
    /// Synced changes: user, table, key, offset among the user's changes, whether a delete.
    private var synced: [(user: String, table: PostgresTableBase, key: String, offset: Int, deleted: Bool)] = []
    /// Statement index of each user's `users` update (its `feed_seq` after the commit).
    private var userStatements: [String: Int] = [:]
    private var header: [Statement] = []

    private struct Group {
        let table: PostgresTableBase
        let user: String
        let deleting: Bool
        var keys: [String] = []
        var seen: Set<String> = []
        var bodies: [String] = []
        var orders: [String?] = []
        var offsets: [Int] = []
    }

    /// Big groups of puts of a synced table, which a detached commit may write with `COPY` (`Bulk`), by
    /// the index of their INSERT statement.
    private(set) var bulks: [Int: Bulk] = [:]

    /// Rows of one table and user that a detached commit may `COPY` straight into `rows` when none of
    /// their keys is there yet: COPY wrote a month of samples in 0.5 s where the INSERT over arrays with
    /// its conflict check took 0.85 s (43,200 rows, four indexes).
    struct Bulk {
        let table: String
        let user: String
        let keys: [String]
        let orders: [String?]
        let bodies: [String]
        let offsets: [Int]
    }

    /// Groups from this many puts are bulks: below it, the extra round trips cost more than COPY saves.
    static let bulkRows = 1024

    /// Whether to keep the synced changes for host events (`changes`).
    let collects: Bool

    /// The channel commits are announced on (while some kernel listens).
    let channel: String
    /// The kernel the commit's announcements name as theirs (`PostgresStore.kernelID`).
    let origin: String

    init(at: Int64, collects: Bool, channel: String, origin: String) {
        self.at = at
        self.collects = collects
        self.channel = channel
        self.origin = origin
    }

    mutating func add(_ entry: Transaction.Entry, _ slots: [PostgresTableBase]) {
        switch entry {
        case .put(let handle, let user, let key, let row):
            let table = slots[handle.slot]
            let offset = touch(user, synced: table.entity != nil)
            let (body, order) = table.stored(row, key: key)
            join(table, user, deleting: false, key: key)
            group!.bodies.append(body)
            group!.orders.append(order)
            group!.offsets.append(offset)
        case .delete(let handle, let user, let key):
            let table = slots[handle.slot]
            let offset = touch(user, synced: table.entity != nil)
            join(table, user, deleting: true, key: key)
            group!.offsets.append(offset)
        case .deleteUser(let user):
            _ = touch(user, synced: false)
            close()
            for sql in ["DELETE FROM rows WHERE usr = $1", "DELETE FROM tombstones WHERE usr = $1", "DELETE FROM unique_keys WHERE usr = $1"] {
                statements.append(Statement(sql, [user]))
            }
        case .claim(let key, let user):
            _ = touch(user, synced: false)
            close()
            claims[statements.count] = key
            statements.append(Statement("SELECT claim($1, $2, $3)", [key.namespace, key.value, user]))
        case .release(let key, let user):
            _ = touch(user, synced: false)
            close()
            statements.append(Statement("DELETE FROM unique_keys WHERE namespace = $1 AND value = $2 AND usr = $3", [key.namespace, key.value, user]))
        }
    }

    /// Notes a change of `user`; returns its offset among the user's synced changes (0: not synced).
    private mutating func touch(_ user: String, synced: Bool) -> Int {
        if counts[user] == nil {
            counts[user] = 0
            users.append(user)
        }
        guard synced else { return 0 }
        counts[user]! += 1
        return counts[user]!
    }

    /// Continues the open group, or closes it and opens another (a key twice in one group would make
    /// one statement change a row twice, which PostgreSQL refuses).
    private mutating func join(_ table: PostgresTableBase, _ user: String, deleting: Bool, key: String) {
        if let g = group, g.table === table, g.user == user, g.deleting == deleting, !g.seen.contains(key) {
        } else {
            close()
            group = Group(table: table, user: user, deleting: deleting)
        }
        group!.keys.append(key)
        group!.seen.insert(key)
        if collects, table.entity != nil {
            synced.append((user, table, key, counts[user]!, deleting))
        }
    }

    private mutating func close() {
        guard let g = group else { return }
        group = nil
        let name = g.table.name, keys = PostgresStore.array(g.keys), offsets = "{" + g.offsets.map(String.init).joined(separator: ",") + "}"
        let position = "(SELECT feed_seq FROM users WHERE usr = $2) - $5 + t.i"
        if g.deleting {
            if g.table.entity != nil {
                statements.append(Statement("""
                    WITH d AS (DELETE FROM rows r USING unnest($3::text[]) AS k(key) WHERE r.tbl = $1 AND r.usr = $2 AND r.key = k.key RETURNING r.key)
                    INSERT INTO tombstones (tbl, usr, key, seq, at)
                    SELECT $1, $2, t.k, \(position), $6 FROM unnest($3::text[], $4::bigint[]) AS t(k, i) JOIN d ON d.key = t.k
                    ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = excluded.seq, at = excluded.at
                    """, [name, g.user, keys, offsets, nil, String(at)]))
                atParams.append((statements.count - 1, 5))
            } else {
                statements.append(Statement("DELETE FROM rows r USING unnest($3::text[]) AS k(key) WHERE r.tbl = $1 AND r.usr = $2 AND r.key = k.key",
                                            [name, g.user, keys]))
            }
            return
        }
        if g.table.entity != nil {
            // A bulk's orders and bodies (12 MB of array literal for a month) are written into its INSERT
            // only when it runs (`finish`, `inserting`): a detached commit usually copies them instead.
            let bulk = g.keys.count >= Self.bulkRows
            if bulk {
                bulks[statements.count] = Bulk(table: name, user: g.user, keys: g.keys, orders: g.orders, bodies: g.bodies, offsets: g.offsets)
            }
            statements.append(Statement("""
                INSERT INTO rows (tbl, usr, key, ord, body, seq, at)
                SELECT $1, $2, t.k, t.o, t.b, \(position), $6 FROM unnest($3::text[], $4::bigint[], $7::text[], $8::text[]) AS t(k, i, o, b)
                ON CONFLICT (tbl, usr, key) DO UPDATE SET ord = excluded.ord, body = excluded.body, seq = excluded.seq, at = excluded.at
                """, [name, g.user, keys, offsets, nil, String(at)] + (bulk ? [nil, nil] : [PostgresStore.array(g.orders), PostgresStore.array(g.bodies)])))
            atParams.append((statements.count - 1, 5))
            statements.append(Statement("DELETE FROM tombstones t USING unnest($3::text[]) AS k(key) WHERE t.tbl = $1 AND t.usr = $2 AND t.key = k.key",
                                        [name, g.user, keys]))
        } else {
            statements.append(Statement("""
                INSERT INTO rows (tbl, usr, key, ord, body)
                SELECT $1, $2, t.k, t.o, t.b FROM unnest($3::text[], $4::text[], $5::text[]) AS t(k, o, b)
                ON CONFLICT (tbl, usr, key) DO UPDATE SET ord = excluded.ord, body = excluded.body
                """, [name, g.user, keys, PostgresStore.array(g.orders), PostgresStore.array(g.bodies)]))
        }
    }

    /// Drops `user`'s oldest tombstones of `table` down to `Tombstones.kept(of: limit)` when more than
    /// `limit` are kept, raising the floor to the newest one dropped (see `Tombstones`), in the commit's
    /// own transaction. The count stops at `limit + 1` (an index range), and the store asks only once
    /// per quarter of the limit of deletes: O(limit) then, O(1) per delete on the whole.
    mutating func dropOldTombstones(_ table: PostgresTableBase, user: String, limit: Int) {
        close()
        statements.append(Statement("""
            WITH doomed AS (
                SELECT key FROM tombstones WHERE tbl = $1 AND usr = $2 AND key <> ''
                AND (SELECT count(*) FROM (SELECT 1 FROM tombstones WHERE tbl = $1 AND usr = $2 AND key <> '' LIMIT $3 + 1) c) > $3
                ORDER BY seq DESC OFFSET $4),
            gone AS (DELETE FROM tombstones t USING doomed d WHERE t.tbl = $1 AND t.usr = $2 AND t.key = d.key RETURNING t.seq)
            INSERT INTO tombstones (tbl, usr, key, seq, at) SELECT $1, $2, '', max(seq), $5 FROM gone HAVING count(*) > 0
            ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = greatest(tombstones.seq, excluded.seq), at = excluded.at
            """, [table.name, user, String(limit), String(Tombstones.kept(of: limit)), String(at)]))
        atParams.append((statements.count - 1, 4))
    }

    /// Sets the commit time of a plan made ahead of its commit (`PostgresStore.prepare`).
    mutating func restamp(_ at: Int64) {
        self.at = at
        for (s, p) in atParams { statements[s].params[p] = String(at) }
    }

    /// A bulk's INSERT (`statement`, as `finish` gave it) with its orders and bodies written in.
    static func inserting(_ bulk: Bulk, _ statement: Statement) -> Statement {
        var s = statement
        s.params[6] = PostgresStore.array(bulk.orders)
        s.params[7] = PostgresStore.array(bulk.bodies)
        return s
    }

    /// The statements, after the users' counters are moved: `users` rows first, then the changes, with
    /// each user's count filled in (parameter $5 of the statements that compute positions). With
    /// `copying` (a detached commit), bulks' INSERTs are left without their rows (`inserting`).
    mutating func finish(copying: Bool = false) -> [Statement] {
        close()
        var out: [Statement] = []
        for user in users {
            userStatements[user] = out.count
            out.append(Statement("""
                INSERT INTO users (usr, feed_seq, version) VALUES ($1, $2, 1)
                ON CONFLICT (usr) DO UPDATE SET feed_seq = users.feed_seq + $2, version = users.version + 1 RETURNING feed_seq
                """, [user, String(counts[user]!)]))
        }
        let shift = out.count
        claims = Dictionary(uniqueKeysWithValues: claims.map { ($0.key + shift, $0.value) })
        bulks = Dictionary(uniqueKeysWithValues: bulks.map { ($0.key + shift, $0.value) })
        for (index, var s) in statements.enumerated() {
            if s.params.count >= 5, s.params[4] == nil, let user = s.params[1] { s.params[4] = String(counts[user]!) }
            if !copying, let bulk = bulks[index + shift] { s = Self.inserting(bulk, s) }
            out.append(s)
        }
        // Announce each user's new positions to listening kernels ("<last> <count> <origin> <user>");
        // PostgreSQL sends them at commit, in commit order. NOTIFY serialises commits, so only while a
        // kernel listens.
        for user in users where announces(user) {
            out.append(Statement("""
                SELECT pg_notify($1, u.feed_seq || ' ' || $2 || ' ' || $4 || ' ' || u.usr) FROM users u
                WHERE u.usr = $3 AND EXISTS (SELECT 1 FROM listeners)
                """, [channel, String(counts[user]!), user, origin]))
        }
        return out
    }

    /// `bulk` in COPY's text format for `rows`, its feed positions from its user's position after the
    /// commit (`last`, what the user's `users` statement returned). O(bytes of the rows).
    func copyData(_ bulk: Bulk, last: UInt64) -> [UInt8] {
        let tab = UInt8(ascii: "\t"), newline = UInt8(ascii: "\n"), backslash = UInt8(ascii: "\\")
        var out: [UInt8] = []
        out.reserveCapacity(bulk.bodies.reduce(0) { $0 + $1.utf8.count } + bulk.keys.count * 120)
        func field(_ text: String) {
            for b in text.utf8 {
                switch b {
                case backslash: out += [backslash, backslash]
                case tab: out += [backslash, UInt8(ascii: "t")]
                case newline: out += [backslash, UInt8(ascii: "n")]
                case UInt8(ascii: "\r"): out += [backslash, UInt8(ascii: "r")]
                default: out.append(b)
                }
            }
            out.append(tab)
        }
        let base = Int64(last) - Int64(counts[bulk.user] ?? 0)
        for i in bulk.keys.indices {
            field(bulk.table)
            field(bulk.user)
            field(bulk.keys[i])
            if let order = bulk.orders[i] { field(order) } else { out += [backslash, UInt8(ascii: "N"), tab] }
            field(bulk.bodies[i])
            field(String(base + Int64(bulk.offsets[i])))
            out += String(at).utf8
            out.append(newline)
        }
        return out
    }

    /// The statement of `finish()`'s output that moves `user`'s counters and returns their feed position.
    func userStatement(of user: String) -> Int? { userStatements[user] }

    /// Whether the commit announces `user`'s changes: it made synced ones, and the payload stays under
    /// NOTIFY's 8,000 bytes.
    func announces(_ user: String) -> Bool { counts[user]! > 0 && Self.announcesChanges(of: user) }

    /// Whether a commit's changes of `user` are announced: the payload stays under NOTIFY's 8,000 bytes.
    static func announcesChanges(of user: String) -> Bool { user.utf8.count < 7000 }

    /// The committed changes, for host events: positions from each user's counter after the commit.
    /// A delete of a row that did not exist made no change, but still took a position (a gap is harmless).
    func changes(_ results: ArraySlice<StatementResult>, commit: UInt64) -> [CommittedChange] {
        var out: [CommittedChange] = []
        for change in synced {
            guard let index = userStatements[change.user], let last = results[results.startIndex + index].scalar.flatMap({ UInt64($0) }),
                  let entity = change.table.entity else { continue }
            let position = last - UInt64(counts[change.user] ?? 0) + UInt64(change.offset)
            out.append(CommittedChange(user: change.user, entry: FeedEntry(position: position, entity: entity.name, id: entity.id(change.key),
                                                                           op: change.deleted ? .delete : .upsert, at: at), commit: commit))
        }
        return out
    }
}
