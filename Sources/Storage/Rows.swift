import JSON

/// A row type a table stores. Its stored form is a JSON value: the log and snapshots keep it in the
/// binary form, `store export` shows it as JSON.
public protocol StoredRow: Sendable, Equatable {
    /// Decodes a stored row; throws when the stored form is not a valid row (damage or a format bug).
    init(stored: JSON) throws(StorageError)
    /// The stored form.
    var stored: JSON { get }
    /// Appends the stored form in the binary form. The default goes through `stored`; rows written on
    /// every request write it directly, and must write exactly the bytes the default would.
    func writeStored(to out: inout [UInt8])
    /// Reads the stored form from the binary form. The default goes through `init(stored:)`.
    init(binaryStored reader: inout BinaryReader) throws(StorageError)
    /// Whether `key` is a key the domain could have written for such a row (a date, for rows kept by
    /// day): `store import` refuses others, so no read meets a key it cannot parse. Default: any key.
    static func isValidKey(_ key: String) -> Bool
}

extension StoredRow {
    public static func isValidKey(_ key: String) -> Bool { true }

    public func writeStored(to out: inout [UInt8]) {
        stored.writeBinary(to: &out)
    }

    public init(binaryStored reader: inout BinaryReader) throws(StorageError) {
        let value: JSON
        do {
            value = try JSON.readBinary(&reader)
        } catch {
            throw StorageError.corrupt("\(Self.self): \(error)")
        }
        try self.init(stored: value)
    }
}

/// Why storage could not do something. Domains answer `unavailable` with -32050 and change nothing.
public enum StorageError: Error, Equatable, CustomStringConvertible {
    /// Writing failed (disk full, I/O error): nothing was applied.
    case unavailable(String)
    /// Stored data does not decode.
    case corrupt(String)
    /// A claimed unique key is held by another user: nothing was applied.
    case taken(UniqueKey)
    /// The request raced another one (on another kernel) and lost: nothing was applied, and running the
    /// whole request again, reads included, may succeed.
    case conflict(String)
    /// A commit whose outcome cannot be learnt (the connection broke during COMMIT and the server could
    /// not say in time): it may have been applied.
    case outcomeUnknown(String)

    public var description: String {
        switch self {
        case .unavailable(let m): return "storage unavailable: \(m)"
        case .corrupt(let m): return "corrupt data: \(m)"
        case .taken(let key): return "\(key.namespace) is held by another user"
        case .conflict(let m): return "conflict with a concurrent request: \(m)"
        case .outcomeUnknown(let m): return "outcome unknown: \(m)"
        }
    }
}
