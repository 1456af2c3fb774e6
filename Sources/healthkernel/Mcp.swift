import ArgumentParser
import Chrono
import JSON
import JSONParsing
import JSONRPC
import Kernel
import Logging
import MCP
import Threads
#if canImport(Glibc)
import Glibc
#endif

/// `healthkernel mcp`: the Model Context Protocol on stdin/stdout for one user.
struct Mcp: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mcp",
        abstract: "Serve the Model Context Protocol on stdin/stdout for one user, so an assistant can read that user's data.",
        discussion: """
            Speaks MCP 2026-07-28 (server/discover, no handshake) and 2025-11-25 (initialize). Every tool \
            calls a kernel method with the user's token: nothing of another user is reachable. Without \
            --connect it opens the data dir (or --store) itself; with it, it reaches a kernel serving \
            --listen unix:PATH, so the data dir stays with that kernel.
            """
    )

    @Option(help: "The user's access token (default: $HEALTHKERNEL_TOKEN). A service token is refused.")
    var token: String?

    @Flag(help: ArgumentHelp("Keep the session alive: take the refresh token saved in --refresh-token-file, refresh the access token a minute before it expires, and save each rotated refresh token there.",
                             discussion: "Put the user's refresh token (from auth.signIn) in the file once: chmod 600."))
    var refreshToken = false

    @Option(help: "Where --refresh-token keeps the refresh token (default: $XDG_STATE_HOME/healthkernel/mcp-refresh-token, else ~/.local/state/healthkernel/mcp-refresh-token).")
    var refreshTokenFile: String?

    @Flag(help: "Also offer the tools that write (record a meditation session, claim Screen Time minutes).")
    var allowWrites = false

    @Option(help: "Reach the kernel serving on this Unix socket (unix:PATH or PATH) instead of opening the data dir.")
    var connect: String?

    @OptionGroup var options: KernelOptions

    func run() throws {
        let given = token ?? environment()["HEALTHKERNEL_TOKEN"]
        guard refreshToken || given?.isEmpty == false else {
            fail("healthkernel mcp: give the user's access token (--token or HEALTHKERNEL_TOKEN), or keep a session alive with --refresh-token",
                 status: ExitStatus.startupFailed)
        }
        let config = options.load()
        let logger = bootstrapLogging(level: config.logLevel)
        let link: KernelLink
        if let connect {
            do {
                link = try SocketLink(path: connect.hasPrefix("unix:") ? String(connect.dropFirst(5)) : connect, waitSeconds: 5, command: "healthkernel mcp")
            } catch {
                fail("healthkernel mcp: \(error)", status: ExitStatus.startupFailed)
            }
        } else {
            link = InProcessLink(kernel: options.start(config, logger: logger))
        }
        let session: SessionToken
        if refreshToken {
            guard let path = refreshTokenFile ?? RefreshTokenFile.defaultPath(environment: environment()) else {
                fail("healthkernel mcp: --refresh-token needs --refresh-token-file (no HOME to keep it under)", status: ExitStatus.startupFailed)
            }
            do {
                session = try SessionToken(refreshingFrom: RefreshTokenFile(path: path), now: SystemClock().now().seconds) { refresh in
                    link.call("auth.refresh", JSONObject([("refreshToken", .string(refresh))]))
                }
            } catch {
                fail("healthkernel mcp: \(error)", status: ExitStatus.startupFailed)
            }
        } else {
            session = SessionToken(fixed: given ?? "")
        }
        // The token now; a kept-alive session that can no longer be refreshed ends the server, saying why.
        let token = { () -> String in
            do {
                return try session.current(now: SystemClock().now().seconds)
            } catch {
                fail("healthkernel mcp: \(error)", status: ExitStatus.callFailed)
            }
        }
        // Only a user's own token: a service token would reach every user.
        let who = link.call("auth.user", JSONObject([("auth", .string(token()))]))
        guard who["result"]?["id"]?.stringValue != nil else {
            let why = who["error"]?["message"]?.stringValue ?? "no answer"
            fail("healthkernel mcp: the token is not a user's access token (\(why))", status: ExitStatus.startupFailed)
        }
        let document = link.call("rpc.discover", JSONObject())["result"] ?? .null
        let methods = (document["methods"]?.arrayValue ?? []).compactMap { m -> MCPMethod? in
            guard let name = m["name"]?.stringValue else { return nil }
            return MCPMethod(name: name, params: m["params"]?.arrayValue ?? [], resultSchema: m["result"]?["schema"] ?? [:])
        }
        let tools = MCPTool.catalogue(methods, allowWrites: allowWrites)
        let server = MCPServer(tools: tools, token: token, serverVersion: KernelVersion.version,
                               today: { Zone.utc.localDate(at: SystemClock().now()) }) { method, params in
            let response = link.call(method, params)
            // The token expired or was revoked: say so and stop, rather than answer every call with it.
            if response["error"]?["code"] == -32001 {
                fail("healthkernel mcp: the token is no longer accepted (\(response["error"]?["message"]?.stringValue ?? "")); start again with a fresh one",
                     status: ExitStatus.callFailed)
            }
            return response
        }
        logger.info("mcp: serving \(methods.count) kernel methods as \(tools.count) tools")
        // One lock for the server, its kernel link and stdout: requests and the feed's polling take turns.
        let shared = Locked(server)
        @Sendable func write(_ lines: [[UInt8]]) {
            for line in lines { writeStdout(String(decoding: line, as: UTF8.self) + "\n") }
        }
        // Subscribed resources: the user's feed, read every half second, says which answers changed
        // (writes other hosts make through the kernel's socket included).
        spawnThread {
            while true {
                usleep(500_000)
                shared.withLock { server in write(server.poll()) }
            }
        }
        // The kernel's own line limit and framer: a line past `kernel.maxLineBytes` is answered once and
        // skipped to its newline, never held (an unfinished 256 MiB line took 269 MiB).
        var framer = LineFramer(maxLineBytes: config.maxLineBytes)
        let handle = { (event: LineFramer.Event) in
            switch event {
            case .line(let bytes):
                let line = Array(bytes)
                shared.withLock { server in write(server.handle(line)) }
            case .tooLong:
                write([MCPServer.lineTooLong(config.maxLineBytes).bytes])
            }
        }
        var block = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = block.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            block.withUnsafeBytes { framer.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n]), handle) }
        }
        framer.finish(handle)
        shared.withLock { _ in link.close() }
    }
}

