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

    /// Creates `dir` (and missing parents; only `dir` itself is made private), or checks an existing one
    /// and tightens it and the kernel's files in it. An existing folder must be empty or a data dir (it
    /// holds the kernel's lock, log, snapshot or secret): `--data-dir .` in a project folder is refused,
    /// and a file that is no folder is refused before anything is changed. Only files the kernel names
    /// are ever tightened. Returns the names it tightened, for a warning, or why it refused.
    public static func prepare(_ dir: String) -> Result<[String], DataDirAccessError> {
        var st = stat()
        if stat(dir, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFDIR else {
                return .failure(DataDirAccessError("data dir \(dir) is not a folder"))
            }
            let names = FileIO.list(dir).filter { !ignored.contains($0) }
            guard names.isEmpty || names.contains(where: isDataDirMark) else {
                return .failure(DataDirAccessError("\(dir) holds \(names.count) files and is no data dir (no LOCK, log, snapshot or "
                    + "jwt-secret in it): give the kernel an empty or new folder, such as \(dir.hasSuffix("/") ? dir : dir + "/")data"))
            }
        } else {
            var prefix = dir.hasPrefix("/") ? "/" : ""
            let parts = dir.split(separator: "/")
            for (i, part) in parts.enumerated() {
                prefix += part + "/"
                let mode: mode_t = i == parts.count - 1 ? folderMode : 0o755
                if mkdir(prefix, mode) != 0 && errno != EEXIST {
                    return .failure(DataDirAccessError("cannot create data dir \(prefix): \(FileIO.describe(errno))"))
                }
            }
        }
        var tightened: [String] = []
        if tighten(dir) { tightened.append("the data dir") }
        for name in FileIO.list(dir) where isKernelFile(name) && tighten(dir + "/" + name) { tightened.append(name) }
        return .success(tightened)
    }

    /// Names a data dir may hold besides the kernel's own: a volume's `lost+found`.
    static let ignored: Set<String> = ["lost+found"]

    /// Files whose presence makes a folder a data dir.
    static func isDataDirMark(_ name: String) -> Bool {
        name == "LOCK" || name == "jwt-secret" || (name.hasPrefix("wal-") && name.hasSuffix(".log"))
            || (name.hasPrefix("snapshot-") && name.hasSuffix(".snap"))
    }

    /// Files the kernel writes in a data dir: the marks, temporary files and parts `store repair` moved aside.
    static func isKernelFile(_ name: String) -> Bool {
        isDataDirMark(name) || (["wal-", "snapshot-", "jwt-secret", "LOCK"].contains { name.hasPrefix($0) }
            && (name.hasSuffix(".tmp") || name.contains(".broken")))
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

/// A data dir that could not be made or taken.
public struct DataDirAccessError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
