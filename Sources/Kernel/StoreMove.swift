import Auth
import JSON
import Postgres
import Storage
import Store

/// Moving a deployment between a data dir and PostgreSQL: `store export` writes the rows as JSON lines,
/// `store import` applies such lines to an empty store through ordinary commits.
///
/// Lines are those of `store export`: `{"type":"row","table","user","key","value"}` (a stored row, a
/// unique key in the table `store.unique`), and from a data dir also `{"type":"record","changes"}`
/// (a log record after the snapshot, applied in order) and `{"type":"snapshot"}` (a header). Feed
/// positions are not carried: the target gives every imported change a new one. A cursor from before
/// the move is then either ahead of the new feed (refused with `out_of_range`, and the client syncs from
/// the start) or behind all of it (the client gets every record again): nothing is missed.
extension Kernel {
    /// A check of export lines against what the domains could have written, which changes nothing:
    /// `store import` runs every line through it before it applies any, so a file with one bad line is
    /// refused whole.
    public func importCheck() -> ImportCheck {
        ImportCheck(access: storage.storedAccess, uniqueValues: ["auth.email": UniqueKey.isEmailKey])
    }

    /// Checks, then applies, export lines (`storeImport` of lines held in memory: tests).
    public func importRows(_ lines: [JSON], batch: Int = 1000) throws -> Int {
        var check = importCheck()
        for (i, line) in lines.enumerated() {
            do { try check.line(line) } catch { throw MoveError("line \(i + 1): \(error)") }
        }
        var rest = lines[...]
        return try importRows(batch: batch) { rest.popFirst() }
    }

    /// Applies export lines, taken one at a time from `next` until it returns nil, to this kernel's
    /// store, which must be empty; commits every `batch` changes. Returns how many changes it applied.
    /// The lines must have passed `importCheck()` (the caller keeps them for this second pass).
    public func importRows(batch: Int = 1000, from next: () throws -> JSON?) throws -> Int {
        guard try storage.isEmpty() else { throw MoveError("the target store is not empty: import only into a new one") }
        let access = storage.storedAccess
        var tx = Transaction()
        var staged = 0, applied = 0
        func flush() throws {
            guard !tx.isEmpty else { return }
            try storage.commit(tx)
            storage.endRequest()
            let (failed, fatal) = storage.flushCommits()
            if fatal || !failed.isEmpty { throw MoveError("committing imported rows failed") }
            applied += staged
            tx = Transaction()
            staged = 0
        }
        func count() throws {
            staged += 1
            if staged >= batch { try flush() }
        }
        while let line = try next() {
            for change in try ImportCheck.changes(of: line) {
                switch change {
                case .put(let table, let user, let key, let value):
                    if table == ImportCheck.uniqueTable {
                        tx.claim(try ImportCheck.uniqueKey(key), for: user)
                    } else {
                        guard let a = access[table] else { throw MoveError("table \(MoveError.quote(table)) is unknown to this binary") }
                        try a.put(&tx, user, key, value)
                    }
                case .delete(let table, let user, let key):
                    if table == ImportCheck.uniqueTable {
                        tx.release(try ImportCheck.uniqueKey(key), of: user)
                    } else {
                        guard let a = access[table] else { throw MoveError("table \(MoveError.quote(table)) is unknown to this binary") }
                        a.delete(&tx, user, key)
                    }
                case .deleteUser(let user):
                    tx.deleteUser(user)
                }
                try count()
            }
        }
        try flush()
        return applied
    }

    /// Writes every row of a PostgreSQL store as `store export` lines (a data dir is exported offline,
    /// from its files). Throws when the kernel's store is not PostgreSQL.
    public func exportRows(_ emit: (JSON) -> Void) throws {
        guard let postgres = storage as? PostgresStore else { throw MoveError("export of a data dir reads its files: use --data-dir") }
        var bad: String?
        try postgres.exportRows { table, user, key, body in
            guard let value = try? JSON.parse(body) else {
                bad = bad ?? "\(table) \(user) \(key)"
                return
            }
            emit(["type": "row", "table": .string(table), "user": .string(user), "key": .string(key), "value": value])
        }
        if let bad { throw MoveError("a stored row does not parse: \(bad)") }
    }

}

/// Why a move between stores stopped.
public struct MoveError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }

    /// `text` as a quoted string that is safe on a terminal: printable ASCII as is, everything else
    /// (control characters, escape sequences, C1 controls, any non-ASCII) as `\\u{...}`. Messages about
    /// rows quote their content this way, since it is data, not the kernel's words.
    public static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars.prefix(200) {
            switch scalar.value {
            case 0x22: out += "\\\""
            case 0x5C: out += "\\\\"
            case 0x20...0x7E: out.unicodeScalars.append(scalar)
            default: out += "\\u{" + String(scalar.value, radix: 16) + "}"
            }
        }
        return out + (text.unicodeScalars.count > 200 ? "…\"" : "\"")
    }
}

