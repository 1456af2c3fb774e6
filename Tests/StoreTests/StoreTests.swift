import Chrono
import Foundation
import JSON
import JSONParsing
import Testing
import Storage
import TestSupport
@testable import Store

struct Note: StoredRow {
    let text: String
    init(_ text: String) { self.text = text }
    init(stored: JSON) throws(StorageError) {
        guard let t = stored["t"]?.stringValue else { throw StorageError.corrupt("no t") }
        text = t
    }
    var stored: JSON { ["t": .string(text)] }
}


final class Messages: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) { lock.withLock { items.append(s) } }
    var all: [String] { lock.withLock { items } }
}

/// A store over a fresh temp dir (or `dir`), with one table `notes`.
final class Harness {
    let dir: String
    let store: Store
    let notes: Table<Note>
    let messages = Messages()

    init(dir: String? = nil, configure: (inout StoreOptions) -> Void = { _ in }, clockMs: Int64 = 1_000) throws {
        let d = dir ?? FileManager.default.temporaryDirectory.appendingPathComponent("hk-store-\(UUID().uuidString)").path
        self.dir = d
        var options = StoreOptions(dataDir: d)
        options.fsync = .never
        configure(&options)
        let messages = self.messages
        store = Store(options: options, clock: FixedClock(ms: clockMs), log: { messages.add($0) })
        notes = store.table("notes", of: Note.self)
        try store.open()
    }

    /// Waits up to 5 s for a background snapshot to appear.
    func waitForSnapshot() {
        var waited = 0
        while StoreFiles.list(dir).snapshots.isEmpty && waited < 5000 {
            usleep(1000)
            waited += 1
        }
    }

    /// Commits one transaction writing `key` for two users.
    func write(_ key: String, _ text: String) throws {
        var tx = Transaction()
        tx.put(notes, user: "u1", key: key, Note(text))
        tx.put(notes, user: "u2", key: key, Note(text))
        try store.commit(tx)
    }

    var contents: [String: String] {
        var out: [String: String] = [:]
        for user in ["u1", "u2"] {
            for (k, v) in notes.scan(user: user) { out["\(user)/\(k)"] = v.text }
        }
        return out
    }

    var segmentPath: String { dir + "/" + StoreFiles.list(dir).segments.last!.name }
}

func reopenError(_ dir: String) -> StoreOpenError? {
    do {
        let h = try Harness(dir: dir)
        h.store.abandon()
        return nil
    } catch let e as StoreOpenError {
        return e
    } catch {
        return nil
    }
}

@Suite(.oneStoreOnly) struct CRCTests {
    @Test func knownVectors() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([]) == 0)
        let long = (0..<1000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let whole = CRC32C.checksum(long)
        let split = long.withUnsafeBytes { raw in
            CRC32C.update(CRC32C.update(0, UnsafeRawBufferPointer(rebasing: raw[0..<333])), UnsafeRawBufferPointer(rebasing: raw[333...]))
        }
        #expect(whole == split)
    }

    @Test func hardwareAndSoftwareAgreeOnEveryLengthAndAlignment() {
        let bytes = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        bytes.withUnsafeBytes { raw in
            for start in 0..<9 {
                for end in stride(from: start, through: raw.count, by: 7) {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[start..<end])
                    #expect(CRC32C.update(0x1234_5678, slice) == CRC32C.software(0x1234_5678, slice))
                }
            }
        }
        #expect(CRC32C.software(0, UnsafeRawBufferPointer(start: nil, count: 0)) == 0)
        // The comparison above means something only where the hardware path runs.
        #if arch(x86_64) && os(Linux)
        if let cpuinfo = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8), cpuinfo.contains(" sse4_2") {
            #expect(CRC32C.hardware)
        }
        #endif
    }
}

@Suite(.oneStoreOnly) struct FramingTests {
    @Test func roundTripAndEveryCorruptionIsCaught() {
        var bytes: [UInt8] = []
        RecordFraming.append(seq: 7, payload: Array("[1,2,3]".utf8), to: &bytes)
        guard case .success(let r) = RecordFraming.read(bytes, at: 0) else {
            Issue.record("did not read back")
            return
        }
        #expect(r.seq == 7 && Array(r.payload) == Array("[1,2,3]".utf8) && r.end == bytes.count)
        for i in bytes.indices {
            var damaged = bytes
            damaged[i] ^= 0x40
            guard case .failure = RecordFraming.read(damaged, at: 0) else {
                Issue.record("flipping byte \(i) went unnoticed")
                continue
            }
        }
        for cut in 0..<bytes.count {
            guard case .failure(let e) = RecordFraming.read(Array(bytes[0..<cut]), at: 0) else {
                Issue.record("truncation at \(cut) went unnoticed")
                continue
            }
            #expect(e.damage == .truncated || e.damage == .badHeader)
        }
    }
}