/// How the MCP server reaches the kernel: a kernel of its own, or one serving a socket.
protocol KernelLink: AnyObject {
    /// The JSON-RPC response to one request.
    func call(_ method: String, _ params: JSONObject) -> JSON
    func close()
}

/// A kernel in this process, entered through a connection like every other host's, its slow work
/// waited for on every call.
final class InProcessLink: KernelLink {
    let kernel: Kernel
    private var connection: Connection
    private var id: Int64 = 0
    init(kernel: Kernel) {
        self.kernel = kernel
        connection = kernel.connection()
    }

    func call(_ method: String, _ params: JSONObject) -> JSON {
        id += 1
        let request: JSON = ["jsonrpc": "2.0", "id": .int(id), "method": .string(method), "params": .object(params)]
        let (out, fatal) = connection.exchange(request.bytes)
        if fatal { fail("healthkernel mcp: syncing the log failed", status: ExitStatus.storageFailed) }
        let line = out.split(separator: UInt8(ascii: "\n")).first.map(Array.init) ?? []
        return (try? JSON.parse(line)) ?? .null
    }

    func close() {
        connection.close()
        kernel.shutdown()
    }
}

/// A kernel serving `--listen unix:PATH`: one connection, one request at a time (`mcp`, `call --connect`).
final class SocketLink: KernelLink {
    let fd: Int32
    /// Names the command in what a lost connection prints.
    let command: String
    private var id: Int64 = 0
    private var pending: [UInt8] = []

    init(path: String, waitSeconds: Double, command: String) throws {
        fd = try SocketServer.connectToKernel(path, waitSeconds: waitSeconds)
        self.command = command
    }

    func call(_ method: String, _ params: JSONObject) -> JSON {
        id += 1
        let request: JSON = ["jsonrpc": "2.0", "id": .int(id), "method": .string(method), "params": .object(params)]
        var line = request.bytes + [UInt8(ascii: "\n")]
        var offset = 0
        while offset < line.count {
            let n = line.withUnsafeMutableBytes { buffer in buffer.baseAddress.map { write(fd, $0 + offset, buffer.count - offset) } ?? -1 }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { fail("\(command): the kernel closed the connection", status: ExitStatus.callFailed) }
            offset += n
        }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            // Answers come in order; an events.changed line (none is asked for here) would be skipped.
            if let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let answer = Array(pending[..<end])
                pending.removeSubrange(...end)
                if let json = try? JSON.parse(answer), json["id"] == .int(id) { return json }
                continue
            }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { fail("\(command): the kernel closed the connection", status: ExitStatus.callFailed) }
            pending.append(contentsOf: buffer[0..<n])
        }
    }

    func close() { _ = Glibc.close(fd) }
}
