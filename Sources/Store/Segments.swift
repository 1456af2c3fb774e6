#if canImport(Glibc)
import Storage
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Threads

/// The log segments of a data dir: the one records are appended to, starting the next one, and
/// syncing under the fsync policy (for `everysec`, on a helper thread). Shared by the serving thread
/// and the helper threads, under one lock.
final class Segments: Sendable {
    /// The segment records are appended to. `fd` is -1 while there is none (a fresh data dir, or a
    /// full disk kept the last one from being started): the next append starts it.
    struct Current {
        var fd: Int32 = -1
        var name = ""
        var size = 0
        /// Written since the last sync (`everysec`).
        var dirty = false
        var syncFailed: String?
        /// A failed append whose bytes could not be cut off yet: the file holds a partial record past
        /// `size`. Nothing may be appended or synced after it until the cut succeeds.
        var cutPending = false
    }

    let disk: Disk
    let fsync: FsyncMode
    private let state = Locked(Current())
    private let syncerStop = Locked(false)

    init(disk: Disk, fsync: FsyncMode) {
        self.disk = disk
        self.fsync = fsync
    }

    /// The name of the segment being appended to, if there is one.
    var current: String? { state.withLock { $0.fd >= 0 ? $0.name : nil } }
    /// Bytes in the current segment.
    var size: Int { state.withLock { $0.size } }
    /// Why syncing failed, once it has.
    var syncFailure: String? { state.withLock { $0.syncFailed } }

    /// Appends to the existing segment `name` from now on.
    func reopen(_ name: String) -> DiskError? {
        switch disk.open(name, create: false) {
        case .success(let fd):
            install(fd: fd, name: name, size: disk.size(name) ?? 0)
            return nil
        case .failure(let e):
            return e
        }
    }

    private func install(fd: Int32, name: String, size: Int) {
        let old = state.withLock { s -> Int32 in
            let old = s.fd
            s = Current(fd: fd, name: name, size: size, dirty: false, syncFailed: s.syncFailed, cutPending: false)
            return old
        }
        if old >= 0 { Glibc.close(old) }
    }

    /// Starts the segment whose first record is `firstSeq` and appends to it from now on. The segment
    /// appears under its name complete with its magic or not at all: it is written as a temp file, synced,
    /// renamed and the folder synced. On failure the folder is left as it was and the current segment stays.
    func start(firstSeq: UInt64) -> DiskError? {
        let name = StoreFiles.segmentName(firstSeq: firstSeq)
        if state.withLock({ $0.name }) == name { return nil }
        // Records always go to the newest segment, so a file with this name and records in it cannot be
        // ours to replace; an empty one (a failed rotation of an older version) can.
        if let size = disk.size(name), size > StoreFiles.walMagic.count { return DiskError("start", name, EEXIST) }
        let tmp = name + ".tmp"
        let fd: Int32
        switch disk.open(tmp, create: true, truncate: true) {
        case .success(let f): fd = f
        case .failure(let e): return e
        }
        var failure = StoreFiles.walMagic.withUnsafeBytes { disk.write(fd, tmp, $0) } ?? disk.sync(fd, tmp)
        var renamed = false
        if failure == nil {
            failure = disk.rename(tmp, to: name)
            renamed = failure == nil
        }
        if failure == nil { failure = disk.syncDirectory() }
        if let failure {
            Glibc.close(fd)
            _ = disk.unlink(renamed ? name : tmp)
            if renamed { _ = disk.syncDirectory() }
            return failure
        }
        install(fd: fd, name: name, size: StoreFiles.walMagic.count)
        return nil
    }

    /// Appends `bytes` (whole records) to the current segment and syncs as the policy says; returns why
    /// it failed, after cutting the segment back so no partial record stays. When even the cut fails, the
    /// partial record stays past the end the store knows, and every later append tries the cut again
    /// first, failing until it works: a crash meanwhile leaves a torn tail, which start-up cuts off, and
    /// no record is ever written after the partial one. (It used to count as a failed fsync, which stops
    /// the kernel for good: a full disk that frees up must not need a restart.)
    /// With `durable`, syncs whatever the policy (a numbering marker).
    func append(_ bytes: [UInt8], durable: Bool = false) -> String? {
        state.withLock { s in
            if let failure = cutIfPending(&s) { return failure }
            if let error = bytes.withUnsafeBytes({ disk.write(s.fd, s.name, $0) }) {
                s.cutPending = true
                _ = cutIfPending(&s)
                return error.description
            }
            s.size += bytes.count
            switch durable ? .always : fsync {
            case .always:
                if let e = disk.sync(s.fd, s.name) { s.syncFailed = e.description }
            case .everysec:
                s.dirty = true
            case .never:
                break
            }
            return nil
        }
    }

    /// Starts a new segment at `nextSeq` (syncing the current one first), unless the current one already
    /// starts there (it holds no records yet). A segment that cannot be started leaves the current one in
    /// use, so rotation is never needed for correctness; returns why it did not happen.
    func rotate(nextSeq: UInt64) -> String? {
        guard state.withLock({ $0.name }) != StoreFiles.segmentName(firstSeq: nextSeq) else { return nil }
        let synced = state.withLock { s -> Bool in
            guard s.fd >= 0 else { return true }
            if cutIfPending(&s) != nil { return false }
            if s.dirty || fsync != .never {
                if let e = disk.sync(s.fd, s.name) { s.syncFailed = e.description; return false }
                s.dirty = false
            }
            return true
        }
        guard synced else { return "syncing the current segment failed" }
        return start(firstSeq: nextSeq)?.description
    }

    /// Cuts a partial record left by a failed append; why it still cannot, or nil once the segment ends
    /// at its last whole record.
    private func cutIfPending(_ s: inout Current) -> String? {
        guard s.cutPending else { return nil }
        if let e = disk.truncate(s.fd, s.name, to: s.size) { return "a failed write could not be cut off yet: \(e.description)" }
        s.cutPending = false
        return nil
    }

    /// Syncs the current segment every 200 ms while it has unsynced records (`everysec`), on `executor`.
    func startSyncer(on executor: any Executor) {
        let (state, stop, disk) = (self.state, syncerStop, self.disk)
        executor.every(micros: 200_000) {
            if stop.withLock({ $0 }) { return false }
            state.withLock { s in
                guard s.dirty, s.syncFailed == nil, !s.cutPending, s.fd >= 0 else { return }
                if let e = disk.sync(s.fd, s.name) { s.syncFailed = e.description }
                s.dirty = false
            }
            return true
        }
    }

    /// Stops the syncer and closes the current segment, syncing it first when `sync`.
    func close(sync: Bool) {
        syncerStop.withLock { $0 = true }
        let fd = state.withLock { s -> Int32 in
            if sync && s.dirty && s.fd >= 0 { _ = fdatasync(s.fd) }
            let fd = s.fd
            s.fd = -1
            return fd
        }
        if fd >= 0 { Glibc.close(fd) }
    }
}
