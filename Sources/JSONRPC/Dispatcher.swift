import Chrono
import JSON
import JSONParsing
import Threads

/// A line of input after parsing: what the reading thread hands to the dispatcher.
public enum ParsedLine: Sendable {
    /// A JSON value, and when its parsing started (request latency counts from there).
    case value(JSON, started: UInt64)
    /// Not JSON; `id` is the request's id when it could still be read (else null).
    case parseError(JSONParseError, id: JSON, started: UInt64)
    /// A line longer than `limit` bytes, skipped.
    case tooLong(limit: Int)
}

/// Turns request lines into response lines: parses the envelope, finds the method, authenticates,
/// decodes params, calls the handler and writes the response. One thread at a time answers (the
/// serving thread, or whichever stream holds the serving lock), so it is the store's single writer;
/// the slow parts of slow methods run on worker threads meanwhile, and their answers follow the
/// stream's ordering (read order, or completion order).
///
/// This file reads a line to the call of its method; the rest is in files of their own: the envelope
/// (`Envelope.swift`), slow work and big commits (`SlowWork.swift`), answers held until their writes
/// are durable (`Acknowledgement.swift`) and response lines (`Responses.swift`).
public final class Dispatcher {
    /// The methods served.
    public let registry: MethodRegistry
    /// Counters and latencies for `kernel.info`.
    public let stats: RequestStats
    let authenticator: Authenticator
    let clock: Clock
    let onInternalError: (String) -> Void
    /// The store's commit log; nil for a kernel without writes.
    public var journal: CommitTracker?
    /// Every stream's subscription to change notifications, and the stream being answered.
    public var hub = EventHub()
    /// The stream being answered.
    public var current = RequestStream()
    /// The longest answer written (the line limit); a longer answer to a read is refused.
    public var maxAnswerBytes = 16 << 20
    /// Requests per user (`limits.requestsPerSecond`); nil: no limit.
    public var rateLimiter: RateLimiter?
    /// Where slow parts run; started on first use.
    public lazy var workers = WorkerPool.perCore()
    /// Answers given since the journal was last flushed that depend on writes not yet durable.
    var pendingWrites: [PendingWrite] = []
    /// Answers to replace with -32050 at the end of the batch: their writes failed to be logged.
    /// Writes of the batch answered with an error instead: not applied, or applied or not, unknown.
    var refusedWrites: [(PendingWrite, RPCError)] = []
    /// The last commit id the journal has flushed (made durable, or refused and undone).
    var settledCommitID: UInt64 = 0
    /// A flush in the middle of this batch failed to sync: the kernel stops after answering it.
    var syncFailed = false
    /// Commits being applied (in slices, or detached), with the stream whose answer waits for each and
    /// that request's ordering keys: a request of the same user on another stream is held until the
    /// commit is applied, instead of waiting for the user's lock on the serving thread, where every other
    /// user would wait with it (#52 defect 8). Streams holding such a request, woken when one is applied.
    var applying: [(commit: UInt64, stream: RequestStream, keys: Set<String>?)] = []
    var heldAcross: [RequestStream] = []
    /// How long the serving thread applies the backlog between rounds of other requests.
    public static let backlogSliceMicros: UInt64 = 4000

    /// A dispatcher; `onInternalError` receives the details of bugs that are answered -32603.
    public init(registry: MethodRegistry, authenticator: Authenticator, clock: Clock, stats: RequestStats,
                onInternalError: @escaping (String) -> Void = { _ in }) {
        self.registry = registry
        self.authenticator = authenticator
        self.clock = clock
        self.stats = stats
        self.onInternalError = onInternalError
    }

    /// Parses one line (without its newline). Pure, so the reading thread can do it while this
    /// dispatcher answers earlier lines.
    public static func parse(_ line: UnsafeRawBufferPointer) -> ParsedLine {
        let started = monotonicMicros()
        do {
            return .value(try JSON.parse(line), started: started)
        } catch {
            return .parseError(error, id: RequestIDScan.id(in: line) ?? .null, started: started)
        }
    }

    /// Handles one line (without its newline) and appends the response line, if any, to `out`.
    public func handleLine(_ line: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        handle(Self.parse(line), into: &out)
    }

