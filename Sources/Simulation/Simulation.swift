import Chrono
import Crypto
import Foundation
import JSON
import JSONParsing
import JSONRPC
import Kernel
import Logging
import Postgres
import PostgresModel
import Storage
import Store
import Subscriptions
import Threads

/// One seed's run: a kernel on a data dir, several users on several streams, and every choice (what each
/// client sends, how its bytes are cut into reads, when a batch ends, when a worker's job runs, when
/// the backlog gets a slice, when time passes, when the disk fails and when the process dies) drawn
/// from the seed. Everything runs on this one thread, so the same seed makes the same history.
final class Simulation {
    struct Settings {
        var seed: UInt64
        var steps = 400
        var users = 3
        var streams = 3
        /// The kernel on the model of PostgreSQL (`PostgresModel`) instead of a data dir.
        var onPostgres = false
        /// Kernels sharing the model of PostgreSQL (one on a data dir); stream c is served by kernel c mod this.
        var kernels = 1
    }

    /// One kernel process: its kernel, the executor its other threads' work waits in, whether its
    /// serving thread is inside a call (a step on its streams cannot start then), and its process number
    /// (what the model of PostgreSQL knows its connections by).
    final class Node {
        var kernel: Kernel!
        let executor: SimulatedExecutor
        var serving = false
        var process = 0
        /// With `viaSocket`, the kernel's socket server (its rounds are steps) and its peers' sockets; and
        /// whether making a batch durable failed there (the server then has the process stop).
        var sockets: SocketServer?
        var socketIO: SimulatedSocketIO?
        var socketStorageFailed = false

        init(clock: SimulatedClock) { executor = SimulatedExecutor(clock: clock) }
    }

    /// A client's stream: its connection, the bytes it sent that the kernel has not read yet, and the
    /// requests it waits for, in the order it sent them.
    /// A class, so that a step on one stream may run while another kernel's serving thread is inside a
    /// call on another stream (each client is its own object; the array is only read).
    final class Client {
        /// nil only while its kernel restarts.
        var connection: Connection! {
            didSet { server = nil }
        }
        /// With `viaServer`, the stdio server that serves the connection, reading what the host end of
        /// its transport is offered: its reader and serving threads' rounds are steps of their own.
        var server: StdioServer?
        var transport: SimulatedTransport?
        /// Through the socket server: the client's socket, and the end of a line written in part.
        var socket: (io: SimulatedSocketIO, peer: Int32)?
        private var partial: [UInt8] = []
        /// The kernel serving it.
        let node: Int
        var unread: [UInt8] = []
        var waiting: [Int64] = []
        /// The feed cursor this client holds per user, and the last change position it saw.
        var cursors: [Int: String] = [:]
        var lastSeen: [Int: Int64] = [:]

        init(connection: Connection, node: Int) {
            self.connection = connection
            self.node = node
        }

        /// Puts the stdio server between the client and its connection to `kernel`, woken by the
        /// kernel's other threads as the binary's is.
        func serveThroughStdio(_ kernel: Kernel) {
            let transport = SimulatedTransport()
            let server = StdioServer(connection: connection, transport: transport)
            kernel.onOtherKernelsChanges(server.wake)
            (self.transport, self.server) = (transport, server)
        }

        /// Connects the client to its kernel's socket server instead of a connection of its own.
        func connect(to io: SimulatedSocketIO) {
            connection?.close()
            connection = nil
            socket = (io, io.connect())
            partial = []
        }

        /// What the kernel wrote to the client since the last call, in whole lines.
        func takeOutput() -> [UInt8] {
            if let socket {
                partial += socket.io.takeWritten(socket.peer)
                guard let last = partial.lastIndex(of: 10) else { return [] }
                defer { partial.removeFirst(last + 1) }
                return Array(partial[...last])
            }
            if let transport {
                defer { transport.written.removeAll() }
                return transport.written
            }
            defer { connection.output.removeAll() }
            return connection.output
        }
    }

