#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono

/// Splits a byte stream into lines: `\n` or `\r\n` endings, blank lines skipped, lines over the limit
/// reported once and skipped up to their newline so the stream resynchronises.
public struct LineFramer: Sendable {
    /// One unit of input.
    public enum Event {
        /// A complete, non-blank line without its ending; valid only during the callback.
        case line(UnsafeRawBufferPointer)
        /// A line exceeded the limit; its bytes are being discarded.
        case tooLong
    }

    /// Longest accepted line, ending excluded.
    public let maxLineBytes: Int
    private var pending: [UInt8] = []
    private var discarding = false

    /// A framer that accepts lines up to `maxLineBytes`.
    public init(maxLineBytes: Int) {
        self.maxLineBytes = maxLineBytes
    }

    /// Whether a partial line is buffered.
    public var hasPartialLine: Bool { !pending.isEmpty }

    /// Bytes of the partial line buffered.
    public var bufferedBytes: Int { pending.count }

    /// Largest line buffer kept for the next line.
    static let keptCapacity = 1 << 20

    /// Feeds a chunk; calls `handle` for each event in stream order.
    public mutating func feed(_ chunk: UnsafeRawBufferPointer, _ handle: (Event) -> Void) {
        guard let base = chunk.baseAddress else { return }
        var start = 0
        while start < chunk.count {
            let rest = chunk.count - start
            guard let nl = memchr(base + start, 0x0A, rest) else {
                accumulate(UnsafeRawBufferPointer(start: base + start, count: rest), handle)
                return
            }
            let end = base.distance(to: UnsafeRawPointer(nl))
            let piece = UnsafeRawBufferPointer(start: base + start, count: end - start)
            start = end + 1
            if discarding {
                discarding = false
                pending.removeAll(keepingCapacity: false)
                continue
            }
            if pending.isEmpty {
                emit(piece, handle)
            } else {
                pending.append(contentsOf: piece)
                let full = pending
                // A buffer that held a long line goes back to the allocator: a connection that once
                // sent 16 MiB must not keep 16 MiB for as long as it stays open.
                pending.removeAll(keepingCapacity: pending.count <= Self.keptCapacity)
                full.withUnsafeBytes { emit($0, handle) }
            }
        }
    }

    /// End of input: a final line without a newline is still a line.
    public mutating func finish(_ handle: (Event) -> Void) {
        defer {
            pending.removeAll()
            discarding = false
        }
        guard !discarding, !pending.isEmpty else { return }
        let full = pending
        full.withUnsafeBytes { emit($0, handle) }
    }

    private mutating func accumulate(_ bytes: UnsafeRawBufferPointer, _ handle: (Event) -> Void) {
        guard !discarding else { return }
        // Allow one byte beyond the limit for a `\r` that belongs to the ending.
        if pending.count + bytes.count > maxLineBytes + 1 {
            pending.removeAll(keepingCapacity: false)
            discarding = true
            handle(.tooLong)
            return
        }
        pending.append(contentsOf: bytes)
    }

    private func emit(_ raw: UnsafeRawBufferPointer, _ handle: (Event) -> Void) {
        var line = raw
        if let last = line.last, last == 0x0D { line = UnsafeRawBufferPointer(rebasing: line.dropLast()) }
        if line.count > maxLineBytes {
            handle(.tooLong)
            return
        }
        // Blank (empty or whitespace-only) lines are skipped.
        guard line.contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D }) else { return }
        handle(.line(line))
    }
}

/// The reading half of a connection: frames input into lines and parses each one. It owns no shared
/// state, so the stdio server runs it on its own thread while the dispatcher answers earlier lines.
public struct RequestReader: Sendable {
    private var framer: LineFramer
    /// Reads each line's requests; parser threads use it for the long lines left to them.
    public let envelopes: EnvelopeReader

    /// A reader accepting lines up to `maxLineBytes`, of the methods `envelopes` knows.
    public init(maxLineBytes: Int, envelopes: EnvelopeReader) {
        framer = LineFramer(maxLineBytes: maxLineBytes)
        self.envelopes = envelopes
    }

    /// The parsed lines completed by `chunk`, in order.
    public mutating func read(_ chunk: UnsafeRawBufferPointer) -> [ParsedLine] {
        var lines: [ParsedLine] = []
        let (limit, envelopes) = (framer.maxLineBytes, envelopes)
        framer.feed(chunk) { lines.append(Self.parse($0, limit, envelopes)) }
        return lines
    }

    /// End of input: a final line without a newline, if any.
    public mutating func finish() -> [ParsedLine] {
        var lines: [ParsedLine] = []
        let (limit, envelopes) = (framer.maxLineBytes, envelopes)
        framer.finish { lines.append(Self.parse($0, limit, envelopes)) }
        return lines
    }

    /// A line as `readLines` gives it: parsed, or (a long one) its bytes for another thread to parse.
    public enum ReadLine: Sendable {
        case parsed(ParsedLine)
        case unparsed([UInt8])
    }

    /// The lines completed by `chunk`, in order: those up to `parseUpTo` bytes parsed here, longer ones
    /// as their bytes (parsing 12 MB takes a tenth of a second: on a thread that serves every connection
    /// it would hold all of them).
    public mutating func readLines(_ chunk: UnsafeRawBufferPointer, parseUpTo: Int) -> [ReadLine] {
        var lines: [ReadLine] = []
        let (limit, envelopes) = (framer.maxLineBytes, envelopes)
        framer.feed(chunk) { lines.append(Self.read($0, limit, parseUpTo, envelopes)) }
        return lines
    }

