#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Thin wrappers over the POSIX calls the store needs, with errno turned into messages.
enum FileIO {
    /// The text for an errno value.
    static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }

    /// Reads a whole file, or its first `limit` bytes; nil when it cannot be opened.
    static func readAll(_ path: String, limit: Int = .max) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        var out = [UInt8](repeating: 0, count: min(Int(st.st_size), limit))
        var offset = 0
        while offset < out.count {
            let n = out.withUnsafeMutableBytes { read(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 { if errno == EINTR { continue } else { return nil } }
            if n == 0 { break }
            offset += n
        }
        if offset < out.count { out.removeSubrange(offset...) }
        return out
    }

    /// Writes all of `bytes` to `fd`; returns errno on failure.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            if n == 0 { return EIO }
            offset += n
        }
        return nil
    }

    /// Writes a file atomically: temp file, fsync, rename, fsync of the folder.
    static func fsyncDirectory(_ dir: String) -> Int32? {
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        return fsync(fd) == 0 ? nil : errno
    }

    /// Names in a folder.
    static func list(_ dir: String) -> [String] {
        guard let d = opendir(dir) else { return [] }
        defer { closedir(d) }
        var names: [String] = []
        while let entry = readdir(d) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Size of a file, or nil.
    static func size(_ path: String) -> Int? {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : nil
    }

    /// Creates a folder and its parents.
    static func makeDirectories(_ path: String) -> Int32? {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for part in path.split(separator: "/") {
            prefix += part + "/"
            if mkdir(prefix, 0o755) != 0 && errno != EEXIST { return errno }
        }
        return nil
    }
}