@Suite(.oneStoreOnly) struct StoreTests {
    @Test func writesSurviveACrashAndReplayTheSame() throws {
        let h = try Harness()
        for i in 0..<20 { try h.write("k\(i)", "v\(i)") }
        #expect(h.store.flush().failedCommits.isEmpty)
        let before = h.contents
        h.store.abandon()
        // Replay under another clock gives the same state: the log holds effects, not inputs.
        let again = try Harness(dir: h.dir, clockMs: 9_999_999)
        #expect(again.contents == before)
        #expect(again.store.lastRecord == 20)
        again.store.abandon()
    }

    @Test func unflushedWritesAreNotInTheLog() throws {
        let h = try Harness()
        try h.write("a", "1")
        _ = h.store.flush()
        try h.write("b", "2")  // never flushed: never acknowledged
        h.store.abandon()
        let again = try Harness(dir: h.dir)
        #expect(again.contents == ["u1/a": "1", "u2/a": "1"])
        again.store.abandon()
    }

    @Test func tornTailIsCutAtEveryByteOffsetOfTheLastRecord() throws {
        let h = try Harness()
        for i in 0..<4 { try h.write("k\(i)", "v\(i)") }
        _ = h.store.flush()
        let sizeBefore = FileIO.size(h.segmentPath)!
        try h.write("last", "x")
        _ = h.store.flush()
        let path = h.segmentPath
        h.store.abandon()
        let full = try #require(FileIO.readAll(path))
        let expected = (0..<4).reduce(into: [String: String]()) { d, i in d["u1/k\(i)"] = "v\(i)"; d["u2/k\(i)"] = "v\(i)" }
        for cut in sizeBefore..<full.count {
            let copy = FileManager.default.temporaryDirectory.appendingPathComponent("hk-torn-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: copy) }
            try Data(full[0..<cut]).write(to: URL(fileURLWithPath: copy + "/" + (path as NSString).lastPathComponent))
            let r = try Harness(dir: copy)
            #expect(r.contents == expected, "cut at \(cut)")
            #expect(r.store.lastRecord == 4)
            #expect(cut == sizeBefore || r.messages.all.contains { $0.contains("torn record at byte \(sizeBefore)") }, "cut at \(cut)")
            // The log goes on cleanly after the cut.
            try r.write("after", "y")
            _ = r.store.flush()
            r.store.abandon()
            let r2 = try Harness(dir: copy)
            #expect(r2.contents["u1/after"] == "y" && r2.store.lastRecord == 5, "cut at \(cut)")
            r2.store.abandon()
        }
    }

    @Test func damageInTheMiddleRefusesToStartAndRepairKeepsWhatCameBefore() throws {
        let h = try Harness()
        for i in 0..<5 {
            try h.write("k\(i)", "v\(i)")
            _ = h.store.flush()
        }
        let path = h.segmentPath
        h.store.abandon()
        var bytes = try #require(FileIO.readAll(path))
        // Find the third record and flip a payload byte.
        var offset = StoreFiles.walMagic.count
        for _ in 0..<2 {
            guard case .success(let r) = RecordFraming.read(bytes, at: offset) else { Issue.record("bad fixture"); return }
            offset = r.end
        }
        bytes[offset + RecordFraming.headerSize + 3] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        guard case .damaged(let damage)? = reopenError(h.dir) else {
            Issue.record("a damaged log was accepted")
            return
        }
        #expect(damage.offset == offset)
        #expect(damage.file == (path as NSString).lastPathComponent)
        #expect(StoreTool.verify(h.dir).status == StoreTool.damagedExitStatus)
        #expect(bytes == FileIO.readAll(path), "refusing to start changed the file")
        let actions = try StoreTool.repair(h.dir)
        #expect(!actions.isEmpty)
        #expect(StoreTool.verify(h.dir).status == 0)
        let repaired = try Harness(dir: h.dir)
        #expect(repaired.contents == ["u1/k0": "v0", "u2/k0": "v0", "u1/k1": "v1", "u2/k1": "v1"])
        repaired.store.abandon()
        #expect(FileManager.default.fileExists(atPath: path + ".broken"))
    }

    @Test func snapshotsRetireCoveredSegmentsAndRecoveryUsesBoth() throws {
        let h = try Harness()
        for i in 0..<3 { try h.write("k\(i)", "v\(i)") }
        let info = try h.store.snapshot()
        #expect(info.seq == 3 && info.bytes > 0)
        for i in 3..<5 { try h.write("k\(i)", "v\(i)") }
        _ = h.store.flush()
        let before = h.contents
        h.store.abandon()
        let listing = StoreFiles.list(h.dir)
        #expect(listing.snapshots.map(\.seq) == [3])
        #expect(listing.segments.map(\.firstSeq) == [4])
        let again = try Harness(dir: h.dir)
        #expect(again.contents == before)
        #expect(again.store.lastRecord == 5)
        again.store.abandon()
    }

    @Test func damagedSnapshotRefusesToStart() throws {
        let h = try Harness()
        try h.write("k", "v")
        _ = try h.store.snapshot()
        h.store.abandon()
        let snap = h.dir + "/" + StoreFiles.list(h.dir).snapshots.last!.name
        var bytes = try #require(FileIO.readAll(snap))
        bytes[bytes.count / 2] ^= 0x10
        try Data(bytes).write(to: URL(fileURLWithPath: snap))
        guard case .damaged? = reopenError(h.dir) else {
            Issue.record("a damaged snapshot was accepted")
            return
        }
        #expect(StoreTool.verify(h.dir).status == StoreTool.damagedExitStatus)
        _ = try StoreTool.repair(h.dir)
        #expect(StoreTool.verify(h.dir).status == 0)
        #expect(FileManager.default.fileExists(atPath: snap + ".broken"))
    }

    @Test func shutdownSnapshotsAndNextStartNeedsNoReplay() throws {
        let h = try Harness()
        for i in 0..<10 { try h.write("k\(i)", "v\(i)") }
        h.store.shutdown()
        let summary = StoreTool.inspect(h.dir)
        #expect(summary["logRecords"] == 0 && summary["lastSeq"] == 10)
        let again = try Harness(dir: h.dir)
        #expect(again.contents.count == 20)
        again.store.abandon()
    }

    @Test func oneKernelPerDataDir() throws {
        let h = try Harness()
        guard case .locked(_, let pid)? = reopenError(h.dir) else {
            Issue.record("a second store opened the same data dir")
            return
        }
        #expect(pid == String(getpid()))
        h.store.abandon()
        #expect(reopenError(h.dir) == nil)
    }

    @Test func failedAppendUndoesTheBatchAndReportsIt() throws {
        let h = try Harness(configure: { $0.failAppendsBeyondBytes = 300 })
        try h.write("ok", "1")
        #expect(h.store.flush().failedCommits.isEmpty)
        let kept = h.contents
        let seq = h.store.lastRecord
        try h.write("big", String(repeating: "x", count: 400))
        var tx = Transaction()
        tx.deleteUser("u1")
        try h.store.commit(tx)
        #expect(h.contents.isEmpty == false)
        let outcome = h.store.flush()
        #expect(outcome.failedCommits == [2...3])
        #expect(!outcome.fatal)
        #expect(h.contents == kept)
        #expect(h.store.lastRecord == seq)
        // Smaller writes still fit and are durable.
        try h.write("small", "2")
        #expect(h.store.flush().failedCommits.isEmpty)
        h.store.abandon()
        let again = try Harness(dir: h.dir)
        #expect(again.contents["u1/small"] == "2" && again.contents["u1/big"] == nil)
        again.store.abandon()
    }

    @Test func deleteUserRemovesOnlyThatUser() throws {
        let h = try Harness()
        try h.write("k", "v")
        var tx = Transaction()
        tx.deleteUser("u1")
        try h.store.commit(tx)
        _ = h.store.flush()
        #expect(h.contents == ["u2/k": "v"])
        h.store.abandon()
        let again = try Harness(dir: h.dir)
        #expect(again.contents == ["u2/k": "v"])
        again.store.abandon()
    }

    @Test func automaticSnapshotByRecordCount() throws {
        let h = try Harness(configure: { $0.snapshotEveryRecords = 5 })
        for i in 0..<6 {
            try h.write("k\(i)", "v")
            _ = h.store.flush()
            h.store.snapshotIfDue()
        }
        h.waitForSnapshot()
        #expect(StoreFiles.list(h.dir).snapshots.first?.seq == 5)
        h.store.shutdown()
    }
}

/// Security round 2, item 6 (part): re-uploading one day with a 256 KiB `raw` wrote 521 MiB of log in 20 s
/// with nothing triggering a snapshot (a few records, far from the record count). The log's size now
/// triggers one too.
extension StoreTests {
    @Test func automaticSnapshotByLogSize() throws {
        let h = try Harness(configure: {
            $0.snapshotEveryRecords = Int(Int32.max)
            $0.snapshotEverySeconds = 0
            $0.snapshotEveryBytes = 200_000
        })
        let big = String(repeating: "r", count: 30_000)
        for i in 0..<3 {  // two rows of 30 KB a record: 180 KB of log, still below the size
            try h.write("k\(i)", big)
            _ = h.store.flush()
            h.store.snapshotIfDue()
        }
        #expect(StoreFiles.list(h.dir).snapshots.isEmpty, "a snapshot before the log reached the size")
        try h.write("k3", big)  // 240 KB: past it
        _ = h.store.flush()
        h.store.snapshotIfDue()
        h.waitForSnapshot()
        #expect(StoreFiles.list(h.dir).snapshots.first?.seq == 4)
        h.store.shutdown()
    }
}

@Suite(.oneStoreOnly) struct ChangeFormTests {
    @Test func binaryFormRoundTrips() throws {
        let changes: [Change] = [
            .put(table: "t\"1", user: "u", key: "k\n", value: ["a": [1, 2.5, "x"], "b": nil]),
            .delete(table: "t", user: "u", key: "k"),
            .deleteUser(user: "u\\"),
        ]
        for change in changes {
            var out: [UInt8] = []
            change.writeBinary(to: &out)
            let back = try out.withUnsafeBytes { raw in
                var r = BinaryReader(raw)
                let c = try Change(binary: &r)
                #expect(r.isAtEnd)
                return c
            }
            #expect(back == change)
            #expect(try Change(json: try JSON.parse(change.json.bytes)) == change)
        }
    }
}

@Suite(.oneStoreOnly) struct FormatCompatibilityTests {
    /// Writes a data dir the way format 1 did: a JSON text snapshot and a JSON text log segment.
    static func writeVersion1(_ dir: String) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var snap = Array("HKSNP001".utf8)
        let header: JSON = ["format": "healthkernel-snapshot", "version": 1, "seq": 2, "createdAt": "2026-01-01T00:00:00.000Z",
                            "tables": ["notes": 2]]
        RecordFraming.append(seq: 2, payload: header.bytes, to: &snap)
        let rows: JSON = [["notes", "u1", "a", ["t": "one"]], ["notes", "u2", "a", ["t": "two"]]]
        RecordFraming.append(seq: 2, payload: rows.bytes, to: &snap)
        RecordFraming.append(seq: 2, payload: (["end": true, "rows": 2] as JSON).bytes, to: &snap)
        try Data(snap).write(to: URL(fileURLWithPath: dir + "/" + StoreFiles.snapshotName(seq: 2)))
        var wal = Array("HKWAL001".utf8)
        let change: JSON = [Change.put(table: "notes", user: "u1", key: "b", value: ["t": "three"]).json]
        RecordFraming.append(seq: 3, payload: change.bytes, to: &wal)
        try Data(wal).write(to: URL(fileURLWithPath: dir + "/" + StoreFiles.segmentName(firstSeq: 3)))
    }

