#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if SIMULATION
import Mutants
#endif

/// Makes chosen file operations of a data dir fail, so tests can check what every half-finished I/O
/// leaves behind (a full disk at each step of a rotation or a snapshot) on any machine.
public final class FaultInjector: Sendable {
    /// The operations that can be made to fail.
    public enum Operation: String, Sendable, CaseIterable {
        /// Creating a file.
        case create
        /// Writing to a file; an injected failure writes half of the bytes first, as a full disk does.
        case write
        /// fsync or fdatasync of a file.
        case fsync
        /// Renaming a temp file to its final name.
        case rename
        /// Removing a file.
        case unlink
        /// Cutting a file back after a failed append.
        case truncate
        /// fsync of the data dir itself.
        case fsyncDirectory
    }

    private let rule: @Sendable (Operation, String) -> Int32?

    /// An injector that asks `rule(operation, file name)` before every operation; a non-nil errno fails it.
    public init(_ rule: @escaping @Sendable (Operation, String) -> Int32?) {
        self.rule = rule
    }

    func failure(_ operation: Operation, _ name: String) -> Int32? {
        rule(operation, name)
    }
}

extension FaultInjector: Equatable {
    /// The same injector (configurations compare equal only when they watch the same way).
    public static func == (a: FaultInjector, b: FaultInjector) -> Bool { a === b }
}

/// A failed file operation: the errno and a message that names the file relative to the data dir
/// (messages reach hosts; the server's own paths are none of their business).
struct DiskError: Error, CustomStringConvertible {
    let description: String

    init(_ what: String, _ name: String, _ code: Int32) {
        description = "cannot \(what) \(name): \(FileIO.describe(code))"
    }
}

/// The data dir's files, named relative to it, with every operation that can fail routed through the
/// optional fault injector. The store does all its file work through this, so tests reach every step.
struct Disk: Sendable {
    let dir: String
    let faults: FaultInjector?

    func path(_ name: String) -> String { dir + "/" + name }

    /// Opens `name` for appending, creating it (empty) first when `create`; truncates it when `truncate`.
    func open(_ name: String, create: Bool, truncate: Bool = false) -> Result<Int32, DiskError> {
        if create, let e = faults?.failure(.create, name) { return .failure(DiskError("create", name, e)) }
        var flags = O_WRONLY | O_APPEND | O_CLOEXEC
        if create { flags |= O_CREAT }
        if truncate { flags |= O_TRUNC }
        let fd = DataDirAccess.open(path(name), flags)
        return fd >= 0 ? .success(fd) : .failure(DiskError(create ? "create" : "open", name, errno))
    }

    /// Writes all of `bytes` to `fd` (the file `name`).
    func write(_ fd: Int32, _ name: String, _ bytes: UnsafeRawBufferPointer) -> DiskError? {
        if let e = faults?.failure(.write, name) {
            _ = FileIO.writeAll(fd, UnsafeRawBufferPointer(rebasing: bytes[0..<(bytes.count / 2)]))
            return DiskError("write", name, e)
        }
        return FileIO.writeAll(fd, bytes).map { DiskError("write", name, $0) }
    }

    /// Flushes the data of `fd` (the file `name`) to the device.
    func sync(_ fd: Int32, _ name: String) -> DiskError? {
        #if SIMULATION
        if Mutant.fsyncSkipped.isOn { return nil }
        #endif
        if let e = faults?.failure(.fsync, name) { return DiskError("sync", name, e) }
        return fdatasync(fd) == 0 ? nil : DiskError("sync", name, errno)
    }

    /// Syncs the file `name`, which nothing holds open.
    func sync(_ name: String) -> DiskError? {
        let fd = DataDirAccess.open(path(name), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return DiskError("open", name, errno) }
        defer { Glibc.close(fd) }
        return sync(fd, name)
    }

