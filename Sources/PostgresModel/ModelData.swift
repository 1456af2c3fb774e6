/// The tables of one schema as the kernel's migrations make them (`Schema.migrations`), and a
/// transaction's writes to them. Values are kept as PostgreSQL would return them, as text.
struct Pair: Hashable, Comparable {
    let tbl: String, usr: String
    static func < (a: Pair, b: Pair) -> Bool { (a.tbl, a.usr) < (b.tbl, b.usr) }
}

struct Row: Equatable {
    var ord: String?
    var body: String
    var seq: Int64?
    var at: Int64?
}

struct Tombstone: Equatable {
    var seq: Int64, at: Int64
}

struct UserRow: Equatable {
    var feedSeq: Int64, version: Int64
}

struct UniqueKeyID: Hashable, Comparable {
    let namespace: String, value: String
    static func < (a: UniqueKeyID, b: UniqueKeyID) -> Bool { (a.namespace, a.value) < (b.namespace, b.value) }
}

/// A row of any table, as the thing a writer locks (PostgreSQL's row lock: a second writer waits for
/// the first's transaction to end).
enum RowLock: Hashable {
    case row(Pair, String), tombstone(Pair, String), user(String), unique(UniqueKeyID), shared(String), listener(Int32), version
}

/// Committed contents of a schema. Rows are grouped per table and user (the kernel reads one user's
/// rows of one table at a time): a scan costs O(rows of that user and table), not O(all rows).
struct SchemaData {
    var rows: [Pair: [String: Row]] = [:]
    var tombstones: [Pair: [String: Tombstone]] = [:]
    var users: [String: UserRow] = [:]
    var unique: [UniqueKeyID: String] = [:]
    var shared: [String: String] = [:]
    var listeners: Set<Int32> = []
    var version: Int?
    /// Whether the schema's tables exist (the first migration ran).
    var created = false
}

/// What a transaction wrote, read through before the committed contents (read committed: a statement
/// sees what was committed when it starts, and its own transaction's writes). A savepoint is a copy.
struct Writes {
    var rows: [Pair: [String: Row?]] = [:]
    var tombstones: [Pair: [String: Tombstone?]] = [:]
    var users: [String: UserRow?] = [:]
    var unique: [UniqueKeyID: String?] = [:]
    var shared: [String: String?] = [:]
    var listeners: [Int32: Bool] = [:]
    var version: Int?
    var created = false
    /// Row locks taken (written or `FOR UPDATE`): released when the transaction or savepoint ends.
    var locks: Set<RowLock> = []
    /// Advisory locks of the transaction, released at its end (or at a rollback to before them).
    var advisory: Set<String> = []
    /// NOTIFYs, sent at commit.
    var notifies: [(channel: String, payload: String)] = []

    var isEmpty: Bool {
        rows.isEmpty && tombstones.isEmpty && users.isEmpty && unique.isEmpty && shared.isEmpty && listeners.isEmpty
            && version == nil && !created && notifies.isEmpty
    }

    /// Applies the writes to `data` (commit).
    func apply(to data: inout SchemaData) {
        for (pair, keys) in rows {
            for (key, row) in keys { data.rows[pair, default: [:]][key] = row }
            if data.rows[pair]?.isEmpty == true { data.rows[pair] = nil }
        }
        for (pair, keys) in tombstones {
            for (key, t) in keys { data.tombstones[pair, default: [:]][key] = t }
            if data.tombstones[pair]?.isEmpty == true { data.tombstones[pair] = nil }
        }
        for (k, v) in users { data.users[k] = v }
        for (k, v) in unique { data.unique[k] = v }
        for (k, v) in shared { data.shared[k] = v }
        for (pid, present) in listeners { if present { data.listeners.insert(pid) } else { data.listeners.remove(pid) } }
        if let version { data.version = max(data.version ?? 0, version) }
        if created { data.created = true }
    }
}

/// The committed contents seen through a transaction's writes: what one statement reads.
struct View {
    let data: SchemaData
    let writes: Writes

    func row(_ pair: Pair, _ key: String) -> Row? {
        if let w = writes.rows[pair]?[key] { return w }
        return data.rows[pair]?[key]
    }

    /// Every row of one table and user, by key.
    func rows(_ pair: Pair) -> [String: Row] {
        var out = data.rows[pair] ?? [:]
        for (key, row) in writes.rows[pair] ?? [:] { out[key] = row }
        return out
    }

    /// Every pair with rows of `tbl` (or of any table when nil), and of `usr` when given.
    func pairs(tbl: String?, usr: String? = nil) -> [Pair] {
        var out = Set<Pair>()
        for p in data.rows.keys where (tbl == nil || p.tbl == tbl) && (usr == nil || p.usr == usr) { out.insert(p) }
        for p in writes.rows.keys where (tbl == nil || p.tbl == tbl) && (usr == nil || p.usr == usr) { out.insert(p) }
        return out.sorted()
    }

    func tombstone(_ pair: Pair, _ key: String) -> Tombstone? {
        if let w = writes.tombstones[pair]?[key] { return w }
        return data.tombstones[pair]?[key]
    }

    func tombstones(_ pair: Pair) -> [String: Tombstone] {
        var out = data.tombstones[pair] ?? [:]
        for (key, t) in writes.tombstones[pair] ?? [:] { out[key] = t }
        return out
    }

    func tombstonePairs(usr: String? = nil) -> [Pair] {
        var out = Set<Pair>()
        for p in data.tombstones.keys where usr == nil || p.usr == usr { out.insert(p) }
        for p in writes.tombstones.keys where usr == nil || p.usr == usr { out.insert(p) }
        return out.sorted()
    }

    func user(_ usr: String) -> UserRow? {
        if let w = writes.users[usr] { return w }
        return data.users[usr]
    }

    var allUsers: [String: UserRow] {
        var out = data.users
        for (k, v) in writes.users { out[k] = v }
        return out
    }

    func unique(_ key: UniqueKeyID) -> String? {
        if let w = writes.unique[key] { return w }
        return data.unique[key]
    }

    var allUnique: [UniqueKeyID: String] {
        var out = data.unique
        for (k, v) in writes.unique { out[k] = v }
        return out
    }

    func shared(_ name: String) -> String? {
        if let w = writes.shared[name] { return w }
        return data.shared[name]
    }

    var listeners: Set<Int32> {
        var out = data.listeners
        for (pid, present) in writes.listeners { if present { out.insert(pid) } else { out.remove(pid) } }
        return out
    }

    var version: Int? { writes.version.map { max($0, data.version ?? 0) } ?? data.version }
    var created: Bool { writes.created || data.created }
}
