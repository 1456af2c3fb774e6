#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One kernel per data dir: an exclusive `flock` on `<dir>/LOCK`, which holds the owner's pid.
/// The kernel holds it for its whole life; the operating system drops it if the process dies.
public enum DataDirLock {
    /// Takes the lock or fails at once naming the holder's pid.
    public static func acquire(_ dir: String) throws(StoreOpenError) -> Int32 {
        let path = dir + "/LOCK"
        let fd = DataDirAccess.open(path, O_RDWR | O_CREAT | O_CLOEXEC)
        guard fd >= 0 else { throw .io("cannot open \(path): \(FileIO.describe(errno))") }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let holder = FileIO.readAll(path).map { String(decoding: $0, as: UTF8.self) }?
                .filter { !$0.isWhitespace } ?? "unknown"
            close(fd)
            throw .locked(dir: dir, pid: holder.isEmpty ? "unknown" : holder)
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return fd
    }

    /// Releases the lock.
    public static func release(_ fd: Int32) {
        guard fd >= 0 else { return }
        flock(fd, LOCK_UN)
        close(fd)
    }
}