    let settings: Settings
    private var dice: Dice
    private let dir: String
    private let clock = SimulatedClock(wallMs: Simulation.began)
    static let began: Int64 = 1_767_225_600_000  // 2026-01-01
    private var nodes: [Node] = []
    private let disk: SimulatedDisk
    /// The model of PostgreSQL (with `onPostgres`), and how its sessions wait: by the simulation taking
    /// other steps (`stepWhileWaiting`) until what they wait for is released.
    private var server: ModelServer?
    /// Whether a host subscribes to events (on PostgreSQL not always: big commits run detached only
    /// while no host listens).
    private var subscribes = true
    /// Changes from which a write is big (planned on a worker, finished in slices or detached): the
    /// workload's writes are a few changes each, so most seeds lower it to reach those paths.
    private var bigUnit = Transaction.bigUnit
    /// The data dir's `--fsync`: `always`, or now and then `everysec` (a power cut may take the writes
    /// answered in the last second).
    private var fsync = FsyncMode.always
    /// Answers given in the last second, or since the second before the log's first failed fsync, with
    /// when (wall ms): under `everysec`, what a power cut may take.
    private var recentAnswers: [(id: Int64, atMs: Int64)] = []
    /// When an fsync of the running process first failed (`everysec`: what was answered since the second
    /// before it may be lost at a power cut, until a new process has synced it).
    private var syncFailedAtMs: Int64?
    /// The earliest answer a power cut may take now (`everysec`).
    private var atRiskFromMs: Int64 { min(clock.now().milliseconds, syncFailedAtMs ?? .max) - 1000 }
    /// Whether the first stream of each kernel goes through the stdio server (its reader and serving
    /// rounds, its hand-over queue and wakes), as the host that spawned the kernel talks to it; the other
    /// streams drive their connections as the socket server does.
    private var viaServer = false
    /// Whether the streams that do not go through the stdio server go through each kernel's socket server
    /// (its accept, poll rounds, wakes, partial writes and, for lines longer than `parseInline`, its
    /// parser jobs), as peers on `--listen unix:` do; else they drive their connections directly.
    private var viaSocket = false
    /// Lines longer than this are parsed on a parser job (lowered in most seeds, so that the workload's
    /// lines reach that path).
    private var parseInline = SocketServer.parseInlineBytes
    /// The first kernel: the one the checker reads through.
    private var kernel: Kernel { nodes[0].kernel }
    private var clients: [Client] = []
    private var users: [String] = []
    private var tokens: [String] = []
    private var serviceToken = ""
    private var minutes: [[Int]]
    private(set) var model = Model()
    private var sent: [Int64: Sent] = [:]
    private var nextID: Int64 = 1
    private var digest = SHA256()
    /// What happened, one line an event: what a failing seed prints.
    private(set) var trace: [String] = []
    private(set) var requests = 0
    /// Notification lines received.
    private(set) var events = 0
    private(set) var faultCount = 0
    private(set) var failure: String?
    /// Processes started so far.
    private var incarnation = 0

    /// How likely each kind of step is in this seed. Each seed draws its own mix (swarm testing): a seed
    /// that crashes often or fills the disk often reaches states an even mix almost never does.
    private var mix: [(action: String, weight: Int)] = []

    init(_ settings: Settings, dir: String) {
        self.settings = settings
        self.dir = dir
        disk = SimulatedDisk(dir: dir)
        dice = Dice(seed: settings.seed)
        minutes = Array(repeating: Array(repeating: 0, count: Workload.days), count: settings.users)
        users = (0..<settings.users).map { "00000000-0000-4000-8000-\(String($0 + 1).leftPadded(12))" }
        let often = [0, 1, 3, 8]
        mix = [("send", 40), ("read", 25), ("end", 18), ("job", 14), ("backlog", 4), ("time", 3),
               ("snapshot", often[dice.below(4)]), ("crash", often[dice.below(3)]), ("power", often[dice.below(3)]),
               ("disk", often[dice.below(4)])]
        bigUnit = [Transaction.bigUnit, 2, 3, 5][dice.below(4)]
        nodes = (0..<settings.kernels).map { [clock] _ in Node(clock: clock) }
        if !settings.onPostgres && dice.below(3) == 0 { fsync = .everysec }
        viaServer = dice.below(3) > 0
        viaSocket = dice.below(3) > 0
        parseInline = [SocketServer.parseInlineBytes, 200, 400, 800][dice.below(4)]
        if settings.onPostgres {
            // No data dir: no snapshots, power or disk faults; network failures and the listener instead.
            mix = mix.map { ["snapshot", "power", "disk"].contains($0.action) ? ($0.action, 0) : $0 }
                + [("cut", often[dice.below(4)]), ("listen", 4), ("failover", [0, 0, 1, 2][dice.below(4)])]
            subscribes = dice.below(2) == 0
            server = ModelServer(parking: SimulatedParking(SimulationRef(self)), now: { [clock] in clock.monotonicMicros() })
            // Notifications take up to 0, 2 or 15 s to reach a listener (a listener behind: past 10 s
            // the kernel stops waiting for its own announcements).
            let lag = [0, 0, 2_000_000, 15_000_000][dice.below(4)]
            if lag > 0 {
                let this = SimulationRef(self)
                server?.notifyDelayMicros = { UInt64(this.simulation.draw(below: lag + 1)) }
            }
            // HK_SIM_SQL=1: every statement the model runs goes into the trace.
            if ProcessInfo.processInfo.environment["HK_SIM_SQL"] != nil {
                let this = SimulationRef(self)
                server?.trace = { this.simulation.note($0) }
            }
        }
    }

