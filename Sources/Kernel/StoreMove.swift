import Auth
import Chrono
import JSON
import JSONParsing
import Postgres
import Storage
import Store

/// Moving a deployment between a data dir and PostgreSQL: `store export` writes the rows as JSON lines,
/// `store import` checks every line, then restores them into an empty store with the feed positions and
/// times they had, so each user's feed, and every device's cursor into it, is the same after the move.
///
/// Lines are those of `store export` (protocol/storage.md, "Moving a deployment"): `row` (a stored row, a
/// unique key in the table `store.unique`; `seq` and `at` for a synced row), `tombstone`, `feed` (a
/// user's last position), and from a data dir `record` (a log record after the snapshot, applied in
/// order; change i of record n had position n << 20 | i) and `snapshot` (a header).
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
        try check.finish()
        var rest = lines[...]
        return try importRows(batch: batch) { rest.popFirst() }
    }

    /// Applies export lines, taken one at a time from `next` until it returns nil, to this kernel's
    /// store, which must be empty, `batch` changes at a time, keeping each change's feed position and
    /// time as the source had them (`restore`); the data dir makes them durable with one snapshot at the
    /// end. Returns how many changes it applied. The lines must have passed `importCheck()` (the caller
    /// keeps them for this second pass).
    /// Refuses a target store that holds anything: checked before the input is read, and again before
    /// the rows go in.
    public func checkImportTarget() throws {
        guard try storage.isEmpty() else { throw MoveError("the target store is not empty: import only into a new one") }
    }

    public func importRows(batch: Int = 1000, from next: () throws -> JSON?) throws -> Int {
        try checkImportTarget()
        let access = storage.storedAccess
        let now = SystemClock().now().milliseconds  // the time of changes an old export gives none
        var staged: [RestoredChange] = []
        var applied = 0
        func flush() throws {
            guard !staged.isEmpty else { return }
            try storage.restore(staged)
            applied += staged.count
            staged.removeAll(keepingCapacity: true)
        }
        func table(_ name: String) throws -> StoredAccess {
            guard let a = access[name] else { throw MoveError("table \(MoveError.quote(name)) is unknown to this binary") }
            return a
        }
        while let line = try next() {
            for (change, position, at) in try ImportCheck.changes(of: line) {
                let kind: RestoredChange.Kind
                switch change {
                case .put(let name, let user, let key, let value):
                    if name == ImportCheck.uniqueTable {
                        kind = .change(.claim(try ImportCheck.uniqueKey(key), user: user))
                    } else {
                        var tx = Transaction()
                        try table(name).put(&tx, user, key, value)
                        guard let entry = tx.entries.first else { continue }
                        kind = .change(entry)
                    }
                case .delete(let name, let user, let key):
                    kind = name == ImportCheck.uniqueTable ? .change(.release(try ImportCheck.uniqueKey(key), user: user))
                        : .change(.delete(try table(name).handle, user: user, key: key))
                case .deleteUser(let user):
                    kind = .change(.deleteUser(user))
                case .tombstone(let name, let user, let key):
                    kind = .tombstone(try table(name).handle, user: user, key: key)
                case .feedCounter(let user):
                    kind = .feedCounter(user: user)
                }
                staged.append(RestoredChange(kind, position: position, at: at ?? now))
                if staged.count >= batch { try flush() }
            }
        }
        try flush()
        try storage.finishRestore()
        return applied
    }

    /// Writes every row of a PostgreSQL store as `store export` lines (a data dir is exported offline,
    /// from its files). Throws when the kernel's store is not PostgreSQL.
    public func exportRows(_ emit: (JSON) -> Void) throws {
        guard let postgres = storage as? PostgresStore else { throw MoveError("export of a data dir reads its files: use --data-dir") }
        var bad: String?
        try postgres.exportRows { e in
            if e.table.isEmpty {
                emit(["type": "feed", "user": .string(e.user), "last": .int(e.seq ?? 0)])
                return
            }
            var line = JSONObject([("type", e.body == nil ? "tombstone" : "row"), ("table", .string(e.table)), ("user", .string(e.user)),
                                   ("key", .string(e.key))])
            if let body = e.body {
                guard let value = try? JSON.parseAllowingNul(Array(body.utf8)) else {
                    bad = bad ?? "\(MoveError.quote(e.table)) \(MoveError.quote(e.user)) \(MoveError.quote(e.key))"
                    return
                }
                line["value"] = value
            }
            if let seq = e.seq, let at = e.at {
                line["seq"] = .int(seq)
                line["at"] = .int(at)
            }
            emit(.object(line))
        }
        if let bad { throw MoveError("a stored row does not parse: \(bad)") }
    }

}

