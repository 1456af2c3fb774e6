import Storage

/// Rows fetched ahead of the `get`s that read them (`PostgresStore.prefetch`, `readAhead`), with the
/// writes of the batch laid over them: what each row holds in the batch's transaction now. Valid only
/// while the batch holds the row's user's lock, so the store forgets a user's rows when it lets go of
/// the lock (a request rolled back, the batch ended). Costs O(rows fetched) memory: a batch's requests
/// name at most a few rows each.
struct PrefetchedRows {
    /// A row as the batch's transaction holds it: its stored body as read (nil: no such row), or as a
    /// commit of the batch wrote it (nil: deleted), which no one reads back from the server.
    enum Held {
        case stored(String?)
        case written((any StoredRow)?)
    }

    struct Address: Hashable {
        let slot: Int
        let user: String
        let key: String
    }

    private var rows: [Address: Held] = [:]

    /// A scan read ahead (`StorageTable.prefetchScanOrdered`): its user, and its statement exactly.
    struct Scan: Hashable {
        let user: String
        let sql: String
        let params: [String?]
    }

    /// Scans read ahead and their rows. A write of the user drops them (no scan is laid over).
    private var scans: [Scan: [[String?]]] = [:]

    var isEmpty: Bool { rows.isEmpty && scans.isEmpty }

    func contains(slot: Int, user: String, key: String) -> Bool {
        rows[Address(slot: slot, user: user, key: key)] != nil
    }

    subscript(slot: Int, user: String, key: String) -> Held? {
        rows[Address(slot: slot, user: user, key: key)]
    }

    /// A row as read from the server: `body`, or nil when there is none.
    mutating func fetched(slot: Int, user: String, key: String, body: String?) {
        rows[Address(slot: slot, user: user, key: key)] = .stored(body)
    }

    /// A scan as read from the server.
    mutating func scanned(_ scan: Scan, rows: [[String?]]) {
        scans[scan] = rows
    }

    /// The rows of `scan`, when read ahead and no write of its user came since.
    func rows(of scan: Scan) -> [[String?]]? {
        scans.isEmpty ? nil : scans[scan]
    }

    /// A commit of the batch made these changes: rows held take their new value (a later request of the
    /// batch reads its predecessors' writes); rows not held stay unheld, so a big commit adds nothing.
    /// O(changes) lookups, O(rows held) for a user deleted whole.
    mutating func apply(_ entries: [Transaction.Entry]) {
        if !scans.isEmpty {
            let written = Set(entries.compactMap(\.user))
            scans = scans.filter { !written.contains($0.key.user) }
        }
        guard !rows.isEmpty else { return }
        for entry in entries {
            switch entry {
            case .put(let table, let user, let key, let row):
                let address = Address(slot: table.slot, user: user, key: key)
                if rows[address] != nil { rows[address] = .written(row) }
            case .delete(let table, let user, let key):
                let address = Address(slot: table.slot, user: user, key: key)
                if rows[address] != nil { rows[address] = .written(nil) }
            case .deleteUser(let user):
                for address in rows.keys where address.user == user { rows[address] = .written(nil) }
            case .claim, .release:
                break
            }
        }
    }

    /// Forgets the rows of `users`: the batch no longer holds their locks. O(rows held).
    mutating func forget(users: [String]) {
        guard !isEmpty, !users.isEmpty else { return }
        let gone = Set(users)
        rows = rows.filter { !gone.contains($0.key.user) }
        scans = scans.filter { !gone.contains($0.key.user) }
    }

    mutating func removeAll() {
        rows.removeAll(keepingCapacity: true)
        scans.removeAll()
    }
}