    /// Runs the seed; the failure found, if any, is in `failure`.
    func run() {
        let this = SimulationRef(self)
        clock.onPause = { micros in this.simulation.park(until: { false }, timeoutMicros: micros) }
        defer { clock.onPause = nil }
        TraceLog.sink.withLock { $0 = { line in this.simulation.note(line) } }
        Waiting.install(SimulatedWaiter(this))
        defer {
            Waiting.install(nil)
            for node in nodes { node.kernel?.store?.abandon() }
            TraceLog.sink.withLock { $0 = nil }
        }
        do {
            try start()
            for step in 0..<settings.steps where failure == nil {
                try self.step(step)
                noteFailedSync()
                if disk.isDead { try crash("armed at an earlier step", powerLoss: true) }
            }
            if failure == nil { try settleEverything() }
            if failure == nil {
                // Every answered write must survive the process dying now, and with every request
                // answered and flushed, recovery must rebuild exactly the state the process had.
                let before = kernel.store?.fingerprint()
                for n in nodes.indices { try crash("the end", node: n) }
                let after = kernel.store?.fingerprint()
                guard before == after else { throw Failure("recovery after the last crash built another state than the process had (fingerprint \(before ?? 0) then \(after ?? 0))") }
                try Checker(simulation: self).checkFinalState()
                note("\(events) notifications received")
            }
        } catch let error as Failure {
            failure = error.message
        } catch {
            failure = "\(error)"
        }
    }

    /// The history's digest: every answer each stream got, in order, and every fault.
    var hexDigest: String { digest.finalize().map { String($0, radix: 16).leftPadded(2) }.joined() }

    // MARK: Steps

    private func step(_ step: Int) throws {
        let c = dice.below(clients.count)
        let working = nodes.indices.filter { nodes[$0].executor.count > 0 }
        let action = dice.weighted(mix.map { ($0.action, $0.action == "job" && working.isEmpty ? 0 : $0.weight) })
        let n = clients[c].node
        switch action {
        case "send":
            send(on: c)
        case "read":
            read(c)
        case "end":
            try endBatch(c)
        case "job":
            let node = working[dice.below(working.count)]
            let executor = nodes[node].executor
            let i = dice.below(executor.count)
            note("job \(i) of \(executor.count)\(nodes.count > 1 ? " on kernel \(node)" : "")")
            executor.run(at: i)
        case "backlog":
            note("backlog slice")
            if clients[c].connection == nil { try endBatch(c) } else { _ = serve(n) { clients[c].connection.applyBacklog() } }
        case "listen":
            note("listener polls")
            nodes[n].kernel.postgres?.pollListener()
        case "cut":
            var after = dice.below(8), orphan = dice.below(2) == 0
            // Now and then the primary fails over there, in the middle of a pipeline, or just before a
            // COMMIT whose transaction id the kernel has (its standby never knew the transaction).
            let failover = dice.below(6) == 0 ? UInt64(dice.below(3_000_000)) : nil
            if failover != nil && dice.below(2) == 0 { after = -1 }
            faultCount += 1
            if let failover {
                note("failover armed: \(after < 0 ? "before the next COMMIT" : "after \(after) statements"), the standby accepting connections after \(failover / 1000) ms")
            } else {
                note("network failure armed: after \(after) statements\(orphan ? ", the backend not noticing" : "")")
            }
            digest.update(data: Array("cut \(after) \(orphan) \(failover.map(String.init) ?? "")\n".utf8))
            server?.armCut(after: after, orphan: orphan, failover: failover)
        case "failover":
            let down = UInt64(dice.below(3_000_000))
            faultCount += 1
            note("failover: every connection breaks, the standby accepts connections after \(down / 1000) ms")
            digest.update(data: Array("failover \(down)\n".utf8))
            server?.failOver(downMicros: down)
        case "snapshot":
            note("snapshot if due")
            nodes[n].kernel.store?.snapshotIfDue()
        case "time":
            passTime()
        case "crash":
            try crash("step \(step)", node: n)
        case "power":
            try crash("step \(step)", node: n, powerLoss: true)
        default:
            let fault = dice.weighted([(SimulatedDisk.Fault.writes(1 + dice.below(3), ["", "wal-", "snapshot-"][dice.below(3)]), 3), (.fsync, 1),
                                       (.power(1 + dice.below(12)), 2)])
            faultCount += 1
            note("disk fault armed: \(fault)")
            digest.update(data: Array("fault \(fault)\n".utf8))
            disk.arm(fault)
        }
    }

