#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Keeps a data dir private to the kernel's own Unix user: the folder 0700 and every file in it 0600,
/// whatever the umask. The log and snapshots hold emails, password hashes and health data; a second
/// account on the machine must not read them.
public enum DataDirAccess {
    /// Mode of the data dir.
    public static let folderMode: mode_t = 0o700
    /// Mode of every file the kernel writes in it.
    public static let fileMode: mode_t = 0o600

    /// Creates `dir` (and missing parents; only `dir` itself is made private), or tightens an existing
    /// one and the files in it. Returns the names it tightened, for a warning, or the folder it could
    /// not create.
    public static func prepare(_ dir: String) -> Result<[String], DataDirAccessError> {
        var prefix = dir.hasPrefix("/") ? "/" : ""
        let parts = dir.split(separator: "/")
        for (i, part) in parts.enumerated() {
            prefix += part + "/"
            let mode: mode_t = i == parts.count - 1 ? folderMode : 0o755
            if mkdir(prefix, mode) != 0 && errno != EEXIST {
                return .failure(DataDirAccessError(dir: prefix, code: errno))
            }
        }
        var tightened: [String] = []
        if tighten(dir) { tightened.append("the data dir") }
        for name in FileIO.list(dir) where tighten(dir + "/" + name) { tightened.append(name) }
        return .success(tightened)
    }

    /// Opens (creating when missing) a file of the data dir with mode 0600 whatever the umask.
    static func open(_ path: String, _ flags: Int32) -> Int32 {
        let fd = Glibc.open(path, flags, fileMode)
        if fd >= 0 && flags & O_CREAT != 0 { _ = fchmod(fd, fileMode) }
        return fd
    }

    /// Removes group and other bits from `path` (a file or folder the kernel's user owns); whether it changed.
    private static func tighten(_ path: String) -> Bool {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_uid == geteuid(), (st.st_mode & S_IFMT) != S_IFLNK,
              st.st_mode & 0o077 != 0 else { return false }
        return chmod(path, st.st_mode & 0o700) == 0
    }
}

/// A data dir folder that could not be created.
public struct DataDirAccessError: Error, CustomStringConvertible {
    public let dir: String
    public let code: Int32
    public var description: String { "cannot create data dir \(dir): \(FileIO.describe(code))" }
}
