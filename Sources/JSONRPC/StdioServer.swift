#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import Threads

/// Write end of the self-pipe that SIGTERM/SIGINT wake the read loop through.
nonisolated(unsafe) private var signalPipeWriteFD: Int32 = -1

/// Serves a connection over file descriptors: raw `read(2)` from the input, responses written with
/// `write(2)` once per read batch (after the batch's writes are durable), SIGPIPE ignored, and a
/// prompt, orderly stop on EOF, SIGTERM or SIGINT.
public final class StdioServer {
    /// Why the loop ended.
    public enum Ending: Equatable, Sendable {
        case endOfInput
        case signal
        case outputClosed
        /// Storage failed in a way that makes further writes unsafe.
        case storageFailure
    }

    private var connection: Connection
    private let inputFD: Int32
    private let outputFD: Int32
    /// Called after each batch's responses are written (the store's snapshot trigger), holding the
    /// serving lock when streams share the dispatcher: a snapshot freezes the store between commits,
    /// never while a socket's batch commits.
    public var afterWrite: () -> Void = {}
    /// Whether the threads may wait for input by spinning rather than sleeping. False while other work
    /// (a background snapshot) needs the CPU: then a request wakes a thread, which costs little when
    /// the CPU is busy anyway, instead of the two request threads crowding that work out.
    public var mayBusyWait: @Sendable () -> Bool = { true }
    /// Receives diagnostics for stderr.
    public var log: (String) -> Void = { _ in }
    /// Set when other streams (socket connections) share the dispatcher: every batch is answered
    /// holding it, and their changes reach this stream's subscription between batches.
    public var lock: ServingLock?

    /// A server reading `inputFD` and writing `outputFD`.
    public init(connection: Connection, inputFD: Int32, outputFD: Int32) {
        self.connection = connection
        self.inputFD = inputFD
        self.outputFD = outputFD
        (wakeFD, wake) = Self.makeWakePipe()
        connection.events.wake = wake
        connection.stream.wake = wake
    }

    /// Read end of the pipe that wakes the reader thread.
    private let wakeFD: Int32
    /// Makes the server run an empty batch soon (from any thread): other streams' changes, finished slow
    /// work or other kernels' changes wait for this stream.
    public let wake: @Sendable () -> Void

    /// Moves the protocol stream off fd 1: returns a private duplicate of stdout for responses and points
    /// fd 1 at stderr, so a stray print from any library can never corrupt the protocol.
    public static func protectStdout() -> Int32 {
        let fd = dup(1)
        guard fd >= 0 else { return 1 }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = dup2(2, 1)
        return fd
    }

    /// Ignores SIGPIPE (a vanished host shows up as EPIPE instead) and routes SIGTERM/SIGINT to the loop.
    public static func installSignalHandlers() {
        signal(SIGPIPE, SIG_IGN)
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        signalPipeRead = fds[0]
        signalPipeWriteFD = fds[1]
        for sig in [SIGTERM, SIGINT] {
            var action = sigaction()
            #if canImport(Glibc)
            action.__sigaction_handler.sa_handler = { _ in
                var byte: UInt8 = 1
                _ = write(signalPipeWriteFD, &byte, 1)
            }
            #else
            action.__sigaction_u.__sa_handler = { _ in
                var byte: UInt8 = 1
                _ = write(signalPipeWriteFD, &byte, 1)
            }
            #endif
            sigemptyset(&action.sa_mask)
            action.sa_flags = 0
            sigaction(sig, &action, nil)
        }
        // A parent may spawn us with these signals blocked (test runners do): unblock what we handle.
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for sig in [SIGTERM, SIGINT, SIGPIPE] { sigaddset(&unblock, sig) }
        sigprocmask(SIG_UNBLOCK, &unblock, nil)
    }

    nonisolated(unsafe) private static var signalPipeRead: Int32 = -1

    /// How long the reader keeps polling without sleeping after input arrived.
    static let busyPollMicros: UInt64 = 50

    /// What the reader thread hands over: the parsed lines of one read, or why input ended.
    enum Input: Sendable {
        case batch([ParsedLine])
        case end(Ending)
    }