    private func send(on c: Int) {
        let user = dice.below(users.count)
        // Nothing of a user is sent while their account deletion is in flight.
        guard !model.deleting.contains(user) else { return }
        let idle = !clients.contains { $0.waiting.contains { sent[$0]!.user == user } }
        var operation = Workload.draw(user: user, idle: idle, dice: &dice, model: &model, minutes: &minutes[user])
        if case .feed = operation { operation = .feed(since: clients[c].cursors[user]) }
        send(operation, user: user, on: c)
    }

    private func send(_ operation: Operation, user: Int, on c: Int) {
        let id = nextID
        nextID += 1
        var params = Workload.params(operation, model: model)
        params["auth"] = .string(["events.subscribe", "subscriptions.notify"].contains(operation.name) ? serviceToken : tokens[user])
        let line: JSON = ["jsonrpc": "2.0", "id": .int(id), "method": .string(operation.name), "params": .object(params)]
        sent[id] = Sent(id: id, stream: c, user: user, operation: operation)
        clients[c].unread += Array(line.serialized.utf8) + [10]
        clients[c].waiting.append(id)
        requests += 1
        var what = operation.name
        if case .ingest(let uuids) = operation { what += " [\(uuids.map { $0.prefix(8) }.joined(separator: " "))]" }
        if case .replace(let day, let kept, let added, let removed) = operation {
            what += " replacing day \(day): \(kept.count) kept, \(added.count) added, \(removed.count) removed"
        }
        if case .verify(let original, _) = operation { what += " purchase \(original)" }
        if case .notify(let uuid, _) = operation { what += " \(uuid.suffix(1))" }
        note("send \(id) on stream \(c): \(what) user \(user)")
    }

    /// Notes when an fsync of the running process first failed.
    private func noteFailedSync() {
        if disk.takeFailedSync(), syncFailedAtMs == nil { syncFailedAtMs = clock.now().milliseconds }
    }

    /// Time passes (up to 5 s); the model of PostgreSQL ends transactions idle past their timeout.
    private func passTime() {
        let ms = Int64(dice.below(5_000))
        note("time +\(ms) ms")
        // Periodic helpers run at their times on the way (a power failure armed on the disk may end the
        // way early: time stops there).
        var left = ms
        var ticks = 0
        defer { if ticks > 0 { note("periodic helpers ran \(ticks) times") } }
        while left > 0 && !disk.isDead {
            let now = clock.monotonicMicros()
            let due = nodes.compactMap(\.executor.nextDue).min().map { $0 > now ? Int64(($0 - now + 999) / 1000) : 0 } ?? left
            let step = min(left, max(1, due))
            clock.advance(ms: step)
            left -= step
            for node in nodes { ticks += node.executor.fireDue() }
            noteFailedSync()
        }
        server?.expireIdle()
    }

    /// What one read() of stream `c` returns: any cut of what its client sent (half a line, one line,
    /// several lines; what one read returns decides the batch).
    private func read(_ c: Int) {
        // The reader thread waits while the serving thread has not taken what it handed over.
        guard !clients[c].unread.isEmpty, clients[c].server?.isInputQueueFull != true else { return }
        let n = 1 + dice.below(clients[c].unread.count)
        let chunk = Array(clients[c].unread.prefix(n))
        clients[c].unread.removeFirst(n)
        if let socket = clients[c].socket {
            note("stream \(c): \(n) bytes reach its socket")
            socket.io.arrive(chunk, at: socket.peer)
            return
        }
        if let server = clients[c].server {
            note("read stream \(c) \(n) bytes (reader thread)")
            clients[c].transport!.offered = chunk
            server.readStep()
            return
        }
        note("read stream \(c) \(n) bytes")
        serve(clients[c].node) { clients[c].connection.receive(chunk) }
    }

