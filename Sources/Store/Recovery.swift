import JSON
import Storage
import JSONParsing

/// Reading a data dir back: the newest snapshot, then every log record after it, with torn tails told
/// apart from damage in the middle. Recovery, `store verify`, `store export` and `store repair` share it.
public struct DataDirScan {
    /// The snapshot recovery starts from, if any.
    public var snapshotName: String?
    public var snapshot: StoreFiles.DecodedSnapshot?
    /// Log records after the snapshot, in order, with the segment each came from and its payload format.
    public var records: [LogRecord] = []
    /// Raw bytes of each segment read, by name (records point into them).
    public var segmentBytes: [String: [UInt8]] = [:]
    /// Segments recovery does not need: those whose every record the snapshot covers, and those that
    /// hold no record at all (a rotation that failed half-way in an older version left such files).
    /// Never the segment new records go to (`appendSegment`).
    public var disposableSegments: [String] = []
    /// The segment new records are appended to: an empty one named for the next record (a rotation
    /// completed just before the stop), else the last segment holding records when it is written in
    /// the current format; nil when the next write must start a new segment.
    public var appendSegment: String?
    /// A torn record at the very end of the last segment holding records: cut off at this offset.
    public var tornTail: (segment: String, offset: Int)?
    /// The last sequence number present (past a `jumped` marker: the one before the next record).
    public var lastSeq: UInt64 = 0
    /// Whether the log ends in a `stopped` marker: the last process stopped cleanly.
    public var stoppedCleanly = false

    /// Reads `dir`; fails with the first damage that is not a torn tail.
    ///
    /// Which segments the snapshot covers is decided by their records, never by their names alone, and
    /// a segment without records is never damage: whatever order failures happened in (a rotation that
    /// failed, a snapshot whose clean-up was cut short), the records read are the records written.
    public static func read(_ dir: String) -> Result<DataDirScan, StoreDamage> {
        let listing = StoreFiles.list(dir)
        var scan = DataDirScan()
        if let newest = listing.snapshots.last {
            guard let bytes = FileIO.readAll(dir + "/" + newest.name) else {
                return .failure(StoreDamage(file: newest.name, offset: 0, detail: "cannot be read"))
            }
            switch StoreFiles.decodeSnapshot(bytes) {
            case .success(let s):
                guard s.seq == newest.seq else {
                    return .failure(StoreDamage(file: newest.name, offset: 8, detail: "its header says seq \(s.seq)"))
                }
                scan.snapshot = s
                scan.snapshotName = newest.name
                scan.lastSeq = s.seq
            case .failure(var d):
                d.file = newest.name
                return .failure(d)
            }
        }
        let base = scan.lastSeq
        let magicCount = StoreFiles.walMagic.count
        var withRecords: [(firstSeq: UInt64, name: String, bytes: [UInt8])] = []
        var empty: [(firstSeq: UInt64, name: String, format: PayloadFormat?)] = []
        for segment in listing.segments {
            guard let bytes = FileIO.readAll(dir + "/" + segment.name) else {
                return .failure(StoreDamage(file: segment.name, offset: 0, detail: "cannot be read"))
            }
            if bytes.count <= magicCount, StoreFiles.isMagicPrefix(bytes, wal: true) {
                empty.append((segment.firstSeq, segment.name, StoreFiles.format(of: bytes, wal: true)))
            } else {
                withRecords.append((segment.firstSeq, segment.name, bytes))
            }
        }
        var lastFormat: PayloadFormat?
        var lastRecordsSeq: [String: UInt64] = [:]
        for (index, segment) in withRecords.enumerated() {
            let isLast = index == withRecords.count - 1
            let bytes = segment.bytes
            scan.segmentBytes[segment.name] = bytes
            guard let format = StoreFiles.format(of: bytes, wal: true) else {
                return .failure(StoreDamage(file: segment.name, offset: 0, detail: "not a healthkernel log segment (bad magic)"))
            }
            if segment.firstSeq > scan.lastSeq + 1 {
                return .failure(StoreDamage(file: segment.name, offset: 0,
                                            detail: "starts at seq \(segment.firstSeq) but the data before ends at \(scan.lastSeq)"))
            }
            lastFormat = format
            var offset = magicCount
            while offset < bytes.count {
                switch RecordFraming.read(bytes, at: offset) {
                case .success(let record):
                    lastRecordsSeq[segment.name] = record.seq
                    if record.seq <= scan.lastSeq && record.seq <= base {
                        offset = record.end  // already in the snapshot
                        continue
                    }
                    guard record.seq == scan.lastSeq + 1 else {
                        return .failure(StoreDamage(file: segment.name, offset: offset,
                                                    detail: "record seq \(record.seq) where \(scan.lastSeq + 1) was expected"))
                    }
                    scan.lastSeq = record.seq
                    offset = record.end
                    switch NumberingMarker(payload: record.payload, format: format) {
                    case .jumped(let next)?:
                        scan.lastSeq = max(record.seq, next - 1)
                        scan.stoppedCleanly = false
                    case .stopped?:
                        scan.stoppedCleanly = true
                    case nil:
                        scan.records.append(LogRecord(segment: segment.name, record: record, format: format))
                        scan.stoppedCleanly = false
                    }
                case .failure(let e):
                    if isLast && !RecordFraming.intactRecordExists(after: e.offset, in: bytes) {
                        scan.tornTail = (segment.name, e.offset)
                        offset = bytes.count
                    } else {
                        return .failure(StoreDamage(file: segment.name, offset: e.offset, detail: "record \(e.damage)"))
                    }
                }
            }
        }
        let next = StoreFiles.segmentName(firstSeq: scan.lastSeq + 1)
        if let ready = empty.first(where: { $0.name == next && $0.format == .stamped }) {
            scan.appendSegment = ready.name
        } else if let last = withRecords.last, lastFormat == .stamped {
            scan.appendSegment = last.name
        }
        for segment in withRecords where segment.name != scan.appendSegment {
            if let lastSeq = lastRecordsSeq[segment.name], lastSeq > base { continue }
            if scan.tornTail?.segment == segment.name { continue }
            scan.disposableSegments.append(segment.name)
        }
        for segment in empty where segment.name != scan.appendSegment { scan.disposableSegments.append(segment.name) }
        return .success(scan)
    }

