#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Auth
import DomainSupport
import Storage
import Store

/// Where the HS256 secret comes from: the configuration (file, `HEALTHKERNEL_JWT_SECRET`, `--jwt-secret`),
/// else `<data-dir>/jwt-secret`, generated once with mode 0600; a memory-only kernel makes one per process.
public enum JWTSecret {
    /// The file name in the data dir.
    public static let fileName = "jwt-secret"

    /// The secret's bytes, creating the data dir file when needed.
    public static func resolve(configured: String?, dataDir: String?, random: RandomSource = SystemRandom()) throws -> [UInt8] {
        if let configured {
            guard configured.utf8.count >= 32 else { throw AuthSetupError("the JWT secret must be at least 32 bytes") }
            return Array(configured.utf8)
        }
        guard let dataDir else { return Array(Base64URL.encode(random.bytes(48)).utf8) }
        let path = dataDir + "/" + fileName
        if let existing = read(path) { return existing }
        // A new secret would make every token and cursor the data dir's users hold fail "the signature
        // does not verify", with no word why: a data dir that holds data never gets one silently.
        if access(path, F_OK) != 0, holdsData(dataDir) {
            throw AuthSetupError("the data dir holds data but its \(fileName) is gone, so every token it signed would fail: "
                + "put the file back from a backup, or configure the secret it held (auth.jwtSecret); to start over with a "
                + "new secret on purpose, write one: openssl rand -base64 48 > \(path)")
        }
        let secret = Array(Base64URL.encode(random.bytes(48)).utf8)
        // A file too short to be a secret never signed anything (the start that wrote it failed, as an
        // older version's did when the disk filled up): it is replaced rather than blocking every start.
        let tooShort = access(path, F_OK) == 0
        switch DurableFile.create(dir: dataDir, name: fileName, bytes: secret, replacing: tooShort) {
        case .created:
            return secret
        case .exists:
            if let existing = read(path) { return existing }  // another process made it first
            throw AuthSetupError("\(fileName) in the data dir is unreadable or shorter than 32 bytes")
        case .failed(let message):
            throw AuthSetupError(message)
        }
    }

    /// Whether the data dir has a snapshot, or a log segment holding a record (one holding only its
    /// magic number is what a first start leaves).
    static func holdsData(_ dir: String) -> Bool {
        let files = StoreFiles.list(dir)
        if !files.snapshots.isEmpty { return true }
        return files.segments.contains { segment in
            var st = stat()
            return stat(dir + "/" + segment.name, &st) == 0 && Int(st.st_size) > StoreFiles.walMagic.count
        }
    }

    private static func read(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard n >= 32 else { return nil }
        var bytes = Array(buffer[0..<n])
        while let last = bytes.last, last == 0x0A || last == 0x0D || last == 0x20 { bytes.removeLast() }
        return bytes
    }
}
