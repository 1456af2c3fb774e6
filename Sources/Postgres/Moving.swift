import Storage

/// Moving a deployment between stores (`store export`, `store import`): every row, tombstone, unique key
/// and feed counter out, and in again with the feed positions they had.
extension PostgresStore {
    /// Whether the schema holds no rows and no unique keys (`store import` fills only an empty store).
    public func isEmpty() throws(StorageError) -> Bool {
        let results = try read(users: [], [Statement("SELECT EXISTS (SELECT 1 FROM rows) OR EXISTS (SELECT 1 FROM unique_keys)")])
        endRequest()
        return results[0].scalar == "f"
    }

    /// One entry of an export: a row (with its feed stamp when synced), a tombstone (a deleted synced
    /// row's feed entry: no body), or a user's feed counter (`table` empty, `seq` the last position given).
    public struct ExportedEntry {
        public let table: String, user: String, key: String
        public let body: String?
        public let seq: Int64?, at: Int64?
    }

    /// Every row, every tombstone, every unique key (as the in-memory store's `store.unique` table keeps
    /// them: key `namespace NUL value`, an empty object) and every user's feed counter, pages of `page`
    /// in key order, on a pooled connection: what a move needs to keep each user's feed as it is.
    public func exportRows(page: Int = 10_000, _ emit: (ExportedEntry) -> Void) throws(StorageError) {
        for source in ["rows", "tombstones"] {
            var after: [String?] = ["", "", ""]
            let body = source == "rows" ? "body" : "NULL"
            while true {
                let rows = try readPooled([Statement("""
                    SELECT tbl, usr, key, \(body), seq, at FROM \(source) WHERE (tbl, usr, key) > ($1, $2, $3) ORDER BY tbl, usr, key LIMIT \(page)
                    """, after)])[0].rows
                for r in rows {
                    emit(ExportedEntry(table: r[0] ?? "", user: r[1] ?? "", key: r[2] ?? "", body: source == "rows" ? (r[3] ?? "null") : nil,
                                       seq: r[4].flatMap { Int64($0) }, at: r[5].flatMap { Int64($0) }))
                }
                guard rows.count == page, let last = rows.last else { break }
                after = [last[0], last[1], last[2]]
            }
        }
        var afterKey: [String?] = ["", ""]
        while true {
            let keys = try readPooled([Statement("""
                SELECT namespace, value, usr FROM unique_keys WHERE (namespace, value) > ($1, $2) ORDER BY namespace, value LIMIT \(page)
                """, afterKey)])[0].rows
            for k in keys {
                emit(ExportedEntry(table: "store.unique", user: k[2] ?? "", key: (k[0] ?? "") + "\u{0}" + (k[1] ?? ""), body: "{}", seq: nil, at: nil))
            }
            guard keys.count == page, let last = keys.last else { break }
            afterKey = [last[0], last[1]]
        }
        var afterUser = ""
        while true {
            let users = try readPooled([Statement("SELECT usr, feed_seq FROM users WHERE usr > $1 ORDER BY usr LIMIT \(page)", [afterUser])])[0].rows
            for u in users where (u[1].flatMap { Int64($0) } ?? 0) > 0 {
                emit(ExportedEntry(table: "", user: u[0] ?? "", key: "", body: nil, seq: u[1].flatMap { Int64($0) }, at: nil))
            }
            guard users.count == page, let last = users.last?[0] else { break }
            afterUser = last
        }
    }

    // MARK: Moving a deployment in

