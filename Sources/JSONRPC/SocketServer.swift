#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import JSON
import JSONParsing
import Synchronization
import Threads
#if SIMULATION
import Mutants
#endif

#if canImport(Glibc)
/// glibc's `malloc_trim` (declared in malloc.h, which the Glibc module leaves out): returns free memory
/// of every arena to the system.
@_silgen_name("malloc_trim")
func glibcMallocTrim(_ pad: Int) -> Int32

/// glibc's `mallopt` (malloc.h), for `M_MMAP_THRESHOLD` (-3).
@_silgen_name("mallopt")
func glibcMallopt(_ parameter: Int32, _ value: Int32) -> Int32
#endif

/// Held while a stream uses the dispatcher: the dispatcher answers one batch at a time, whichever
/// stream (stdio or a socket connection) it came from.
public final class ServingLock: Sendable {
    /// Turns taken. A value of no size (`Locked(())`) made ThreadSanitizer report the lock's own inout
    /// access as racing with the next holder's (its address is the object's).
    private let mutex = Locked(0)
    /// The thread holding it (`pthread_self`), 0 when none.
    private let holder = Atomic<UInt>(0)

    public init() {}

    public func run<T>(_ body: () -> T) -> T {
        mutex.withLock { turns in
            turns &+= 1
            holder.store(UInt(pthread_self()), ordering: .relaxed)
            defer { holder.store(0, ordering: .relaxed) }
            return body()
        }
    }

    /// Whether the calling thread holds it, for checks that work runs under it (only the holder's own
    /// read can match its id).
    public var isHeldByCurrentThread: Bool { holder.load(ordering: .relaxed) == UInt(pthread_self()) }
}

/// Why a socket could not be opened.
public struct SocketError: Error, CustomStringConvertible {
    public let description: String
}

/// Serves JSON-RPC on a Unix socket, beside stdio: each accepted connection is its own stream with the
/// same framing and ordering as stdin/stdout. One thread polls every connection; reads and writes never
/// block, so a slow or dead peer holds up nobody. A line longer than `parseInlineBytes` is parsed on a
/// parser thread (a month of samples, 12 MB, takes a tenth of a second), so a short line on another
/// connection is never held behind it; lines of one connection are still answered in the order read. A peer whose unread output passes `maxUnreadBytes` is
/// disconnected; one that has more than a quarter of that unread is not read from until it catches up.
/// Unfinished request lines of all connections together are bounded by `maxInputBytes`: past it, the
/// connection holding the longest one is cut, so many peers that never end a line cannot exhaust memory.
///
/// Its system calls go through `SocketIO`, and its rounds can be run one at a time (`serveRound`): the
/// simulation serves its peers so, on its own thread, deciding what each read and write moves.
public final class SocketServer: @unchecked Sendable {
    /// The socket file (nil when the server was given its `SocketIO`, as in the simulation).
    private let path: String?
    private var io: (any SocketIO)?
    /// Its monotonic time counts turns, accept pauses and start-up waits (the kernel's clock).
    private let clock: Clock
    private let makeConnection: () -> Connection
    private let lock: ServingLock
    private let maxUnreadBytes: Int
    private let maxInputBytes: Int
    /// While accepting fails (descriptors exhausted), the listening socket is not polled until then
    /// (monotonic microseconds), so the thread sleeps instead of spinning on a pending connection.
    private var acceptPausedUntil: UInt64 = 0
    private var acceptFailing = false
    private let stopping = SharedFlag()
    /// A peer's turn longer than this ends the round of applying finished work (see `serve`).
    static let longTurnMicros: UInt64 = 5_000
    /// The peers woken since the last round: a round takes turns for these only, not for every
    /// connection (O(peers woken), not O(peers)).
    private let woken = Locked(WokenPeers())
    /// Numbers the next peer accepted.
    private var nextPeerNumber = 0
    /// Lines longer than this are parsed on `parsers`, shorter ones on the polling thread.
    public static let parseInlineBytes = 64 << 10
    /// This server's bound (the simulation lowers it, so that its short lines reach the parsers).
    private let parseInline: Int
    private let parsers: any Executor
    private static let parserThreads = 2
    /// Long lines the parsers finished, for the polling thread to answer.
    private let parsedLines = Inbox<ParsedLongLine>()
    private let stopped = HandoffQueue<Bool>(capacity: 1)
    /// Receives diagnostics for stderr.
    public var log: (String) -> Void = { _ in }
    /// Called when making a batch durable failed: the kernel must stop.
    public var onStorageFailure: () -> Void = {}
    /// Applies a slice of big commits still being applied (`Dispatcher.applyBacklog`), holding the
    /// serving lock; returns whether any is left.
    public var applyBacklog: () -> Bool = { false }
    /// Called after each round of answering, holding the serving lock (the store's snapshot trigger):
    /// with `--no-stdin` the socket is the only thing that writes, so the trigger must run here too.
    public var afterRound: () -> Void = {}

