#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import JSON
import Storage

/// The offline commands behind `healthkernel store inspect|verify|export|repair`.
public enum StoreTool {
    /// Exit status for a damaged data dir (also used when `serve` refuses to start).
    public static let damagedExitStatus: Int32 = 3

    /// A summary of the data dir as one JSON object.
    public static func inspect(_ dir: String) -> JSON {
        let listing = StoreFiles.list(dir)
        var segments: [JSON] = []
        for s in listing.segments {
            segments.append(["file": .string(s.name), "firstSeq": .int(Int64(s.firstSeq)),
                             "bytes": .int(Int64(FileIO.size(dir + "/" + s.name) ?? 0))])
        }
        var snapshots: [JSON] = []
        for s in listing.snapshots {
            snapshots.append(["file": .string(s.name), "seq": .int(Int64(s.seq)),
                              "bytes": .int(Int64(FileIO.size(dir + "/" + s.name) ?? 0))])
        }
        var summary: JSONObject = JSONObject([
            ("dataDir", .string(dir)), ("snapshots", .array(snapshots)), ("segments", .array(segments)),
        ])
        switch DataDirScan.read(dir) {
        case .success(let scan):
            summary["snapshotRows"] = .int(Int64(scan.snapshot?.rowCount ?? 0))
            summary["logRecords"] = .int(Int64(scan.records.count))
            summary["lastSeq"] = .int(Int64(scan.lastSeq))
            summary["tornTail"] = scan.tornTail.map { ["file": .string($0.segment), "offset": .int(Int64($0.offset))] } ?? .null
            summary["damage"] = .null
        case .failure(let d):
            summary["damage"] = ["file": .string(d.file), "offset": .int(Int64(d.offset)), "detail": .string(d.detail)]
        }
        return .object(summary)
    }

    /// Checks every record of every file; returns the exit status and the lines to print.
    public static func verify(_ dir: String) -> (status: Int32, report: [String]) {
        switch DataDirScan.read(dir) {
        case .failure(let d):
            return (damagedExitStatus, ["damaged: \(d)"])
        case .success(let scan):
            do throws(StorageError) {
                try scan.snapshot?.forEachRow { _, _, _, _ in }
            } catch {
                return (damagedExitStatus, ["damaged: \(scan.snapshotName ?? ""): \(error)"])
            }
            for log in scan.records {
                do {
                    _ = try DataDirScan.changes(of: log)
                } catch {
                    return (damagedExitStatus, ["damaged: \(log.segment) at byte \(log.record.offset): \(error)"])
                }
            }
            var report = ["ok: snapshot \(scan.snapshotName ?? "none") with \(scan.snapshot?.rowCount ?? 0) rows, "
                + "\(scan.records.count) log records, last seq \(scan.lastSeq)"]
            if let torn = scan.tornTail {
                report.append("note: \(torn.segment) ends in a torn record at byte \(torn.offset); start-up cuts it off")
            }
            return (0, report)
        }
    }