    @Test func aVersion1DataDirRecoversAndIsRewrittenInTodaysFormat() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("hk-v1-\(UUID().uuidString)").path
        try Self.writeVersion1(dir)
        let h = try Harness(dir: dir)
        #expect(h.contents == ["u1/a": "one", "u2/a": "two", "u1/b": "three"])
        #expect(h.store.lastRecord == 3)
        try h.write("c", "four")
        #expect(h.store.flush().failedCommits.isEmpty)
        h.store.abandon()
        // The older files were rewritten as a snapshot in today's format at start-up.
        #expect(StoreFiles.list(dir).snapshots.map(\.seq) == [3])
        let segments = StoreFiles.list(dir).segments.map(\.name)
        #expect(segments == [StoreFiles.segmentName(firstSeq: 4)])
        let newest = try #require(FileIO.readAll(dir + "/" + segments[0]))
        #expect(StoreFiles.format(of: newest, wal: true) == .stamped)
        let again = try Harness(dir: dir)
        #expect(again.contents == ["u1/a": "one", "u2/a": "two", "u1/b": "three", "u1/c": "four", "u2/c": "four"])
        again.store.shutdown()
        let final = try Harness(dir: dir)
        #expect(final.contents.count == 5)
        let snapshot = try #require(StoreFiles.list(dir).snapshots.last)
        let bytes = try #require(FileIO.readAll(dir + "/" + snapshot.name))
        #expect(StoreFiles.format(of: bytes, wal: false) == .stamped)
        final.store.abandon()
    }

    @Test func damagedBinaryValuesAreErrorsNotCrashes() {
        var good: [UInt8] = []
        JSON.object(JSONObject([("a", [1, -2, 2.5, "x", nil, true, ["k": "v"]])])).writeBinary(to: &good)
        // Every truncation and every single-byte change either decodes or throws; none may trap.
        for cut in 0..<good.count {
            let prefix = Array(good[0..<cut])
            let result = prefix.withUnsafeBytes { raw in
                var r = BinaryReader(raw)
                return try? JSON.readBinary(&r)
            }
            #expect(result == nil, "a value cut at \(cut) of \(good.count) bytes must not decode")
        }
        for i in good.indices {
            for flip: UInt8 in [0x01, 0x80, 0xFF] {
                var bad = good
                bad[i] ^= flip
                _ = bad.withUnsafeBytes { raw in
                    var r = BinaryReader(raw)
                    return try? JSON.readBinary(&r)
                }
            }
        }
        let back = good.withUnsafeBytes { raw in
            var r = BinaryReader(raw)
            return try? JSON.readBinary(&r)
        }
        #expect(back == JSON.object(JSONObject([("a", [1, -2, 2.5, "x", nil, true, ["k": "v"]])])))
    }
}