    /// The connections being served, in the order accepted (the polling thread's own).
    private var peers: [Peer] = []
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
    /// A big commit is still being applied: the next round does not wait.
    private var backlogLeft = false

    /// A server for `path` whose connections come from `makeConnection`, answered holding `lock`.
    public convenience init(path: String, lock: ServingLock, maxUnreadBytes: Int, maxInputBytes: Int = 256 << 20, clock: Clock = SystemClock(),
                            makeConnection: @escaping () -> Connection) {
        self.init(path: path, io: nil, lock: lock, maxUnreadBytes: maxUnreadBytes, maxInputBytes: maxInputBytes, clock: clock,
                  parsers: WorkerPool(threads: Self.parserThreads), parseInlineBytes: Self.parseInlineBytes, makeConnection: makeConnection)
    }

    /// A server over `io`, whose rounds the caller runs (`serveRound`), its long lines parsed on `parsers`.
    public convenience init(io: any SocketIO, lock: ServingLock, maxUnreadBytes: Int, maxInputBytes: Int, clock: Clock,
                            parsers: any Executor, parseInlineBytes: Int, makeConnection: @escaping () -> Connection) {
        self.init(path: nil, io: io, lock: lock, maxUnreadBytes: maxUnreadBytes, maxInputBytes: maxInputBytes, clock: clock,
                  parsers: parsers, parseInlineBytes: parseInlineBytes, makeConnection: makeConnection)
    }

    private init(path: String?, io: (any SocketIO)?, lock: ServingLock, maxUnreadBytes: Int, maxInputBytes: Int, clock: Clock,
                 parsers: any Executor, parseInlineBytes: Int, makeConnection: @escaping () -> Connection) {
        (self.path, self.io, self.clock, self.lock) = (path, io, clock, lock)
        (self.maxUnreadBytes, self.maxInputBytes, self.parsers, self.parseInline) = (maxUnreadBytes, maxInputBytes, parsers, parseInlineBytes)
        self.makeConnection = makeConnection
    }

    deinit { buffer.deallocate() }

    /// Binds the socket (mode 0600, only its owner may connect) and starts serving on a thread of its own.
    /// The socket is 0660 instead of 0600: members of the process's group may connect too.
    public var groupAccess = false

    public func start() throws(SocketError) {
        guard let path else { return }
        #if canImport(Glibc)
        // A fixed threshold: blocks of 1 MiB and more (a long line, its parse) are mapped on their own and
        // go back to the system when freed. glibc otherwise raises the threshold to the largest block
        // freed so far (a 16 MiB read buffer), after which a 12 MiB line's parse landed in an arena and
        // stayed resident whenever a trim ran before its last free (the flaky socket-memory test).
        _ = glibcMallopt(-3, 1 << 20)
        #endif
        var address = try Self.address(path)
        try removeStaleSocket(&address)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SocketError(description: "cannot create a socket: errno \(errno)") }
        // 0600, or 0660 with `groupAccess`: who may connect is the file's to say (and its folder's).
        let previous = umask(groupAccess ? 0o117 : 0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(previous)
        guard bound == 0, listen(fd, 128) == 0 else {
            let e = errno
            close(fd)
            throw SocketError(description: "cannot listen on \(path): errno \(e)")
        }
        do {
            io = try SystemSocketIO(listening: fd)
        } catch {
            close(fd)
            throw error
        }
        warmParsers()
        spawnThread { [self] in
            while serveRound(wait: true) {}
            finish()
            _ = stopped.put(true)
        }
    }

