import Chrono
import JSON
import Threads

/// Turns requests into response lines: authenticates, decodes params, calls the method in a unit of
/// work of its own and writes the response. One thread at a time answers (the serving thread, or
/// whichever stream holds the serving lock), so it is the store's single writer; the slow parts of
/// slow methods run on worker threads meanwhile, and their answers follow the stream's ordering (read
/// order, or completion order). Every call names the stream it answers: the dispatcher keeps no
/// stream of its own.
///
/// The steps a request flows through are small parts that own their state: the line reader checks
/// envelopes (`EnvelopeReader`); the stream keeps its unanswered requests and their order
/// (`RequestStream`, `Scheduling.swift`); slow work runs on `workers` (`SlowWork.swift`); commits being
/// applied after their answers hold later requests of their users (`CommitsInFlight`); answers wait
/// for their writes to be durable (`Acknowledgement`); changes go to subscribed streams (`EventHub`);
/// response lines are written in `Responses.swift`.
public final class Dispatcher {
    /// The methods served.
    public let registry: MethodRegistry
    /// Counters and latencies for `kernel.info`.
    public let stats: RequestStats
    let authenticator: Authenticator
    let clock: Clock
    let onInternalError: (String) -> Void
    /// The store's commit log; nil for a kernel without writes.
    public var journal: CommitTracker? {
        get { acknowledgement.journal }
        set { acknowledgement.journal = newValue }
    }
    /// Answers waiting for their writes to be durable.
    let acknowledgement = Acknowledgement()
    /// Commits being applied after their answers, and the streams holding requests behind them.
    let inFlight = CommitsInFlight()
    /// Every stream's subscription to change notifications.
    public var hub = EventHub()
    /// The longest answer written (the line limit); a longer answer to a read is refused.
    public var maxAnswerBytes = 16 << 20
    /// Requests per user (`limits.requestsPerSecond`); nil: no limit.
    public var rateLimiter: RateLimiter?
    /// Where slow parts run; started on first use.
    public lazy var workers: any Executor = WorkerPool.perCore()
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

    /// Handles one line (without its newline) of `stream` and appends the response line, if any, to
    /// `out` (for tests).
    public func handleLine(_ line: [UInt8], on stream: RequestStream, into out: inout [UInt8]) {
        line.withUnsafeBytes { handle(EnvelopeReader(registry: registry, clock: clock).parse($0), on: stream, into: &out) }
    }

