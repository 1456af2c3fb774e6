import Chrono
import JSON
import JSONParsing

/// A line of input after parsing: what the reading thread hands to the dispatcher.
public enum ParsedLine: Sendable {
    /// A JSON value, and when its parsing started (request latency counts from there).
    case value(JSON, started: UInt64)
    /// Not JSON.
    case parseError(JSONParseError, started: UInt64)
    /// A line longer than `limit` bytes, skipped.
    case tooLong(limit: Int)
}

/// Turns request lines into response lines: parses the envelope, finds the method, authenticates,
/// decodes params, calls the handler and writes the response. Single-threaded by design: responses
/// come out in the order requests went in.
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
    /// Answers given since the journal was last flushed that depend on writes not yet durable.
    private var pendingWrites: [PendingWrite] = []
    /// Answers to replace with -32050 at the end of the batch: their writes failed to be logged.
    private var refusedWrites: [PendingWrite] = []
    /// The last commit id the journal has flushed (made durable, or refused and undone).
    private var settledCommitID: UInt64 = 0
    /// A flush in the middle of this batch failed to sync: the kernel stops after answering it.
    private var syncFailed = false

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
            return .parseError(error, started: started)
        }
    }

    /// Handles one line (without its newline) and appends the response line, if any, to `out`.
    public func handleLine(_ line: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        handle(Self.parse(line), into: &out)
    }

    /// Answers one parsed line, appending the response line, if any, to `out`.
    public func handle(_ line: ParsedLine, into out: inout [UInt8]) {
        let parsed: JSON, started: UInt64
        switch line {
        case .value(let value, let s):
            (parsed, started) = (value, s)
        case .parseError(let error, let s):
            writeResponse(id: .null, outcome: .failure(.parse(error)), into: &out)
            out.append(UInt8(ascii: "\n"))
            stats.record(micros: monotonicMicros() - s, failed: true)
            return
        case .tooLong(let limit):
            rejectOversizedLine(limit: limit, into: &out)
            return
        }
        guard case .array(let items) = parsed else {
            if handleRequest(parsed, started: started, into: &out) { out.append(UInt8(ascii: "\n")) }
            return
        }
        guard !items.isEmpty else {
            writeResponse(id: .null, outcome: .failure(.invalidRequest("empty batch", reason: "empty_batch")), into: &out)
            out.append(UInt8(ascii: "\n"))
            stats.record(micros: monotonicMicros() - started, failed: true)
            return
        }
        let mark = out.count
        out.append(UInt8(ascii: "["))
        var wroteAny = false
        for (i, item) in items.enumerated() {
            let commaAt = out.count
            if wroteAny { out.append(UInt8(ascii: ",")) }
            if handleRequest(item, started: i == 0 ? started : monotonicMicros(), into: &out) {
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
        writeResponse(id: .null, outcome: .failure(error), into: &out)
        out.append(UInt8(ascii: "\n"))
        stats.record(micros: 0, failed: true)
    }

    private enum Outcome {
        case success(JSON)
        case failure(RPCError)
    }

    private static let envelopeKeys: Set<String> = ["jsonrpc", "id", "method", "params"]

    /// Handles one request object; returns whether a response was written (notifications write none).
    ///
    /// No answer may show state that a failed flush then undoes. Writes of one read batch share one
    /// flush (group commit), so: a read first flushes the writes before it (it then sees only durable
    /// state), and the answer of a write method that commits nothing itself (an idempotent repeat, a
    /// refusal) shares the fate of the unflushed writes it saw: -32050 if they fail.
    private func handleRequest(_ request: JSON, started: UInt64, into out: inout [UInt8]) -> Bool {
        let (id, target) = envelope(request)
        let outcome: Outcome
        var commitsSeen: ClosedRange<UInt64>?
        switch target {
        case .failure(let error):
            outcome = .failure(error)
        case .success(let (method, params)):
            if !method.mutates, let journal, journal.lastCommitID > settledCommitID { settle() }
            let before = journal?.lastCommitID ?? 0
            outcome = call(method, params)
            let after = journal?.lastCommitID ?? 0
            if after > before {
                commitsSeen = (settledCommitID + 1)...after
            } else if method.mutates, before > settledCommitID {
                commitsSeen = (settledCommitID + 1)...before
            }
        }
        stats.record(micros: monotonicMicros() - started, failed: { if case .failure = outcome { true } else { false } }())
        guard let id else { return false }
        let start = out.count
        writeResponse(id: id, outcome: outcome, into: &out)
        if let commitsSeen { pendingWrites.append(PendingWrite(range: start..<out.count, id: id, commits: commitsSeen)) }
        return true
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

    /// Makes the batch's writes durable before their responses go out. Answers that depend on writes
    /// that failed are replaced by -32050 in `out` (those changes were undone). Returns true when syncing
    /// failed and the kernel must stop after writing `out`.
    public func endBatch(_ out: inout [UInt8]) -> Bool {
        settle()
        let fatal = syncFailed
        syncFailed = false
        defer { announceChanges(&out) }
        defer { refusedWrites.removeAll(keepingCapacity: true) }
        guard !refusedWrites.isEmpty else { return fatal }
        let error = RPCError.storageUnavailable(fatal
            ? "Storage failed: syncing the log failed, the kernel is stopping; the write may not be durable"
            : "Storage failed: the write was not applied")
        // Ranges were recorded in output order and nothing before them has moved since.
        var rebuilt: [UInt8] = []
        rebuilt.reserveCapacity(out.count)
        var cursor = 0
        for w in refusedWrites {
            rebuilt.append(contentsOf: out[cursor..<w.range.lowerBound])
            writeResponse(id: w.id, outcome: .failure(error), into: &rebuilt)
            cursor = w.range.upperBound
        }
        rebuilt.append(contentsOf: out[cursor...])
        out = rebuilt
        return fatal
    }

    /// Appends an `events.changed` line for each change made durable in this batch that the host
    /// subscribed to: after the batch's responses (never inside a batch's array), in commit order.
    private func announceChanges(_ out: inout [UInt8]) {
        guard let changes = journal?.takeChanges(), !changes.isEmpty else { return }
        hub.announce(changes, into: &out)
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

    private func call(_ method: RegisteredMethod, _ params: JSONObject) -> Outcome {
        var reader = ObjectReader(params, path: "params")
        let token: String?
        do {
            token = try reader.optional("auth", as: String.self)
        } catch {
            return .failure(.invalidParams(error))
        }
        let now = clock.now()
        do {
            let identity = try authenticator.authenticate(token: token, requirement: method.auth, now: now)
            let context = CallContext(identity: identity, now: now, registry: registry)
            return .success(try method.invoke(&reader, context))
        } catch {
            return .failure(error)
        }
    }

    private func writeResponse(id: JSON, outcome: Outcome, into out: inout [UInt8]) {
        out.append(contentsOf: #"{"jsonrpc":"2.0","id":"#.utf8)
        id.write(to: &out)
        switch outcome {
        case .success(let result):
            out.append(contentsOf: #","result":"#.utf8)
            result.write(to: &out)
        case .failure(let error):
            if error.code == RPCError.internalError.code { onInternalError(error.message) }
            out.append(contentsOf: #","error":"#.utf8)
            error.json.write(to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }
}
