#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import Storage
import Threads

/// The journal of a data dir: a write-ahead log in segments (`Segments`), snapshots beside it
/// (`Snapshots.swift`), recovery from both (`DataDirScan`), and an exclusive lock so that one kernel
/// owns the dir. Used from the serving thread; checkpoints and `everysec` syncing run on helper threads.
final class FileJournal: Journal {
    let options: StoreOptions
    let disk: Disk
    let clock: Clock
    let log: @Sendable (String) -> Void
    let segments: Segments
    private var lockFD: Int32 = -1

    /// Framed records not yet written, and the sequence number before the first of them.
    private var queued: [UInt8] = []
    private var seqBeforeQueued: UInt64 = 0
    private var queuedRecords = 0
    /// The last record in the log.
    private(set) var lastSeq: UInt64 = 0
    /// A `jumped` marker decided at start-up and not yet durable, with the number it takes: every
    /// flush writes it first, and fails while it cannot (`NumberingMarker`).
    private var pendingMarker: (seq: UInt64, marker: NumberingMarker)?
    private var logBytes = 0
    var recordsSinceCheckpoint = 0
    /// Log bytes written since the last checkpoint (recovery counts the log it found after the snapshot).
    var bytesSinceCheckpoint = 0
    var firstChangeSinceCheckpoint: Timestamp?
    let checkpoints = Locked(CheckpointState())
    let checkpointRunning = SharedFlag()

    init(options: StoreOptions, dir: String, clock: Clock, log: @escaping @Sendable (String) -> Void) {
        self.options = options
        self.disk = Disk(dir: dir, faults: options.faults)
        self.clock = clock
        self.log = log
        self.segments = Segments(disk: disk, fsync: options.fsync)
    }

    var keepsRecords: Bool { true }

    // MARK: open

    func open(_ load: (DataDirScan) throws(StoreOpenError) -> Void) throws(StoreOpenError) -> UInt64 {
        let dir = disk.dir
        switch DataDirAccess.prepare(dir) {
        case .failure(let e): throw .io(e.description)
        case .success(let tightened) where !tightened.isEmpty:
            log("data dir \(dir) was readable by other users: made private to this user (\(tightened.joined(separator: ", ")))")
        case .success: break
        }
        lockFD = try DataDirLock.acquire(dir)
        do {
            try recover(load)
        } catch {
            DataDirLock.release(lockFD)  // a refused start leaves the data dir free for `store repair`
            lockFD = -1
            throw error
        }
        return lastSeq
    }

    private func recover(_ load: (DataDirScan) throws(StoreOpenError) -> Void) throws(StoreOpenError) {
        let dir = disk.dir
        for leftover in StoreFiles.list(dir).leftovers { _ = disk.unlink(leftover) }
        let listing = StoreFiles.list(dir)
        let fresh = listing.segments.isEmpty && listing.snapshots.isEmpty
        let scan: DataDirScan
        switch DataDirScan.read(dir) {
        case .success(let s): scan = s
        case .failure(let d): throw .damaged(d)
        }
        try load(scan)
        if let snapshot = scan.snapshot, let name = scan.snapshotName {
            checkpoints.withLock {
                $0.lastAt = Timestamp(rfc3339: snapshot.createdAt)
                $0.last = SnapshotInfo(seq: snapshot.seq, bytes: disk.size(name) ?? 0, durationMs: 0)
            }
        }
        lastSeq = scan.lastSeq
        if options.fsync == .everysec && !fresh && !scan.stoppedCleanly {
            let next = lastSeq + 1 + NumberingMarker.jump
            pendingMarker = (lastSeq + 1, .jumped(next: next))
            lastSeq = next - 1
        }
        recordsSinceCheckpoint = scan.records.count
        if let torn = scan.tornTail {
            let path = disk.path(torn.segment)
            log("log \(torn.segment) ends in a torn record at byte \(torn.offset); cutting it off (it was never acknowledged)")
            if truncate(path, off_t(max(torn.offset, 0))) != 0 {
                throw .io("cannot truncate \(path): \(FileIO.describe(errno))")
            }
        }
        // Whatever is left is harmless to the next start too (it is read by its records), so a removal
        // that fails is only logged.
        for name in scan.disposableSegments {
            if let e = disk.unlink(name) { log("\(e); it holds nothing recovery needs") }
        }
        if let failure = syncRecovered() { log("\(failure); writes are refused until it can be") }
        // Without a segment to append to (an older format, or none yet), the first write starts one: a
        // full disk then refuses that write with -32050 instead of stopping start-up.
        if let name = scan.appendSegment, let e = segments.reopen(name) { throw .io("\(e) in \(dir)") }
        logBytes = StoreFiles.list(dir).segments.reduce(0) { $0 + (disk.size($1.name) ?? 0) }
        bytesSinceCheckpoint = logBytes
        if pendingMarker != nil, let failure = syncRecovered() ?? writePendingMarker() {
            log("\(failure); writes are refused until it can be")
        }
    }

