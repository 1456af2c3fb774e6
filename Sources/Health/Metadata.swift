import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

/// An item's HealthKit metadata as the app sent it (`HKObject.metadata`): keys with a string, number or
/// boolean each (HealthKit's dates and quantities arrive as the strings the app made of them), kept in
/// key order so that the same metadata sent in another order is the same content. Most items carry none:
/// an item holds a reference, nil for those (8 bytes a row), and a row with metadata stores it once.
///
/// Four keys change what the kernel does (protocol/health.md, "Metadata"): `HKWasUserEntered` ranks the
/// item first among sources, `HKTimeZone` places it in that zone's local days, `HKSyncIdentifier` with
/// `HKSyncVersion` replaces an older version of the same synced item.
public final class Metadata: Sendable, Equatable, CustomStringConvertible {
    /// Sorted by key, each key once.
    public let members: [(key: String, value: JSON)]
    public let wasUserEntered: Bool
    /// `HKTimeZone`, when it names a zone.
    public let timeZone: String?
    public let syncIdentifier: String?
    public let syncVersion: Int64?

    /// Limits: a key of at most 128 bytes, a string of at most 1,024, at most 64 keys, at most 8 KiB in all
    /// (its compact JSON): room for everything HealthKit and the apps that write to it put there.
    static let maxKeys = 64
    static let maxKeyBytes = 128
    static let maxStringBytes = 1024
    static let maxBytes = 8192

    init(members: [(key: String, value: JSON)]) {
        self.members = members.sorted { $0.key < $1.key }
        let get = { (key: String) in members.first { $0.key == key }?.value }
        switch get("HKWasUserEntered") {
        case .bool(let b)?: wasUserEntered = b
        case .int(let n)?: wasUserEntered = n != 0
        case .string(let s)?: wasUserEntered = s == "1" || s.lowercased() == "true"
        default: wasUserEntered = false
        }
        timeZone = get("HKTimeZone")?.stringValue.flatMap { Zone.named($0)?.identifier }
        syncIdentifier = get("HKSyncIdentifier")?.stringValue
        switch get("HKSyncVersion") {
        case .int(let n)?: syncVersion = n
        case .double(let d)? where d == d.rounded() && abs(d) < 9e15: syncVersion = Int64(d)
        case .string(let s)?: syncVersion = Int64(s)
        default: syncVersion = nil
        }
    }

    public var json: JSON { .object(JSONObject(members.map { ($0.key, $0.value) })) }
    public var description: String { json.serialized }

    public static func == (a: Metadata, b: Metadata) -> Bool {
        a === b || (a.members.count == b.members.count && zip(a.members, b.members).allSatisfy { $0.key == $1.key && $0.value == $1.value })
    }

    /// The metadata of an item sent at `path` (`params.samples[3].metadata`); nil for an empty object.
    static func decode(_ json: JSON, at path: String) throws(FieldError) -> Metadata? {
        let object = try JSONObject.decode(json, at: path)
        guard object.count <= maxKeys else { throw .outOfRange(path, "must have at most \(maxKeys) keys") }
        var members: [(key: String, value: JSON)] = []
        for (key, value) in object {
            let field = path + "." + key
            guard !key.isEmpty, key.utf8.count <= maxKeyBytes else { throw .outOfRange(field, "keys must be 1 to \(maxKeyBytes) bytes") }
            switch value {
            case .bool, .int: break
            case .double(let d): guard d.isFinite else { throw .outOfRange(field, "must be a finite number") }
            case .string(let s): guard s.utf8.count <= maxStringBytes else { throw .outOfRange(field, "must be at most \(maxStringBytes) bytes") }
            default:
                throw FieldError(field: field, reason: "wrong_type", message: "\(field) must be a string, number or boolean")
            }
            members.append((key, value))
        }
        guard !members.isEmpty else { return nil }
        let metadata = Metadata(members: members)
        guard metadata.json.serialized.utf8.count <= maxBytes else { throw .outOfRange(path, "must be at most \(maxBytes) bytes of JSON") }
        if case .some(let zone) = object["HKTimeZone"], metadata.timeZone == nil {
            throw FieldError(field: path + ".HKTimeZone", reason: "invalid_params", message: "\(path).HKTimeZone must be an IANA time zone name, not \(zone.serialized)")
        }
        if object["HKSyncIdentifier"] != nil, metadata.syncIdentifier == nil || metadata.syncVersion == nil {
            throw FieldError(field: path + ".HKSyncVersion", reason: "invalid_params",
                             message: "\(path).HKSyncIdentifier must be a string sent with HKSyncVersion, an integer")
        }
        return metadata
    }

    /// Metadata read back from a stored row; a row whose metadata is not an object is corrupt.
    static func stored(_ json: JSON?) throws(StorageError) -> Metadata? {
        guard let json, json != .null else { return nil }
        guard case .object(let object) = json else { throw StorageError.corrupt("metadata is not an object") }
        return object.isEmpty ? nil : Metadata(members: object.members)
    }

    /// The key of the synced object this item is a version of (`SyncIdRow`), when it is one: HealthKit
    /// scopes a sync identifier to its source (bundle id, else name).
    func syncKey(_ origin: Origin) -> String? {
        guard let syncIdentifier, syncVersion != nil else { return nil }
        return SyncIdRow.key(source: origin.bundleId ?? origin.sourceName ?? "", syncIdentifier: syncIdentifier)
    }

    static let schema: JSON = [
        "type": "object",
        "additionalProperties": ["type": ["string", "number", "boolean"]],
        "description": "HealthKit metadata as sent (HKWasUserEntered, HKTimeZone, HKSyncIdentifier with HKSyncVersion, ...): at most 64 keys, 8 KiB",
    ]
}

/// The newest version of a synced object (`health.syncIds`, key: `SyncIdRow.key`): the UUID that holds
/// it and its `HKSyncVersion`. An item of the same source and `HKSyncIdentifier` under another UUID
/// replaces it when its version is higher, and is left out when not (`superseded`), as HealthKit does.
public struct SyncIdRow: StoredRow {
    public let uuid: String
    public let version: Int64

    public init(uuid: String, version: Int64) { (self.uuid, self.version) = (uuid, version) }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "sync id")
        uuid = try f.string("uuid")
        guard case .int(let v)? = f.object["version"] else { throw StorageError.corrupt("sync id: no version") }
        version = v
    }

    public var stored: JSON { ["uuid": .string(uuid), "version": .int(version)] }

    /// SHA-256 of the source and the identifier, hex: a fixed 64 bytes whatever their length.
    static func key(source: String, syncIdentifier: String) -> String {
        Digest.sha256Hex(source + "\n" + syncIdentifier)
    }
}
