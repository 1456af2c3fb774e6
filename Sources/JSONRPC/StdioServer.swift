#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import Threads

/// Write end of the self-pipe that SIGTERM/SIGINT wake the read loop through.
nonisolated(unsafe) private var signalPipeWriteFD: Int32 = -1

/// Serves a connection over a transport (file descriptors: raw `read(2)` from the input, responses
/// written with `write(2)` once per read batch, after the batch's writes are durable), SIGPIPE ignored,
/// and a prompt, orderly stop on EOF, SIGTERM or SIGINT.
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
    private let transport: any Transport
    /// Called after each batch's responses are written (the store's snapshot trigger), holding the
    /// serving lock when streams share the dispatcher: a snapshot freezes the store between commits,
    /// never while a socket's batch commits.
    public var afterWrite: () -> Void = {}
    /// Whether the threads may wait for input by spinning rather than sleeping. False while other work
    /// (a background snapshot) needs the CPU: then a request wakes a thread, which costs little when
    /// the CPU is busy anyway, instead of the two request threads crowding that work out.
    public var mayBusyWait: @Sendable () -> Bool = { true }
    /// Receives diagnostics for stderr.
    public var log: (String) -> Void = { _ in } {
        didSet { (transport as? DescriptorTransport)?.log = log }
    }
    /// Set when other streams (socket connections) share the dispatcher: every batch is answered
    /// holding it, and their changes reach this stream's subscription between batches.
    public var lock: ServingLock?

    /// A server reading `inputFD` and writing `outputFD`.
    public convenience init(connection: Connection, inputFD: Int32, outputFD: Int32) {
        self.init(connection: connection, transport: DescriptorTransport(inputFD: inputFD, outputFD: outputFD))
    }

    /// A server reading and writing `transport`.
    public init(connection: Connection, transport: any Transport) {
        self.connection = connection
        self.transport = transport
        input = InputSide(reader: connection.reader, clock: connection.clock)
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

    nonisolated(unsafe) public private(set) static var signalPipeRead: Int32 = -1

    /// How long the reader keeps polling without sleeping after input arrived.
    static let busyPollMicros: UInt64 = 50

    /// What the reader thread hands over: the parsed lines of one read, or why input ended.
    enum Input: Sendable {
        case batch([ParsedLine])
        case end(Ending)
    }

    /// What the reader side keeps between reads: the line framer and parser, its buffer, the batches
    /// answered (freed on the reader's thread), and when input last came. Only the reader uses it.
    private final class InputSide: @unchecked Sendable {
        var reader: RequestReader
        let clock: Clock
        let buffer: UnsafeMutableRawBufferPointer
        let answered = Locked<[[ParsedLine]]>([])
        var lastInput: UInt64 = 0
        var ended = false

        init(reader: RequestReader, clock: Clock, bufferBytes: Int = 256 * 1024) {
            self.reader = reader
            self.clock = clock
            buffer = .allocate(byteCount: bufferBytes, alignment: 16)
        }

        deinit { buffer.deallocate() }
    }
    private let input: InputSide

    /// Runs until EOF, a stop signal, or the host closing its end of the output.
    ///
    /// Two threads, so that parsing (jansson) overlaps with answering: a reader thread reads the input,
    /// frames and parses each read into a batch; this thread answers the batches in order, makes each
    /// batch's writes durable with one flush, then writes its responses. Every request read in one
    /// read still shares one flush, and responses keep the order of requests.
    public func run() -> Ending {
        let (queue, clock, mayBusyWait) = (self.queue, input.clock, self.mayBusyWait)
        nonisolated(unsafe) let this = self
        spawnThread {
            while true {
                // Shortly after input, poll without sleeping: waking an idle CPU costs tens of microseconds
                // on virtual machines, more than a request takes, and the next request is usually close.
                let busy = clock.monotonicMicros() - this.input.lastInput < Self.busyPollMicros && mayBusyWait()
                if !this.readStep(wait: !busy) { return }
            }
        }
        defer { queue.close() }
        while true {
            if let ending = serve(queue.takeOrSignals(spin: mayBusyWait())) { return ending }
        }
    }

    /// One round of the reader thread: reads what the transport has (with `wait`, waiting for it) and
    /// queues its lines, or the input's end. Returns false once the input ended. The simulation calls it
    /// as its steps decide, the queue having room.
    @discardableResult
    public func readStep(wait: Bool = false) -> Bool {
        guard !input.ended else { return false }
        let got = transport.read(into: input.buffer, wait: wait)
        switch got {
        case .nothing:
            return true
        case .stop:
            input.ended = true
            queue.put(.end(.signal))
            return false
        case .end:
            input.ended = true
            queue.put(.batch(input.reader.finish()))
            queue.put(.end(.endOfInput))
            return false
        case .bytes(let n):
            input.lastInput = input.clock.monotonicMicros()
            var done = input.answered.withLock { batches in
                var taken: [[ParsedLine]] = []
                swap(&taken, &batches)
                return taken
            }
            done.removeAll()  // frees the answered requests here, on this thread, outside the lock
            let lines = input.reader.read(UnsafeRawBufferPointer(rebasing: input.buffer[0..<n]))
            if !lines.isEmpty, !queue.put(.batch(lines)) {
                input.ended = true
                return false
            }
            return true
        }
    }

    /// Whether the reader's hand-over queue is full (a `readStep` would wait).
    public var isInputQueueFull: Bool { queue.isFull }

    /// One round of the serving thread without waiting: answers the oldest batch read, or what woke it.
    /// Returns whether there was anything, and the ending when the server stops.
    public func serveStep() -> (served: Bool, ending: Ending?) {
        guard let taken = queue.poll() else { return (false, nil) }
        return (true, serve(taken))
    }

    /// Answers what the serving thread took: returns why to stop, or nil to go on.
    private func serve(_ taken: HandoffQueue<Input>.Taken) -> Ending? {
        switch taken {
        case .signals(let bits):
            // Woken without input: a slice due alone applies the slice; anything else ends a round of
            // this stream (applies finished work, writes the answers and notifications that waited).
            if ServingWake(rawValue: bits) != .sliceDue {
                let fatal = serve { connection.endBatch(waitAbove: Self.maxOutstanding) }
                if let ending = flush(fatal: fatal) { return ending }
            }
            if serve({ connection.applyBacklog() }) { wake(.sliceDue) }
        case .item(.batch(let lines)):
            // Reads queued while the last batch was answered (its database round trips, say) join this
            // one: one read-ahead and one flush for them all. At most the queue's capacity of reads.
            var batches = [lines]
            while case .batch(let more)? = queue.pollItem(if: { if case .batch = $0 { true } else { false } }) { batches.append(more) }
            let fatal = serve {
                connection.readAhead { for lines in batches { connection.declareReads(lines) } }
                for lines in batches { connection.answer(lines, readingAhead: false) }
                return connection.endBatch(waitAbove: Self.maxOutstanding)
            }
            // The reader thread frees what it allocated: freeing another thread's memory contends
            // for its malloc arena (a few percent of both threads' time under load).
            input.answered.withLock { $0 += batches }
            if let ending = flush(fatal: fatal) { return ending }
            // A slice of a big commit between batches, and another after the next batch or on its own.
            if serve({ connection.applyBacklog() }) { wake(.sliceDue) }
        case .item(.end(let ending)):
            // Every request read is answered before the kernel stops, slow ones included.
            let fatal = connection.stream.isSettled ? false : serve { connection.endBatch(waitAbove: 0) }
            return flush(fatal: fatal) ?? ending
        }
        return nil
    }

    /// Requests a stream may have waiting for slow work before the server stops reading it.
    public static let maxOutstanding = 4096

    /// Answers under the serving lock when other streams share the dispatcher.
    private func serve(_ body: () -> Bool) -> Bool {
        guard let lock else { return body() }
        return lock.run(body)
    }

    /// Writes the batch's responses (made durable by `endBatch`); returns why to stop, or nil to go on.
    private func flush(fatal: Bool) -> Ending? {
        let ok = connection.output.isEmpty || connection.output.withUnsafeBytes { transport.write($0) }
        connection.output.removeAll(keepingCapacity: true)
        if fatal { return .storageFailure }
        if !ok { return .outputClosed }
        _ = serve {
            afterWrite()
            return false
        }
        return nil
    }
}