    /// Has every parser thread parse a line once now, each at the same time (so each on its own thread):
    /// a thread's first allocation makes its malloc arena, which reserves 64 MiB of address space, and
    /// that belongs to start-up, not to the first long line a host sends (whose memory a host watches).
    /// Waits at most a second.
    private func warmParsers() {
        let (started, threads, clock) = (Locked(0), Self.parserThreads, clock)
        for _ in 0..<threads {
            parsers.submit {
                _ = try? JSON.parse(Array("{\"jsonrpc\":\"2.0\",\"method\":\"kernel.info\"}".utf8))
                started.withLock { $0 += 1 }
                let deadline = clock.monotonicMicros() + 1_000_000
                while started.withLock({ $0 }) < threads && clock.monotonicMicros() < deadline { usleep(1000) }
            }
        }
        let deadline = clock.monotonicMicros() + 1_000_000
        while started.withLock({ $0 }) < threads && clock.monotonicMicros() < deadline { usleep(1000) }
    }

    /// The address of the Unix socket at `path`.
    public static func address(_ path: String) throws(SocketError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity else {
            throw SocketError(description: "socket path must be 1 to \(capacity - 1) bytes: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// A socket file left by a kernel that is gone is replaced; one that answers belongs to whoever
    /// listens there (another kernel, or another user squatting on the path), named in the error.
    private func removeStaleSocket(_ address: inout sockaddr_un) throws(SocketError) {
        guard let path else { return }
        var status = stat()
        guard lstat(path, &status) == 0 else { return }
        guard (status.st_mode & S_IFMT) == S_IFSOCK else {
            throw SocketError(description: "\(path) exists and is not a socket (owner uid \(status.st_uid))")
        }
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(probe) }
        if Self.connect(probe, to: &address) {
            let owner = Self.peer(probe).map { "pid \($0.pid), uid \($0.uid)" } ?? "uid \(status.st_uid)"
            throw SocketError(description: "another process (\(owner)) is listening on \(path)")
        }
        unlink(path)
    }

    /// Connects `fd` to the Unix socket at `address`; false with errno set when it cannot.
    private static func connect(_ fd: Int32, to address: inout sockaddr_un) -> Bool {
        withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        } == 0
    }

    /// The process at the other end of a connected Unix socket, as the operating system vouches for it.
    public static func peer(_ fd: Int32) -> (pid: Int32, uid: uid_t)? {
        // Linux's `struct ucred` (pid, uid, gid), which Glibc shows Swift only under _GNU_SOURCE.
        var credentials: (pid: Int32, uid: UInt32, gid: UInt32) = (0, 0, 0)
        var size = socklen_t(MemoryLayout.size(ofValue: credentials))
        guard getsockopt(fd, SOL_SOCKET, 17 /* SO_PEERCRED */, &credentials, &size) == 0 else { return nil }
        return (credentials.pid, credentials.uid)
    }

    /// The uid of the system user `healthkernel`, which the Debian package makes and runs its kernel as
    /// (only root makes such a user): a kernel it serves is trusted, so that members of its group connect.
    static let packageUser: uid_t? = getpwnam("healthkernel")?.pointee.pw_uid

    /// Connects to the kernel listening at `path`, refusing a listener run by another user (root and the
    /// package's `healthkernel` user excepted): a process squatting on the path would otherwise receive the caller's tokens. While the
    /// socket does not exist yet or nobody accepts on it, tries again every 50 ms for up to
    /// `waitSeconds`, so a script can start a kernel in the background and call it on the next line.
    public static func connectToKernel(_ path: String, waitSeconds: Double = 0, clock: Clock = SystemClock()) throws(SocketError) -> Int32 {
        var address = try address(path)
        let deadline = clock.monotonicMicros() + UInt64(max(0, waitSeconds) * 1_000_000)
        var fd: Int32
        while true {
            fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw SocketError(description: "cannot create a socket: \(String(cString: strerror(errno)))") }
            if Self.connect(fd, to: &address) { break }
            let e = errno
            close(fd)
            if (e == ENOENT || e == ECONNREFUSED) && clock.monotonicMicros() < deadline {
                usleep(50_000)
                continue
            }
            let hint = e == ENOENT ? " (is a kernel serving with --listen unix:\(path)?)" : ""
            throw SocketError(description: "cannot connect to \(path): \(String(cString: strerror(e)))\(hint)")
        }
        guard let peer = peer(fd), peer.uid == geteuid() || peer.uid == 0 || peer.uid == packageUser else {
            let who = peer(fd).map { "uid \($0.uid), pid \($0.pid)" } ?? "an unknown user"
            close(fd)
            throw SocketError(description: "refusing \(path): it is served by \(who), not by this user (uid \(geteuid())), root or the healthkernel user")
        }
        return fd
    }