    /// Runs `body` on kernel `node`'s serving thread, which is busy meanwhile.
    private func serve<R>(_ node: Int, _ body: () throws -> R) rethrows -> R {
        nodes[node].serving = true
        defer { nodes[node].serving = false }
        return try body()
    }

    /// A step taken while a session of the model waits for a lock (a detached commit waiting for the
    /// batch that holds its user): what the kernel's other threads and the clients do meanwhile. False
    /// when nothing can move (the serving thread itself waits).
    func stepWhileWaiting() -> Bool {
        guard failure == nil else { return false }
        // Streams of a kernel whose serving thread waits are in its hands; when every kernel's does,
        // only time can free them (a transaction ended for idling).
        let streams = clients.indices.filter { !nodes[clients[$0].node].serving }
        if streams.isEmpty {
            passTime()
            return true
        }
        let c = streams[dice.below(streams.count)]
        switch dice.weighted([("end", 4), ("read", 2), ("send", 1), ("time", 2)]) {
        case "end":
            do { try endBatch(c) } catch { failure = (error as? Failure)?.message ?? "\(error)" }
        case "read": read(c)
        case "time": passTime()
        default: send(on: c)
        }
        return true
    }

    /// Ends stream `c`'s batch, or (through the stdio server) runs one round of its serving thread;
    /// returns false when that thread had nothing to take.
    @discardableResult
    private func endBatch(_ c: Int) throws -> Bool {
        let fatal: Bool
        if clients[c].socket != nil { return try socketRound(clients[c].node) }
        if let server = clients[c].server {
            let (served, ending) = serve(clients[c].node) { server.serveStep() }
            guard served else { return false }
            note("serving thread's round on stream \(c)\(ending.map { ": it stops (\($0))" } ?? "")")
            fatal = ending == .storageFailure
        } else {
            note("end batch stream \(c)")
            fatal = serve(clients[c].node) { clients[c].connection.endBatch(waitAbove: nil) }
        }
        try collect(c)
        // The log could not be synced: the real server stops here.
        if fatal { try crash("the log could not be synced", node: clients[c].node) }
        return true
    }

    /// One round of kernel `n`'s socket server (accepts, reads what arrived, answers, writes, answers
    /// peers woken, a backlog slice); then its peers take what was written to them.
    private func socketRound(_ n: Int) throws -> Bool {
        note("socket server's round\(nodes.count > 1 ? " on kernel \(n)" : "")")
        _ = serve(n) { nodes[n].sockets!.serveRound(wait: false) }
        for c in clients.indices where clients[c].node == n && clients[c].socket != nil { try collect(c) }
        if nodes[n].socketStorageFailed { try crash("the log could not be synced", node: n) }
        return true
    }

    /// How many of `n` bytes a socket takes in one write: all, some, or none (EAGAIN).
    func socketRoom(_ n: Int) -> Int {
        switch dice.below(4) {
        case 0: return 0
        case 1: return 1 + dice.below(n)
        default: return n
        }
    }

    /// Kernel `n`'s socket server, as the binary's `--listen` makes it (on a lock of its own: the
    /// simulation already runs one serving step of a kernel at a time).
    private func makeSocketServer(_ n: Int) {
        let node = nodes[n], kernel = nodes[n].kernel!, this = SimulationRef(self)
        let io = SimulatedSocketIO(room: { this.simulation.socketRoom($0) })
        let server = SocketServer(io: io, lock: ServingLock(), maxUnreadBytes: ServeSettings().maxUnreadBytes,
                                  maxInputBytes: ServeSettings().maxInputBytes, clock: clock, parsers: node.executor,
                                  parseInlineBytes: parseInline, makeConnection: { kernel.connection() })
        server.applyBacklog = { kernel.dispatcher.applyBacklog() }
        if let store = kernel.store { server.afterRound = { store.snapshotIfDue() } }
        server.onStorageFailure = { [unowned node] in node.socketStorageFailed = true }
        (node.sockets, node.socketIO, node.socketStorageFailed) = (server, io, false)
    }

    // MARK: Answers

