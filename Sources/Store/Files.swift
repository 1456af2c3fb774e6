import JSON

/// The files of a data dir: names, magic numbers and the snapshot format.
public enum StoreFiles {
    /// First bytes of every log segment: format name and version.
    public static let walMagic = Array("HKWAL001".utf8)
    /// First bytes of every snapshot.
    public static let snapshotMagic = Array("HKSNP001".utf8)
    /// Rows per snapshot record.
    static let rowsPerRecord = 512

    /// `wal-<first seq, 20 digits>.log`.
    public static func segmentName(firstSeq: UInt64) -> String { "wal-\(padded(firstSeq)).log" }
    /// `snapshot-<seq, 20 digits>.snap`.
    public static func snapshotName(seq: UInt64) -> String { "snapshot-\(padded(seq)).snap" }

    static func padded(_ n: UInt64) -> String {
        let s = String(n)
        return String(repeating: "0", count: max(0, 20 - s.count)) + s
    }

    /// The sequence number in a segment or snapshot name, or nil for other files.
    static func number(in name: String, prefix: String, suffix: String) -> UInt64? {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix) else { return nil }
        let digits = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard digits.count == 20 else { return nil }
        return UInt64(digits)
    }

    /// Log segments and snapshots found in `dir`, oldest first.
    public struct Listing {
        public var segments: [(firstSeq: UInt64, name: String)] = []
        public var snapshots: [(seq: UInt64, name: String)] = []
        public var leftovers: [String] = []
    }

    /// What `dir` holds.
    public static func list(_ dir: String) -> Listing {
        var l = Listing()
        for name in FileIO.list(dir) {
            if let n = number(in: name, prefix: "wal-", suffix: ".log") { l.segments.append((n, name)) }
            else if let n = number(in: name, prefix: "snapshot-", suffix: ".snap") { l.snapshots.append((n, name)) }
            else if name.hasSuffix(".tmp") { l.leftovers.append(name) }
        }
        l.segments.sort { $0.firstSeq < $1.firstSeq }
        l.snapshots.sort { $0.seq < $1.seq }
        return l
    }

    /// Serializes a snapshot of `tables` at `seq` into file bytes.
    static func encodeSnapshot(seq: UInt64, createdAt: String, tables: [FrozenTable]) -> [UInt8] {
        var out = snapshotMagic
        var counts = JSONObject()
        for t in tables { counts[t.name] = .int(Int64(t.rowCount)) }
        let header: JSON = [
            "format": "healthkernel-snapshot", "version": 1, "seq": .int(Int64(seq)),
            "createdAt": .string(createdAt), "tables": .object(counts),
        ]
        RecordFraming.append(seq: seq, payload: header.bytes, to: &out)
        var batch: [JSON] = []
        var total = 0
        for table in tables {
            table.forEachRow { user, key, value in
                batch.append([.string(table.name), .string(user), .string(key), value])
                if batch.count == rowsPerRecord {
                    RecordFraming.append(seq: seq, payload: JSON.array(batch).bytes, to: &out)
                    total += batch.count
                    batch.removeAll(keepingCapacity: true)
                }
            }
        }
        if !batch.isEmpty {
            RecordFraming.append(seq: seq, payload: JSON.array(batch).bytes, to: &out)
            total += batch.count
        }
        let footer: JSON = ["end": true, "rows": .int(Int64(total))]
        RecordFraming.append(seq: seq, payload: footer.bytes, to: &out)
        return out
    }

    /// A snapshot read back.
    public struct DecodedSnapshot {
        public let seq: UInt64
        public let createdAt: String
        public let rows: [(table: String, user: String, key: String, value: JSON)]
    }

    /// Reads and fully checks a snapshot; any damage is reported with its byte offset.
    public static func decodeSnapshot(_ bytes: [UInt8]) -> Result<DecodedSnapshot, StoreDamage> {
        func damage(_ offset: Int, _ what: String) -> Result<DecodedSnapshot, StoreDamage> {
            .failure(StoreDamage(file: "", offset: offset, detail: what))
        }
        guard bytes.count >= 8, Array(bytes[0..<8]) == snapshotMagic else { return damage(0, "not a healthkernel snapshot (bad magic)") }
        var offset = 8
        guard case .success(let head) = RecordFraming.read(bytes, at: offset),
              let header = try? JSON.parse(Array(head.payload)),
              header["format"] == "healthkernel-snapshot", header["version"] == 1,
              let seq = header["seq"]?.intValue, seq >= 0, UInt64(seq) == head.seq else {
            return damage(offset, "bad snapshot header")
        }
        offset = head.end
        var rows: [(table: String, user: String, key: String, value: JSON)] = []
        while true {
            let record: RecordFraming.Record
            switch RecordFraming.read(bytes, at: offset) {
            case .success(let r): record = r
            case .failure(let e): return damage(e.offset, "snapshot record \(e.damage)")
            }
            guard let payload = try? JSON.parse(Array(record.payload)) else { return damage(offset, "snapshot record is not JSON") }
            if case .object = payload {
                guard payload["end"] == true, payload["rows"]?.intValue == Int64(rows.count) else {
                    return damage(offset, "snapshot footer does not match its rows")
                }
                guard record.end == bytes.count else { return damage(record.end, "bytes after the snapshot footer") }
                return .success(DecodedSnapshot(seq: UInt64(seq), createdAt: header["createdAt"]?.stringValue ?? "", rows: rows))
            }
            guard case .array(let items) = payload else { return damage(offset, "snapshot record is not a row list") }
            for item in items {
                guard case .array(let f) = item, f.count == 4, let t = f[0].stringValue, let u = f[1].stringValue,
                      let k = f[2].stringValue else { return damage(offset, "malformed snapshot row") }
                rows.append((t, u, k, f[3]))
            }
            offset = record.end
        }
    }
}

/// Damage found in a data dir: which file, at which byte, and what.
public struct StoreDamage: Error, CustomStringConvertible, Equatable {
    public var file: String
    public var offset: Int
    public var detail: String

    public var description: String { "\(file) is damaged at byte \(offset): \(detail)" }
}