    /// Stops accepting, closes every connection (after writing what it can of their answers) and removes
    /// the socket file. Returns once the serving thread has finished.
    public func stop() {
        guard let path, let io else { return }
        stopping.set(true)
        io.poke()
        _ = stopped.take(spin: false)
        self.io = nil
        unlink(path)
    }

    /// A line of a peer's, read but not yet answered: parsed, or waiting for a parser.
    private final class QueuedLine: @unchecked Sendable {
        /// Set on the polling thread only (a parser hands its value over through `parsedLines`).
        var line: ParsedLine?
        /// Bytes of an unparsed line (for the input budget).
        let bytes: Int
        /// The unparsed line, for its parser alone (set before the job is submitted).
        private var raw: [UInt8]?
        init(_ line: ParsedLine?, bytes: Int = 0) {
            self.line = line
            self.bytes = bytes
        }
        init(unparsed raw: [UInt8]) {
            self.bytes = raw.count
            self.raw = raw
        }

        /// On a parser thread: the line parsed, its bytes freed before this returns, so before the
        /// polling thread can answer it and trim (a trim that runs first finds nothing to give back).
        func parse(_ envelopes: EnvelopeReader) -> ParsedLine {
            let raw = self.raw ?? []
            self.raw = nil
            return raw.withUnsafeBytes { envelopes.parse($0) }
        }
    }

    /// A long line a parser finished.
    private struct ParsedLongLine: Sendable {
        let queued: QueuedLine
        let line: ParsedLine
    }

    /// Peers woken, by number, with why, in the order first woken. O(1) per wake.
    private struct WokenPeers {
        var order: [Int] = []
        var why: [Int: ServingWake] = [:]

        /// Adds a reason; true when the list was empty (the polling thread must be poked).
        mutating func add(_ peer: Int, _ reason: ServingWake) -> Bool {
            if let known = why[peer] {
                why[peer] = known.union(reason)
                return false
            }
            why[peer] = reason
            order.append(peer)
            return order.count == 1
        }

        mutating func take() -> [(peer: Int, why: ServingWake)] {
            defer { self = WokenPeers() }
            return order.map { ($0, why[$0] ?? []) }
        }
    }

    /// One accepted connection.
    private final class Peer {
        let fd: Int32
        /// Names the peer in `woken` (never reused, unlike a descriptor or an address).
        let number: Int
        var connection: Connection
        /// Bytes of `connection.output` already written.
        var sent = 0
        /// The peer closed its writing side: answer what was read, write it, close.
        var ended = false
        /// Lines read and not yet answered, in read order: a long one at the head waits for its parser
        /// (and the peer is not read from meanwhile), the ones behind it wait for it.
        var queued: [QueuedLine] = []

        /// Bytes of lines waiting for a parser.
        var queuedBytes: Int { queued.reduce(0) { $0 + ($1.line == nil ? $1.bytes : 0) } }

        init(fd: Int32, number: Int, connection: Connection) {
            self.fd = fd
            self.number = number
            self.connection = connection
        }

        var unread: Int { connection.output.count - sent }
    }