    /// Writes the pending `jumped` marker durably (no record may be answered before), or says why not.
    private func writePendingMarker() -> String? {
        guard let (seq, marker) = pendingMarker else { return nil }
        if let failure = writeMarker(marker, seq: seq) { return "the log's numbering could not be noted: \(failure)" }
        pendingMarker = nil
        return nil
    }

    /// Appends `marker` as record `seq` and syncs it, whatever the fsync policy.
    private func writeMarker(_ marker: NumberingMarker, seq: UInt64) -> String? {
        if segments.current == nil, let e = segments.start(firstSeq: seq) { return e.description }
        var bytes: [UInt8] = []
        RecordFraming.append(seq: seq, payload: marker.payload, to: &bytes)
        if let failure = segments.append(bytes, durable: true) ?? segments.syncFailure { return failure }
        logBytes += bytes.count
        return nil
    }

    func startHelpers(on executor: any Executor) {
        if options.fsync == .everysec { segments.startSyncer(on: executor) }
    }

    /// Whether what recovery read is known durable (`syncRecovered`).
    private var recoveredSynced = false

    /// Syncs every file recovery read, and the folder. What the previous process wrote may never have
    /// reached the device: it died before an fsync, an fsync or a folder fsync of its failed, or `--fsync`
    /// let the system choose. Nothing new may be acknowledged on top of it (a segment renamed into place
    /// whose name is not durable is lost with every record appended to it), so until this succeeds every
    /// flush tries it again first and fails. A few fsyncs: the segments since the last snapshot, the
    /// snapshot, the folder. Returns why it failed.
    private func syncRecovered() -> String? {
        guard !recoveredSynced else { return nil }
        let files = StoreFiles.list(disk.dir)
        for name in files.segments.map(\.name) + files.snapshots.map(\.name) {
            if let e = disk.sync(name) { return "\(e.description): what recovery read is not known durable" }
        }
        if let e = disk.syncDirectory() { return "\(e.description): what recovery read is not known durable" }
        recoveredSynced = true
        return nil
    }

    // MARK: append and flush

    func append(seq: UInt64, _ payload: (inout [UInt8]) -> Void) {
        if queued.isEmpty { seqBeforeQueued = seq - 1 }
        queuedRecords += 1
        RecordFraming.appendRecord(seq: seq, to: &queued, payload)
    }

    var hasQueued: Bool { !queued.isEmpty }

    func advance(to seq: UInt64) {
        precondition(queued.isEmpty, "advancing the log with records queued")
        lastSeq = max(lastSeq, seq)
    }

    func flush() -> String? {
        guard !queued.isEmpty else { return nil }
        defer {
            queued.removeAll(keepingCapacity: true)
            queuedRecords = 0
        }
        var failure = syncRecovered() ?? writePendingMarker()
        if failure == nil, segments.current == nil { failure = segments.start(firstSeq: seqBeforeQueued + 1)?.description }
        if failure == nil, let limit = options.failAppendsBeyondBytes, logBytes + queued.count > limit {
            failure = FileIO.describe(ENOSPC)
        }
        if failure == nil { failure = segments.append(queued) }
        if let failure { return failure }
        logBytes += queued.count
        lastSeq = seqBeforeQueued + UInt64(queuedRecords)
        recordsSinceCheckpoint += queuedRecords
        bytesSinceCheckpoint += queued.count
        if firstChangeSinceCheckpoint == nil { firstChangeSinceCheckpoint = clock.now() }
        if segments.size >= options.segmentBytes, let why = segments.rotate(nextSeq: lastSeq + 1) {
            log("cannot start a new log segment (\(why)); records go on into the current one")
        }
        return nil
    }

    var syncFailure: String? { segments.syncFailure }

    var durability: (walBytes: Int, lastSnapshotAt: Timestamp?) {
        (logBytes, checkpoints.withLock { $0.lastAt })
    }

    // MARK: close

    /// With `sync` (a clean stop, nothing queued), ends the log with a `stopped` marker first, so the
    /// next start numbers on without a jump.
    func close(sync: Bool) {
        if sync && options.fsync == .everysec && queued.isEmpty && pendingMarker == nil && segments.syncFailure == nil {
            if writeMarker(.stopped, seq: lastSeq + 1) == nil { lastSeq += 1 }
        }
        segments.close(sync: sync)
        DataDirLock.release(lockFD)
        lockFD = -1
    }
}
