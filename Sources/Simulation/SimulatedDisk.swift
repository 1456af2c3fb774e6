#if canImport(Glibc)
import Glibc
#endif
import DiskModel
import Foundation
import Store
import Synchronization

/// The data dir's disk as the simulation runs it: failures the simulator arms (the next few writes fail
/// as a full disk fails them, half the bytes written first; or the next fsync fails), and the page cache
/// (`CrashModel`: which bytes and renames are durable), which a power loss consults. The page cache
/// outlives a process crash; a power loss empties it.
final class SimulatedDisk: @unchecked Sendable {
    enum Fault: Sendable, CustomStringConvertible {
        /// The next n writes to files whose names start with the prefix fail ("" any file; "wal-" the log,
        /// as a bad sector under it fails; "snapshot-" the snapshots).
        case writes(Int, String)
        case fsync
        /// The power fails just before the nth file operation from now.
        case power(Int)

        var description: String {
            switch self {
            case .writes(let n, let prefix): "the next \(n) writes\(prefix.isEmpty ? "" : " to \(prefix)* files") fail"
            case .fsync: "the next fsync fails"
            case .power(let n): "the power fails before the \(n)th file operation from now"
            }
        }
    }

    private struct Armed {
        var writes = 0
        var prefix = ""
        var fsync = false
        /// Operations until the power fails (nil: it does not).
        var power: Int?
        /// The power failed: the device holds what it held then, and nothing the process does reaches it.
        var dead = false
    }

    private let armed = Mutex(Armed())
    /// Touched only on the simulation's one thread (every job runs there).
    private var cache: CrashModel

    init(dir: String) {
        cache = CrashModel(dir: dir)
    }

    func arm(_ fault: Fault) {
        armed.withLock { s in
            switch fault {
            case .writes(let n, let prefix): (s.writes, s.prefix) = (s.writes + n, prefix)
            case .fsync: s.fsync = true
            case .power(let n): s.power = n
            }
        }
    }

    func disarm() {
        armed.withLock { $0 = Armed() }
    }

    /// Whether an armed fsync failure fired since the last `takeFailedSync`.
    func takeFailedSync() -> Bool { failedSync.withLock { f in defer { f = false }; return f } }
    private let failedSync = Mutex(false)

    /// Whether the power failed (the process's answers from then on reach nobody).
    var isDead: Bool { armed.withLock { $0.dead } }

    /// The store's fault injector: the errno an operation fails with now, or nil; the page cache notes
    /// what the operation does (a failed write still writes half its bytes; a failed fsync syncs nothing).
    var injector: FaultInjector {
        FaultInjector { [self] operation, name in
            let failure = armed.withLock { s -> Int32? in
                if let n = s.power {
                    if n <= 1 { (s.dead, s.power) = (true, nil) } else { s.power = n - 1 }
                }
                if s.dead { return EIO }
                switch operation {
                case .write where s.writes > 0 && name.hasPrefix(s.prefix):
                    s.writes -= 1
                    return ENOSPC
                case .fsync where s.fsync:
                    s.fsync = false
                    failedSync.withLock { $0 = true }
                    return EIO
                default:
                    return nil
                }
            }
            if !isDead, failure == nil || operation == .write { cache.observe(operation, name) }
            return failure
        }
    }

    /// Bytes written but not synced in the file written last: a power loss keeps a prefix of them.
    var unsyncedTail: Int { cache.unsyncedTail }

    /// The power fails: the data dir becomes what the device holds, with `keep` bytes of the last
    /// written file's unsynced tail (a torn write), renames not made durable undone. The process must be
    /// gone (its files closed) first.
    func losePower(keep: Int) throws {
        let dir = cache.dir
        let image = dir + ".image"
        try? FileManager.default.removeItem(atPath: image)
        try FileManager.default.createDirectory(atPath: image, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try cache.image(into: image, keep: keep)
        try FileManager.default.removeItem(atPath: dir)
        try FileManager.default.moveItem(atPath: image, toPath: dir)
        cache = CrashModel(dir: dir)
    }
}