/// Partitions keep keys in order through every kind of change, and scans page through them.
@Suite(.oneStoreOnly) struct OrderedPartitionTests {
    @Test func randomChangesKeepKeyOrderAndScansMatchASortedModel() throws {
        let h = try Harness()
        var model: [String: String] = [:]
        var rng = SystemRandomNumberGenerator()
        for i in 0..<600 {
            let key = "k" + String(Int.random(in: 0..<200, using: &rng))
            var tx = Transaction()
            if Int.random(in: 0..<4, using: &rng) == 0 {
                tx.delete(h.notes, user: "u1", key: key)
                model[key] = nil
            } else {
                tx.put(h.notes, user: "u1", key: key, Note("v\(i)"))
                model[key] = "v\(i)"
            }
            try h.store.commit(tx)
        }
        _ = h.store.flush()
        let sorted = model.keys.sorted()
        #expect(h.notes.scan(user: "u1").map(\.key) == sorted)
        #expect(h.notes.scan(user: "u1", reverse: true).map(\.key) == sorted.reversed())
        for k in sorted { #expect(h.notes.get(user: "u1", key: k)?.text == model[k]) }
        // Bounds, both directions, paging with `after`.
        let (lo, hi) = ("k10", "k5")
        let inRange = sorted.filter { $0 >= lo && $0 <= hi }
        #expect(h.notes.scan(user: "u1", from: lo, to: hi).map(\.key) == inRange)
        #expect(h.notes.scan(user: "u1", from: lo, to: hi, reverse: true).map(\.key) == inRange.reversed())
        var paged: [String] = []
        var after: String?
        repeat {
            let page = h.notes.scan(user: "u1", from: lo, to: hi, after: after, limit: 7)
            paged += page.map(\.key)
            after = page.count == 7 ? page.last?.key : nil
        } while after != nil
        #expect(paged == inRange)
        var back: [String] = []
        after = nil
        repeat {
            let page = h.notes.scan(user: "u1", after: after, reverse: true, limit: 5)
            back += page.map(\.key)
            after = page.count == 5 ? page.last?.key : nil
        } while after != nil
        #expect(back == sorted.reversed())
        #expect(h.notes.scan(user: "u1", limit: 0).isEmpty && h.notes.scan(user: "nobody").isEmpty)
        // A snapshot and a restart keep it all, in order.
        _ = try h.store.snapshot()
        h.store.abandon()
        let again = try Harness(dir: h.dir)
        #expect(again.notes.scan(user: "u1").map(\.key) == sorted)
        again.store.abandon()
    }
}

/// The bulk reads of the storage interface give what the single reads give, in one call.
@Suite(.oneStoreOnly) struct BulkReadTests {
    @Test func manyKeysAndManyRangesInOneCall() throws {
        let store = Store(options: StoreOptions(dataDir: nil), clock: FixedClock(ms: 1_000), log: { _ in })
        // Second order: the note's text, then its key (as the health tables order by day, then UUID).
        let notes: Table<Note> = store.table("notes", of: Note.self, orderedBy: { row in row.text + "|" })
        try store.open()
        var tx = Transaction()
        for i in 0..<2_000 { tx.put(notes, user: "u1", key: "k\(i)", Note("d\(i % 50)")) }
        tx.put(notes, user: "u2", key: "k1", Note("d1"))
        try store.commit(tx)
        let keys = (0..<100).map { "k\($0 * 19)" } + ["absent", "k1"]
        let got = notes.get(user: "u1", keys: keys)
        #expect(got.count == Set(keys).count - 1)
        for key in keys { #expect(got[key] == notes.get(user: "u1", key: key)) }
        #expect(notes.get(user: "nobody", keys: keys).isEmpty)
        let ranges = [OrderRange(from: "d3|", to: "d3|~"), OrderRange(from: "d10|", to: "d12|~"), OrderRange(from: "e", to: "f")]
        let expected = ranges.flatMap { notes.scanOrdered(user: "u1", from: $0.from, to: $0.to) }
        #expect(notes.scanOrdered(user: "u1", ranges: ranges).map(\.key) == expected.map(\.key))
        #expect(expected.count == 40 * 4)
    }
}

/// Unique keys: one holder at a time, claimed and released in transactions, released with the user,
/// undone with a failed flush, and kept by the log and snapshots.
@Suite(.oneStoreOnly) struct UniqueKeyTests {
    @Test func oneHolderReleasedWithTheUserAndDurable() throws {
        let h = try Harness(configure: { $0.failAppendsBeyondBytes = 2_000 })
        let email = UniqueKey("test.email", "a@example.com")
        var tx = Transaction()
        tx.claim(email, for: "u1")
        tx.put(h.notes, user: "u1", key: "k", Note("v"))
        try h.store.commit(tx)
        #expect(h.store.flush().failedCommits.isEmpty)
        #expect(h.store.holder(of: email) == "u1")
        #expect(h.store.holder(of: UniqueKey("other.namespace", "a@example.com")) == nil)
        // Another user's claim fails whole.
        var steal = Transaction()
        steal.put(h.notes, user: "u2", key: "k", Note("v"))
        steal.claim(email, for: "u2")
        #expect(throws: StorageError.taken(email)) { try h.store.commit(steal) }
        #expect(h.notes.get(user: "u2", key: "k") == nil)
        // A claim whose flush fails is undone.
        let big = UniqueKey("test.email", String(repeating: "b", count: 3_000))
        var failing = Transaction()
        failing.claim(big, for: "u2")
        try h.store.commit(failing)
        #expect(h.store.flush().failedCommits.count == 1)
        #expect(h.store.holder(of: big) == nil)
        // Durable through the log, then through a snapshot.
        h.store.abandon()
        let again = try Harness(dir: h.dir)
        #expect(again.store.holder(of: email) == "u1")
        _ = try again.store.snapshot()
        again.store.abandon()
        let third = try Harness(dir: h.dir)
        #expect(third.store.holder(of: email) == "u1")
        // Deleting the user releases it, and someone else can take it.
        var delete = Transaction()
        delete.deleteUser("u1")
        try third.store.commit(delete)
        #expect(third.store.holder(of: email) == nil)
        var take = Transaction()
        take.claim(email, for: "u2")
        try third.store.commit(take)
        _ = third.store.flush()
        third.store.abandon()
        let fourth = try Harness(dir: h.dir)
        #expect(fourth.store.holder(of: email) == "u2")
        fourth.store.abandon()
    }