    /// The changes of one log record.
    /// The commit time a record carries (format 3), milliseconds since 1970.
    public static func commitTime(of log: LogRecord) -> Int64? {
        guard log.format == .stamped else { return nil }
        return log.record.payload.withUnsafeBytes { raw -> Int64? in
            var r = BinaryReader(raw)
            return (try? r.varint()).map { Int64(bitPattern: $0) }
        }
    }

    public static func changes(of log: LogRecord) throws(StorageError) -> [Change] {
        let record = log.record
        switch log.format {
        case .text:
            guard case .array(let items)? = try? JSON.parse(Array(record.payload)) else {
                throw StorageError.corrupt("record \(record.seq) is not a JSON array")
            }
            var out: [Change] = []
            out.reserveCapacity(items.count)
            for item in items { out.append(try Change(json: item)) }
            return out
        case .binary, .stamped:
            let decoded = record.payload.withUnsafeBytes { raw -> Result<[Change], BinaryDecodeError> in
                var r = BinaryReader(raw)
                var out: [Change] = []
                do throws(BinaryDecodeError) {
                    if log.format == .stamped { _ = try r.varint() }  // the commit time
                    while !r.isAtEnd { out.append(try Change(binary: &r)) }
                } catch {
                    return .failure(error)
                }
                return .success(out)
            }
            switch decoded {
            case .success(let changes) where !changes.isEmpty: return changes
            case .success: throw StorageError.corrupt("record \(record.seq) has no changes")
            case .failure(let error): throw StorageError.corrupt("record \(record.seq): \(error)")
            }
        }
    }
}

/// One log record found by a scan: which segment it is in, the record, and how its payload is written.
public struct LogRecord {
    public let segment: String
    public let record: RecordFraming.Record
    public let format: PayloadFormat
}