    /// Answers one parsed line of `stream`, appending the response line, if any, to `out` (or keeping
    /// it in the stream until it may be written).
    public func handle(_ line: ParsedLine, on stream: RequestStream, into out: inout [UInt8]) {
        let items: [Request], started: UInt64
        switch line {
        case .request(let request, let s):
            place(request, started: s, element: nil, on: stream, into: &out)
            return
        case .batch(let requests, let s):
            (items, started) = (requests, s)
        case .parseError(let error, let id, let s):
            deliver(id: id, .failure(.parse(error)), depends: nil, started: s, slot: nil, on: stream, into: &out)
            return
        case .tooLong(let limit):
            let error = RPCError.invalidRequest("line longer than \(limit) bytes", reason: "line_too_long")
            deliver(id: .null, .failure(error), depends: nil, started: clock.monotonicMicros(), slot: nil, on: stream, into: &out)
            return
        }
        guard !items.isEmpty else {
            deliver(id: .null, .failure(.invalidRequest("empty batch", reason: "empty_batch")), depends: nil, started: started,
                    slot: nil, on: stream, into: &out)
            return
        }
        // A batch is at most as much work as that many lines, and its answer one line within the limit.
        guard items.count <= Self.maxBatchLength, let budget = BatchBudget(limit: maxAnswerBytes, ids: items.map(\.id)) else {
            let why = items.count > Self.maxBatchLength ? "a batch holds at most \(Self.maxBatchLength) requests"
                : "the batch's answers could not fit in one line of \(maxAnswerBytes) bytes"
            deliver(id: .null, .failure(.invalidRequest(why, reason: "batch_too_large")), depends: nil, started: started, slot: nil,
                    on: stream, into: &out)
            return
        }
        if !stream.entries.isEmpty || (stream.ordering == .read && !stream.slots.isEmpty) || items.contains(where: { $0.method?.slow == true }) {
            // Some answer may have to wait: the batch's array is written once all its elements are done.
            let batch = Slot(ordered: stream.ordering == .read, elements: [])
            for (i, item) in items.enumerated() {
                let element = Slot(ordered: false)
                batch.elements!.append(element)
                place(item, started: i == 0 ? started : clock.monotonicMicros(), element: element, on: stream, into: &out)
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
            if answerInline(item, started: i == 0 ? started : clock.monotonicMicros(), room: room, on: stream, into: &out) {
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

    /// Runs `declare`, in which requests name the rows they will read (`declareReads`), so that a store
    /// across a network fetches them for the whole batch in one round trip before any runs. Nothing, and
    /// `declare` is not run, on a store that reads no network.
    public func readAhead(_ declare: () -> Void) {
        journal?.readAhead {
            declaredAll = true
            declare()
            return declaredAll
        }
    }

    /// While `readAhead` declares: whether every request so far only reads and named all it reads.
    private var declaredAll = true

    /// Has the requests of `lines` name the rows they will read: their token's session or account, and
    /// what their method declares. O(requests).
    public func declareReads(_ lines: [ParsedLine], on stream: RequestStream) {
        let now = clock.now()
        for line in lines {
            switch line {
            case .request(let request, _): declareReads(of: request, now: now, on: stream)
            case .batch(let requests, _): for request in requests { declareReads(of: request, now: now, on: stream) }
            default: break
            }
        }
    }

    private func declareReads(of request: Request, now: Timestamp, on stream: RequestStream) {
        guard case .success(let (method, params)) = request.target else { return }  // refused as read: reads nothing
        if method.mutates || (method.declareReads == nil && method.readsState) { declaredAll = false }
        guard method.mutates || method.declareReads != nil else { return }
        var reader = ObjectReader(params, path: "params")
        let token = (try? reader.optional("auth", as: String.self)) ?? nil
        let identity = method.auth == .none ? nil : authenticator.declareReads(token: token, requirement: method.auth, writes: method.mutates, now: now)
        method.declareReads?(params, CallContext(identity: identity, now: now, registry: registry, stream: stream))
    }

    /// What executing a request gave: its answer, or slow work to run first.
    enum Step {
        case answered(Outcome, depends: Dependency?)
        case slow(SlowCall<JSON>)
    }

    /// A batch element answered into the batch's array in `out` (no request of the batch waits);
    /// returns whether it wrote a response (notifications write none).
    func answerInline(_ request: Request, started: UInt64, room: Int, on stream: RequestStream, into out: inout [UInt8]) -> Bool {
        let id = request.id
        let outcome: Outcome, depends: Dependency?
        switch request.target {
        case .failure(let error):
            (outcome, depends) = (.failure(error), nil)
        case .success where room < Self.smallestAnswer:
            // No answer but the refusal fits: the element is not run at all.
            (outcome, depends) = (.failure(BatchBudget.error(maxAnswerBytes)), nil)
        case .success(let (method, params)):
            switch execute(method, params, on: stream) {
            case .answered(let o, let d): (outcome, depends) = (o, d)
            case .slow: (outcome, depends) = (.failure(.internalError), nil)  // `handle` routes slow methods to `place`
            }
        }
        stats.record(micros: clock.monotonicMicros() - started, failed: outcome.failed)
        guard let id else { return false }
        let start = out.count
        writeResponse(id: id, outcome: outcome, read: depends?.wrote != true, room: room, into: &out)
        if let depends { acknowledgement.hold(PendingWrite(range: start..<out.count, id: id, depends: depends, slot: nil, stream: ObjectIdentifier(stream))) }
        return true
    }

    /// The most requests one batch may hold (`-32600 batch_too_large` past it).
    public static let maxBatchLength = 1000

    /// Room below which a batch element is not run: no answer but its refusal fits in less.
    static let smallestAnswer = 256

    /// Calls a method in a unit of work of its own, tracking what its answer depends on (`tracked`).
    /// A request that lost a race with another kernel changed nothing and runs again from its first read,
    /// so that no decision rests on what the other request changed.
    func execute(_ method: RegisteredMethod, _ params: JSONObject, on stream: RequestStream, attempts: Int = 0) -> Step {
        var slow: SlowCall<JSON>?
        var attempt = attempts
        while true {
            var (outcome, depends) = acknowledgement.tracked(mutates: method.mutates) {
                switch call(method, params, on: stream) {
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
    func deliver(id: JSON?, _ outcome: Outcome, depends: Dependency?, started: UInt64, slot: Slot?, on stream: RequestStream,
                 into out: inout [UInt8]) {
        stats.record(micros: clock.monotonicMicros() - started, failed: outcome.failed)
        guard let id else {
            slot?.done = true
            return
        }
        if let slot = slot ?? (stream.ordering == .read && !stream.slots.isEmpty ? stream.newSlot() : nil) {
            slot.bytes.removeAll()
            writeResponse(id: id, outcome: outcome, read: depends?.wrote != true, into: &slot.bytes)
            (slot.id, slot.answersWrite) = (id, depends?.wrote == true)
            slot.done = true
            if let depends { acknowledgement.hold(PendingWrite(range: 0..<slot.bytes.count, id: id, depends: depends, slot: slot, stream: ObjectIdentifier(stream))) }
            return
        }
        let start = out.count
        writeResponse(id: id, outcome: outcome, read: depends?.wrote != true, into: &out)
        if let depends { acknowledgement.hold(PendingWrite(range: start..<out.count, id: id, depends: depends, slot: nil, stream: ObjectIdentifier(stream))) }
        out.append(UInt8(ascii: "\n"))
    }

    func call(_ method: RegisteredMethod, _ params: JSONObject, on stream: RequestStream) -> Result<RegisteredMethod.Invocation, RPCError> {
        var reader = ObjectReader(params, path: "params")
        let token: String?
        do {
            token = try reader.optional("auth", as: String.self)
        } catch {
            return .failure(.invalidParams(error))
        }
        let now = clock.now()
        do throws(RPCError) {
            let identity = try authenticator.authenticate(token: token, requirement: method.auth, writes: method.mutates, now: now)
            if let rateLimiter, let identity, identity.role != "service_role", let user = identity.userId,
               let wait = rateLimiter.admit(user, now: now) {
                throw RPCError.rateLimited(retryAfterMs: wait)
            }
            let context = CallContext(identity: identity, now: now, registry: registry, stream: stream)
            // Authentication only reads. The account of a user known only from a trusted token is made by
            // their first request that writes, with its first commit (nothing when it commits nothing).
            guard let identity, identity.needsAccount, method.mutates else { return .success(try method.invoke(&reader, context)) }
            let authenticator = self.authenticator
            let attach = { () throws(RPCError) in try authenticator.createAccount(for: identity, now: now) }
            try attach()
            switch try method.invoke(&reader, context) {
            case .done(let result): return .success(.done(result))
            // A slow request commits in the unit that applies its result: attached again there.
            case .slow(let slow): return .success(.slow(slow.first(attach)))
            }
        } catch {
            return .failure(error)
        }
    }

}

/// What a request's call gave: its result, or the error it answers.
enum Outcome {
    case success(JSON)
    case failure(RPCError)

    var failed: Bool { if case .failure = self { true } else { false } }
}
