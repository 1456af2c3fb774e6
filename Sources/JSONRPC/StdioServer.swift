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
        let queue = HandoffQueue<Input>(capacity: 8)
        self.queue = queue
        wake = { queue.signal($0.rawValue) }
        connection.events.wake = { queue.signal(ServingWake.events.rawValue) }
        connection.stream.wake = wake
    }

    /// What the serving thread answers: the reader thread's batches and the input's end, in order, and
    /// the reasons it is woken without input (`ServingWake`), straight from the threads that have them.
    private let queue: HandoffQueue<Input>
    /// Wakes the serving thread for `reason` (from any thread, never waiting): finished slow work, a
    /// commit applied, changes of other streams or kernels, a slice of a big commit due.
    public let wake: @Sendable (ServingWake) -> Void

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
        let queue = self.queue
        let answered = Locked<[[ParsedLine]]>([])
        let (reader, clock) = (connection.reader, connection.clock)
        let (inputFD, log, mayBusyWait) = (self.inputFD, self.log, self.mayBusyWait)
        nonisolated(unsafe) let unsafeLog = log
        spawnThread {
            Self.readLoop(reader: reader, clock: clock, inputFD: inputFD, bufferBytes: readBufferBytes, queue: queue,
                          answered: answered, mayBusyWait: mayBusyWait, log: unsafeLog)
        }
        defer { queue.close() }
        while true {
            switch queue.takeOrSignals(spin: mayBusyWait()) {
            case .signals(let bits):
                // Woken without input: a slice due alone applies the slice; anything else ends a round of
                // this stream (applies finished work, writes the answers and notifications that waited).
                if ServingWake(rawValue: bits) != .sliceDue {
                    let fatal = serve { connection.endBatch(waitAbove: Self.maxOutstanding) }
                    if let ending = flush(fatal: fatal) { return ending }
                }
                if serve({ connection.applyBacklog() }) { wake(.sliceDue) }
            case .item(.batch(let lines)):
                let fatal = serve {
                    connection.answer(lines)
                    return connection.endBatch(waitAbove: Self.maxOutstanding)
                }
                // The reader thread frees what it allocated: freeing another thread's memory contends
                // for its malloc arena (a few percent of both threads' time under load).
                answered.withLock { $0.append(lines) }
                if let ending = flush(fatal: fatal) { return ending }
                // A slice of a big commit between batches, and another after the next batch or on its own.
                if serve({ connection.applyBacklog() }) { wake(.sliceDue) }
            case .item(.end(let ending)):
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

    /// The reader thread: reads until EOF or a stop signal, handing each read's parsed lines over. It
    /// reads input only: whatever else wakes the serving thread signals it directly (`wake`).
    private static func readLoop(reader: RequestReader, clock: Clock, inputFD: Int32, bufferBytes: Int, queue: HandoffQueue<Input>,
                                 answered: Locked<[[ParsedLine]]>, mayBusyWait: () -> Bool,
                                 log: (String) -> Void) {
        var reader = reader
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferBytes, alignment: 16)
        defer { buffer.deallocate() }
        var fds = [pollfd(fd: inputFD, events: Int16(POLLIN), revents: 0)]
        if signalPipeRead >= 0 { fds.append(pollfd(fd: signalPipeRead, events: Int16(POLLIN), revents: 0)) }
        var lastInput = clock.monotonicMicros()
        while true {
            for i in fds.indices { fds[i].revents = 0 }
            // Shortly after input, poll without sleeping: waking an idle CPU costs tens of microseconds
            // on virtual machines, more than a request takes, and the next request is usually close.
            let busy = clock.monotonicMicros() - lastInput < Self.busyPollMicros && mayBusyWait()
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
            lastInput = clock.monotonicMicros()
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
