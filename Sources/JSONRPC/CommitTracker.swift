import Chrono
/// What the dispatcher needs from the store to acknowledge writes only once they are durable:
/// a counter of commits, and a flush that reports which commits failed. Keeps JSONRPC free of Store.
public protocol CommitTracker: AnyObject {
    /// Id of the last commit made; unchanged by a call that wrote nothing.
    var lastCommitID: UInt64 { get }
    /// Makes queued commits durable; reports commits that failed (and were undone), commits whose outcome
    /// cannot be learnt (they may have been applied), and whether syncing failed.
    func flushCommits() -> (failed: [ClosedRange<UInt64>], unknown: [ClosedRange<UInt64>], fatal: Bool)
    /// Changes made durable since the last call, in commit order (for `events.changed`).
    func takeChanges() -> [ChangeNotice]
    /// Begins a request's unit of work (each part of a slow one: its start, applying its result). With
    /// `mayFinishLater` (only a slow request's result, whose answer is then held until `isApplied`), a
    /// big commit may finish after `commit` returns: in slices (`applyBacklog`) on the data dir,
    /// detached on PostgreSQL.
    func beginUnit(mayFinishLater: Bool)
    /// Ends the unit begun last (a store that opened a transaction for its reads ends it), and returns
    /// the commits it made, nil when none.
    func endUnit() -> ClosedRange<UInt64>?
    /// Applies units committed but not yet wholly applied, for about `budgetMicros`; returns whether any
    /// remain. A store that applies every commit at once has none.
    func applyBacklog(budgetMicros: UInt64) -> Bool
    /// Whether commit `id` is wholly applied (or was undone, or failed).
    func isApplied(_ commit: UInt64) -> Bool
    /// Whether commit `id`, applied after its batch's flush (PostgreSQL's detached commits), was not
    /// made or may not have been: its held answer becomes -32050 with that reason. Told once; nil when
    /// it was made.
    func takeFailure(of commit: UInt64) -> CommitFailure?
    /// Runs `declare`, in which the batch's requests name the rows they will read, and fetches them all
    /// together, locked for the batch: one round trip for the batch where each request took its own.
    /// `declare` returns whether the batch only reads and named all it reads (then nothing need be
    /// locked). A store whose reads cost no round trip does nothing (and never runs `declare`).
    func readAhead(_ declare: () -> Bool)
}

extension CommitTracker {
    public func readAhead(_ declare: () -> Bool) {}
}

/// What became of a commit that was not made for sure.
public enum CommitFailure: Sendable {
    /// Nothing of it was applied.
    case notApplied
    /// It may have landed: the kernel could not learn (`data.reason: "outcome_unknown"`).
    case outcomeUnknown
}

/// A committed change, as an `events.changed` notification announces it.
public struct ChangeNotice: Sendable {
    public let userId: String
    public let entity: String
    public let id: String
    public let op: String
    /// The change's feed position in its user's feed (`seq` on the wire).
    public let position: UInt64
    /// RFC 3339.
    public let at: String
    /// The number of this kernel's commit that made it; nil when another kernel made it.
    public let commit: UInt64?

    public init(userId: String, entity: String, id: String, op: String, position: UInt64, at: String, commit: UInt64?) {
        self.userId = userId
        self.entity = entity
        self.id = id
        self.op = op
        self.position = position
        self.at = at
        self.commit = commit
    }

    /// The notification line (without its newline).
    func write(to out: inout [UInt8]) {
        let params: JSON = ["userId": .string(userId), "entity": .string(entity), "id": .string(id), "op": .string(op),
                            "seq": .int(Int64(position)), "at": .string(at)]
        let line: JSON = ["jsonrpc": "2.0", "method": "events.changed", "params": params]
        line.write(to: &out)
    }
}