/// Checks `store export` lines before any is applied: each row decodes as its table's row type, with a
/// key the table can hold and values within the domain's bounds; unique keys are as the kernel claims
/// them, and no key ends up claimed by two users. Costs memory for the unique keys only (a dictionary
/// of every key and, per user, the keys held: O(keys)); rows are checked and forgotten.
public struct ImportCheck {
    let access: [String: StoredAccess]
    /// Per unique-key namespace, the values the kernel can claim (a normalised email).
    let uniqueValues: [String: (String) -> Bool]
    private var holders: [UniqueKey: String] = [:]
    private var held: [String: Set<UniqueKey>] = [:]

    init(access: [String: StoredAccess], uniqueValues: [String: (String) -> Bool]) {
        self.access = access
        self.uniqueValues = uniqueValues
    }

    /// The in-memory store's table of unique keys, as exports name it.
    static let uniqueTable = "store.unique"

    /// A change an export line makes.
    enum Change {
        case put(table: String, user: String, key: String, value: JSON)
        case delete(table: String, user: String, key: String)
        case deleteUser(String)
    }

    /// Checks one line; throws saying what is wrong with it (content quoted).
    public mutating func line(_ line: JSON) throws(MoveError) {
        for change in try Self.changes(of: line) {
            switch change {
            case .put(let table, let user, let key, let value):
                guard !user.isEmpty else { throw MoveError("a row of \(MoveError.quote(table)) without a user") }
                if table == Self.uniqueTable {
                    try claim(Self.uniqueKey(key), user)
                    continue
                }
                guard let a = access[table] else { throw MoveError("table \(MoveError.quote(table)) is unknown to this binary") }
                var scratch = Transaction()
                do throws(StorageError) {
                    try a.put(&scratch, user, key, value)
                } catch {
                    let why = if case .corrupt(let m) = error { m } else { error.description }
                    throw MoveError("\(MoveError.quote(table)) row \(MoveError.quote(key)) of user \(MoveError.quote(user)) is not one "
                        + "the kernel writes: \(MoveError.quote(why))")
                }
            case .delete(let table, let user, let key):
                if table == Self.uniqueTable {
                    let k = try Self.uniqueKey(key)
                    if holders[k] == user {
                        holders[k] = nil
                        held[user]?.remove(k)
                    }
                } else if access[table] == nil {
                    throw MoveError("table \(MoveError.quote(table)) is unknown to this binary")
                }
            case .deleteUser(let user):
                for k in held.removeValue(forKey: user) ?? [] { holders[k] = nil }
            }
        }
    }

    private mutating func claim(_ key: UniqueKey, _ user: String) throws(MoveError) {
        if let check = uniqueValues[key.namespace], !check(key.value) {
            throw MoveError("the \(MoveError.quote(key.namespace)) key \(MoveError.quote(key.value)) of user \(MoveError.quote(user)) "
                + "is not in the form the kernel claims it (sign-in could never find it)")
        }
        if let other = holders[key], other != user {
            throw MoveError("the \(MoveError.quote(key.namespace)) key \(MoveError.quote(key.value)) is held by two users, "
                + "\(MoveError.quote(other)) and \(MoveError.quote(user))")
        }
        holders[key] = user
        held[user, default: []].insert(key)
    }

    /// The changes a line makes, in order; throws for a line that is not one of `store export`.
    static func changes(of line: JSON) throws(MoveError) -> [Change] {
        switch line["type"]?.stringValue {
        case "snapshot": return []
        case "row":
            guard let table = line["table"]?.stringValue, let user = line["user"]?.stringValue, let key = line["key"]?.stringValue else {
                throw MoveError("a row without table, user or key")
            }
            return [.put(table: table, user: user, key: key, value: line["value"] ?? .null)]
        case "record":
            guard case .array(let changes)? = line["changes"] else { throw MoveError("a record without its changes") }
            return try changes.map { (c) throws(MoveError) -> Change in
                guard case .array(let a) = c, case .string(let op)? = a.first else {
                    throw MoveError("a change is not [op, ...]: \(MoveError.quote(c.serialized))")
                }
                switch (op, a.count) {
                case ("p", 5):
                    guard let table = a[1].stringValue, let user = a[2].stringValue, let key = a[3].stringValue else { break }
                    return .put(table: table, user: user, key: key, value: a[4])
                case ("d", 4):
                    guard let table = a[1].stringValue, let user = a[2].stringValue, let key = a[3].stringValue else { break }
                    return .delete(table: table, user: user, key: key)
                case ("u", 2):
                    guard let user = a[1].stringValue else { break }
                    return .deleteUser(user)
                default: break
                }
                throw MoveError("an unknown change: \(MoveError.quote(c.serialized))")
            }
        default:
            throw MoveError("not a line of store export: \(MoveError.quote(line.serialized))")
        }
    }

    /// A unique key from its row key (`namespace NUL value`).
    static func uniqueKey(_ rowKey: String) throws(MoveError) -> UniqueKey {
        guard let nul = rowKey.firstIndex(of: "\u{0}") else { throw MoveError("a unique key without its namespace: \(MoveError.quote(rowKey))") }
        return UniqueKey(String(rowKey[..<nul]), String(rowKey[rowKey.index(after: nul)...]))
    }
}