    /// Takes the answers written to stream `c` at the end of its batch (before it, answers held for the
    /// flush may still be rewritten in place, so servers write only then) and checks each is the next
    /// one its client waits for.
    private func collect(_ c: Int) throws {
        let output = clients[c].takeOutput()
        guard !output.isEmpty, !disk.isDead else { return }
        for line in output.split(separator: 10) {
            let answer = try JSON.parse(Array(line))
            digest.update(data: Array("\(c) ".utf8) + Array(line) + [10])
            guard let id = answer["id"]?.intValue else {
                if let p = answer["params"] { note("event on stream \(c): \(p["entity"]?.stringValue ?? "") \(p["op"]?.stringValue ?? "") seq \(p["seq"]?.intValue ?? 0) user \(p["userId"]?.stringValue.map { users.firstIndex(of: $0) ?? -1 } ?? -1)") }
                try Checker(simulation: self).checkEvent(answer, in: &model)
                events += 1
                continue
            }
            guard let expected = clients[c].waiting.first else { throw Failure("stream \(c): answer \(id) that nothing waits for") }
            guard id == expected else { throw Failure("stream \(c): answer \(id) before \(expected), which was sent first") }
            clients[c].waiting.removeFirst()
            let request = sent[id]!
            note("answer \(id): \(answer["error"].map { "error \($0["code"]?.intValue ?? 0) \($0["message"]?.stringValue ?? "")" } ?? "ok")")
            if let error = answer["error"], error["code"]?.intValue == -32603 { throw Failure("internal error answering \(id): \(error.serialized)") }
            try Checker(simulation: self).checkAnswer(request, answer, client: clients[c])
            if case .stop = request.operation, let result = answer["result"], let id = result["clientSessionId"]?.stringValue {
                let seconds = result["durationSeconds"]?.intValue ?? -1
                // Paused time does not count: never more than the time since the simulation began.
                guard seconds >= 0, seconds <= (clock.now().milliseconds - Self.began) / 1000 + 1 else {
                    throw Failure("session \(id) stopped with \(seconds) s, not between 0 and the time passed")
                }
                model.stopped[id] = (request.user, seconds, request.id, model.epoch(request.user))
            }
            Workload.settle(request, answer: answer, in: &model)
            if fsync == .everysec {
                let from = atRiskFromMs
                recentAnswers.removeFirst(recentAnswers.prefix { $0.atMs < from }.count)
                recentAnswers.append((id, clock.now().milliseconds))
            }
        }
    }

    // MARK: Process

    private func start() throws {
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for n in nodes.indices { try startKernel(n) }
        clients = (0..<settings.streams).map { c in Client(connection: nodes[c % nodes.count].kernel.connection(), node: c % nodes.count) }
        if viaServer { for c in nodes.indices { clients[c].serveThroughStdio(nodes[c].kernel) } }
        if viaSocket { for c in clients.indices where clients[c].server == nil { clients[c].connect(to: nodes[clients[c].node].socketIO!) } }
        tokens = users.map { kernel.auth.mint(sub: $0, role: "authenticated", ttl: 10 * 365 * 86_400, now: clock.now()) }
        serviceToken = kernel.auth.mint(sub: nil, role: "service_role", ttl: 10 * 365 * 86_400, now: clock.now())
        if subscribes { send(.subscribe, user: 0, on: 0) }
    }

    /// Starts kernel `n`'s process (again).
    private func startKernel(_ n: Int) throws {
        var config = KernelConfig()
        config.dataDir = dir
        config.fsync = fsync
        config.auth.jwtSecret = "healthkernel-simulation-secret-0123456789"
        config.limits.requestsPerSecond = 0
        // Snapshots fall due every few records, so that one is often taken while records are queued
        // (snapshot-ahead-of-log took 906 seeds to find with 5-44, 309 with 1-12).
        config.snapshotEveryRecords = 1 + dice.below(12)
        config.snapshotEverySeconds = 1_000_000
        config.segmentBytes = 4096 << dice.below(5)
        config.storeFaults = disk.injector
        config.bigUnitEntries = bigUnit
        var appStore = AppStoreConfig()
        appStore.bundleId = Workload.bundleId
        appStore.rootsPEM = Workload.appStoreRoots
        config.domains[AppStoreConfig.self] = appStore
        if settings.onPostgres {
            config.storeURL = "postgres://model"
            config.storeSchema = "sim"
        }
        let logger = Logger(label: "simulation")
        // A kernel whose connection to PostgreSQL fails while it starts exits, and is started again (as
        // its supervisor would); the data dir's kernel must start every time. Its streams wait meanwhile
        // (it may pause to retry, which other kernels' steps fill).
        nodes[n].serving = true
        defer { nodes[n].serving = false }
        for attempt in 1... {
            do {
                // Each process draws afresh (the same draws again would make the same session ids again).
                incarnation += 1
                nodes[n].process = incarnation
                note("process \(incarnation) starts\(nodes.count > 1 ? " (kernel \(n))" : "")")
                nodes[n].kernel = try Kernel(config: config, clock: clock, random: SeededRandom(seed: dice.next()), logger: logger,
                                             executor: nodes[n].executor, database: server?.client(incarnation))
                if viaSocket { makeSocketServer(n) }
                break
            } catch {
                server?.disconnect(tag: incarnation)
                guard settings.onPostgres, attempt < 3 else { throw Failure("the kernel did not start: \(error)") }
                note("the kernel exited while starting: \(error)")
            }
        }
    }