/// Whether the host of a stream asked for change notifications (`events.subscribe`), and for which
/// topics: entity names, or domain prefixes such as `health` or `screentime`. Used only by whoever
/// holds the dispatcher (one thread at a time).
public final class EventSubscription: @unchecked Sendable {
    /// nil: not subscribed; empty: every change.
    public private(set) var topics: [String]?
    /// This kernel's commits up to this number were made before the subscription. (Not a feed position:
    /// those are per user on a shared database, and the busiest user's would hide everyone else's.)
    private var afterCommit: UInt64 = 0
    /// When the subscription ends: its service token's `exp` (seconds since 1970). The host renews it
    /// with `events.renew` and a fresh token before then; a token that has ended grants nothing more.
    private var endsAt: Int64 = .max
    /// When `events.ending` is due for the current `endsAt`, and whether it was written.
    private var endingAt: Int64 = .max
    private var endingSent = false
    /// Notification lines for changes another stream made, waiting for this stream to write them.
    private var pending: [UInt8] = []
    /// Tells the stream's server that `pending` has lines (called with the dispatcher held), or that the
    /// subscription's end is near (from the alarm's thread): the server then drains this stream. Set
    /// once, when the stream's server takes the connection, before anything can call it.
    public var wake: @Sendable () -> Void = {}
    /// Wakes this stream before and at its end (`EventHub.alarm`); nil: no end is announced.
    var alarm: SubscriptionAlarm?

    /// How long before its end a subscription says so (`events.ending`): five minutes, or half the
    /// token's remaining life when that is shorter, so a host renewing with short-lived tokens is told
    /// once per token, never at once again after each renewal.
    public static let endingNoticeSeconds: Int64 = 300

    public init() {}

    /// Subscribes to `topics` (empty: everything) for changes of this kernel's commits after number
    /// `afterCommit`, and every change of another kernel heard from now on.
    public func subscribe(_ topics: [String], afterCommit: UInt64, endsAt: Int64?, now nowSeconds: Int64) {
        self.topics = topics
        self.afterCommit = afterCommit
        renew(endsAt: endsAt, now: nowSeconds)
    }

    /// Moves the subscription's end to a fresh token's `exp`; false when the stream has no subscription.
    @discardableResult
    public func renew(endsAt: Int64?, now nowSeconds: Int64) -> Bool {
        guard topics != nil else { return false }
        self.endsAt = endsAt ?? .max
        endingSent = false
        endingAt = endsAt.map { max($0 - Self.endingNoticeSeconds, nowSeconds + ($0 - nowSeconds) / 2) } ?? .max
        if let endsAt, let alarm {
            alarm.schedule(self, atMs: endingAt * 1000)
            alarm.schedule(self, atMs: (endsAt + 1) * 1000)
        }
        return true
    }

    /// When the subscription ends, seconds since 1970; nil when it does not.
    public var endsAtSeconds: Int64? { topics == nil || endsAt == .max ? nil : endsAt }

    /// Ends the subscription once its token has expired, saying so (`events.ended`) and logging it; says
    /// `events.ending` once when it is due (`endingNoticeSeconds`). True while it lasts.
    func lasts(at nowSeconds: Int64) -> Bool {
        guard topics != nil else { return false }
        guard nowSeconds <= endsAt else {
            unsubscribe()
            notice("events.ended", JSONObject([("reason", "token_expired"), ("endedAt", .string(Timestamp(milliseconds: endsAt * 1000).description))]))
            onEnded()
            return false
        }
        if !endingSent, nowSeconds >= endingAt {
            endingSent = true
            notice("events.ending", JSONObject([("endsAt", .string(Timestamp(milliseconds: endsAt * 1000).description)),
                                                ("secondsLeft", .int(endsAt - nowSeconds))]))
        }
        return true
    }

    /// Told when a subscription ends at its token's expiry (the kernel logs it).
    public var onEnded: () -> Void = {}

    /// A lifecycle notification for this stream, written with its next lines.
    private func notice(_ method: String, _ params: JSONObject) {
        let line: JSON = ["jsonrpc": "2.0", "method": .string(method), "params": .object(params)]
        line.write(to: &pending)
        pending.append(UInt8(ascii: "\n"))
    }

