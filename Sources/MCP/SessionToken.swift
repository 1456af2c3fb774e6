#if canImport(Glibc)
import Glibc
#endif
import JSON

/// The access token an MCP server calls the kernel with: the one it was given (`--token`), or one kept
/// alive from a refresh token (`--refresh-token`), so that an assistant's connection outlives the hour
/// an access token lasts. Kept alive, it is refreshed through `auth.refresh` a minute before it expires,
/// and the rotated refresh token is saved at once: the old one stops working seconds after its use, and
/// an unsaved new one would be lost with the process.
public final class SessionToken: @unchecked Sendable {
    private var access: String
    /// When `access` expires (seconds since 1970); nil: never refreshed (a fixed token).
    private var expiresAt: Int64?
    private let file: RefreshTokenFile?
    /// Calls `auth.refresh` with a refresh token and answers the JSON-RPC response.
    private let refresh: ((String) -> JSON)?

    /// A token used as it is.
    public init(fixed token: String) {
        (access, expiresAt, file, refresh) = (token, nil, nil, nil)
    }

    /// A session kept alive from the refresh token in `file`, refreshed now.
    public init(refreshingFrom file: RefreshTokenFile, now: Int64, refresh: @escaping (String) -> JSON) throws(SessionTokenError) {
        (access, expiresAt, self.file, self.refresh) = ("", 0, file, refresh)
        try renew(now: now)
    }

    /// Seconds before its expiry that an access token is refreshed.
    public static let marginSeconds: Int64 = 60

    /// The access token to call with at `now`, refreshed first when it is due.
    public func current(now: Int64) throws(SessionTokenError) -> String {
        if let expiresAt, now >= expiresAt - Self.marginSeconds { try renew(now: now) }
        return access
    }

    private func renew(now: Int64) throws(SessionTokenError) {
        guard let file, let refresh else { return }
        let token = try file.read()
        let response = refresh(token)
        guard let result = response["result"], let next = result["refreshToken"]?.stringValue, let access = result["accessToken"]?.stringValue,
              let expiresIn = result["expiresIn"]?.intValue else {
            throw .refused(response["error"]?["message"]?.stringValue ?? "no answer")
        }
        try file.write(next)
        self.access = access
        expiresAt = now + expiresIn
    }
}

/// Why a session could not be kept alive.
public enum SessionTokenError: Error, CustomStringConvertible {
    case file(String)
    case refused(String)

    public var description: String {
        switch self {
        case .file(let why): return why
        case .refused(let why): return "the refresh token was refused (\(why)): sign in again and save the new refresh token"
        }
    }
}

/// The file a kept-alive session's refresh token lives in: read at each refresh, replaced atomically
/// (written beside it, 0600, then renamed over it) with each rotation.
public struct RefreshTokenFile: Sendable {
    public let path: String

    public init(path: String) { self.path = path }

    /// Where it lives unless given: `$XDG_STATE_HOME/healthkernel/mcp-refresh-token`, else
    /// `$HOME/.local/state/healthkernel/mcp-refresh-token`.
    public static func defaultPath(environment: [String: String]) -> String? {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/healthkernel/mcp-refresh-token" }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return home + "/.local/state/healthkernel/mcp-refresh-token"
    }

    public func read() throws(SessionTokenError) -> String {
        guard let f = fopen(path, "r") else { throw .file("cannot read the refresh token at \(path): \(String(cString: strerror(errno)))") }
        defer { fclose(f) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&buffer, 1, buffer.count, f)
            if n <= 0 { break }
            bytes += buffer[0..<n]
            if bytes.count > 4096 { throw .file("\(path) is not a refresh token (over 4 KiB)") }
        }
        let token = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: " \n\r\t")
        guard !token.isEmpty else { throw .file("\(path) holds no refresh token") }
        return token
    }

    public func write(_ token: String) throws(SessionTokenError) {
        let temporary = path + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .file("cannot save the rotated refresh token at \(path): \(String(cString: strerror(errno)))") }
        let bytes = Array((token + "\n").utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw .file("cannot save the rotated refresh token at \(path): \(String(cString: strerror(errno)))")
        }
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var s = Substring(self)
        while let c = s.first, set.contains(c) { s.removeFirst() }
        while let c = s.last, set.contains(c) { s.removeLast() }
        return String(s)
    }
}