    /// A unit of work may release a key and hand it to another user (a purchase's kept notifications
    /// moving to its owner); a claim of a key it did not release still fails whole.
    @Test func handOverInOneUnitOfWork() throws {
        let h = try Harness()
        let key = UniqueKey("test.notification", "n1")
        var tx = Transaction()
        tx.claim(key, for: "pending")
        try h.store.commit(tx)
        var steal = Transaction()
        steal.release(key, of: "someone-else")
        steal.claim(key, for: "u1")
        #expect(throws: StorageError.taken(key)) { try h.store.commit(steal) }
        var handOver = Transaction()
        handOver.release(key, of: "pending")
        handOver.claim(key, for: "u1")
        try h.store.commit(handOver)
        #expect(h.store.holder(of: key) == "u1")
        h.store.abandon()
    }

    /// A change attached to a unit (a user's account) that a worker already joined to a month is found
    /// in place by the commit, which neither copies the month's changes nor extends its prepared record
    /// (on the serving thread that copy cost many.py's light host 52 against 32-36 ms at p99); a month
    /// not joined is extended with it once. Either way the account and the month are one record.
    @Test func attachedChangesJoinedOnAWorkerAreNotAddedAgain() throws {
        let h = try Harness()
        var account = Transaction()
        account.put(h.notes, user: "u1", key: "account", Note("made by the first write"))
        var month = Transaction()
        for i in 0..<Transaction.bigUnit { month.put(h.notes, user: "u1", key: "s\(i)", Note("sample")) }
        var joined = UnitOfWork.joined(account.entries, month)
        #expect(joined.entries.count == month.entries.count + 1)
        h.store.prepare(&joined)

        var unit = UnitOfWork()
        unit.begin(mayFinishLater: false, lastCommit: 0)
        unit.attach(account)
        var extensions = 0
        let taken = unit.merge(joined) { prepared, _ in extensions += 1; return prepared }
        #expect(extensions == 0 && taken.prepared != nil)
        // The very same changes, not a copy of them.
        #expect(taken.entries.withUnsafeBufferPointer { $0.baseAddress } == joined.entries.withUnsafeBufferPointer { $0.baseAddress })
        var prepared = month
        h.store.prepare(&prepared)
        unit.attach(account)
        let extended = unit.merge(prepared) { prepared, attached in extensions += attached.count; return prepared }
        #expect(extensions == 1 && extended.entries.count == month.entries.count + 1 && extended.prepared != nil)

        let before = h.store.lastCommitID
        h.store.beginUnit(mayFinishLater: false)
        h.store.attachToUnit(account)
        try h.store.commit(joined)
        #expect(h.store.endUnit() == (before + 1)...(before + 1))
        try h.store.flush()
        h.store.abandon()
        let reopened = try Harness(dir: h.dir)
        #expect(try reopened.notes.get(user: "u1", key: "account")?.text == "made by the first write")
        #expect(try reopened.notes.get(user: "u1", key: "s0")?.text == "sample")
        reopened.store.abandon()
    }
}

/// A table's second order follows every change, undo and restart included.
@Suite(.oneStoreOnly) struct SecondOrderTests {
    /// Notes ordered by their text, then key.
    final class OrderedHarness {
        let dir: String
        let store: Store
        let notes: Table<Note>
        init(dir: String? = nil, failBeyond: Int? = nil) throws {
            self.dir = dir ?? FileManager.default.temporaryDirectory.appendingPathComponent("hk-order-\(UUID().uuidString)").path
            var options = StoreOptions(dataDir: self.dir)
            options.fsync = .never
            options.failAppendsBeyondBytes = failBeyond
            store = Store(options: options, clock: FixedClock(ms: 1), log: { _ in })
            notes = store.table("notes", of: Note.self, orderedBy: { row in row.text + "|" })
            try store.open()
        }
        func put(_ user: String, _ key: String, _ text: String) throws {
            var tx = Transaction()
            tx.put(notes, user: user, key: key, Note(text))
            try store.commit(tx)
        }
        func order(_ user: String = "u1") -> [String] { notes.scanOrdered(user: user).map(\.key) }
    }

