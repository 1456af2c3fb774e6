import Chrono
import DomainSupport
import JSON
import Storage

/// The iOS companion's connection (`screentime.connection`, key `connection`).
public struct ConnectionRow: StoredRow {
    public var enabled = false
    public var timezone = "UTC"
    public var lastSyncAt: Int64?
    /// Opaque app, category and web-domain tokens from the device picker; null when none.
    public var selection: BinaryJSON = .null
    /// Bytes of `raw` the user's days keep (the `rawBytesPerUser` quota); nil in rows written before it
    /// was kept, counted once when first needed.
    public var rawBytes: Int64?

    public init() {}
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "connection")
        enabled = f.bool("enabled")
        timezone = try f.string("timezone")
        lastSyncAt = try f.optionalInstant("lastSyncAt")
        selection = BinaryJSON(f.object["selection"] ?? .null)
        rawBytes = try f.optionalInt("rawBytes")
    }
    public var stored: JSON {
        ["enabled": .bool(enabled), "timezone": .string(timezone), "lastSyncAt": .optionalInt(lastSyncAt), "selection": selection.json,
         "rawBytes": .optionalInt(rawBytes)]
    }
    /// Written on every upload, so written directly (the same bytes as `stored.writeBinary`).
    public func writeStored(to out: inout [UInt8]) {
        Binary.writeObjectHeader(count: 5, to: &out)
        Binary.writeString("enabled", to: &out)
        Binary.writeBool(enabled, to: &out)
        Binary.writeString("timezone", to: &out)
        Binary.writeStringValue(timezone, to: &out)
        Binary.writeString("lastSyncAt", to: &out)
        Binary.writeOptionalInt(lastSyncAt, to: &out)
        Binary.writeString("selection", to: &out)
        selection.write(to: &out)
        Binary.writeString("rawBytes", to: &out)
        Binary.writeOptionalInt(rawBytes, to: &out)
    }
    public init(binaryStored r: inout BinaryReader) throws(StorageError) {
        var sawTimezone = false
        do throws(BinaryDecodeError) {
            for _ in 0..<(try r.objectCount()) {
                switch try r.string() {
                case "enabled": enabled = try r.bool()
                case "timezone": timezone = try r.stringValue(); sawTimezone = true
                case "lastSyncAt": lastSyncAt = try r.optionalInt()
                case "selection": selection = try r.value()
                case "rawBytes": rawBytes = try r.optionalInt()
                default: try r.skipValue()
                }
            }
        } catch {
            throw StorageError.corrupt("connection: \(error)")
        }
        guard sawTimezone else { throw StorageError.corrupt("connection: missing timezone") }
    }
}

/// One day's claim and upload (`screentime.days`, key `YYYY-MM-DD`).
public struct DayRow: StoredRow {
    /// Kept by date (`YYYY-MM-DD`).
    public static func isValidKey(_ key: String) -> Bool { CalendarDate(key) != nil }
    // Packed: days are most of what the kernel holds in memory, and this halves a row (72 -> 40 bytes).
    @PackedOptional public var claimedMinutes: Int64? = nil
    @PackedOptional public var verifiedMinutes: Int64? = nil
    @PackedOptional public var claimedAt: Int64? = nil
    @PackedOptional public var uploadedAt: Int64? = nil
    /// The upload's `raw`, as sent; null when none. Kept in binary form: one allocation per day.
    public var raw: BinaryJSON = .null