    /// Runs until EOF, a stop signal, or the host closing its end of the output.
    ///
    /// Two threads, so that parsing (jansson) overlaps with answering: a reader thread reads stdin,
    /// frames and parses each read into a batch; this thread answers the batches in order, makes each
    /// batch's writes durable with one flush, then writes its responses. Every request read in one
    /// `read(2)` still shares one flush, and responses keep the order of requests.
    public func run(readBufferBytes: Int = 256 * 1024) -> Ending {
        let queue = HandoffQueue<Input>(capacity: 8)
        let answered = Locked<[[ParsedLine]]>([])
        let reader = connection.reader
        let (inputFD, log, mayBusyWait) = (self.inputFD, self.log, self.mayBusyWait)
        nonisolated(unsafe) let unsafeLog = log
        let wakeFD = self.wakeFD
        spawnThread {
            Self.readLoop(reader: reader, inputFD: inputFD, wakeFD: wakeFD, bufferBytes: readBufferBytes, queue: queue,
                          answered: answered, mayBusyWait: mayBusyWait, log: unsafeLog)
        }
        defer { queue.close() }
        while true {
            switch queue.take(spin: mayBusyWait()) {
            case .batch(let lines):
                let fatal = serve {
                    connection.answer(lines)
                    return connection.endBatch(waitAbove: Self.maxOutstanding)
                }
                // The reader thread frees what it allocated: freeing another thread's memory contends
                // for its malloc arena (a few percent of both threads' time under load).
                answered.withLock { $0.append(lines) }
                if let ending = flush(fatal: fatal) { return ending }
                // A slice of a big commit between batches; the reader hands over an empty batch to come back.
                if serve({ connection.applyBacklog() }) { wake() }
            case .end(let ending):
                // Every request read is answered before the kernel stops, slow ones included.
                let fatal = connection.stream.isSettled ? false : serve { connection.endBatch(waitAbove: 0) }
                return flush(fatal: fatal) ?? ending
            }
        }
    }

    /// Requests a stream may have waiting for slow work before the server stops reading it.
    public static let maxOutstanding = 4096

    /// Answers under the serving lock when other streams share the dispatcher.
    private func serve(_ body: () -> Bool) -> Bool {
        guard let lock else { return body() }
        return lock.run(body)
    }

    /// A pipe whose write end is poked when other streams' changes or finished slow work wait for this
    /// stream: the read end, which the reader thread polls, and the poke.
    private static func makeWakePipe() -> (Int32, @Sendable () -> Void) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return (-1, {}) }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        let writeEnd = fds[1]
        return (fds[0], {
            var byte: UInt8 = 1
            _ = write(writeEnd, &byte, 1)
        })
    }

    /// The reader thread: reads until EOF or a stop signal, handing each read's parsed lines over (and
    /// an empty batch when notifications from other streams or finished slow work wait).
    private static func readLoop(reader: RequestReader, inputFD: Int32, wakeFD: Int32, bufferBytes: Int, queue: HandoffQueue<Input>,
                                 answered: Locked<[[ParsedLine]]>, mayBusyWait: () -> Bool,
                                 log: (String) -> Void) {
        var reader = reader
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferBytes, alignment: 16)
        defer { buffer.deallocate() }
        var fds = [pollfd(fd: inputFD, events: Int16(POLLIN), revents: 0)]
        if signalPipeRead >= 0 { fds.append(pollfd(fd: signalPipeRead, events: Int16(POLLIN), revents: 0)) }
        let wakeIndex = fds.count
        if wakeFD >= 0 { fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)) }
        var lastInput = monotonicMicros()
        while true {
            for i in fds.indices { fds[i].revents = 0 }
            // Shortly after input, poll without sleeping: waking an idle CPU costs tens of microseconds
            // on virtual machines, more than a request takes, and the next request is usually close.
            let busy = monotonicMicros() - lastInput < Self.busyPollMicros && mayBusyWait()
            let ready = poll(&fds, nfds_t(fds.count), busy ? 0 : -1)
            if ready == 0 { continue }
            if ready < 0 {
                if errno == EINTR { continue }
                log("poll failed: errno \(errno)")
                queue.put(.end(.endOfInput))
                return
            }
            if signalPipeRead >= 0, fds[1].revents != 0 {
                queue.put(.end(.signal))
                return
            }
            if wakeFD >= 0, fds[wakeIndex].revents != 0 {
                var drain = [UInt8](repeating: 0, count: 64)
                while read(wakeFD, &drain, drain.count) > 0 {}
                if !queue.put(.batch([])) { return }
                if fds[0].revents == 0 { continue }
            }
            let n = read(inputFD, buffer.baseAddress, bufferBytes)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                log("read from stdin failed: errno \(errno); treating as end of input")
            }
            if n <= 0 {
                queue.put(.batch(reader.finish()))
                queue.put(.end(.endOfInput))
                return
            }
            lastInput = monotonicMicros()
            var done = answered.withLock { batches in
                var taken: [[ParsedLine]] = []
                swap(&taken, &batches)
                return taken
            }
            done.removeAll()  // frees the answered requests here, on this thread, outside the lock
            let lines = reader.read(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            if !lines.isEmpty, !queue.put(.batch(lines)) { return }
        }
    }

    /// Writes the batch's responses (made durable by `endBatch`); returns why to stop, or nil to go on.
    private func flush(fatal: Bool) -> Ending? {
        let ok = connection.output.isEmpty || connection.output.withUnsafeBytes { writeAll($0) }
        connection.output.removeAll(keepingCapacity: true)
        if fatal { return .storageFailure }
        if !ok { return .outputClosed }
        _ = serve {
            afterWrite()
            return false
        }
        return nil
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = write(outputFD, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                log("stdout closed by the host (errno \(errno)); stopping")
                return false
            }
            offset += n
        }
        return true
    }
}