    @Test func followsPutsDeletesUndoDeleteUserAndRestarts() throws {
        let h = try OrderedHarness(failBeyond: 400)
        try h.put("u1", "a", "3")
        try h.put("u1", "b", "1")
        try h.put("u1", "c", "2")
        #expect(h.order() == ["b", "c", "a"])
        try h.put("u1", "b", "9")  // a changed row moves
        #expect(h.order() == ["c", "a", "b"])
        #expect(h.notes.scanOrdered(user: "u1", from: "2", to: "3|z").map(\.key) == ["c", "a"])
        #expect(h.notes.scanOrdered(user: "u1", after: "3|a", reverse: true).map(\.key) == ["c"])
        _ = h.store.flush()
        // A write whose flush fails is undone in the second order too.
        try h.put("u1", "a", String(repeating: "0", count: 500))
        #expect(h.order().first == "a")
        #expect(h.store.flush().failedCommits.count == 1)
        #expect(h.order() == ["c", "a", "b"])
        var tx = Transaction()
        tx.delete(h.notes, user: "u1", key: "c")
        try h.store.commit(tx)
        #expect(h.order() == ["a", "b"])
        _ = h.store.flush()
        h.store.abandon()
        // Rebuilt from the log, then from a snapshot.
        let again = try OrderedHarness(dir: h.dir)
        #expect(again.order() == ["a", "b"])
        _ = try again.store.snapshot()
        again.store.abandon()
        let third = try OrderedHarness(dir: h.dir)
        #expect(third.order() == ["a", "b"])
        var delete = Transaction()
        delete.deleteUser("u1")
        try third.store.commit(delete)
        #expect(third.order().isEmpty)
        third.store.abandon()
    }

