import Chrono
import JSON
import JSONRPC
import Storage

extension RPCError {
    /// The RPC form of a store failure: -32050 when nothing was applied, -32603 for data that does not decode.
    public static func from(_ error: StorageError) -> RPCError {
        switch error {
        case .unavailable(let m): return .storageUnavailable("Storage unavailable: \(m); nothing was applied")
        case .conflict(let m): return .storageConflict(m)
        case .outcomeUnknown(let m): return .outcomeUnknown(m)
        case .corrupt(let m):
            // -32603 for this request only; the kernel serves on, and the log names the row.
            var e = RPCError.internalError
            e.logDetail = "a stored row cannot be read: \(m)"
            return e
        // Domains check a key before they claim it, so a claim refused at commit lost a race to a request
        // on another kernel. The request runs again from its first read, where the domain's own check sees
        // the winner and answers as it would have had the winner come first (email_taken, ...).
        case .taken(let key): return .storageConflict("the \(key.namespace) was taken by a concurrent request")
        }
    }
}

extension CallContext {
    /// The calling user's id; user methods always have one (the dispatcher authenticated it).
    public func userID() throws(RPCError) -> String {
        guard let user = try requireIdentity().userId else { throw RPCError.internalError }
        return user
    }
}

/// Shows a synced entity of a user as its own read method returns it (for `sync.changes` with
/// `includeData`); nil when the entity no longer exists.
public typealias EntityRenderer = (_ user: String, _ id: String, _ now: Timestamp) throws(RPCError) -> JSON?

extension CalendarDate: FieldDecodable {
    /// A `YYYY-MM-DD` string naming a day that exists; else `invalid_date`.
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> CalendarDate {
        let text = try String.decode(value, at: path)
        guard let date = CalendarDate(text) else {
            throw FieldError(field: path, reason: "invalid_date", message: "\(path) must be an existing date as YYYY-MM-DD")
        }
        return date
    }
}

extension Timestamp: FieldDecodable {
    /// An RFC 3339 timestamp with an offset (`Z` or `±hh:mm`); else `invalid_date`.
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> Timestamp {
        let text = try String.decode(value, at: path)
        guard text.utf8.count <= 40, let t = Timestamp(rfc3339: text) else {
            throw FieldError(field: path, reason: "invalid_date", message: "\(path) must be an RFC 3339 timestamp with an offset")
        }
        return t
    }
}

extension Zone: FieldDecodable {
    /// An IANA time zone name known to the system's tz database; else `invalid_timezone`.
    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> Zone {
        let text = try String.decode(value, at: path)
        guard let zone = Zone.named(text) else {
            throw FieldError(field: path, reason: "invalid_timezone", message: "\(path) must be an IANA time zone name")
        }
        return zone
    }
}

extension CalendarDate: ParamType {
    public static var schema: JSON { ["type": "string", "format": "date", "description": "YYYY-MM-DD, an existing day"] }
}

extension Timestamp: ParamType {
    public static var schema: JSON { ["type": "string", "format": "date-time", "description": "RFC 3339 with an offset"] }
}

extension Zone: ParamType {
    public static var schema: JSON { ["type": "string", "description": "IANA time zone name"] }
}

/// A UUID param, in canonical lowercase form whatever case it was sent in.
public struct CanonicalUUID: ParamType, Sendable {
    public let text: String

    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> CanonicalUUID {
        guard case .string(let raw) = value, let id = Identifiers.canonicalUUID(raw) else {
            throw FieldError(field: path, reason: "invalid_params", message: "\(path) must be a UUID")
        }
        return CanonicalUUID(text: id)
    }

    public static var schema: JSON { ["type": "string", "format": "uuid"] }
}

/// A param that is an RFC 3339 timestamp or a `YYYY-MM-DD` date (a whole UTC day).
public enum DayOrInstant: ParamType, Sendable {
    case day(CalendarDate)
    case instant(Timestamp)

    public static func decode(_ value: JSON, at path: String) throws(FieldError) -> DayOrInstant {
        if case .string(let text) = value, text.utf8.count == 10 { return .day(try CalendarDate.decode(value, at: path)) }
        return .instant(try Timestamp.decode(value, at: path))
    }

    public static var schema: JSON { ["type": "string"] }

    /// The instant: a day's start, or with `endOfDay` the start of the next day.
    public func instant(endOfDay: Bool) -> Timestamp {
        switch self {
        case .instant(let t): return t
        case .day(let date): return Timestamp(seconds: Int64(date.daysSinceEpoch + (endOfDay ? 1 : 0)) * 86_400)
        }
    }
}