    /// The process dies: writes not yet in the log are lost, the workers' jobs with them, and every
    /// request not answered has an unknown outcome. With `powerLoss`, the machine too: what was written
    /// but not synced is lost, or a prefix of it kept (a torn write), and renames not made durable are
    /// undone. Then a new process recovers the data dir.
    func crash(_ why: String, node n: Int = 0, powerLoss: Bool = false) throws {
        // A process that stops because its disk died with the power is a power loss, whatever it saw.
        let powerLoss = powerLoss || disk.isDead
        faultCount += 1
        let keep = powerLoss ? dice.below(disk.unsyncedTail + 1) : 0
        let which = nodes.count > 1 ? " of kernel \(n)" : ""
        note(powerLoss ? "power loss (\(why)), keeping \(keep) unsynced bytes; restart" : "crash\(which) (\(why)), restart")
        digest.update(data: Array((powerLoss ? "power loss \(keep)\n" : "crash \(n)\n").utf8))
        let node = nodes[n]
        node.kernel.store?.abandon()
        node.executor.dropAll()
        let served = clients.filter { $0.node == n }
        for client in served {
            for id in client.waiting { Workload.settle(sent[id]!, answer: nil, in: &model) }
        }
        disk.disarm()
        // On PostgreSQL the server sees the process's connections close, and rolls back what was open.
        server?.disconnect(tag: node.process)
        if powerLoss && fsync == .everysec {
            // At most the last second of answered writes may be gone: they may or may not be there now.
            let from = atRiskFromMs
            for (id, at) in recentAnswers where at >= from {
                let request = sent[id]!
                Workload.settle(request, answer: nil, in: &model)
                model.stopped = model.stopped.filter { $0.value.request != id }
            }
            recentAnswers.removeAll()
        }
        syncFailedAtMs = nil
        if powerLoss {
            do { try disk.losePower(keep: keep) } catch { throw Failure("the power-loss image could not be made: \(error)") }
        }
        // The dead process's objects go (memory only: nothing of it is observable any more); its clients
        // keep their cursors and connect to the new process.
        for client in served {
            client.connection?.close()
            client.connection = nil
            (client.unread, client.waiting) = ([], [])
        }
        node.sockets?.abandon()
        (node.sockets, node.socketIO) = (nil, nil)
        weak var gone = node.kernel.store
        node.kernel = nil
        if gone != nil { throw Failure("the store of a stopped kernel is still referenced (a retain cycle)") }
        try startKernel(n)
        for client in served {
            client.connection = node.kernel.connection()
            if viaServer && clients.firstIndex(where: { $0 === client }) == n {
                client.serveThroughStdio(node.kernel)
            } else if viaSocket {
                client.connect(to: node.socketIO!)
            }
        }
        // A host subscribes again after a restart (as the Node client does).
        if subscribes && n == 0 { send(.subscribe, user: 0, on: 0) }
    }

    /// Sends what is unsent, ends every batch and runs every job until every request is answered.
    private func settleEverything() throws {
        note("settle")
        disk.disarm()
        for round in 0..<10_000 {
            for c in clients.indices where !clients[c].unread.isEmpty {
                if let socket = clients[c].socket {
                    socket.io.arrive(clients[c].unread, at: socket.peer)
                } else if let server = clients[c].server {
                    guard !server.isInputQueueFull else { continue }
                    clients[c].transport!.offered = clients[c].unread
                    server.readStep()
                } else {
                    serve(clients[c].node) { clients[c].connection.receive(clients[c].unread) }
                }
                clients[c].unread = []
            }
            for c in clients.indices {
                // The serving thread takes everything queued (the reader reads on while there is room).
                while try endBatch(c) && clients[c].server != nil { clients[c].server?.readStep() }
            }
            for node in nodes {
                node.executor.drain()
                node.kernel.postgres?.pollListener()
            }
            for c in clients.indices where clients[c].connection != nil && clients[c].server == nil {
                _ = serve(clients[c].node) { clients[c].connection.applyBacklog() }
            }
            if clients.allSatisfy({ $0.waiting.isEmpty }) { return }
            if round == 9_999 { break }
        }
        throw Failure("requests never answered: \(clients.flatMap(\.waiting))")
    }