    /// Answers one parsed line, appending the response line, if any, to `out` (or keeping it in the
    /// stream until it may be written).
    public func handle(_ line: ParsedLine, into out: inout [UInt8]) {
        let parsed: JSON, started: UInt64
        switch line {
        case .value(let value, let s):
            (parsed, started) = (value, s)
        case .parseError(let error, let id, let s):
            deliver(id: id, .failure(.parse(error)), depends: nil, started: s, slot: nil, into: &out)
            return
        case .tooLong(let limit):
            rejectOversizedLine(limit: limit, into: &out)
            return
        }
        guard case .array(let items) = parsed else {
            place(parsed, started: started, element: nil, into: &out)
            return
        }
        guard !items.isEmpty else {
            deliver(id: .null, .failure(.invalidRequest("empty batch", reason: "empty_batch")), depends: nil, started: started,
                    slot: nil, into: &out)
            return
        }
        // A batch is at most as much work as that many lines, and its answer one line within the limit.
        guard items.count <= Self.maxBatchLength, let budget = BatchBudget(limit: maxAnswerBytes, ids: items.map { envelope($0).0 }) else {
            let why = items.count > Self.maxBatchLength ? "a batch holds at most \(Self.maxBatchLength) requests"
                : "the batch's answers could not fit in one line of \(maxAnswerBytes) bytes"
            deliver(id: .null, .failure(.invalidRequest(why, reason: "batch_too_large")), depends: nil, started: started, slot: nil, into: &out)
            return
        }
        let stream = current
        if !stream.entries.isEmpty || (stream.ordering == .read && !stream.slots.isEmpty) || items.contains(where: isSlow) {
            // Some answer may have to wait: the batch's array is written once all its elements are done.
            let batch = Slot(ordered: stream.ordering == .read, elements: [])
            for (i, item) in items.enumerated() {
                let element = Slot(ordered: false)
                batch.elements!.append(element)
                place(item, started: i == 0 ? started : monotonicMicros(), element: element, into: &out)
            }
            stream.slots.append(batch)
            return
        }
        let mark = out.count
        out.append(UInt8(ascii: "["))
        var wroteAny = false
        for (i, item) in items.enumerated() {
            let commaAt = out.count
            if wroteAny { out.append(UInt8(ascii: ",")) }
            // What is left of the line for this element's answer, after the room the later ones need.
            let room = budget.room(for: i, used: out.count - mark)
            if answerInline(item, started: i == 0 ? started : monotonicMicros(), room: room, into: &out) {
                wroteAny = true
            } else {
                out.removeSubrange(commaAt...)
            }
        }
        if wroteAny {
            out.append(contentsOf: "]\n".utf8)
        } else {
            out.removeSubrange(mark...)  // an all-notification batch writes nothing
        }
    }

    /// Handles one line given as bytes (convenience for tests and `call`).
    public func handleLine(_ line: [UInt8], into out: inout [UInt8]) {
        line.withUnsafeBytes { handleLine($0, into: &out) }
    }

    /// Answers a line that exceeded the size limit.
    func rejectOversizedLine(limit: Int, into out: inout [UInt8]) {
        let error = RPCError.invalidRequest("line longer than \(limit) bytes", reason: "line_too_long")
        deliver(id: .null, .failure(error), depends: nil, started: monotonicMicros(), slot: nil, into: &out)
    }

    enum Outcome {
        case success(JSON)
        case failure(RPCError)

        var failed: Bool { if case .failure = self { true } else { false } }
    }

    /// What executing a request gave: its answer, or slow work to run first.
    enum Step {
        case answered(Outcome, depends: Dependency?)
        case slow(SlowCall<JSON>)
    }

    /// A batch element answered into the batch's array in `out` (no request of the batch waits);
    /// returns whether it wrote a response (notifications write none).
    func answerInline(_ request: JSON, started: UInt64, room: Int, into out: inout [UInt8]) -> Bool {
        let (id, target) = envelope(request)
        let outcome: Outcome, depends: Dependency?
        switch target {
        case .failure(let error):
            (outcome, depends) = (.failure(error), nil)
        case .success where room < Self.smallestAnswer:
            // No answer but the refusal fits: the element is not run at all.
            (outcome, depends) = (.failure(BatchBudget.error(maxAnswerBytes)), nil)
        case .success(let (method, params)):
            switch execute(method, params) {
            case .answered(let o, let d): (outcome, depends) = (o, d)
            case .slow: (outcome, depends) = (.failure(.internalError), nil)  // `handle` routes slow methods to `place`
            }
        }
        stats.record(micros: monotonicMicros() - started, failed: outcome.failed)
        guard let id else { return false }
        let start = out.count
        writeResponse(id: id, outcome: outcome, read: depends?.wrote != true, room: room, into: &out)
        if let depends { pendingWrites.append(PendingWrite(range: start..<out.count, id: id, depends: depends, slot: nil, stream: ObjectIdentifier(current))) }
        return true
    }