/// The last line of `store export`, `{"type": "end", "lines": N, "crc32c": "…"}`: how many lines came
/// before it and the CRC-32C of their bytes (each with its newline), so that `store import` takes a whole
/// export only, never one cut short by a full disk, a broken pipe or `head`. O(1) memory.
public struct ExportTrailer {
    public static let type = "end"
    public private(set) var lines = 0
    private var crc: UInt32 = 0

    public init() {}

    /// Counts one line (its bytes, without the newline).
    public mutating func add(_ bytes: [UInt8]) {
        lines += 1
        crc = bytes.withUnsafeBytes { CRC32C.update(crc, $0) }
        crc = withUnsafeBytes(of: UInt8(0x0A)) { CRC32C.update(crc, $0) }
    }

    /// The trailer line for the lines counted.
    public var line: JSON { ["type": .string(Self.type), "lines": .int(Int64(lines)), "crc32c": .string(Self.hex(crc))] }

    /// Checks a trailer against the lines counted before it.
    public func check(_ trailer: JSON) throws(MoveError) {
        guard trailer["lines"]?.intValue == Int64(lines) else {
            throw MoveError("the export's end line counts \(MoveError.quote(trailer["lines"]?.serialized ?? "nothing")) lines, but \(lines) came before it")
        }
        guard trailer["crc32c"]?.stringValue == Self.hex(crc) else {
            throw MoveError("the lines before the export's end line are not the ones exported (their CRC-32C differs)")
        }
    }