    /// Cuts `fd` (the file `name`) back to `size` bytes.
    func truncate(_ fd: Int32, _ name: String, to size: Int) -> DiskError? {
        if let e = faults?.failure(.truncate, name) { return DiskError("truncate", name, e) }
        return ftruncate(fd, off_t(size)) == 0 ? nil : DiskError("truncate", name, errno)
    }

    func rename(_ from: String, to: String) -> DiskError? {
        if let e = faults?.failure(.rename, from) { return DiskError("rename", from, e) }
        return Glibc.rename(path(from), path(to)) == 0 ? nil : DiskError("rename", from, errno)
    }

    func unlink(_ name: String) -> DiskError? {
        if let e = faults?.failure(.unlink, name) { return DiskError("remove", name, e) }
        return Glibc.unlink(path(name)) == 0 || errno == ENOENT ? nil : DiskError("remove", name, errno)
    }

    /// Makes the folder's entries (creations, renames, removals) durable.
    func syncDirectory() -> DiskError? {
        if let e = faults?.failure(.fsyncDirectory, ".") { return DiskError("sync", "the data dir", e) }
        return FileIO.fsyncDirectory(dir).map { DiskError("sync", "the data dir", $0) }
    }

    func size(_ name: String) -> Int? { FileIO.size(path(name)) }

    /// Writes a file through `<name>.tmp`: what `produce` hands its `write` callback, chunk by chunk,
    /// then fsync, rename and a folder fsync. Nothing is left under either name when it fails before
    /// the rename; after a rename whose folder fsync failed, `name` exists but may not survive a crash.
    func writeDurably(_ name: String, _ produce: (_ write: ([UInt8]) -> Void) -> Void) -> DiskError? {
        let tmp = name + ".tmp"
        let fd: Int32
        switch open(tmp, create: true, truncate: true) {
        case .success(let f): fd = f
        case .failure(let e): return e
        }
        var failure: DiskError?
        produce { chunk in
            if failure == nil { failure = chunk.withUnsafeBytes { write(fd, tmp, $0) } }
        }
        if failure == nil { failure = sync(fd, tmp) }
        close(fd)
        if failure == nil { failure = rename(tmp, to: name) }
        if let failure {
            _ = unlink(tmp)  // a leftover .tmp is removed at the next start if this fails too
            return failure
        }
        return syncDirectory()
    }
}

/// Files outside the log that must appear complete or not at all (the generated JWT secret).
public enum DurableFile {
    /// What `create` did.
    public enum Outcome: Equatable, Sendable {
        case created
        /// The file was there already (another process made it first): nothing was written.
        case exists
        /// Nothing was created; the message names the file relative to its folder.
        case failed(String)
    }

    /// Creates `dir/name` holding `bytes` unless it exists (or replaces it when `replacing`): a temp file
    /// is written, synced and linked into place (which fails when the name is taken) or renamed over it,
    /// then the folder is synced. A disk that fills up half-way leaves no file behind, so it cannot block
    /// the next start.
    public static func create(dir: String, name: String, bytes: [UInt8], replacing: Bool = false) -> Outcome {
        let disk = Disk(dir: dir, faults: nil)
        let tmp = name + ".\(getpid()).tmp"
        let fd = DataDirAccess.open(disk.path(tmp), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { return .failed(DiskError("create", tmp, errno).description) }
        var failure = bytes.withUnsafeBytes { disk.write(fd, tmp, $0) } ?? disk.sync(fd, tmp)
        Glibc.close(fd)
        defer { _ = disk.unlink(tmp) }
        if let failure { return .failed(failure.description) }
        if replacing {
            if let e = disk.rename(tmp, to: name) { return .failed(e.description) }
        } else if link(disk.path(tmp), disk.path(name)) != 0 {
            return errno == EEXIST ? .exists : .failed(DiskError("create", name, errno).description)
        }
        failure = disk.syncDirectory()
        return failure.map { .failed($0.description) } ?? .created
    }
}