    /// Wakes the polling thread for one peer, for `why` (from any thread, never waiting). Only the first
    /// wake since the last round pokes: later ones are taken in the same round.
    private lazy var wake: @Sendable (Int, ServingWake) -> Void = { [woken, io] number, why in
        guard woken.withLock({ $0.add(number, why) }) else { return }
        io?.poke()
    }

    /// One round of the polling thread: waits (with `wait`, until something is ready; else not at all),
    /// accepts, reads and answers what arrived, writes, answers the peers woken meanwhile, applies a
    /// slice of a big commit, and cuts peers over their budgets. False once the server stops.
    public func serveRound(wait: Bool) -> Bool {
        guard !stopping.isSet, let io else { return false }
        let now = clock.monotonicMicros()
        let accepting = now >= acceptPausedUntil
        let interests = peers.map { peer in
            SocketInterest(peer: peer.fd,
                           readable: !peer.ended && peer.queued.isEmpty && peer.unread <= maxUnreadBytes / 4
                               && peer.connection.stream.outstanding <= StdioServer.maxOutstanding,
                           writable: peer.unread > 0)
        }
        let timeout = !wait || backlogLeft ? 0 : accepting ? -1 : Int32((acceptPausedUntil - now) / 1000 + 1)
        guard let ready = io.wait(accepting: accepting, peers: interests, timeoutMillis: timeout) else {
            log("socket poll failed: errno \(errno)")
            return false
        }
        let polled = peers.count
        if ready.acceptable { acceptAll(io) }
        var closing: [Peer] = []
        // Every peer's input first, then one batch of it all: its reads ahead in one round trip and its
        // writes in one flush (one COMMIT on PostgreSQL), however many peers sent something.
        var arrived: [(peer: Peer, lines: [ParsedLine])] = []
        for (i, peer) in peers[..<polled].enumerated() where ready.readable[i] && !peer.ended && peer.queued.isEmpty {
            guard let lines = receive(peer, buffer, wake: wake) else { closing.append(peer); continue }
            if let lines { arrived.append((peer, lines)) }
        }
        answer(arrived)
        for peer in peers[..<polled] where !closing.contains(where: { $0 === peer }) {
            if peer.unread > 0 && !send(peer) { closing.append(peer); continue }
            if peer.unread > maxUnreadBytes {
                log("socket connection cut: \(peer.unread) bytes of answers and events unread (limit \(maxUnreadBytes))")
                closing.append(peer)
            } else if peer.ended && peer.unread == 0 && peer.queued.isEmpty && peer.connection.stream.isSettled {
                closing.append(peer)
            }
        }
        // Peers woken (other streams' changes, slow work, a commit applied, a long line parsed): answer
        // what can be, apply it and write what became ready. After every peer's input was read and
        // answered, and in the order they were woken: once one peer's turn took long (a month's commit),
        // the rest wait for the next round, so a short request waits for at most one such commit.
        if ready.poked {
            let turns = woken.withLock { $0.take() }
            // Long lines parsed are taken after the woken peers, never before: a parser hands its line
            // over before it wakes the peer, so every peer taken finds its line here. (Taken before,
            // a line handed over in between was left for a peer whose wake this round used up: it
            // waited forever, 2 of 100 peers in many.py.)
            for done in parsedLines.takeAll(wait: false) { done.queued.line = done.line }
            let byNumber = Dictionary(uniqueKeysWithValues: peers.map { ($0.number, $0) })
            for (k, turn) in turns.enumerated() {
                guard let peer = byNumber[turn.peer] else { continue }  // gone since it was woken
                let began = clock.monotonicMicros()
                let fatal = lock.run {
                    answerParsed(peer)
                    return peer.connection.endBatch(waitAbove: nil)
                }
                if fatal { onStorageFailure() }
                if clock.monotonicMicros() - began > Self.longTurnMicros && k + 1 < turns.count {
                    for later in turns[(k + 1)...] { wake(later.peer, later.why) }
                    break
                }
            }
        }
        // One slice of a big commit per round, after every peer's input was read and answered.
        backlogLeft = lock.run {
            let left = applyBacklog()
            afterRound()
            return left
        }
        closing += overBudget(peers.filter { peer in !closing.contains { $0 === peer } })
        for peer in closing { disconnect(peer) }
        peers.removeAll { peer in closing.contains { $0 === peer } }
        trimIfDue()
        return true
    }