    private static func hex(_ v: UInt32) -> String {
        let digits = String(v, radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
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
    /// Users with an account row (`auth.users` `profile`): an email or identity must belong to one.
    private var accounts = Set<String>()
    static let accountTable = "auth.users", accountKey = "profile"

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
        /// A deleted synced row's feed entry.
        case tombstone(table: String, user: String, key: String)
        /// A user's last feed position given.
        case feedCounter(String)
    }

    /// Checks one line; throws saying what is wrong with it (content quoted).
    public mutating func line(_ line: JSON) throws(MoveError) {
        for (change, _, _) in try Self.changes(of: line) {
            switch change {
            case .put(let table, let user, let key, let value):
                guard !user.isEmpty else { throw MoveError("a row of \(MoveError.quote(table)) without a user") }
                try Self.noNul(table, user, table == Self.uniqueTable ? "" : key)
                if table == Self.uniqueTable {
                    try claim(Self.uniqueKey(key), user)
                    continue
                }
                guard let a = access[table] else { throw MoveError("table \(MoveError.quote(table)) is unknown to this binary") }
                if table == Self.accountTable, key == Self.accountKey { accounts.insert(user) }
                var scratch = Transaction()
                do throws(StorageError) {
                    try a.put(&scratch, user, key, value)
                } catch {
                    let why = if case .corrupt(let m) = error { m } else { error.description }
                    throw MoveError("\(MoveError.quote(table)) row \(MoveError.quote(key)) of user \(MoveError.quote(user)) is not one "
                        + "the kernel writes: \(MoveError.quote(why))")
                }
            case .delete(let table, let user, let key):
                try Self.noNul(table, user, table == Self.uniqueTable ? "" : key)
                if table == Self.uniqueTable {
                    let k = try Self.uniqueKey(key)
                    if holders[k] == user {
                        holders[k] = nil
                        held[user]?.remove(k)
                    }
                } else if access[table] == nil {
                    throw MoveError("table \(MoveError.quote(table)) is unknown to this binary")
                } else if table == Self.accountTable, key == Self.accountKey {
                    accounts.remove(user)
                }
            case .deleteUser(let user):
                try Self.noNul(user)
                for k in held.removeValue(forKey: user) ?? [] { holders[k] = nil }
                accounts.remove(user)
            case .tombstone(let table, let user, let key):
                guard !user.isEmpty, access[table] != nil else { throw MoveError("a tombstone of table \(MoveError.quote(table)) that is unknown, or without a user") }
                try Self.noNul(user, key)
            case .feedCounter(let user):
                guard !user.isEmpty else { throw MoveError("a feed counter without a user") }
                try Self.noNul(user)
            }
        }
    }

    /// Checks what only the whole file shows, after its last line: every email and sign-in identity
    /// belongs to a user whose account is in the file (a claim without one leaves the address dead:
    /// sign-in finds no account, sign-up finds it taken). O(unique keys).
    public func finish() throws(MoveError) {
        for (key, user) in holders where key.namespace.hasPrefix("auth.") && !accounts.contains(user) {
            throw MoveError("the \(MoveError.quote(key.namespace)) key \(MoveError.quote(key.value)) belongs to user \(MoveError.quote(user)), "
                + "whose account is not in the file")
        }
    }

    /// Refuses U+0000 in names no method can write it in (users, tables, keys): PostgreSQL's text cannot
    /// hold it, and a data dir would keep two keys that another store makes one. A unique key's row key
    /// has exactly one, between namespace and value (`uniqueKey`).
    static func noNul(_ names: String...) throws(MoveError) {
        for name in names where name.utf8.contains(0) { throw MoveError("\(MoveError.quote(name)) holds U+0000, which no method writes") }
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

    /// The changes a line makes, in order, each with the feed position and commit time it had (0 and
    /// nil where the line gives none); throws for a line that is not one of `store export`.
    static func changes(of line: JSON) throws(MoveError) -> [(Change, position: UInt64, at: Int64?)] {
        let at = try number(line, "at", in: 0...Self.latestTime)
        switch line["type"]?.stringValue {
        case "snapshot", ExportTrailer.type: return []
        case "row", "tombstone":
            let position = try number(line, "seq", in: 0...Self.lastPosition).map(UInt64.init) ?? 0
            guard let table = line["table"]?.stringValue, let user = line["user"]?.stringValue, let key = line["key"]?.stringValue else {
                throw MoveError("a row without table, user or key")
            }
            guard line["type"] == "row" else { return [(.tombstone(table: table, user: user, key: key), position, at)] }
            return [(.put(table: table, user: user, key: key, value: line["value"] ?? .null), position, at)]
        case "feed":
            guard let user = line["user"]?.stringValue, let last = try number(line, "last", in: 0...Self.lastPosition) else {
                throw MoveError("a feed line without user or last")
            }
            return [(.feedCounter(user), UInt64(last), nil)]
        case "record":
            guard case .array(let changes)? = line["changes"] else { throw MoveError("a record without its changes") }
            // Change i of record n had feed position n << 20 | i (see storage.md).
            let record = try number(line, "seq", in: 0...(Self.lastPosition >> 20)).map(UInt64.init)
            guard changes.count < 1 << 20 else { throw MoveError("a record of \(changes.count) changes, more than a record holds") }
            return try changes.enumerated().map { (i, c) throws(MoveError) -> (Change, position: UInt64, at: Int64?) in
                let position = record.map { $0 << 20 | UInt64(i) } ?? 0
                guard case .array(let a) = c, case .string(let op)? = a.first else {
                    throw MoveError("a change is not [op, ...]: \(MoveError.quote(c.serialized))")
                }
                switch (op, a.count) {
                case ("p", 5):
                    guard let table = a[1].stringValue, let user = a[2].stringValue, let key = a[3].stringValue else { break }
                    return (.put(table: table, user: user, key: key, value: a[4]), position, at)
                case ("d", 4):
                    guard let table = a[1].stringValue, let user = a[2].stringValue, let key = a[3].stringValue else { break }
                    return (.delete(table: table, user: user, key: key), position, at)
                case ("u", 2):
                    guard let user = a[1].stringValue else { break }
                    return (.deleteUser(user), position, at)
                default: break
                }
                throw MoveError("an unknown change: \(MoveError.quote(c.serialized))")
            }
        default:
            throw MoveError("not a line of store export: \(MoveError.quote(line.serialized))")
        }
    }

    /// The greatest feed position a line may carry: 2^53 - 1, so that a position stays exact in every
    /// JSON reader (JavaScript's too) and the kernel's next positions can never overflow.
    static let lastPosition: Int64 = 1 << 53 - 1
    /// The latest commit time a line may carry: the last millisecond of the year 9999.
    static let latestTime: Int64 = 253_402_300_799_999

    /// Member `name` of `line` as an integer within `range`; nil when absent; refused when it is there but
    /// no integer, or out of range (a position past 2^63 would stop every user's feed).
    private static func number(_ line: JSON, _ name: String, in range: ClosedRange<Int64>) throws(MoveError) -> Int64? {
        guard let value = line[name], value != .null else { return nil }
        guard let n = value.intValue, range.contains(n) else {
            throw MoveError("\(name) \(MoveError.quote(value.serialized)) is not an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return n
    }

    /// A unique key from its row key (`namespace NUL value`).
    static func uniqueKey(_ rowKey: String) throws(MoveError) -> UniqueKey {
        guard let nul = rowKey.firstIndex(of: "\u{0}") else { throw MoveError("a unique key without its namespace: \(MoveError.quote(rowKey))") }
        let key = UniqueKey(String(rowKey[..<nul]), String(rowKey[rowKey.index(after: nul)...]))
        try noNul(key.value)
        return key
    }
}
