import Auth
import Chrono
import DomainSupport
import JSON
import JSONParsing
import JSONRPC
import Threads
#if canImport(Glibc)
import Glibc
#endif

/// Imports of Apple Health exports that a host started with `health.importExport`: each runs as a child
/// process, `healthkernel health import-export --connect <this kernel's socket>`, so the minutes a large
/// export takes hold no request, no worker and no lock of this kernel: the child's batches are ordinary
/// `health.ingest` requests of the user on a connection of their own. The one owner of the table of
/// jobs; at most `maxRunning` run at once, and the newest `maxKept` are remembered (in memory: a
/// restarted kernel forgets them, and importing again is harmless, since an import is idempotent).
final class ImportJobs: Sendable {
    static let maxRunning = 4
    static let maxKept = 100

    struct Job: Sendable {
        let id: String
        let userId: String
        let pid: pid_t
        let directory: String
        let startedAt: Timestamp
        var state = "running"
        var summary: JSON?
        var error: String?
    }

    private let jobs = Locked<[(String, Job)]>([])
    /// `healthkernel` itself and the socket this kernel serves; nil when it serves none (in-process, stdio).
    let executable: String?
    let socket: String?

    init(executable: String?, socket: String?) {
        self.executable = executable
        self.socket = socket
    }

    /// Starts importing `path` for `userId` with a token minted for them; answers the job's id.
    func start(userId: String, path: String, timezone: String?, token: String, id: String, now: Timestamp) throws(RPCError) -> String {
        guard let executable, let socket else {
            throw RPCError.forbidden("socket_required", "health.importExport runs imports through the kernel's socket: serve with --listen unix:PATH")
        }
        guard path.hasPrefix("/"), access(path, R_OK) == 0 else {
            throw RPCError.invalidParams("params.path", reason: "not_found", "params.path must be an absolute path to a file this kernel can read")
        }
        reap()
        guard jobs.withLock({ $0.filter { $0.1.state == "running" }.count }) < Self.maxRunning else {
            throw RPCError.rateLimited("\(Self.maxRunning) imports are running; start this one when one has finished (health.importStatus)")
        }
        var template = Array("/tmp/healthkernel-import-XXXXXX".utf8CString)
        guard let dir = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }).map({ String(cString: $0) }) else {
            throw RPCError.storageUnavailable("cannot make a directory for the import's output")
        }
        var args = [executable, "health", "import-export", "--user", userId, "--connect", socket, "--token", token, "--log-level", "notice"]
        if let timezone { args += ["--timezone", timezone] }
        args.append(path)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, dir + "/summary.json", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, dir + "/log", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        var pid: pid_t = 0
        let argv = args.map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        // The child gets none of this kernel's environment (its secrets stay here): the token is its
        // authority; a PATH for unzip.
        let envp: [UnsafeMutablePointer<CChar>?] = [strdup("PATH=/usr/local/bin:/usr/bin:/bin"), nil]
        defer { free(envp[0]) }
        let spawned = argv.withUnsafeBufferPointer { a in envp.withUnsafeBufferPointer { e in
            posix_spawn(&pid, executable, &actions, nil, UnsafeMutablePointer(mutating: a.baseAddress!), UnsafeMutablePointer(mutating: e.baseAddress!))
        } }
        guard spawned == 0 else { throw RPCError.storageUnavailable("cannot start the import: \(String(cString: strerror(spawned)))") }
        let job = Job(id: id, userId: userId, pid: pid, directory: dir, startedAt: now)
        jobs.withLock { jobs in
            jobs.append((id, job))
            // Forget the oldest finished jobs past the bound (a running one is never forgotten).
            while jobs.count > Self.maxKept, let i = jobs.firstIndex(where: { $0.1.state != "running" }) { jobs.remove(at: i) }
        }
        return id
    }

    /// A job as it stands, or nil when this kernel does not know it.
    func status(_ id: String) -> Job? {
        reap()
        return jobs.withLock { $0.first { $0.0 == id }?.1 }
    }

    /// Collects finished children: their summary, or the last lines they logged.
    private func reap() {
        jobs.withLock { jobs in
            for i in jobs.indices where jobs[i].1.state == "running" {
                var status: Int32 = 0
                guard waitpid(jobs[i].1.pid, &status, WNOHANG) == jobs[i].1.pid else { continue }
                let dir = jobs[i].1.directory
                let exited = (status & 0x7f) == 0 && ((status >> 8) & 0xff) == 0
                if exited, let bytes = readFile(dir + "/summary.json"), let summary = try? JSON.parse(bytes) {
                    jobs[i].1.state = "done"
                    jobs[i].1.summary = summary
                } else {
                    jobs[i].1.state = "failed"
                    let log = String(decoding: readFile(dir + "/log") ?? [], as: UTF8.self)
                    jobs[i].1.error = String(log.split(separator: "\n").last { $0.contains("import-export") } ?? "the import stopped (status \(status))")
                }
                unlink(dir + "/summary.json")
                unlink(dir + "/log")
                rmdir(dir)
            }
        }
    }

    /// A small file's bytes (a summary, a log), at most 1 MiB.
    private func readFile(_ path: String) -> [UInt8]? {
        guard let f = fopen(path, "rb") else { return nil }
        defer { fclose(f) }
        var out = [UInt8](repeating: 0, count: 1 << 20)
        let n = fread(&out, 1, out.count, f)
        return Array(out[0..<n])
    }
}