    /// Accepts every pending connection; while accepting fails (descriptors exhausted), pauses it.
    private func acceptAll(_ io: any SocketIO) {
        while true {
            switch io.accept() {
            case .none:
                return
            case .failed(let why):
                acceptPausedUntil = clock.monotonicMicros() + 100_000
                if !acceptFailing { log("cannot accept socket connections: \(why); \(peers.count) open, retrying every 100 ms") }
                acceptFailing = true
                return
            case .peer(let fd):
                if acceptFailing { log("accepting socket connections again") }
                acceptFailing = false
                nextPeerNumber += 1
                let number = nextPeerNumber
                let peer = lock.run { Peer(fd: fd, number: number, connection: makeConnection()) }
                let wake = self.wake
                peer.connection.events.wake = { wake(number, .events) }
                peer.connection.stream.wake = { wake(number, $0) }
                peers.append(peer)
            }
        }
    }

    /// After the last round: every line read is answered before the server stops (long ones still
    /// being parsed included), written as far as each peer takes it, and every connection closed.
    public func finish() {
        while peers.contains(where: { !$0.queued.isEmpty }) {
            for done in parsedLines.takeAll(wait: true) { done.queued.line = done.line }
            for peer in peers { lock.run { answerParsed(peer) } }
        }
        for peer in peers {
            if lock.run({ peer.connection.endBatch(waitAbove: 0) }) { onStorageFailure() }
            _ = send(peer)
            disconnect(peer)
        }
        peers.removeAll()
    }

    /// Closes every connection without answering or writing anything more: the process is gone (the
    /// simulation's crash).
    public func abandon() {
        for peer in peers { disconnect(peer) }
        peers.removeAll()
    }

    /// Answers the peer's queued lines up to the first still being parsed (holding the serving lock).
    /// After a long line, its memory goes back to the system at the end of the round (`trimDue`).
    private func answerParsed(_ peer: Peer) {
        let ready = peer.queued.prefix { $0.line != nil }
        guard !ready.isEmpty else { return }
        peer.queued.removeFirst(ready.count)
        if ready.contains(where: { $0.bytes > 0 }) { trimDue = true }
        peer.connection.answer(ready.compactMap(\.line))
    }

    /// A long line was answered (or dropped with its peer) this round. Its memory was allocated on a
    /// parser thread, whose malloc arena keeps it resident once freed; the polling thread gives it back
    /// after the round, when every part of it is freed (a trim on another thread could run before the
    /// last free, and find nothing to give back: handed to a parser after the round, the socket-memory
    /// test still kept 8 MiB resident once). Once per long line, outside the serving lock.
    private var trimDue = false

    private func trimIfDue() {
        guard trimDue else { return }
        trimDue = false
        #if canImport(Glibc)
        _ = glibcMallocTrim(0)
        #endif
    }

    /// The peers to cut so that their unfinished lines fit `maxInputBytes`: first those whose input has
    /// ended (a last line left for a parser, from a peer that may be gone), then the longest: O(peers)
    /// per poll round, sorting only when over the budget.
    private func overBudget(_ peers: [Peer]) -> [Peer] {
        let held = { (peer: Peer) in peer.connection.reader.bufferedBytes + peer.queuedBytes }
        var total = peers.reduce(0) { $0 + held($1) }
        guard total > maxInputBytes else { return [] }
        var cut: [Peer] = []
        for peer in peers.sorted(by: { $0.ended != $1.ended ? $0.ended : held($0) > held($1) }) {
            guard total > maxInputBytes else { break }
            total -= held(peer)
            log("socket connection cut: \(held(peer)) bytes of an unfinished request line and lines waiting to be parsed, while all connections together held more than \(maxInputBytes)")
            cut.append(peer)
        }
        return cut
    }

