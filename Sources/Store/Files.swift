import JSON
import Storage
import JSONParsing

/// The files of a data dir: names, magic numbers and the snapshot format.
public enum StoreFiles {
    /// First bytes of every log segment written now: format name and version (3: binary payloads with
    /// commit times and feed stamps).
    public static let walMagic = Array("HKWAL003".utf8)
    /// First bytes of every snapshot written now.
    public static let snapshotMagic = Array("HKSNP003".utf8)
    /// Older files, still read so that older data dirs recover: version 2 (binary payloads, no commit
    /// times) and version 1 (JSON text payloads).
    static let walMagicV2 = Array("HKWAL002".utf8)
    static let snapshotMagicV2 = Array("HKSNP002".utf8)
    static let walMagicV1 = Array("HKWAL001".utf8)
    static let snapshotMagicV1 = Array("HKSNP001".utf8)
    /// A snapshot row record is closed once its payload passes this size.
    static let snapshotRecordBytes = 512 * 1024

    /// The payload format of a log segment or snapshot, from its first 8 bytes; nil for other files.
    static func format(of bytes: [UInt8], wal: Bool) -> PayloadFormat? {
        guard bytes.count >= 8 else { return nil }
        let magic = Array(bytes[0..<8])
        if magic == (wal ? walMagic : snapshotMagic) { return .stamped }
        if magic == (wal ? walMagicV2 : snapshotMagicV2) { return .binary }
        if magic == (wal ? walMagicV1 : snapshotMagicV1) { return .text }
        return nil
    }

    /// Whether `bytes` are the start of a magic number of either version (an empty file counts): what a
    /// segment holds when it has no records yet, or when writing its magic was cut short.
    static func isMagicPrefix(_ bytes: [UInt8], wal: Bool) -> Bool {
        let magics = wal ? [walMagic, walMagicV2, walMagicV1] : [snapshotMagic, snapshotMagicV2, snapshotMagicV1]
        return magics.contains { bytes.count <= $0.count && Array($0.prefix(bytes.count)) == bytes }
    }

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

    /// Serializes a snapshot of `tables` at `seq` into file bytes (format 3): a JSON header record, row
    /// records of one table each (name, whether entries are stamped, entry count, then groups of one
    /// user's entries: user, count, then key and binary value per row; a stamped entry is key, kind,
    /// value of a row, feed stamp), a JSON footer.
    /// The bytes are handed to `emit` in chunks of about 1 MiB, so a snapshot never sits whole in memory.
    static func encodeSnapshot(seq: UInt64, createdAt: String, tables: [FrozenTable], emit: ([UInt8]) -> Void) {
        var out = snapshotMagic
        var counts = JSONObject()
        for t in tables { counts[t.name] = .int(Int64(t.rowCount)) }
        let header: JSON = [
            "format": "healthkernel-snapshot", "version": .int(Int64(PayloadFormat.stamped.rawValue)), "seq": .int(Int64(seq)),
            "createdAt": .string(createdAt), "tables": .object(counts),
        ]
        RecordFraming.append(seq: seq, payload: header.bytes, to: &out)
        var total = 0
        var rows: [UInt8] = []
        for table in tables {
            var inRecord = 0
            func close(_ buffer: inout [UInt8]) {
                guard inRecord > 0 else { return }
                RecordFraming.appendRecord(seq: seq, to: &out) { payload in
                    Binary.writeString(table.name, to: &payload)
                    payload.append(table.stamped ? 1 : 0)
                    Binary.writeVarint(UInt64(inRecord), to: &payload)
                    payload.append(contentsOf: buffer)
                }
                total += inRecord
                inRecord = 0
                buffer.removeAll(keepingCapacity: true)
                if out.count >= 1 << 20 {
                    emit(out)
                    out.removeAll(keepingCapacity: true)
                }
            }
            table.writeRows(&rows) { written, count in
                inRecord += count
                if written.count >= snapshotRecordBytes { close(&written) }
            }
            close(&rows)
        }
        let footer: JSON = ["end": true, "rows": .int(Int64(total))]
        RecordFraming.append(seq: seq, payload: footer.bytes, to: &out)
        emit(out)
    }

