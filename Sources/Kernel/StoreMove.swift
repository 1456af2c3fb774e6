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
    /// Applies export lines, taken one at a time from `next` until it returns nil, to this kernel's
    /// store, which must be empty; commits every `batch` changes. Returns how many changes it applied.
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
        func change(_ c: JSON) throws {
            guard case .array(let a) = c, case .string(let op)? = a.first else { throw MoveError("a change is not [op, ...]: \(c)") }
            switch (op, a.count) {
            case ("p", 5): try put(a[1].stringValue, a[2].stringValue, a[3].stringValue, a[4])
            case ("d", 4): try delete(a[1].stringValue, a[2].stringValue, a[3].stringValue)
            case ("u", 2):
                guard let user = a[1].stringValue else { throw MoveError("a user deletion without a user") }
                tx.deleteUser(user)
            default: throw MoveError("an unknown change: \(c)")
            }
            staged += 1
            if staged >= batch { try flush() }
        }
        func put(_ table: String?, _ user: String?, _ key: String?, _ value: JSON) throws {
            guard let table, let user, let key else { throw MoveError("a row without table, user or key") }
            if table == Self.uniqueTable {
                tx.claim(try Self.uniqueKey(key), for: user)
            } else {
                guard let a = access[table] else { throw MoveError("table \(table) is unknown to this binary") }
                try a.put(&tx, user, key, value)
            }
        }
        func delete(_ table: String?, _ user: String?, _ key: String?) throws {
            guard let table, let user, let key else { throw MoveError("a delete without table, user or key") }
            if table == Self.uniqueTable {
                tx.release(try Self.uniqueKey(key), of: user)
            } else {
                guard let a = access[table] else { throw MoveError("table \(table) is unknown to this binary") }
                a.delete(&tx, user, key)
            }
        }
        while let line = try next() {
            switch line["type"]?.stringValue {
            case "snapshot": continue
            case "row":
                try put(line["table"]?.stringValue, line["user"]?.stringValue, line["key"]?.stringValue, line["value"] ?? .null)
                staged += 1
                if staged >= batch { try flush() }
            case "record":
                for c in line["changes"]?.arrayValue ?? [] { try change(c) }
            default:
                throw MoveError("not a line of store export: \(line.serialized.prefix(200))")
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

    /// The in-memory store's table of unique keys, as exports name it.
    static let uniqueTable = "store.unique"

    /// A unique key from its row key (`namespace NUL value`).
    static func uniqueKey(_ rowKey: String) throws -> UniqueKey {
        guard let nul = rowKey.firstIndex(of: "\u{0}") else { throw MoveError("a unique key without its namespace: \(rowKey)") }
        return UniqueKey(String(rowKey[..<nul]), String(rowKey[rowKey.index(after: nul)...]))
    }
}

/// Why a move between stores stopped.
public struct MoveError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