    /// Writes changes moved in from another store with the feed stamps they had there (`store import`),
    /// in one transaction: rows and tombstones keep their positions and times, and each user's counter
    /// moves to the greatest position given, so a device's cursor from before the move answers as it
    /// did. A synced row without a position (an export from before positions were carried) gets the
    /// user's next one. One statement per change, all in one pipeline: one round trip per call.
    public func restore(_ changes: [RestoredChange]) throws(StorageError) {
        commitBatch()  // a read before (the emptiness check) may have left the batch's transaction open
        var statements = [Statement("BEGIN")]
        var touched: Set<String> = []
        for change in changes {
            var position = change.position
            let at = String(change.at)
            switch change.kind {
            case .change(let entry):
                switch entry {
                case .put(let handle, let user, let key, let row):
                    let table = slots[handle.slot]
                    let (body, order) = table.stored(row, key: key)
                    guard table.entity != nil else {
                        statements.append(Statement("""
                            INSERT INTO rows (tbl, usr, key, ord, body) VALUES ($1, $2, $3, $4, $5)
                            ON CONFLICT (tbl, usr, key) DO UPDATE SET ord = excluded.ord, body = excluded.body
                            """, [table.name, user, key, order, body]))
                        continue
                    }
                    if position == 0 { position = (restoredPositions[user] ?? 0) + 1 }
                    statements.append(Statement("""
                        INSERT INTO rows (tbl, usr, key, ord, body, seq, at) VALUES ($1, $2, $3, $4, $5, $6, $7)
                        ON CONFLICT (tbl, usr, key) DO UPDATE SET ord = excluded.ord, body = excluded.body, seq = excluded.seq, at = excluded.at
                        """, [table.name, user, key, order, body, String(position), at]))
                    statements.append(Statement("DELETE FROM tombstones WHERE tbl = $1 AND usr = $2 AND key = $3", [table.name, user, key]))
                    note(user, position, &touched)
                case .delete(let handle, let user, let key):
                    let table = slots[handle.slot]
                    guard table.entity != nil, position > 0 else {
                        statements.append(Statement("DELETE FROM rows WHERE tbl = $1 AND usr = $2 AND key = $3", [table.name, user, key]))
                        continue
                    }
                    statements.append(Statement("""
                        WITH d AS (DELETE FROM rows WHERE tbl = $1 AND usr = $2 AND key = $3 RETURNING key)
                        INSERT INTO tombstones (tbl, usr, key, seq, at) SELECT $1, $2, key, $4, $5 FROM d
                        ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = excluded.seq, at = excluded.at
                        """, [table.name, user, key, String(position), at]))
                    note(user, position, &touched)
                case .deleteUser(let user):
                    for sql in ["DELETE FROM rows WHERE usr = $1", "DELETE FROM tombstones WHERE usr = $1", "DELETE FROM unique_keys WHERE usr = $1"] {
                        statements.append(Statement(sql, [user]))
                    }
                case .claim(let key, let user):
                    statements.append(Statement("INSERT INTO unique_keys VALUES ($1, $2, $3) ON CONFLICT (namespace, value) DO UPDATE SET usr = excluded.usr",
                                                [key.namespace, key.value, user]))
                case .release(let key, let user):
                    statements.append(Statement("DELETE FROM unique_keys WHERE namespace = $1 AND value = $2 AND usr = $3", [key.namespace, key.value, user]))
                }
            case .tombstone(let handle, let user, let key):
                guard slots[handle.slot].entity != nil, position > 0 else { continue }
                statements.append(Statement("""
                    INSERT INTO tombstones (tbl, usr, key, seq, at) VALUES ($1, $2, $3, $4, $5)
                    ON CONFLICT (tbl, usr, key) DO UPDATE SET seq = excluded.seq, at = excluded.at
                    """, [handle.name, user, key, String(position), at]))
                note(user, position, &touched)
            case .feedCounter(let user):
                note(user, position, &touched)
            }
        }
        for user in touched {
            statements.append(Statement("""
                INSERT INTO users (usr, feed_seq, version) VALUES ($1, $2, 1)
                ON CONFLICT (usr) DO UPDATE SET feed_seq = greatest(users.feed_seq, $2), version = users.version + 1
                """, [user, String(restoredPositions[user] ?? 0)]))
        }
        statements.append(Statement("COMMIT"))
        let results = try main.run(statements)
        if let failed = results.first(where: { $0.error != nil })?.error {
            _ = try? main.run([Statement("ROLLBACK")])
            throw error(failed)
        }
    }

    /// Each `restore` committed its own changes: nothing is left to do.
    public func finishRestore() throws(StorageError) {}

    func note(_ user: String, _ position: UInt64, _ touched: inout Set<String>) {
        touched.insert(user)
        if position > restoredPositions[user] ?? 0 { restoredPositions[user] = position }
    }
}