    /// The alarm's thread: the end is near or here; the stream's server drains it (`drain`), which says so.
    func alarmFired() { wake() }

    public func unsubscribe() {
        topics = nil
        pending.removeAll()
    }

    func wants(_ change: ChangeNotice) -> Bool {
        guard let topics, (change.commit ?? .max) > afterCommit else { return false }
        return topics.isEmpty || topics.contains { change.entity == $0 || change.entity.hasPrefix($0 + ".") }
    }

    /// Appends the lines of the changes this stream wants to `out`; returns whether it added any.
    func write(_ changes: [ChangeNotice], to out: inout [UInt8]) -> Bool {
        let before = out.count
        for change in changes where wants(change) {
            change.write(to: &out)
            out.append(UInt8(ascii: "\n"))
        }
        return out.count > before
    }

    /// Moves the waiting notification lines to `out`, after checking the subscription's end.
    func drain(into out: inout [UInt8], nowSeconds: Int64) {
        _ = lasts(at: nowSeconds)
        guard !pending.isEmpty else { return }
        out.append(contentsOf: pending)
        pending.removeAll(keepingCapacity: true)
    }

    func queue(_ changes: [ChangeNotice]) {
        if write(changes, to: &pending) { wake() }
    }
}

/// The subscriptions of every stream a kernel serves (stdio and each socket connection). A change is
/// announced to every subscribed stream: to the one being answered right after its batch's responses,
/// to the others through their queue.
public final class EventHub: @unchecked Sendable {
    private var streams: [EventSubscription] = []

    public init() {}

    /// Whether any stream wants changes (the store collects them only then).
    public var anySubscribed: Bool { streams.contains { $0.topics != nil } }

    public func add(_ stream: EventSubscription) {
        stream.alarm = alarm
        stream.onEnded = { [weak self] in self?.onEnded() }
        streams.append(stream)
    }

    /// Wakes streams before and at their subscriptions' ends; set once, before any stream is added.
    public var alarm: SubscriptionAlarm?

    /// Told when a stream's subscription ended at its token's expiry.
    public var onEnded: () -> Void = {}

    /// Told whether any stream still wants changes after one goes away.
    public var onSubscribersChanged: (Bool) -> Void = { _ in }

    public func remove(_ stream: EventSubscription) {
        streams.removeAll { $0 === stream }
        if stream.topics != nil { onSubscribersChanged(anySubscribed) }
    }

    /// Announces `changes`: into `out` for `answering`, the stream whose batch just ended.
    func announce(_ changes: [ChangeNotice], at nowSeconds: Int64, answering: EventSubscription, into out: inout [UInt8]) {
        for stream in streams {
            guard stream.lasts(at: nowSeconds) else {
                if stream !== answering { stream.wake() }  // its events.ended waits in its queue
                continue
            }
            if stream === answering { _ = stream.write(changes, to: &out) } else { stream.queue(changes) }
        }
    }
}

/// A write answered in the current batch, kept until its commit is durable.
/// What an answer depends on: commits that must be durable before it is written, and whether they are
/// the request's own (it answers a write) or writes it showed (a read, or a write that committed
/// nothing, after writes of the same batch). A read's method and params, to run it again when those
/// writes are refused: its answer is then what it would have been without them.
struct Dependency {
    let commits: ClosedRange<UInt64>
    let wrote: Bool
    /// Whether `commits` are the request's own (its unit made them), not writes of others it may have shown.
    var own = false
    var rerun: (method: RegisteredMethod, params: JSONObject)?
}

struct PendingWrite {
    /// Where its response sits: in the output buffer, or in `slot`.
    let range: Range<Int>
    let id: JSON
    let depends: Dependency
    let slot: Slot?
    /// The stream whose output holds it (`range` counts in that stream's output only).
    let stream: ObjectIdentifier
}

import JSON