    @Test func acrossUsersInOrderWithATotal() throws {
        let h = try OrderedHarness()
        try h.put("u1", "a", "3")
        try h.put("u2", "b", "1")
        try h.put("u3", "c", "2")
        try h.put("u3", "d", "7")
        func keys(_ through: String, _ limit: Int) -> ([String], Int) {
            let (rows, total) = h.notes.scanAllOrdered(through: through, limit: limit)
            return (rows.map { "\($0.user)/\($0.key)" }, total)
        }
        #expect(keys("5", 10) == (["u2/b", "u3/c", "u1/a"], 3))
        #expect(keys("5", 2) == (["u2/b", "u3/c"], 3))
        #expect(keys("~", 1) == (["u2/b"], 4))
        #expect(keys("0", 5) == ([], 0))
        try h.put("u2", "b", "8")  // moved to the end
        #expect(keys("~", 5).0 == ["u3/c", "u1/a", "u3/d", "u2/b"])
        h.store.abandon()
    }
}

/// Issue "Security and robustness defects", item 7: the log and snapshots hold emails, password hashes
/// and health data, so the data dir is 0700 and every file in it 0600 whatever the umask.
@Suite(.serialized, .oneStoreOnly) struct DataDirAccessTests {
    private func mode(_ path: String) -> mode_t {
        var st = stat()
        #expect(lstat(path, &st) == 0, "\(path)")
        return st.st_mode & 0o777
    }

