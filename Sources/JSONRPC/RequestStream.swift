import JSON
import Threads

/// The order a stream's responses are written in.
public enum ResponseOrdering: String, Sendable, CaseIterable {
    /// In the order the requests were read (what shell pipelines and `jq` rely on).
    case read
    /// Each as soon as its request is done and durable (for hosts that match answers by id).
    case completion
}

/// One stream's state in the dispatcher (stdio, or one socket connection): its ordering, its event
/// subscription, and its requests that are not answered yet because they, or requests of the same user
/// before them, wait for slow work. Used with the dispatcher held, except `finished` and `wake`, which
/// worker threads use.
public final class RequestStream: @unchecked Sendable {
    /// How responses are ordered; `kernel.setOrdering` changes it from the next request on.
    public var ordering: ResponseOrdering
    /// This stream's subscription to change notifications.
    public let events = EventSubscription()
    /// Slow work done by the workers, waiting for the serving thread to apply it.
    let finished = Inbox<Finished>()
    /// Tells the stream's server why to answer it again: slow work finished (called on a worker thread),
    /// or a commit its answers or held requests waited for is applied.
    public var wake: @Sendable (ServingWake) -> Void = { _ in }
    /// Answers not yet written, in read order: the ones in flight, and in read order the ones behind them.
    var slots: [Slot] = []
    /// Requests not yet applied, in read order: running slow work, or held behind earlier ones.
    var entries: [Entry] = []
    /// Entries answered whose commits are still being applied in slices.
    var applying = 0
    private var lastTicket: UInt64 = 0

    public init(ordering: ResponseOrdering = .read) {
        self.ordering = ordering
    }

    /// The next request's ticket (how finished slow work finds its request).
    func nextTicket() -> UInt64 {
        lastTicket += 1
        return lastTicket
    }

    /// A new top-level place for an answer that cannot be written yet, after every other one.
    func newSlot() -> Slot {
        let slot = Slot(ordered: ordering == .read)
        slots.append(slot)
        return slot
    }

    /// The stream is gone: its requests not yet answered are dropped (nobody reads their answers). A
    /// request's context refers to its stream, so until then a stream and each unanswered request (a
    /// month of samples and its plan) hold each other: a host that hung up during slow work leaked both.
    func end() {
        entries.removeAll()
        slots.removeAll()
        applying = 0
        _ = finished.takeAll(wait: false)
    }

    /// Requests read but not yet applied (slow work running, or waiting behind it).
    public var outstanding: Int { entries.count }

    /// Whether every request read is answered and written.
    public var isSettled: Bool { entries.isEmpty && slots.isEmpty && finished.isEmpty }

    /// Whether a request with `keys` read now must wait for earlier entries (nil keys: it waits for all).
    func mustWait(_ keys: Set<String>?, before end: Int? = nil) -> Bool {
        for entry in entries[..<(end ?? entries.count)] {
            guard let theirs = entry.keys, let keys else { return true }
            if !theirs.isDisjoint(with: keys) { return true }
        }
        return false
    }

    /// Answers ready to write, moved to `out`: a completion-ordered one when done, a read-ordered one
    /// when done and everything read before it is written.
    func flushReady(into out: inout [UInt8], limit: Int) {
        guard !slots.isEmpty else { return }
        var blocked = false
        var kept: [Slot] = []
        for slot in slots {
            if slot.isDone && (!slot.ordered || !blocked) {
                slot.write(to: &out, limit: limit)
            } else {
                blocked = true
                kept.append(slot)
            }
        }
        slots = kept
    }
}

/// What a worker hands back: the value of one request's slow part.
struct Finished: Sendable {
    let ticket: UInt64
    let value: any Sendable
}

/// A place for one answer (or a batch's array) that cannot be written yet.
final class Slot {
    /// The response line's bytes without its newline; empty for a notification.
    var bytes: [UInt8] = []
    var done = false
    /// Written only after every answer read before it.
    let ordered: Bool
    /// A batch's elements; nil for a single request.
    var elements: [Slot]?
    /// The answer's id, and whether it answers a write (whose answer is never replaced: it applied).
    var id: JSON = .null
    var answersWrite = false
    /// The commit this answer waits for while it is applied in slices (`Dispatcher.applyBacklog`).
    var gate: UInt64?

    init(ordered: Bool, elements: [Slot]? = nil) {
        self.ordered = ordered
        self.elements = elements
    }

    var isDone: Bool { elements.map { $0.allSatisfy(\.isDone) } ?? (done && gate == nil) }

    /// The line (a batch as one array of its elements' answers; nothing when none has one). A batch's
    /// line stays within `limit` bytes: an answer to a read that would take it past is replaced by
    /// -32602 `answer_too_large` (a write's answer stays: the write applied, and its answer is small).
    func write(to out: inout [UInt8], limit: Int) {
        guard let elements else {
            if !bytes.isEmpty {
                out.append(contentsOf: bytes)
                out.append(UInt8(ascii: "\n"))
            }
            return
        }
        let answers = elements.filter { !$0.bytes.isEmpty }
        guard !answers.isEmpty else { return }
        let mark = out.count
        let budget = BatchBudget(limit: limit, ids: answers.map(\.id))
        out.append(UInt8(ascii: "["))
        for (i, answer) in answers.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            if let budget, !answer.answersWrite, answer.bytes.count > budget.room(for: i, used: out.count - mark) {
                (["jsonrpc": "2.0", "id": answer.id, "error": BatchBudget.error(limit).json] as JSON).write(to: &out)
            } else {
                out.append(contentsOf: answer.bytes)
            }
        }
        out.append(contentsOf: "]\n".utf8)
    }
}

/// A request not yet applied.
final class Entry {
    enum State {
        /// Waiting for earlier requests with a shared key.
        case held(RegisteredMethod, JSONObject)
        /// Its slow part runs on a worker.
        case running(RegisteredMethod, JSONObject, SlowCall<JSON>)
        /// Answered and durable, its commit still being applied in slices: later requests with a shared
        /// key wait, and the answer is written once the commit is applied.
        case applying(commit: UInt64)
    }

    let ticket: UInt64
    let id: JSON?
    let slot: Slot
    /// What orders it against the stream's other requests; nil: everything.
    var keys: Set<String>?
    let started: UInt64
    var state: State
    /// Runs of it that lost a race with another kernel (see `Dispatcher.attempts`).
    var attempts = 0

    init(ticket: UInt64, id: JSON?, slot: Slot, keys: Set<String>?, started: UInt64, state: State) {
        self.ticket = ticket
        self.id = id
        self.slot = slot
        self.keys = keys
        self.started = started
        self.state = state
    }
}