    /// One request on a fresh stream, answered whatever it takes (reads for the checker).
    func ask(_ method: String, user: Int, _ params: JSONObject = JSONObject()) throws -> JSON {
        var params = params
        params["auth"] = .string(tokens[user])
        let line: JSON = ["jsonrpc": "2.0", "id": 1, "method": .string(method), "params": .object(params)]
        var connection = kernel.connection()
        defer { connection.close() }
        serve(0) { connection.receive(Array(line.serialized.utf8) + [10]) }
        for _ in 0..<1_000 {
            _ = serve(0) { connection.endBatch(waitAbove: nil) }
            if let line = connection.output.split(separator: 10).first { return try JSON.parse(Array(line)) }
            for node in nodes { node.executor.drain() }
            _ = serve(0) { connection.applyBacklog() }
        }
        throw Failure("\(method) was never answered")
    }

    func note(_ event: String) { trace.append(event) }

    /// A kernel thread waits (`SimulatedWaiter`).
    func park(until ready: () -> Bool, timeoutMicros: UInt64?) {
        note("a kernel thread waits\(timeoutMicros.map { " up to \($0 / 1000) ms" } ?? "")")
        let deadline = timeoutMicros.map { clock.monotonicMicros() + $0 }
        for _ in 0..<1_000 {
            if ready() { return }
            if let deadline, clock.monotonicMicros() >= deadline { return }
            guard stepWhileWaiting() else { break }
        }
        if deadline == nil && !ready() { fail("a kernel thread waited for what nothing released (the kernel would hang)") }
    }

    /// A number below `n` from the seed (for the model of PostgreSQL's draws).
    func draw(below n: Int) -> Int { dice.below(n) }

    /// On the model of PostgreSQL, the committed rows whose key holds `text` (what a failure shows).
    func storedRows(containing text: String) -> String {
        guard let server else { return "" }
        var found: [String] = []
        for (table, users) in server.committedRows(schema: "sim") {
            for (user, rows) in users { for (key, _) in rows where key.uppercased().contains(text) { found.append("\(table) \(user.suffix(2)) \(key)") } }
        }
        return "; rows in the database: \(found.isEmpty ? "none" : found.joined(separator: ", "))"
    }

    /// Records a failure found where it cannot be thrown (inside the model's wait).
    func fail(_ message: String) { if failure == nil { failure = message } }
}

/// How a kernel thread's wait on `Locked` is spent in the simulation: the simulation takes other steps
/// (drawn from the seed) until what it waits for holds, or its timeout has passed in simulated time.
/// A wait without a timeout that 1,000 steps do not release fails the run: a real kernel would hang.
final class SimulatedWaiter: Waiter, @unchecked Sendable {
    private let simulation: SimulationRef

    init(_ simulation: SimulationRef) { self.simulation = simulation }

    func wait(until ready: () -> Bool, timeoutMicros: UInt64?) {
        simulation.simulation.park(until: ready, timeoutMicros: timeoutMicros)
    }
}

/// A broken guarantee.
struct Failure: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// How the model's sessions wait in the simulation: everything runs on one thread, so a session that
/// must wait lets the simulation take steps of the clients and the serving thread (which may release
/// what it waits for), drawn from the seed like every other step. After 1,000 steps without the lock
/// coming free it gives up: the statement fails as at a lock timeout, and the run fails, since a real
/// kernel would wait there for ever.
final class SimulatedParking: Parking, @unchecked Sendable {
    private let simulation: SimulationRef

    init(_ simulation: SimulationRef) { self.simulation = simulation }

    func park(_ state: Locked<ModelServer.State>, past generation: UInt64) -> Bool {
        let sim = simulation.simulation
        sim.note("a session of the model waits for a lock")
        for _ in 0..<1_000 {
            if state.withLock({ $0.generation }) != generation { return true }
            guard sim.stepWhileWaiting() else { break }
        }
        if state.withLock({ $0.generation }) != generation { return true }
        sim.fail("a session waited for a lock that nothing released (the kernel would hang)")
        return false
    }

    func wake(_ state: Locked<ModelServer.State>) {}

    func awaitNotice(_ state: Locked<ModelServer.State>, pid: Int32, timeoutMilliseconds: Int32) {}
}
