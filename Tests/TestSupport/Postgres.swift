import Foundation

/// A PostgreSQL server the tests share: `$HEALTHKERNEL_TEST_PG_URL` (the README's test command starts
/// one with `scripts/pg-server`), else one this test process starts itself the first time a test asks
/// and stops when it exits. Each test gets a schema of its own, so tests never see each other's rows.
public enum TestPostgres {
    /// The server's URL.
    public static let url: String = {
        if let url = ProcessInfo.processInfo.environment["HEALTHKERNEL_TEST_PG_URL"], !url.isEmpty { return url }
        let dir = "/tmp/hk-pg-\(getpid())"
        let url = pgServer("start", dir)
        atexit { _ = TestPostgres.pgServer("stop", "/tmp/hk-pg-\(getpid())") }
        return url
    }()

    /// Set when `url` is a transaction-mode pooler (the test command's PgBouncer run): the server's direct
    /// URL, which kernels then listen on (`store.pooler`, `store.listenUrl`).
    public static let listenURL: String? = ProcessInfo.processInfo.environment["HEALTHKERNEL_TEST_PG_LISTEN_URL"].flatMap { $0.isEmpty ? nil : $0 }

    /// Runs `scripts/pg-server COMMAND DIR` and returns what it printed. Through system(3): Foundation's
    /// Process waits forever here once the script has left a server running.
    @discardableResult
    static func pgServer(_ command: String, _ dir: String, _ sql: String? = nil, arguments: [String] = []) -> String {
        let out = dir + ".out"
        let quoted = (arguments + (sql.map { [$0] } ?? [])).map { " '" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined()
        let status = system("'\(root.path)/scripts/pg-server' \(command) '\(dir)'\(quoted) > '\(out)'")
        precondition(status == 0, "scripts/pg-server \(command) failed")
        defer { unlink(out) }
        return ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A server of the calling test's own, which it may stop and start (`halt`, `resume`) without
    /// disturbing the others; `stop` removes it.
    public final class Private: @unchecked Sendable {
        public let dir: String
        public let url: String

        /// With `tls`, it also listens on localhost with TLS (`scripts/pg-server start-tls`): `url` is then
        /// its TCP URL, and `dir/tls/ca.crt` the CA that signed its certificate.
        public init(tls: Bool = false) {
            dir = "/tmp/hk-pg-private-\(getpid())-\(UUID().uuidString.prefix(8))"
            url = TestPostgres.pgServer(tls ? "start-tls" : "start", dir)
        }

        /// A streaming replica of `primary`, its synchronous standby (every commit from now on waits
        /// until the standby has it).
        public init(standbyOf primary: Private) {
            dir = "/tmp/hk-pg-private-\(getpid())-\(UUID().uuidString.prefix(8))"
            url = TestPostgres.pgServer("standby", dir, arguments: [primary.dir])
        }

        /// The standby becomes a primary.
        public func promote() { TestPostgres.pgServer("promote", dir) }
        public func halt() { TestPostgres.pgServer("halt", dir) }
        public func resume() { TestPostgres.pgServer("resume", dir) }
        public func stop() { TestPostgres.pgServer("stop", dir) }
        /// Stops it at once, as a crash of the server would.
        public func crash() { TestPostgres.pgServer("crash", dir) }
        /// Runs `sql` as the superuser; its output.
        @discardableResult
        public func sql(_ sql: String) -> String { TestPostgres.pgServer("sql", dir, sql) }
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A schema name no other test uses.
    public static func freshSchema() -> String {
        "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }
}