    /// Reads what the peer sent: the lines to answer now (`answer`), nil when nothing arrived; long lines
    /// go to a parser and are answered once read. The outer nil: the connection failed.
    private func receive(_ peer: Peer, _ buffer: UnsafeMutableRawBufferPointer, wake: @escaping @Sendable (Int, ServingWake) -> Void) -> [ParsedLine]?? {
        guard let io else { return .none }
        let n: Int
        switch io.read(peer.fd, into: buffer) {
        case .wouldBlock: return .some(nil)
        case .failed: return .none
        case .end: n = 0
        case .bytes(let count): n = count
        }
        let lines = Self.lines(n == 0 ? nil : UnsafeRawBufferPointer(rebasing: buffer[0..<n]), &peer.connection.reader, parseUpTo: parseInline)
        if n == 0 { peer.ended = true }
        // Lines before the first long one are answered as they are (the peer is read only while nothing
        // waits for a parser); only those behind a long one are queued, so a short line costs no box.
        var direct: [ParsedLine] = []
        for line in lines {
            switch line {
            case .parsed(let parsed) where peer.queued.isEmpty:
                direct.append(parsed)
            #if SIMULATION
            case .parsed(let parsed) where Mutant.socketLinesOutOfOrder.isOn:
                direct.append(parsed)
            #endif
            case .parsed(let parsed):
                peer.queued.append(QueuedLine(parsed))
            case .unparsed(let bytes):
                let queued = QueuedLine(unparsed: bytes)
                peer.queued.append(queued)
                let (done, envelopes, number) = (parsedLines, peer.connection.reader.envelopes, peer.number)
                parsers.submit {
                    done.put(ParsedLongLine(queued: queued, line: queued.parse(envelopes)))
                    wake(number, .lineParsed)
                }
            }
        }
        return .some(direct)
    }

    /// Answers what the peers sent this round as one batch (holding the serving lock): the rows their
    /// requests will read are read ahead together, then each peer's lines are answered in its order,
    /// then the first peer's end of batch makes every peer's writes durable at once, and each peer's
    /// moves its answers out. O(peers + lines).
    private func answer(_ arrived: [(peer: Peer, lines: [ParsedLine])]) {
        guard let first = arrived.first else { return }
        let fatal = lock.run {
            first.peer.connection.readAhead {
                for (peer, lines) in arrived { peer.connection.declareReads(lines) }
            }
            for (peer, lines) in arrived {
                peer.connection.answer(lines, readingAhead: false)
                answerParsed(peer)
            }
            var fatal = false
            for (peer, _) in arrived where peer.connection.endBatch(waitAbove: nil) { fatal = true }
            return fatal
        }
        if fatal {
            for (peer, _) in arrived { _ = send(peer) }
            onStorageFailure()
        }
    }

    /// The lines a read gives (`chunk`, or nil at the peer's end of input): those up to
    /// `parseInlineBytes` parsed, longer ones left for a parser thread. A line the peer never ended is no
    /// exception: parsing 16 MiB of it here would hold every connection (#52 defect 9).
    static func lines(_ chunk: UnsafeRawBufferPointer?, _ reader: inout RequestReader, parseUpTo: Int = parseInlineBytes) -> [RequestReader.ReadLine] {
        guard let chunk else { return reader.finishLines(parseUpTo: parseUpTo) }
        return reader.readLines(chunk, parseUpTo: parseUpTo)
    }

    /// Writes as much unread output as the socket takes; false when the peer is gone.
    private func send(_ peer: Peer) -> Bool {
        guard let io else { return false }
        while peer.unread > 0 {
            let moved = peer.connection.output.withUnsafeBytes { raw in
                io.write(peer.fd, UnsafeRawBufferPointer(rebasing: raw[peer.sent...]))
            }
            switch moved {
            case .bytes(let n): peer.sent += n
            case .wouldBlock: return true
            case .failed, .end: return false
            }
        }
        peer.connection.output.removeAll(keepingCapacity: peer.connection.output.count <= 1 << 20)
        peer.sent = 0
        return true
    }

    private func disconnect(_ peer: Peer) {
        if peer.queued.contains(where: { $0.bytes > 0 }) { trimDue = true }
        peer.queued.removeAll()
        lock.run { peer.connection.close() }
        io?.close(peer.fd)
    }
}
