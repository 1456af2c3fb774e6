#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import Storage
import Threads

/// The result of a snapshot.
public struct SnapshotInfo: Sendable, Equatable {
    public let seq: UInt64
    public let bytes: Int
    public let durationMs: Int
}

/// The last snapshot written.
struct CheckpointState {
    var last: SnapshotInfo?
    var lastAt: Timestamp?
}

/// Checkpoints of the file journal: snapshot files written from a frozen image of the tables, after
/// which the log segments they cover are removed.
extension FileJournal {
    func checkpointDue(now: Timestamp) -> Bool {
        guard recordsSinceCheckpoint > 0, !checkpointRunning.isSet else { return false }
        if recordsSinceCheckpoint >= options.snapshotEveryRecords { return true }
        if options.snapshotEveryBytes > 0, bytesSinceCheckpoint >= options.snapshotEveryBytes { return true }
        guard options.snapshotEverySeconds > 0, let first = firstChangeSinceCheckpoint else { return false }
        return now.milliseconds - first.milliseconds >= Int64(options.snapshotEverySeconds) * 1000
    }

    var isCheckpointing: Bool { checkpointRunning.isSet }

    func waitForCheckpoint() {
        while checkpointRunning.isSet { usleep(1000) }
    }

    /// Starts a new segment, freezes the tables, and returns the work that writes the snapshot: it then
    /// covers exactly the records before the new segment.
    func checkpoint(_ freeze: () -> [FrozenTable]) -> (@Sendable () -> Result<SnapshotInfo, StorageError>)? {
        checkpointRunning.set(true)
        if let why = segments.rotate(nextSeq: lastSeq + 1) {
            log("cannot start a new log segment (\(why)); records go on into the current one")
        }
        let snapSeq = lastSeq
        let frozen = freeze()
        // The snapshot covers the segments before the one records go to now: every record in them is at
        // most `snapSeq`. The current segment is never among them, whether the rotation above worked
        // (it then starts at snapSeq + 1) or failed (it then holds records on both sides of snapSeq).
        let current = segments.current
        let covered = StoreFiles.list(disk.dir).segments.prefix { $0.name != current }.map(\.name)
        recordsSinceCheckpoint = 0
        bytesSinceCheckpoint = 0
        firstChangeSinceCheckpoint = nil
        let createdAt = clock.now()
        let (disk, segments, state, running, log, clock) = (self.disk, self.segments, checkpoints, checkpointRunning, self.log, self.clock)
        return {
            let started = clock.monotonicMicros()
            let name = StoreFiles.snapshotName(seq: snapSeq)
            var size = 0
            let failure = disk.writeDurably(name) { write in
                StoreFiles.encodeSnapshot(seq: snapSeq, createdAt: createdAt.description, tables: frozen) { chunk in
                    size += chunk.count
                    write(chunk)
                }
            }
            let info = SnapshotInfo(seq: snapSeq, bytes: size, durationMs: Int((clock.monotonicMicros() - started) / 1000))
            if let failure {
                log("snapshot failed: \(failure); the log still holds everything")
            } else {
                // Only now that the new snapshot is durable do older snapshots and covered segments go. A
                // removal that fails leaves a file the next start reads by its records and removes then.
                for old in StoreFiles.list(disk.dir).snapshots where old.seq < snapSeq { _ = disk.unlink(old.name) }
                for old in covered where old != segments.current { _ = disk.unlink(old) }
                _ = disk.syncDirectory()
                state.withLock {
                    $0.last = info
                    $0.lastAt = createdAt
                }
            }
            running.set(false)  // after the outcome is recorded: a waiter reads it next
            return failure.map { .failure(.unavailable($0.description)) } ?? .success(info)
        }
    }
}