/// The instants a stored row may hold: 1900-01-01 through 9999-12-31 (milliseconds since 1970). Inputs
/// are checked against narrower floors; this bound keeps every date computation on stored data in range.
public enum Instants {
    public static let stored: ClosedRange<Int64> = -2_208_988_800_000...253_402_300_799_999
}

/// Reads a stored object's members with clear corruption errors.
public struct StoredFields {
    public let object: JSONObject

    /// The members of `json`, which must be an object.
    public init(_ json: JSON, _ what: String) throws(StorageError) {
        guard case .object(let o) = json else { throw StorageError.corrupt("\(what) is not an object") }
        object = o
    }
    public func string(_ k: String) throws(StorageError) -> String {
        guard let s = object[k]?.stringValue else { throw StorageError.corrupt("missing \(k)") }
        return s
    }
    public func optionalString(_ k: String) -> String? { object[k]?.stringValue }
    /// An integer member. Every stored integer is within ±2^53 (what a JavaScript client can hold), so
    /// arithmetic on a few of them never overflows; a row that says otherwise was not written by the kernel.
    public func int(_ k: String) throws(StorageError) -> Int64 {
        guard let i = object[k]?.intValue else { throw StorageError.corrupt("missing \(k)") }
        return try Self.checked(i, k, Self.safeIntegers)
    }
    public func optionalInt(_ k: String) throws(StorageError) -> Int64? {
        try optionalInt(k, in: Self.safeIntegers)
    }
    /// An integer member within `range` (a bound the domain enforces on input).
    public func int(_ k: String, in range: ClosedRange<Int64>) throws(StorageError) -> Int64 {
        guard let i = object[k]?.intValue else { throw StorageError.corrupt("missing \(k)") }
        return try Self.checked(i, k, range)
    }
    public func optionalInt(_ k: String, in range: ClosedRange<Int64>) throws(StorageError) -> Int64? {
        guard let i = object[k]?.intValue else { return nil }
        return try Self.checked(i, k, range)
    }
    /// An instant in milliseconds since 1970, within the years the kernel can write (`Instants.stored`).
    public func instant(_ k: String) throws(StorageError) -> Int64 { try int(k, in: Instants.stored) }
    public func optionalInstant(_ k: String) throws(StorageError) -> Int64? { try optionalInt(k, in: Instants.stored) }

    static let safeIntegers: ClosedRange<Int64> = -(1 << 53)...(1 << 53)

    @inline(__always)
    private static func checked(_ i: Int64, _ k: String, _ range: ClosedRange<Int64>) throws(StorageError) -> Int64 {
        guard range.contains(i) else { throw StorageError.corrupt("\(k) is \(i), outside \(range.lowerBound)...\(range.upperBound)") }
        return i
    }
    public func bool(_ k: String) -> Bool { object[k] == .bool(true) }
    public func strings(_ k: String) -> [String] { object[k]?.arrayValue?.compactMap(\.stringValue) ?? [] }
}

extension JSON {
    /// A timestamp as its wire form (RFC 3339 UTC), or null.
    public static func timestamp(_ ms: Int64?) -> JSON {
        ms.map { .string(Timestamp(milliseconds: $0).description) } ?? .null
    }

    /// A timestamp as its wire form (RFC 3339 UTC).
    public static func timestamp(_ t: Timestamp) -> JSON { .string(t.description) }

    /// An integer or null.
    public static func optionalInt(_ v: Int64?) -> JSON { v.map(JSON.int) ?? .null }
}

/// An optional integer in 8 bytes instead of 16 (an `Int64?` pads to 16 inside a struct): `Int64.min`
/// stands for nil. For rows the kernel keeps by the million, where only real counts and timestamps
/// (never `Int64.min`) are stored.
@propertyWrapper
public struct PackedOptional: Sendable, Hashable {
    private var raw: Int64

    public init(wrappedValue: Int64?) { raw = wrappedValue ?? .min }

    public var wrappedValue: Int64? {
        get { raw == .min ? nil : raw }
        set { raw = newValue ?? .min }
    }
}

/// Zero-pads a non-negative number to 20 digits, so keys made of numbers sort in numeric order.
public func padded(_ n: Int64) -> String {
    let s = String(n)
    return String(repeating: "0", count: max(0, 20 - s.count)) + s
}