    /// The most requests one batch may hold (`-32600 batch_too_large` past it).
    public static let maxBatchLength = 1000

    /// Room below which a batch element is not run: no answer but its refusal fits in less.
    static let smallestAnswer = 256

    func nextTicket() -> UInt64 {
        current.nextTicket += 1
        return current.nextTicket
    }

    /// A new top-level place for an answer that cannot be written yet, after every other one.
    func newSlot() -> Slot {
        let slot = Slot(ordered: current.ordering == .read)
        current.slots.append(slot)
        return slot
    }

    /// The caller's user and the method's own keys; nil (ordered after everything before it) for a
    /// request of no user in read order.
    func orderingKeys(_ method: RegisteredMethod, _ params: JSONObject) -> Set<String>? {
        var keys = Set(method.orderingKeys(params))
        if method.auth != .none, case .string(let token)? = params["auth"],
           let user = authenticator.userOrdering(token: token, requirement: method.auth, now: clock.now()) {
            keys.insert("user:" + user)
        }
        return keys.isEmpty && current.ordering == .read ? nil : keys
    }

    /// Calls a method in a unit of work of its own, tracking what its answer depends on (`tracked`).
    /// A request that lost a race with another kernel changed nothing and runs again from its first read,
    /// so that no decision rests on what the other request changed.
    func execute(_ method: RegisteredMethod, _ params: JSONObject, attempts: Int = 0) -> Step {
        var slow: SlowCall<JSON>?
        var attempt = attempts
        while true {
            var (outcome, depends) = tracked(method) {
                switch call(method, params) {
                case .success(.done(let result)): return .success(result)
                case .success(.slow(let call)):
                    slow = call
                    return .success(.null)
                case .failure(let error): return .failure(error)
                }
            }
            if let slow { return .slow(slow) }
            if case .failure(let error) = outcome, error.isConflict, attempt < Self.attempts {
                attempt += 1
                stats.recordRetry()
                continue
            }
            if !method.mutates { depends?.rerun = (method, params) }
            return .answered(outcome, depends: depends)
        }
    }

    /// Runs of a request that lost races (`RPCError.isConflict`) before its answer is the -32050 itself.
    static let attempts = 3

    /// Records an answer and writes it: into its slot, into a new slot behind earlier unwritten answers
    /// (read order), or straight to `out`.
    func deliver(id: JSON?, _ outcome: Outcome, depends: Dependency?, started: UInt64, slot: Slot?,
                         into out: inout [UInt8]) {
        stats.record(micros: monotonicMicros() - started, failed: outcome.failed)
        guard let id else {
            slot?.done = true
            return
        }
        if let slot = slot ?? (current.ordering == .read && !current.slots.isEmpty ? newSlot() : nil) {
            slot.bytes.removeAll()
            writeResponse(id: id, outcome: outcome, read: depends?.wrote != true, into: &slot.bytes)
            (slot.id, slot.answersWrite) = (id, depends?.wrote == true)
            slot.done = true
            if let depends { pendingWrites.append(PendingWrite(range: 0..<slot.bytes.count, id: id, depends: depends, slot: slot, stream: ObjectIdentifier(current))) }
            return
        }
        let start = out.count
        writeResponse(id: id, outcome: outcome, read: depends?.wrote != true, into: &out)
        if let depends { pendingWrites.append(PendingWrite(range: start..<out.count, id: id, depends: depends, slot: nil, stream: ObjectIdentifier(current))) }
        out.append(UInt8(ascii: "\n"))
    }

    func call(_ method: RegisteredMethod, _ params: JSONObject) -> Result<RegisteredMethod.Invocation, RPCError> {
        var reader = ObjectReader(params, path: "params")
        let token: String?
        do {
            token = try reader.optional("auth", as: String.self)
        } catch {
            return .failure(.invalidParams(error))
        }
        let now = clock.now()
        do throws(RPCError) {
            let identity = try authenticator.authenticate(token: token, requirement: method.auth, now: now)
            if let rateLimiter, let identity, identity.role != "service_role", let user = identity.userId,
               let wait = rateLimiter.admit(user, now: now) {
                throw RPCError.rateLimited(retryAfterMs: wait)
            }
            let context = CallContext(identity: identity, now: now, registry: registry, stream: current)
            return .success(try method.invoke(&reader, context))
        } catch {
            return .failure(error)
        }
    }

}
