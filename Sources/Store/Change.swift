import JSON
import Storage

/// One change a transaction makes: the effect, never the input, so replay gives the same state whatever the clock says.
public enum Change: Sendable, Equatable {
    /// Sets row `key` of `user` in `table`.
    case put(table: String, user: String, key: String, value: JSON)
    /// Removes row `key` of `user` in `table` (nothing if absent).
    case delete(table: String, user: String, key: String)
    /// Removes every row of `user` in every table.
    case deleteUser(user: String)

    /// The text form (format 1 logs, `store export`): `["p", table, user, key, value]`, `["d", table, user, key]`, `["u", user]`.
    public var json: JSON {
        switch self {
        case .put(let t, let u, let k, let v): return ["p", .string(t), .string(u), .string(k), v]
        case .delete(let t, let u, let k): return ["d", .string(t), .string(u), .string(k)]
        case .deleteUser(let u): return ["u", .string(u)]
        }
    }

    /// Appends the binary log form (format 2): its `Head`, then the value of a put.
    public func writeBinary(to out: inout [UInt8]) {
        switch self {
        case .put(let t, let u, let k, let v):
            Head.put(table: t, user: u, key: k).write(to: &out)
            v.writeBinary(to: &out)
        case .delete(let t, let u, let k):
            Head.delete(table: t, user: u, key: k).write(to: &out)
        case .deleteUser(let u):
            Head.deleteUser(user: u).write(to: &out)
        }
    }

    /// Reads one change in the binary log form.
    public init(binary r: inout BinaryReader) throws(BinaryDecodeError) {
        switch try Head.read(&r) {
        case .put(let t, let u, let k): self = .put(table: t, user: u, key: k, value: try JSON.readBinary(&r))
        case .delete(let t, let u, let k): self = .delete(table: t, user: u, key: k)
        case .deleteUser(let u): self = .deleteUser(user: u)
        }
    }

    /// A binary change up to its value: an op byte `p`, `d` or `u`, then table, user and key (string
    /// bodies; only the user for `u`). A put's value follows in the binary form, written and read by
    /// whoever has it (a typed row when committing or replaying, a JSON value for `store export`).
    enum Head {
        case put(table: String, user: String, key: String)
        case delete(table: String, user: String, key: String)
        case deleteUser(user: String)

        func write(to out: inout [UInt8]) {
            switch self {
            case .put(let t, let u, let k):
                out.append(UInt8(ascii: "p"))
                Self.writeRow(t, u, k, &out)
            case .delete(let t, let u, let k):
                out.append(UInt8(ascii: "d"))
                Self.writeRow(t, u, k, &out)
            case .deleteUser(let u):
                out.append(UInt8(ascii: "u"))
                Binary.writeString(u, to: &out)
            }
        }

        private static func writeRow(_ table: String, _ user: String, _ key: String, _ out: inout [UInt8]) {
            Binary.writeString(table, to: &out)
            Binary.writeString(user, to: &out)
            Binary.writeString(key, to: &out)
        }

        static func read(_ r: inout BinaryReader) throws(BinaryDecodeError) -> Head {
            let offset = r.offset
            switch try r.byte() {
            case UInt8(ascii: "p"): return .put(table: try r.string(), user: try r.string(), key: try r.string())
            case UInt8(ascii: "d"): return .delete(table: try r.string(), user: try r.string(), key: try r.string())
            case UInt8(ascii: "u"): return .deleteUser(user: try r.string())
            default: throw BinaryDecodeError(offset: offset, "unknown change")
            }
        }
    }

    /// Reads the text log form (format 1).
    public init(json: JSON) throws(StorageError) {
        guard case .array(let a) = json, let op = a.first?.stringValue else { throw StorageError.corrupt("change is not an array") }
        func str(_ i: Int) throws(StorageError) -> String {
            guard i < a.count, let s = a[i].stringValue else { throw StorageError.corrupt("change field \(i) is not a string") }
            return s
        }
        switch (op, a.count) {
        case ("p", 5): self = .put(table: try str(1), user: try str(2), key: try str(3), value: a[4])
        case ("d", 4): self = .delete(table: try str(1), user: try str(2), key: try str(3))
        case ("u", 2): self = .deleteUser(user: try str(1))
        default: throw StorageError.corrupt("unknown change \(op)")
        }
    }
}

extension Transaction.Entry {
    /// The binary log form; the same bytes as `Change.writeBinary` of the equivalent change.
    func writeBinary(to out: inout [UInt8]) {
        switch self {
        case .put(let table, let user, let key, let row):
            Change.Head.put(table: table.name, user: user, key: key).write(to: &out)
            row.writeStored(to: &out)
        case .delete(let table, let user, let key):
            Change.Head.delete(table: table.name, user: user, key: key).write(to: &out)
        case .deleteUser(let user):
            Change.Head.deleteUser(user: user).write(to: &out)
        case .claim(let key, let user):
            Change.Head.put(table: UniqueKeys.tableName, user: user, key: key.rowKey).write(to: &out)
            ClaimRow().writeStored(to: &out)
        case .release(let key, let user):
            Change.Head.delete(table: UniqueKeys.tableName, user: user, key: key.rowKey).write(to: &out)
        }
    }
}