    /// End of input, as `readLines` gives lines.
    public mutating func finishLines(parseUpTo: Int) -> [ReadLine] {
        var lines: [ReadLine] = []
        let (limit, envelopes) = (framer.maxLineBytes, envelopes)
        framer.finish { lines.append(Self.read($0, limit, parseUpTo, envelopes)) }
        return lines
    }

    private static func read(_ event: LineFramer.Event, _ limit: Int, _ parseUpTo: Int, _ envelopes: EnvelopeReader) -> ReadLine {
        if case .line(let line) = event, line.count > parseUpTo { return .unparsed(Array(line)) }
        return .parsed(parse(event, limit, envelopes))
    }

    /// Whether an unterminated line is buffered.
    public var hasPartialLine: Bool { framer.hasPartialLine }

    /// Bytes of the unterminated line buffered.
    public var bufferedBytes: Int { framer.bufferedBytes }

    private static func parse(_ event: LineFramer.Event, _ limit: Int, _ envelopes: EnvelopeReader) -> ParsedLine {
        switch event {
        case .line(let line): return envelopes.parse(line)
        case .tooLong: return .tooLong(limit: limit)
        }
    }
}

/// One host connection: bytes in, response bytes out. The stdio server, the socket server and the
/// in-process test harness drive it through the same reader and dispatcher, so they behave
/// identically. Its methods that answer use the dispatcher: one connection at a time.
public struct Connection {
    /// The reading half; the stdio server moves it to its reader thread.
    public var reader: RequestReader
    private let dispatcher: Dispatcher
    /// This stream's ordering, subscription and unanswered requests.
    public let stream: RequestStream
    /// This stream's subscription to change notifications.
    public var events: EventSubscription { stream.events }
    /// The kernel's clock (the servers' polling and turns count on its monotonic time).
    public var clock: Clock { dispatcher.clock }
    /// Response bytes not yet written: take them after `endBatch` only (until then an answer held for
    /// the batch's flush may be rewritten in place as a refusal).
    public var output: [UInt8] = []

    /// A connection over `dispatcher` with the given line limit and response ordering.
    public init(dispatcher: Dispatcher, maxLineBytes: Int, ordering: ResponseOrdering = .read) {
        self.dispatcher = dispatcher
        self.reader = RequestReader(maxLineBytes: maxLineBytes, envelopes: EnvelopeReader(registry: dispatcher.registry, clock: dispatcher.clock))
        stream = RequestStream(ordering: ordering)
        dispatcher.hub.add(stream.events)
    }

    /// Consumes a chunk of input, handling every complete line in it.
    public mutating func receive(_ chunk: UnsafeRawBufferPointer) {
        answer(reader.read(chunk))
    }

    /// Consumes a chunk given as bytes.
    public mutating func receive(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { receive($0) }
    }

    /// End of input: answers a final unterminated line.
    public mutating func finish() {
        answer(reader.finish())
    }

    /// Answers parsed lines in order, appending their responses to `output` (or keeping those that
    /// wait for slow work until `endBatch`). The rows they read are read ahead first, unless the caller
    /// did that for several connections together (`readAhead`).
    public mutating func answer(_ lines: [ParsedLine], readingAhead: Bool = true) {
        if readingAhead { readAhead { declareReads(lines) } }
        for line in lines { dispatcher.handle(line, on: stream, into: &output) }
    }

    /// Runs `declare` (calls of `declareReads`, of this connection or others of the dispatcher), then
    /// reads every row named in one round trip (`Dispatcher.readAhead`).
    public func readAhead(_ declare: () -> Void) {
        dispatcher.readAhead(declare)
    }

    /// Names the rows the requests of `lines` will read, inside `readAhead`.
    public func declareReads(_ lines: [ParsedLine]) {
        dispatcher.declareReads(lines, on: stream)
    }

    /// Ends a read batch: applies finished slow work, makes the batch's writes durable and fixes up the
    /// responses of writes that failed, then appends every answer that may be written and the change
    /// notifications due to this stream. With `waitAbove`, first waits for slow work until at most that
    /// many requests are outstanding (0: all answered, as the in-process harness and shutdown want).
    /// Returns true when the kernel must stop after writing the output (the log could not be synced).
    public mutating func endBatch(waitAbove: Int? = 0) -> Bool {
        events.drain(into: &output, nowSeconds: dispatcher.clock.now().seconds)
        return dispatcher.endBatch(&output, on: stream, waitAbove: waitAbove)
    }

    /// One request line in, its answer out, as a host that waits for each answer sees it (`call`, the
    /// MCP server's kernel of its own): the line (a newline is added when missing) is read, its slow
    /// work waited for and its writes made durable. Returns the output, and whether the kernel must stop
    /// (the log could not be synced).
    public mutating func exchange(_ line: [UInt8]) -> (output: [UInt8], fatal: Bool) {
        receive(line.last == UInt8(ascii: "\n") ? line : line + [UInt8(ascii: "\n")])
        let fatal = endBatch(waitAbove: 0)
        defer { output.removeAll() }
        return (output, fatal)
    }

    /// Applies one slice of the store's big commits still being applied (see `Dispatcher.applyBacklog`);
    /// returns whether any is left. Servers call it between rounds of requests.
    public func applyBacklog() -> Bool {
        dispatcher.applyBacklog()
    }

    /// The stream is gone: it gets no more notifications.
    public func close() {
        dispatcher.forget(stream)
    }

    /// Whether an unterminated line is buffered.
    public var hasPartialLine: Bool { reader.hasPartialLine }
}
