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
        // Read straight into uninitialised memory: zero-filling first touched every page of a 64 MiB
        // segment once more (a sixth of replaying a long log).
        let size = min(Int(st.st_size), limit)
        var failed = false
        let out = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            count = 0
            while count < size {
                let n = read(fd, buffer.baseAddress! + count, size - count)
                if n < 0 {
                    if errno == EINTR { continue }
                    failed = true
                    return
                }
                if n == 0 { break }
                count += n
            }
        }
        return failed ? nil : out
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
}

