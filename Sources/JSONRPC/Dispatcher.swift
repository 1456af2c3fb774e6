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
public final class Dispatcher {
    /// The methods served.
    public let registry: MethodRegistry
    /// Counters and latencies for `kernel.info`.
    public let stats: RequestStats
    private let authenticator: Authenticator
    private let clock: Clock
    private let onInternalError: (String) -> Void
    /// The store's commit log; nil for a kernel without writes.
    public var journal: CommitJournal?
    /// Every stream's subscription to change notifications, and the stream being answered.
    public var hub = EventHub()
    /// The stream being answered.
    public var current = RequestStream() {
        didSet { hub.current = current.events }
    }
    /// The longest answer written (the line limit); a longer answer to a read is refused.
    public var maxAnswerBytes = 16 << 20
    /// Requests per user (`limits.requestsPerSecond`); nil: no limit.
    public var rateLimiter: RateLimiter?
    /// Where slow parts run; started on first use.
    public lazy var workers = WorkerPool.perCore()
    /// Answers given since the journal was last flushed that depend on writes not yet durable.
    private var pendingWrites: [PendingWrite] = []
    /// Answers to replace with -32050 at the end of the batch: their writes failed to be logged.
    private var refusedWrites: [PendingWrite] = []
    /// The last commit id the journal has flushed (made durable, or refused and undone).
    private var settledCommitID: UInt64 = 0
    /// A flush in the middle of this batch failed to sync: the kernel stops after answering it.
    private var syncFailed = false
    /// Commits being applied in slices, with the stream whose answer waits for each.
    private var applying: [(commit: UInt64, stream: RequestStream)] = []
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
            deliver(id: id, .failure(.parse(error)), commits: nil, started: s, slot: nil, into: &out)
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
            deliver(id: .null, .failure(.invalidRequest("empty batch", reason: "empty_batch")), commits: nil, started: started,
                    slot: nil, into: &out)
            return
        }
        // A batch is at most as much work as that many lines, and its answer one line within the limit.
        guard items.count <= Self.maxBatchLength, let budget = BatchBudget(limit: maxAnswerBytes, ids: items.map { envelope($0).0 }) else {
            let why = items.count > Self.maxBatchLength ? "a batch holds at most \(Self.maxBatchLength) requests"
                : "the batch's answers could not fit in one line of \(maxAnswerBytes) bytes"
            deliver(id: .null, .failure(.invalidRequest(why, reason: "batch_too_large")), commits: nil, started: started, slot: nil, into: &out)
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
        deliver(id: .null, .failure(error), commits: nil, started: monotonicMicros(), slot: nil, into: &out)
    }

    private enum Outcome {
        case success(JSON)
        case failure(RPCError)

        var failed: Bool { if case .failure = self { true } else { false } }
    }

    /// What executing a request gave: its answer, or slow work to run first.
    private enum Step {
        case answered(Outcome, commits: ClosedRange<UInt64>?)
        case slow(SlowCall<JSON>)
    }

    private static let envelopeKeys: Set<String> = ["jsonrpc", "id", "method", "params"]

    /// Whether `request` calls a method with a slow part.
    private func isSlow(_ request: JSON) -> Bool {
        guard case .object(let o) = request, case .string(let name)? = o["method"] else { return false }
        return registry.method(named: name)?.slow ?? false
    }

    /// Answers a request now, or keeps it in the stream: held while an earlier request it is ordered
    /// after is not applied, running while its slow part runs. `element` is its place in a batch.
    private func place(_ request: JSON, started: UInt64, element: Slot?, into out: inout [UInt8]) {
        let stream = current
        let (id, target) = envelope(request)
        guard case .success(let (method, params)) = target else {
            if case .failure(let error) = target { deliver(id: id, .failure(error), commits: nil, started: started, slot: element, into: &out) }
            return
        }
        var keys: Set<String>? = []
        if method.readsState && (!stream.entries.isEmpty || method.slow) {
            keys = orderingKeys(method, params)
            if stream.mustWait(keys) {
                let slot = element ?? newSlot()
                stream.entries.append(Entry(ticket: nextTicket(), id: id, slot: slot, keys: keys, started: started,
                                            state: .held(method, params)))
                return
            }
        }
        switch execute(method, params) {
        case .answered(let outcome, let commits):
            deliver(id: id, outcome, commits: commits, started: started, slot: element, into: &out)
        case .slow(let call):
            let entry = Entry(ticket: nextTicket(), id: id, slot: element ?? newSlot(), keys: keys, started: started,
                              state: .running(method, params, call))
            stream.entries.append(entry)
            run(entry, call)
        }
    }

    /// A batch element answered into the batch's array in `out` (no request of the batch waits);
    /// returns whether it wrote a response (notifications write none).
    private func answerInline(_ request: JSON, started: UInt64, room: Int, into out: inout [UInt8]) -> Bool {
        let (id, target) = envelope(request)
        let outcome: Outcome, commits: ClosedRange<UInt64>?
        switch target {
        case .failure(let error):
            (outcome, commits) = (.failure(error), nil)
        case .success where room < Self.smallestAnswer:
            // No answer but the refusal fits: the element is not run at all.
            (outcome, commits) = (.failure(BatchBudget.error(maxAnswerBytes)), nil)
        case .success(let (method, params)):
            switch execute(method, params) {
            case .answered(let o, let c): (outcome, commits) = (o, c)
            case .slow: (outcome, commits) = (.failure(.internalError), nil)  // `handle` routes slow methods to `place`
            }
        }
        stats.record(micros: monotonicMicros() - started, failed: outcome.failed)
        guard let id else { return false }
        let start = out.count
        writeResponse(id: id, outcome: outcome, read: commits == nil, room: room, into: &out)
        if let commits { pendingWrites.append(PendingWrite(range: start..<out.count, id: id, commits: commits, slot: nil)) }
        return true
    }

    /// The most requests one batch may hold (`-32600 batch_too_large` past it).
    public static let maxBatchLength = 1000

    /// Room below which a batch element is not run: no answer but its refusal fits in less.
    static let smallestAnswer = 256

    private func nextTicket() -> UInt64 {
        current.nextTicket += 1
        return current.nextTicket
    }

    /// A new top-level place for an answer that cannot be written yet, after every other one.
    private func newSlot() -> Slot {
        let slot = Slot(ordered: current.ordering == .read)
        current.slots.append(slot)
        return slot
    }

    /// The caller's user and the method's own keys; nil (ordered after everything before it) for a
    /// request of no user in read order.
    private func orderingKeys(_ method: RegisteredMethod, _ params: JSONObject) -> Set<String>? {
        var keys = Set(method.orderingKeys(params))
        if method.auth != .none, case .string(let token)? = params["auth"],
           let user = (try? authenticator.authenticate(token: token, requirement: method.auth, now: clock.now()))??.userId {
            keys.insert("user:" + user)
        }
        return keys.isEmpty && current.ordering == .read ? nil : keys
    }

    /// Calls a method, tracking the commits its answer depends on.
    ///
    /// No answer may show state that a failed flush then undoes. Writes of one read batch share one
    /// flush (group commit), so: a read first flushes the writes before it (it then sees only durable
    /// state), and the answer of a write method that commits nothing itself (an idempotent repeat, a
    /// refusal) shares the fate of the unflushed writes it saw: -32050 if they fail.
    private func execute(_ method: RegisteredMethod, _ params: JSONObject, attempts: Int = 0) -> Step {
        var slow: SlowCall<JSON>?
        var attempt = attempts
        while true {
            let (outcome, commits) = tracked(method) {
                defer { journal?.endRequest() }
                switch call(method, params) {
                case .success(.done(let result)): return .success(result)
                case .success(.slow(let call)):
                    slow = call
                    return .success(.null)
                case .failure(let error): return .failure(error)
                }
            }
            if let slow { return .slow(slow) }
            // Lost a race with another kernel: nothing was applied, and the request runs again from its
            // first read, so that no decision rests on what the other request changed.
            if case .failure(let error) = outcome, error.isConflict, attempt < Self.attempts {
                attempt += 1
                stats.recordRetry()
                continue
            }
            return .answered(outcome, commits: commits)
        }
    }

    /// Runs of a request that lost races (`RPCError.isConflict`) before its answer is the -32050 itself.
    static let attempts = 3

    private func tracked(_ method: RegisteredMethod, _ body: () -> Outcome) -> (Outcome, ClosedRange<UInt64>?) {
        if !method.mutates, let journal, journal.lastCommitID > settledCommitID { settle() }
        let before = journal?.lastCommitID ?? 0
        let outcome = body()
        let after = journal?.lastCommitID ?? 0
        if after > before { return (outcome, (settledCommitID + 1)...after) }
        if method.mutates, before > settledCommitID { return (outcome, (settledCommitID + 1)...before) }
        return (outcome, nil)
    }

    /// Runs an entry's slow part on a worker; its value comes back through the stream's `finished`.
    private func run(_ entry: Entry, _ call: SlowCall<JSON>) {
        if let keys = entry.keys { entry.keys = keys.union(call.users.map { "user:" + $0 }) }
        let (finished, wake, ticket, work) = (current.finished, current.wake, entry.ticket, call.work)
        workers.submit {
            finished.put(Finished(ticket: ticket, value: work()))
            wake()
        }
    }

    /// Applies the slow work the workers finished, then whatever was held behind it.
    private func applyFinished(wait: Bool, into out: inout [UInt8]) {
        let stream = current
        for done in stream.finished.takeAll(wait: wait) {
            guard let index = stream.entries.firstIndex(where: { $0.ticket == done.ticket }),
                  case .running(let method, let params, let call) = stream.entries[index].state else { continue }
            let entry = stream.entries[index]
            // A big unit of work committed here may be applied in slices between other users' requests.
            journal?.appliesInSlices = true
            let (outcome, commits) = tracked(method) {
                defer { journal?.endRequest() }
                do throws(RPCError) { return .success(try call.apply(done.value)) } catch { return .failure(error) }
            }
            journal?.appliesInSlices = false
            // Lost a race with another kernel: the whole request runs again, its slow part included.
            if case .failure(let error) = outcome, error.isConflict, entry.attempts < Self.attempts {
                entry.attempts += 1
                stats.recordRetry()
                switch execute(method, params, attempts: entry.attempts) {
                case .slow(let again):
                    entry.state = .running(method, params, again)
                    run(entry, again)
                case .answered(let outcome, let commits):
                    stream.entries.remove(at: index)
                    deliver(id: entry.id, outcome, commits: commits, started: entry.started, slot: entry.slot, into: &out)
                }
                continue
            }
            if let commits, let journal, !journal.isApplied(commits.upperBound) {
                // Answered (so it shares the batch's flush and its fate) but written once applied.
                deliver(id: entry.id, outcome, commits: commits, started: entry.started, slot: entry.slot, into: &out)
                entry.slot.gate = commits.upperBound
                // The request's params and its plan are a month of samples (hundreds of thousands of
                // allocations): they are freed on a worker, not on the thread every other request waits for.
                release(Garbage((entry.state, done)))
                entry.state = .applying(commit: commits.upperBound)
                stream.applying += 1
                applying.append((commits.upperBound, stream))
                continue
            }
            stream.entries.remove(at: index)
            deliver(id: entry.id, outcome, commits: commits, started: entry.started, slot: entry.slot, into: &out)
        }
        releaseApplied()
        release(into: &out)
    }

    /// Drops the last references to `garbage` on a worker thread, and gives the memory back to the
    /// system there (as after a long line: freed memory of other threads' arenas stays resident otherwise).
    private func release(_ garbage: Garbage) {
        workers.submit {
            garbage.drop()
            #if canImport(Glibc)
            _ = glibcMallocTrim(0)
            #endif
        }
    }

    /// Ends the entries of the current stream whose commits are now wholly applied (or were undone):
    /// their answers may be written, and requests held behind them run.
    private func releaseApplied() {
        let stream = current
        guard let journal, stream.applying > 0 else { return }
        stream.entries.removeAll { entry in
            guard case .applying(let commit) = entry.state, journal.isApplied(commit) else { return false }
            if journal.takeFailure(of: commit), entry.id != nil {
                entry.slot.bytes.removeAll()
                writeResponse(id: entry.slot.id, outcome: .failure(.storageUnavailable("Storage failed: the write was not applied")),
                              into: &entry.slot.bytes)
            }
            entry.slot.gate = nil
            stream.applying -= 1
            return true
        }
    }

    /// Applies the store's backlog for one slice (`backlogSliceMicros`), and wakes the streams whose
    /// answers it finished. The servers call it between rounds of requests; returns whether any is left.
    public func applyBacklog() -> Bool {
        guard let journal, !applying.isEmpty else { return false }
        let more = journal.applyBacklog(budgetMicros: Self.backlogSliceMicros)
        applying.removeAll { commit, stream in
            guard journal.isApplied(commit) else { return false }
            stream.wake()
            return true
        }
        return more
    }

    /// Executes the held requests nothing before them holds up any more, in read order.
    private func release(into out: inout [UInt8]) {
        let stream = current
        var i = 0
        while i < stream.entries.count {
            let entry = stream.entries[i]
            guard case .held(let method, let params) = entry.state, !stream.mustWait(entry.keys, before: i) else {
                i += 1
                continue
            }
            switch execute(method, params) {
            case .answered(let outcome, let commits):
                stream.entries.remove(at: i)
                deliver(id: entry.id, outcome, commits: commits, started: entry.started, slot: entry.slot, into: &out)
            case .slow(let call):
                entry.state = .running(method, params, call)
                run(entry, call)
                i += 1
            }
        }
    }

    /// Records an answer and writes it: into its slot, into a new slot behind earlier unwritten answers
    /// (read order), or straight to `out`.
    private func deliver(id: JSON?, _ outcome: Outcome, commits: ClosedRange<UInt64>?, started: UInt64, slot: Slot?,
                         into out: inout [UInt8]) {
        stats.record(micros: monotonicMicros() - started, failed: outcome.failed)
        guard let id else {
            slot?.done = true
            return
        }
        if let slot = slot ?? (current.ordering == .read && !current.slots.isEmpty ? newSlot() : nil) {
            slot.bytes.removeAll()
            writeResponse(id: id, outcome: outcome, read: commits == nil, into: &slot.bytes)
            (slot.id, slot.answersWrite) = (id, commits != nil)
            slot.done = true
            if let commits { pendingWrites.append(PendingWrite(range: 0..<slot.bytes.count, id: id, commits: commits, slot: slot)) }
            return
        }
        let start = out.count
        writeResponse(id: id, outcome: outcome, read: commits == nil, into: &out)
        if let commits { pendingWrites.append(PendingWrite(range: start..<out.count, id: id, commits: commits, slot: nil)) }
        out.append(UInt8(ascii: "\n"))
    }

    /// Flushes the journal; answers that depend on writes that failed are marked for -32050.
    private func settle() {
        guard let journal else { return }
        let (failed, fatal) = journal.flushCommits()
        settledCommitID = journal.lastCommitID
        if fatal { syncFailed = true }
        if fatal || !failed.isEmpty {
            refusedWrites += pendingWrites.filter { w in fatal || failed.contains { $0.overlaps(w.commits) } }
        }
        pendingWrites.removeAll(keepingCapacity: true)
    }

    /// Ends a batch of the current stream: applies the slow work its workers finished (waiting, while
    /// more than `waitAbove` of its requests are outstanding), makes the writes durable before their
    /// responses go out, and moves every answer that may be written to `out`. Answers that depend on
    /// writes that failed are replaced by -32050 (those changes were undone). Returns true when syncing
    /// failed and the kernel must stop after writing `out`.
    public func endBatch(_ out: inout [UInt8], waitAbove: Int? = nil) -> Bool {
        applyFinished(wait: false, into: &out)
        if let waitAbove {
            while current.entries.count > waitAbove {
                if let journal, current.applying > 0 {
                    // Waiting for this stream's commits being applied: apply them now, after ending the
                    // batch (a detached commit on PostgreSQL waits for the locks the batch holds).
                    settle()
                    while journal.applyBacklog(budgetMicros: .max) {}
                    applyFinished(wait: false, into: &out)
                } else {
                    applyFinished(wait: true, into: &out)
                }
            }
        }
        settle()
        let fatal = syncFailed
        syncFailed = false
        defer { announceChanges(&out) }
        defer { current.flushReady(into: &out, limit: maxAnswerBytes) }
        defer { refusedWrites.removeAll(keepingCapacity: true) }
        guard !refusedWrites.isEmpty else { return fatal }
        let error = RPCError.storageUnavailable(fatal
            ? "Storage failed: syncing the log failed, the kernel is stopping; the write may not be durable"
            : "Storage failed: the write was not applied")
        // Ranges in `out` were recorded in output order and nothing before them has moved since.
        var rebuilt: [UInt8] = []
        rebuilt.reserveCapacity(out.count)
        var cursor = 0
        for w in refusedWrites {
            guard let slot = w.slot else {
                rebuilt.append(contentsOf: out[cursor..<w.range.lowerBound])
                writeResponse(id: w.id, outcome: .failure(error), into: &rebuilt)
                cursor = w.range.upperBound
                continue
            }
            slot.bytes.removeAll()
            writeResponse(id: w.id, outcome: .failure(error), into: &slot.bytes)
        }
        rebuilt.append(contentsOf: out[cursor...])
        out = rebuilt
        return fatal
    }

    /// Appends an `events.changed` line for each change made durable in this batch that the host
    /// subscribed to: after the batch's responses (never inside a batch's array), in commit order.
    private func announceChanges(_ out: inout [UInt8]) {
        guard let changes = journal?.takeChanges(), !changes.isEmpty else { return }
        hub.announce(changes, at: clock.now().seconds, into: &out)
    }

    /// The response id (nil for a notification), and the method and params to call or why not.
    private func envelope(_ request: JSON) -> (JSON?, Result<(RegisteredMethod, JSONObject), RPCError>) {
        guard case .object(let envelope) = request else {
            return (.null, .failure(.invalidRequest("a request must be an object")))
        }
        let rawID = envelope["id"]
        var responseID: JSON? = nil
        if let rawID {
            switch rawID {
            // An id the kernel could not echo exactly: NaN, an infinity, an integer beyond 64 bits.
            case .double(let d) where !d.isFinite || (d.rounded() == d && d.magnitude >= 0x1p63):
                return (.null, .failure(.invalidRequest("id must be a string, null, a 64-bit integer or a finite number")))
            case .string, .int, .double, .null: responseID = rawID
            default: return (.null, .failure(.invalidRequest("id must be a string, a number or null")))
            }
        }
        let replyID = responseID ?? .null
        guard envelope["jsonrpc"] == .string("2.0") else {
            return (replyID, .failure(.invalidRequest("jsonrpc must be \"2.0\"")))
        }
        guard case .string(let name)? = envelope["method"] else {
            return (replyID, .failure(.invalidRequest("method must be a string")))
        }
        if let extra = envelope.members.first(where: { !Self.envelopeKeys.contains($0.key) })?.key {
            return (replyID, .failure(.invalidRequest("unknown member \"\(extra)\" in the request")))
        }
        var params = JSONObject()
        switch envelope["params"] {
        case nil: break
        case .object(let o)?: params = o
        case .array(let a)? where a.isEmpty: break
        case .array?:
            return (responseID, .failure(.invalidParams("params", reason: "wrong_type",
                                                       "params must be an object: methods take named params")))
        default:
            return (replyID, .failure(.invalidRequest("params must be an object or an array")))
        }
        guard let method = registry.method(named: name) else {
            return (responseID, .failure(.methodNotFound(name)))
        }
        return (responseID, .success((method, params)))
    }

    private func call(_ method: RegisteredMethod, _ params: JSONObject) -> Result<RegisteredMethod.Invocation, RPCError> {
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

    /// Writes a response. The answer to a `read` (a request that wrote nothing) that comes out longer
    /// than `maxAnswerBytes` is replaced by -32602 `answer_too_large`: a host reading lines up to the
    /// same limit could not take it, and a socket would be cut mid-answer. Methods that can answer
    /// that much page by bytes or name the param to narrow first; this is the net below them.
    private func writeResponse(id: JSON, outcome: Outcome, read: Bool = false, room: Int? = nil, into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: #"{"jsonrpc":"2.0","id":"#.utf8)
        id.write(to: &out)
        switch outcome {
        case .success(let result):
            out.append(contentsOf: #","result":"#.utf8)
            result.write(to: &out)
            if read, let room, out.count - start > room {
                // A batch element past its share of the line: the refusal the batch kept room for.
                out.removeSubrange(start...)
                writeResponse(id: id, outcome: .failure(BatchBudget.error(maxAnswerBytes)), into: &out)
                return
            }
            if read && out.count - start > maxAnswerBytes {
                out.removeSubrange(start...)
                let error = RPCError.invalidParams("params", reason: "answer_too_large",
                                                   "the answer would be longer than \(maxAnswerBytes) bytes; ask for less (a narrower range, a smaller limit)")
                writeResponse(id: id, outcome: .failure(error), into: &out)
                return
            }
        case .failure(let error):
            if error.code == RPCError.internalError.code { onInternalError(error.logDetail ?? error.message) }
            out.append(contentsOf: #","error":"#.utf8)
            error.json.write(to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }
}

/// Values handed to a worker only to be freed there; nothing reads them.
private final class Garbage: @unchecked Sendable {
    private var value: Any?
    init(_ value: Any) { self.value = value }
    func drop() { value = nil }
}
