import FoundationEssentials
import Storage

/// The database schema as versioned migrations, applied at start in one transaction under an advisory
/// lock (two kernels starting together migrate once). Every object lives in one schema; nothing is
/// written to `auth` or `public`; row-level security is on with no policies, so a Supabase project's
/// `anon` and `authenticated` roles see nothing.
enum Schema {
    /// The migrations, in order: migration i brings the schema to version i + 1. Append only.
    static let migrations: [[String]] = [
        [
            // Every table's rows: one generic table, keyed like the in-memory store's partitions. `ord` is the
            // second order's key (head and row key together); `seq` the feed position of a synced row's last
            // change, per user. `body` is the row's stored JSON as text, kept exactly (no jsonb).
            """
            CREATE TABLE rows (tbl text COLLATE "C" NOT NULL, usr text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
                ord text COLLATE "C", body text NOT NULL, seq bigint, at bigint, PRIMARY KEY (tbl, usr, key))
            """,
            "CREATE INDEX rows_ordered ON rows (tbl, usr, ord) WHERE ord IS NOT NULL",
            "CREATE INDEX rows_all_ordered ON rows (tbl, ord, usr) WHERE ord IS NOT NULL",
            "CREATE INDEX rows_feed ON rows (usr, seq) WHERE seq IS NOT NULL",
            // A deleted synced row: its feed entry.
            """
            CREATE TABLE tombstones (tbl text COLLATE "C" NOT NULL, usr text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
                seq bigint NOT NULL, at bigint NOT NULL, PRIMARY KEY (tbl, usr, key))
            """,
            "CREATE INDEX tombstones_feed ON tombstones (usr, seq)",
            // Per user: the last feed position given (taken under the user's lock, so a user's feed is in
            // commit order) and a version that every commit touching the user moves.
            """
            CREATE TABLE users (usr text COLLATE "C" PRIMARY KEY, feed_seq bigint NOT NULL DEFAULT 0,
                version bigint NOT NULL DEFAULT 0)
            """,
            """
            CREATE TABLE unique_keys (namespace text COLLATE "C" NOT NULL, value text COLLATE "C" NOT NULL,
                usr text COLLATE "C" NOT NULL, PRIMARY KEY (namespace, value))
            """,
            "CREATE INDEX unique_keys_user ON unique_keys (usr)",
            // Settings every kernel on the database shares (the JWT secret when none is configured).
            "CREATE TABLE shared (name text COLLATE \"C\" PRIMARY KEY, value text NOT NULL)",
            // A claim fails with SQLSTATE HK001 when another user holds the key, which aborts the
            // transaction it is pipelined in.
            """
            CREATE FUNCTION claim(ns text, val text, owner text) RETURNS void LANGUAGE plpgsql AS $$
            DECLARE holder text;
            BEGIN
                INSERT INTO unique_keys VALUES (ns, val, owner) ON CONFLICT (namespace, value) DO NOTHING;
                IF NOT FOUND THEN
                    SELECT usr INTO holder FROM unique_keys WHERE namespace = ns AND value = val;
                    IF holder IS DISTINCT FROM owner THEN
                        RAISE EXCEPTION USING ERRCODE = 'HK001', MESSAGE = ns;
                    END IF;
                END IF;
            END $$
            """,
            "ALTER TABLE rows ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE tombstones ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE users ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE unique_keys ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE shared ENABLE ROW LEVEL SECURITY",
        ],
        [
            // Server processes of kernels listening for changes (some host subscribed): commits announce
            // their changes only while there is one.
            "CREATE TABLE listeners (pid int PRIMARY KEY)",
            "ALTER TABLE listeners ENABLE ROW LEVEL SECURITY",
        ],
        [
            // A user's lock taken only if free: a batch that already holds other users' locks must not
            // wait for another kernel's batch (each could hold what the other waits for).
            """
            CREATE FUNCTION lock_or_busy(k bigint) RETURNS void LANGUAGE plpgsql AS $$
            BEGIN
                IF NOT pg_try_advisory_xact_lock(k) THEN
                    RAISE EXCEPTION USING ERRCODE = 'HK002', MESSAGE = 'the user is busy on another kernel';
                END IF;
            END $$
            """,
        ],
        [
            // Throttle rows are kept in the order they are spent, so sign-ins prune them (`Throttle.expiry`:
            // the newest time plus an hour, 15 digits, then the key); rows written before had no order.
            """
            UPDATE rows SET ord = lpad((coalesce((SELECT max(e.v::bigint) FROM jsonb_array_elements_text(rows.body::jsonb -> 'failures') AS e(v)), 0)
                + 3600000)::text, 15, '0') || key WHERE tbl = 'auth.throttle' AND ord IS NULL
            """,
        ],
    ]

    /// The version this binary brings a database to.
    static var version: Int { migrations.count }

    /// Quotes an identifier for SQL.
    static func quote(_ name: String) -> String {
        "\"" + name.replacing("\"", with: "\"\"") + "\""
    }

    /// Creates or upgrades `schema` to `version`. Throws `.unavailable` when the database is newer than
    /// this binary (`newer`), or when a statement fails.
    static func migrate(_ connection: any DatabaseSession, schema: String) throws(MigrationError) -> (from: Int, to: Int) {
        let q = quote(schema)
        // A fixed lock id: migrations of every kernel on this database take turns. The lock is the
        // transaction's, so that nothing outlives it in the session (a transaction-mode pooler hands the
        // next transaction to another server connection).
        var committed = false
        defer { if !committed { _ = try? connection.run([Statement("ROLLBACK")]) } }
        do {
            try check(connection.run([
                Statement("BEGIN"),
                Statement("SELECT pg_advisory_xact_lock(7230450331)"),
                Statement("CREATE SCHEMA IF NOT EXISTS \(q)"),
                Statement("CREATE TABLE IF NOT EXISTS \(q).schema_version (version int NOT NULL)"),
                Statement("ALTER TABLE \(q).schema_version ENABLE ROW LEVEL SECURITY"),
            ]))
            let current = Int(try check(connection.run([Statement("SELECT max(version) FROM \(q).schema_version")]))[0].scalar ?? "0") ?? 0
            if current > version { throw MigrationError.newer(database: current, binary: version) }
            var statements = [Statement("SET LOCAL search_path TO \(q)")]
            if current < version {
                for migration in migrations[current...] { statements += migration.map { Statement($0) } }
                statements.append(Statement("INSERT INTO schema_version VALUES (\(version))"))
            }
            statements.append(Statement("COMMIT"))
            let results = try connection.run(statements)
            if let failed = results.first(where: { $0.error != nil }) { throw MigrationError.failed(failed.error!.message) }
            committed = true
            return (current, version)
        } catch let error as StorageError {
            throw MigrationError.failed(error.description)
        } catch let error as MigrationError {
            throw error
        } catch {
            throw MigrationError.failed("\(error)")
        }
    }

    @discardableResult
    static func check(_ results: [StatementResult]) throws(StorageError) -> [StatementResult] {
        if let failed = results.first(where: { $0.error != nil }) {
            throw StorageError.unavailable(failed.error!.message)
        }
        return results
    }
}

/// Why the schema could not be brought to this binary's version.
public enum MigrationError: Error, CustomStringConvertible {
    case newer(database: Int, binary: Int)
    case failed(String)

    public var description: String {
        switch self {
        case .newer(let database, let binary):
            return "the database schema is version \(database), newer than this binary's \(binary): upgrade healthkernel"
        case .failed(let message): return "migrating the schema failed: \(message)"
        }
    }
}