    /// A snapshot whose frames, checksums and row counts have been checked; its rows are decoded while
    /// they are applied (`forEachRow`), so recovery never holds every row twice.
    public struct DecodedSnapshot {
        public let seq: UInt64
        public let createdAt: String
        /// Rows in the snapshot (the footer's count, checked against the records).
        public let rowCount: Int
        let format: PayloadFormat
        /// Row record payloads, in file order, with their offsets in the file.
        let records: [(offset: Int, payload: ArraySlice<UInt8>)]

        /// Calls `body(table, user, key, value)` for every row, in file order.
        public func forEachRow(_ body: (String, String, String, JSON) throws(StorageError) -> Void) throws(StorageError) {
            try forEachEntry { (table, user, key, value, _) throws(StorageError) in
                if let value { try body(table, user, key, value) }
            }
        }

        /// Calls `body(table, user, key, value, stamp)` for every entry, in file order: a row (its value,
        /// and in a synced table of a format 3 snapshot its feed stamp), or a deleted synced row's
        /// tombstone (no value, its stamp).
        func forEachEntry(_ body: (String, String, String, JSON?, Stamp?) throws(StorageError) -> Void) throws(StorageError) {
            for (offset, payload) in records {
                switch format {
                case .text:
                    for row in try Self.textRows(payload, offset) { try body(row.0, row.1, row.2, row.3, nil) }
                case .binary, .stamped:
                    try Self.forEachGroup(payload, offset, format) { table, user, count, r, stamps in
                        for _ in 0..<count {
                            let key = try r.string()
                            if stamps.inline {
                                guard try r.entryKind(of: table) == .row else {
                                    try body(table, user, key, nil, try r.stamp(of: table))
                                    continue
                                }
                            }
                            let value = try JSON.readBinary(&r)
                            let stamp = stamps.inline ? try r.stamp(of: table) : nil
                            try body(table, user, key, value, stamp)
                        }
                    }
                }
            }
        }

        /// Walks the groups of a binary row record, calling `group(table, user, count, &reader, &stamps)`,
        /// which must read exactly the group's entries.
        static func forEachGroup(_ payload: ArraySlice<UInt8>, _ offset: Int, _ format: PayloadFormat, legacyAt: Int64 = 0,
                                 _ group: (String, String, Int, inout BinaryReader, inout SnapshotStamps) throws -> Void) throws(StorageError) {
            let failure = payload.withUnsafeBytes { raw -> StorageError? in
                var r = BinaryReader(raw)
                do {
                    let table = try r.string()
                    let stamped = format == .stamped ? try r.byte() == 1 : false
                    var stamps = SnapshotStamps(inline: stamped, legacyAt: legacyAt)
                    var left = try r.count()
                    while left > 0 {
                        let user = try r.string()
                        let count = try r.count()
                        guard count >= 1, count <= left else { throw BinaryDecodeError(offset: r.offset, "bad group row count") }
                        try group(table, user, count, &r, &stamps)
                        left -= count
                    }
                } catch let error as StorageError {
                    return error
                } catch {
                    return .corrupt("snapshot record at byte \(offset): \(error)")
                }
                return r.isAtEnd ? nil : .corrupt("snapshot record at byte \(offset) has trailing bytes")
            }
            if let failure { throw failure }
        }

        /// Puts every entry into its table (found by `table(name)`), decoding binary values straight
        /// into typed rows. Synced rows of older snapshots, which have no feed stamps, are given
        /// positions 1, 2, 3... and the time `legacyAt`.
        func loadRows(legacyAt: Int64, _ table: (String) throws(StorageError) -> AnyTable) throws(StorageError) {
            var legacy = SnapshotStamps(inline: false, legacyAt: legacyAt)
            guard format != .text else {
                try forEachRow { (name, user, key, value) throws(StorageError) in
                    try table(name).put(user: user, key: key, stored: value, stamp: legacy.legacy())
                }
                return
            }
            for (offset, payload) in records {
                try Self.forEachGroup(payload, offset, format) { name, user, count, r, stamps in
                    stamps.nextLegacy = legacy.nextLegacy
                    try table(name).putBinaryGroup(user: user, count: count, from: &r, stamps: &stamps)
                    legacy.nextLegacy = stamps.nextLegacy
                }
            }
        }