    public init() {}
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "day")
        claimedMinutes = try f.optionalInt("claimedMinutes", in: 0...1440)
        verifiedMinutes = try f.optionalInt("verifiedMinutes", in: 0...1440)
        claimedAt = try f.optionalInstant("claimedAt")
        uploadedAt = try f.optionalInstant("uploadedAt")
        raw = BinaryJSON(f.object["raw"] ?? .null)
    }
    public var stored: JSON {
        ["claimedMinutes": .optionalInt(claimedMinutes), "verifiedMinutes": .optionalInt(verifiedMinutes),
         "claimedAt": .optionalInt(claimedAt), "uploadedAt": .optionalInt(uploadedAt), "raw": raw.json]
    }
    /// Written on every upload and claim, so written directly (the same bytes as `stored.writeBinary`).
    public func writeStored(to out: inout [UInt8]) {
        Binary.writeObjectHeader(count: 5, to: &out)
        Binary.writeString("claimedMinutes", to: &out)
        Binary.writeOptionalInt(claimedMinutes, to: &out)
        Binary.writeString("verifiedMinutes", to: &out)
        Binary.writeOptionalInt(verifiedMinutes, to: &out)
        Binary.writeString("claimedAt", to: &out)
        Binary.writeOptionalInt(claimedAt, to: &out)
        Binary.writeString("uploadedAt", to: &out)
        Binary.writeOptionalInt(uploadedAt, to: &out)
        Binary.writeString("raw", to: &out)
        raw.write(to: &out)
    }
    public init(binaryStored r: inout BinaryReader) throws(StorageError) {
        do throws(BinaryDecodeError) {
            for _ in 0..<(try r.objectCount()) {
                switch try r.string() {
                case "claimedMinutes": claimedMinutes = try r.optionalInt()
                case "verifiedMinutes": verifiedMinutes = try r.optionalInt()
                case "claimedAt": claimedAt = try r.optionalInt()
                case "uploadedAt": uploadedAt = try r.optionalInt()
                case "raw": raw = try r.value()
                default: try r.skipValue()
                }
            }
        } catch {
            throw StorageError.corrupt("day: \(error)")
        }
    }
}

/// The one penalty of a day (`screentime.penalties`, key `YYYY-MM-DD`).
public struct PenaltyRow: StoredRow {
    /// Kept by date (`YYYY-MM-DD`).
    public static func isValidKey(_ key: String) -> Bool { CalendarDate(key) != nil }
    public let points: Int64
    public let deltaMinutes: Int64
    public let appliedAt: Int64
    public init(points: Int64, deltaMinutes: Int64, appliedAt: Int64) {
        self.points = points
        self.deltaMinutes = deltaMinutes
        self.appliedAt = appliedAt
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "penalty")
        points = try f.int("points")
        deltaMinutes = try f.int("deltaMinutes", in: -1440...1440)
        appliedAt = try f.instant("appliedAt")
    }
    public var stored: JSON { ["points": .int(points), "deltaMinutes": .int(deltaMinutes), "appliedAt": .int(appliedAt)] }
}

/// A device monitor event (`screentime.events`, key: a 20-digit sequence number).
public struct EventRow: StoredRow {
    public let type: String
    public let activity: String
    public let event: String?
    public let at: Int64
    public let receivedAt: Int64
    public init(type: String, activity: String, event: String?, at: Int64, receivedAt: Int64) {
        self.type = type
        self.activity = activity
        self.event = event
        self.at = at
        self.receivedAt = receivedAt
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "event")
        type = try f.string("type")
        activity = try f.string("activity")
        event = f.optionalString("event")
        at = try f.instant("at")
        receivedAt = try f.instant("receivedAt")
    }
    public var stored: JSON {
        ["type": .string(type), "activity": .string(activity), "event": .optional(event), "at": .int(at), "receivedAt": .int(receivedAt)]
    }
}

/// A counter (`screentime.counters`), e.g. the next event number.
public struct CounterRow: StoredRow {
    public let value: Int64
    public init(value: Int64) { self.value = value }
    public init(stored: JSON) throws(StorageError) { value = try StoredFields(stored, "counter").int("value") }
    public var stored: JSON { ["value": .int(value)] }
}

/// The Screen Time tables, registered with the store before it recovers.
public struct ScreenTimeTables: Sendable {
    public let connection: any StorageTable<ConnectionRow>
    public let days: any StorageTable<DayRow>
    public let penalties: any StorageTable<PenaltyRow>
    public let events: any StorageTable<EventRow>
    public let counters: any StorageTable<CounterRow>

    /// Registers the tables. Inlinable, so that the composition root's call is specialised for its
    /// storage and each table's row operations are compiled for their row type.
    @inlinable
    public init(_ store: some Storage) {
        connection = store.table("screentime.connection", of: ConnectionRow.self, entity: Entity("screentime.connection"))
        days = store.table("screentime.days", of: DayRow.self, entity: Entity("screentime.day"))
        penalties = store.table("screentime.penalties", of: PenaltyRow.self, entity: Entity("screentime.penalty"))
        // Event rows are keyed by zero-padded numbers; their ids are the event's number as the wire shows it.
        events = store.table("screentime.events", of: EventRow.self, entity: Entity("screentime.event", id: { String(UInt64($0) ?? 0) }))
        counters = store.table("screentime.counters", of: CounterRow.self)
    }
}