    /// Every snapshot row and log record as JSON lines; fails like `verify` on damage.
    public static func export(_ dir: String, emit: (JSON) -> Void) -> StoreDamage? {
        let scan: DataDirScan
        switch DataDirScan.read(dir) {
        case .success(let s): scan = s
        case .failure(let d): return d
        }
        if let snapshot = scan.snapshot, let name = scan.snapshotName {
            emit(["type": "snapshot", "file": .string(name), "seq": .int(Int64(snapshot.seq)), "createdAt": .string(snapshot.createdAt)])
            do throws(StorageError) {
                // Feed stamps go along (`seq`, `at`), tombstones too: a move keeps every user's positions.
                try snapshot.forEachEntry { table, user, key, value, stamp in
                    var line = JSONObject([("type", .string(value == nil ? "tombstone" : "row")), ("table", .string(table)),
                                           ("user", .string(user)), ("key", .string(key))])
                    if let value { line["value"] = value }
                    if let stamp, stamp.position > 0 {
                        line["seq"] = .int(Int64(bitPattern: stamp.position))
                        line["at"] = .int(stamp.at)
                    }
                    emit(.object(line))
                }
            } catch {
                return StoreDamage(file: name, offset: 0, detail: error.description)
            }
        }
        for log in scan.records {
            guard let changes = try? DataDirScan.changes(of: log) else {
                return StoreDamage(file: log.segment, offset: log.record.offset, detail: "record does not decode")
            }
            // Change i of record n had feed position n << 20 | i and the record's commit time.
            var line = JSONObject([("type", "record"), ("file", .string(log.segment)), ("offset", .int(Int64(log.record.offset))),
                                   ("seq", .int(Int64(log.record.seq))), ("changes", .array(changes.map(\.json)))])
            if let at = DataDirScan.commitTime(of: log) { line["at"] = .int(at) }
            emit(.object(line))
        }
        return nil
    }

    /// Moves damaged parts aside as `*.broken` files, keeping every record before the damage;
    /// repeats until the data dir reads cleanly. Returns what it did, one line per action.
    public static func repair(_ dir: String) throws(StoreOpenError) -> [String] {
        let lock = try DataDirLock.acquire(dir)
        defer { DataDirLock.release(lock) }
        var actions: [String] = []
        for _ in 0..<1000 {
            guard case .failure(let damage) = DataDirScan.read(dir) else { break }
            let listing = StoreFiles.list(dir)
            if listing.snapshots.contains(where: { $0.name == damage.file }) {
                // The log after a broken snapshot cannot be applied without it: it goes aside too.
                actions.append(moveAside(dir, damage.file))
                for s in listing.segments { actions.append(moveAside(dir, s.name)) }
                continue
            }
            guard let index = listing.segments.firstIndex(where: { $0.name == damage.file }) else {
                actions.append("cannot repair \(damage)")
                break
            }
            let path = dir + "/" + damage.file
            if damage.offset <= StoreFiles.walMagic.count {
                actions.append(moveAside(dir, damage.file))
            } else {
                guard let bytes = FileIO.readAll(path) else { throw .io("cannot read \(path)") }
                let broken = freeName(dir, damage.file + ".broken")
                if let error = StoreFiles.writeFile(dir + "/" + broken, Array(bytes[damage.offset...])) {
                    throw .io("cannot write \(broken): \(error)")
                }
                guard truncate(path, off_t(damage.offset)) == 0 else { throw .io("cannot truncate \(path)") }
                actions.append("kept \(damage.file) up to byte \(damage.offset); moved the rest to \(broken)")
            }
            // Later segments would leave a gap in the sequence: they go aside as well.
            for s in listing.segments[(index + 1)...] { actions.append(moveAside(dir, s.name)) }
        }
        _ = FileIO.fsyncDirectory(dir)
        return actions
    }

    private static func moveAside(_ dir: String, _ name: String) -> String {
        let target = freeName(dir, name + ".broken")
        rename(dir + "/" + name, dir + "/" + target)
        return "moved \(name) to \(target)"
    }

    private static func freeName(_ dir: String, _ name: String) -> String {
        var candidate = name
        var n = 1
        while FileIO.size(dir + "/" + candidate) != nil {
            n += 1
            candidate = name + ".\(n)"
        }
        return candidate
    }
}

extension StoreFiles {
    /// Writes a whole file and syncs it; returns an error message on failure.
    static func writeFile(_ path: String, _ bytes: [UInt8]) -> String? {
        let fd = DataDirAccess.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { return FileIO.describe(errno) }
        defer { close(fd) }
        if let e = bytes.withUnsafeBytes({ FileIO.writeAll(fd, $0) }) { return FileIO.describe(e) }
        return fsync(fd) == 0 ? nil : FileIO.describe(errno)
    }
}