        /// The rows of a format 1 record: a JSON array of `[table, user, key, value]`.
        static func textRows(_ payload: ArraySlice<UInt8>, _ offset: Int) throws(StorageError) -> [(String, String, String, JSON)] {
            guard case .array(let items)? = try? JSON.parse(Array(payload)) else {
                throw StorageError.corrupt("snapshot record at byte \(offset) is not a row list")
            }
            var rows: [(String, String, String, JSON)] = []
            rows.reserveCapacity(items.count)
            for item in items {
                guard case .array(let f) = item, f.count == 4, let t = f[0].stringValue, let u = f[1].stringValue,
                      let k = f[2].stringValue else { throw StorageError.corrupt("malformed snapshot row at byte \(offset)") }
                rows.append((t, u, k, f[3]))
            }
            return rows
        }

        /// How many rows a row record holds, read without decoding the rows.
        static func rowCount(_ payload: ArraySlice<UInt8>, _ format: PayloadFormat, _ offset: Int) throws(StorageError) -> Int {
            switch format {
            case .text:
                return try textRows(payload, offset).count
            case .binary, .stamped:
                let count = payload.withUnsafeBytes { raw -> Int? in
                    var r = BinaryReader(raw)
                    _ = try? r.string()
                    if format == .stamped { _ = try? r.byte() }
                    return try? r.count()
                }
                guard let count else { throw StorageError.corrupt("snapshot record at byte \(offset) has no row count") }
                return count
            }
        }
    }

    /// Reads a snapshot and checks its frames, checksums, header, footer and row counts; any damage is
    /// reported with its byte offset. Rows themselves are decoded by `forEachRow`.
    public static func decodeSnapshot(_ bytes: [UInt8]) -> Result<DecodedSnapshot, StoreDamage> {
        func damage(_ offset: Int, _ what: String) -> Result<DecodedSnapshot, StoreDamage> {
            .failure(StoreDamage(file: "", offset: offset, detail: what))
        }
        guard let format = format(of: bytes, wal: false) else { return damage(0, "not a healthkernel snapshot (bad magic)") }
        var offset = 8
        guard case .success(let head) = RecordFraming.read(bytes, at: offset),
              let header = try? JSON.parse(Array(head.payload)),
              header["format"] == "healthkernel-snapshot", header["version"] == .int(Int64(format.rawValue)),
              let seq = header["seq"]?.intValue, seq >= 0, UInt64(seq) == head.seq else {
            return damage(offset, "bad snapshot header")
        }
        offset = head.end
        var records: [(offset: Int, payload: ArraySlice<UInt8>)] = []
        var rows = 0
        while true {
            let record: RecordFraming.Record
            switch RecordFraming.read(bytes, at: offset) {
            case .success(let r): record = r
            case .failure(let e): return damage(e.offset, "snapshot record \(e.damage)")
            }
            if record.payload.first == UInt8(ascii: "{") {
                guard let footer = try? JSON.parse(Array(record.payload)), footer["end"] == true,
                      footer["rows"]?.intValue == Int64(rows) else {
                    return damage(offset, "snapshot footer does not match its rows")
                }
                guard record.end == bytes.count else { return damage(record.end, "bytes after the snapshot footer") }
                return .success(DecodedSnapshot(seq: UInt64(seq), createdAt: header["createdAt"]?.stringValue ?? "",
                                                rowCount: rows, format: format, records: records))
            }
            do {
                rows += try DecodedSnapshot.rowCount(record.payload, format, offset)
            } catch {
                return damage(offset, "\(error)")
            }
            records.append((offset, record.payload))
            offset = record.end
        }
    }
}

/// How a file's record payloads are written: format 1 as JSON text, format 2 in the binary form,
/// format 3 in the binary form with each log record's commit time and each synced row's feed stamp.
public enum PayloadFormat: Int, Sendable {
    case text = 1
    case binary = 2
    case stamped = 3
}

/// Damage found in a data dir: which file, at which byte, and what.
public struct StoreDamage: Error, CustomStringConvertible, Equatable {
    public var file: String
    public var offset: Int
    public var detail: String

    public var description: String { "\(file) is damaged at byte \(offset): \(detail)" }
}