    // The umask is left alone: it is the process's, and other tests run beside this one. Under the usual
    // 022 the files came out 0644 before.
    @Test func aNewDataDirIsPrivate() throws {
        let h = try Harness()
        try h.write("a", "secret")
        _ = try h.store.snapshot()
        try h.write("b", "more")
        h.store.shutdown()
        #expect(mode(h.dir) == 0o700)
        let names = FileIO.list(h.dir)
        #expect(names.contains { $0.hasPrefix("wal-") } && names.contains { $0.hasPrefix("snapshot-") } && names.contains("LOCK"))
        for name in names { #expect(mode(h.dir + "/" + name) == 0o600, "\(name)") }
    }

    @Test func anExistingOpenDataDirIsTightenedWithAWarning() throws {
        let h = try Harness()
        try h.write("a", "secret")
        h.store.shutdown()
        chmod(h.dir, 0o755)
        for name in FileIO.list(h.dir) { chmod(h.dir + "/" + name, 0o644) }
        let again = try Harness(dir: h.dir)
        defer { again.store.shutdown() }
        #expect(again.contents["u1/a"] == "secret")
        #expect(mode(h.dir) == 0o700)
        for name in FileIO.list(h.dir) { #expect(mode(h.dir + "/" + name) == 0o600, "\(name)") }
        #expect(again.messages.all.contains { $0.contains("readable by other users") })
    }

    /// #51 item 13: `--data-dir .` in a project folder took group and other bits off every file there and
    /// wrote LOCK beside them; a plain file given as the data dir was made 0600 before the error.
    @Test func aFolderThatIsNoDataDirAndAFileAreRefusedUntouched() throws {
        let project = temporaryDirectory("project")
        defer { try? FileManager.default.removeItem(atPath: project) }
        for name in ["README.md", "Package.swift"] {
            FileManager.default.createFile(atPath: project + "/" + name, contents: Data("x".utf8))
            chmod(project + "/" + name, 0o644)
        }
        chmod(project, 0o755)
        guard case .failure(let refused) = DataDirAccess.prepare(project) else { Issue.record("a project folder was taken"); return }
        #expect(refused.description.contains("is no data dir"), "\(refused)")
        #expect(mode(project) == 0o755 && mode(project + "/README.md") == 0o644 && FileIO.list(project).sorted() == ["Package.swift", "README.md"])
        // A plain file: refused, its mode as it was.
        let file = project + "/README.md"
        guard case .failure = DataDirAccess.prepare(file) else { Issue.record("a file was taken as a data dir"); return }
        #expect(mode(file) == 0o644)
        // An empty folder is taken; so is a data dir holding a file of the operator's beside the kernel's,
        // which is left as it was.
        let empty = project + "/data"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
        chmod(empty, 0o755)
        guard case .success = DataDirAccess.prepare(empty) else { Issue.record("an empty folder was refused"); return }
        #expect(mode(empty) == 0o700)
        FileManager.default.createFile(atPath: empty + "/LOCK", contents: Data())
        FileManager.default.createFile(atPath: empty + "/notes.txt", contents: Data("mine".utf8))
        chmod(empty + "/notes.txt", 0o644)
        chmod(empty + "/LOCK", 0o644)
        guard case .success = DataDirAccess.prepare(empty) else { Issue.record("a data dir was refused"); return }
        #expect(mode(empty + "/LOCK") == 0o600 && mode(empty + "/notes.txt") == 0o644, "only the kernel's own files are tightened")
    }
}
