import Chrono
import JSON
import Threads
#if SIMULATION
import Mutants
#endif

/// Answers to writes wait until the writes are durable: what each answer depends on, the flush at the
/// end of each batch, and the answers a failed flush refuses. The one owner of that state; used by
/// whoever holds the dispatcher.
final class Acknowledgement {
    /// The store's commit log; nil for a kernel without writes.
    var journal: CommitTracker?
    /// Answers given since the journal was last flushed that depend on writes not yet durable.
    private var pending: [PendingWrite] = []
    /// Answers to replace at their stream's end of batch: their writes failed to be logged, or may not
    /// have been applied.
    private var refused: [(PendingWrite, RPCError)] = []
    /// The last commit id the journal has flushed (made durable, or refused and undone).
    private var settledCommitID: UInt64 = 0
    /// A flush in the middle of this batch failed to sync: the kernel stops after answering it.
    private var syncFailed = false

    /// Runs a request's call (`body`) as one unit of work of the store, and returns its outcome and what
    /// its answer depends on, nil for nothing.
    ///
    /// No answer may show state that a failed flush then undoes, and none may be refused for a write
    /// that is not its own. So a request that committed depends on its own commits only: a store reports
    /// every commit a failure undid (the batch's transaction on PostgreSQL, every queued record on the
    /// data dir), and a commit of its own (PostgreSQL's detached commit) has its own fate, whatever
    /// became of the batch around it. One that committed nothing (a read, an idempotent repeat, a
    /// refusal) may show writes of the batch not yet durable: it shares their fate, refused -32050 if
    /// they fail, instead of forcing them durable first (which cost a flush, on PostgreSQL a COMMIT,
    /// per read that followed a write in one batch).
    func tracked(mutates: Bool, mayFinishLater: Bool = false, _ body: () -> Outcome) -> (Outcome, Dependency?) {
        guard let journal else { return (body(), nil) }
        journal.beginUnit(mayFinishLater: mayFinishLater)
        let outcome = body()
        if let own = journal.endUnit() { return (outcome, Dependency(commits: own, wrote: true, own: true)) }
        let last = journal.lastCommitID
        return (outcome, last > settledCommitID ? Dependency(commits: (settledCommitID + 1)...last, wrote: mutates) : nil)
    }

    /// An answer written that waits for the flush of what it depends on.
    func hold(_ answer: PendingWrite) {
        pending.append(answer)
    }

    /// Flushes the journal; answers that depend on writes that failed are marked for -32050.
    func settle() {
        guard let journal else { return }
        let (failed, unknown, fatal) = journal.flushCommits()
        settledCommitID = journal.lastCommitID
        if fatal { syncFailed = true }
        if fatal || !failed.isEmpty || !unknown.isEmpty {
            for w in pending {
                let commits = w.depends.commits
                var isFailed = failed.contains { $0.overlaps(commits) }
                #if SIMULATION
                if Mutant.failureUnsaid.isOn { isFailed = false }
                #endif
                let error = fatal ? Self.syncFailedError : isFailed ? Self.notAppliedError
                    : unknown.contains { $0.overlaps(commits) } ? Self.outcomeUnknownError : nil
                // A read (or a write that committed nothing) only showed those writes: its own words.
                if let error { refused.append((w, w.depends.wrote ? error : Self.undoneError)) }
            }
        }
        pending.removeAll(keepingCapacity: true)
    }

    /// Whether a flush since the last call failed to sync (the kernel stops after this batch).
    func takeSyncFailure() -> Bool {
        defer { syncFailed = false }
        return syncFailed
    }

    /// The refusals to write at `stream`'s end of batch: answers in its output, or in slots (which any
    /// stream's end of batch may rewrite: they are not written yet). A range counts in its own stream's
    /// output only, so the others wait for their stream's end of batch.
    func takeRefusals(of stream: RequestStream) -> [(PendingWrite, RPCError)] {
        guard !refused.isEmpty else { return [] }
        let mine = ObjectIdentifier(stream)
        let here = refused.filter { $0.0.slot != nil || $0.0.stream == mine }
        refused.removeAll { $0.0.slot != nil || $0.0.stream == mine }
        return here
    }

    /// Forgets the refusals still waiting for `stream`'s end of batch: the stream is gone.
    func forget(_ stream: RequestStream) {
        let gone = ObjectIdentifier(stream)
        refused.removeAll { $0.0.stream == gone }
    }

    static let syncFailedError = RPCError.storageUnavailable(
        "Storage failed: syncing the log failed, the kernel is stopping; the write may not be durable")
    static let notAppliedError = RPCError.storageUnavailable("Storage failed: the write was not applied")
    static let undoneError = RPCError.storageUnavailable(
        "Storage failed: writes this answer showed were not applied (or may not have been); ask again")
    static let outcomeUnknownError = RPCError.outcomeUnknown(
        "the connection to the database broke while the write was committed, and whether it landed cannot be learnt")
}

/// The end of a stream's batch: its writes made durable before their answers go out.
extension Dispatcher {
    /// Ends a batch of `stream`: applies the slow work its workers finished (waiting, while
    /// more than `waitAbove` of its requests are outstanding), makes the writes durable before their
    /// responses go out, and moves every answer that may be written to `out`. Answers that depend on
    /// writes that failed are replaced by -32050 (those changes were undone). Returns true when syncing
    /// failed and the kernel must stop after writing `out`.
    public func endBatch(_ out: inout [UInt8], on stream: RequestStream, waitAbove: Int? = nil) -> Bool {
        applyFinished(stream, wait: false, into: &out)
        if let waitAbove {
            while stream.entries.count > waitAbove {
                if let journal, stream.applying > 0 || inFlight.isHolding(stream) {
                    // Waiting for commits being applied (this stream's, or another's of the same user): apply
                    // them now, after ending the batch (a detached commit on PostgreSQL waits for the locks
                    // the batch holds).
                    acknowledgement.settle()
                    while journal.applyBacklog(budgetMicros: .max) {}
                    inFlight.prune(journal)
                    applyFinished(stream, wait: false, into: &out)
                } else {
                    applyFinished(stream, wait: true, into: &out)
                }
            }
        }
        acknowledgement.settle()
        let fatal = acknowledgement.takeSyncFailure()
        defer { announceChanges(to: stream, &out) }
        defer { stream.flushReady(into: &out, limit: maxAnswerBytes) }
        // Refusals of answers in another stream's output wait for that stream's end of batch (a read here
        // may have flushed its writes).
        let here = acknowledgement.takeRefusals(of: stream)
        guard !here.isEmpty else { return fatal }
        // Ranges in `out` were recorded in output order and nothing before them has moved since.
        var rebuilt: [UInt8] = []
        rebuilt.reserveCapacity(out.count)
        var cursor = 0
        var ranAgain = false
        for (w, error) in here {
            // After a failed sync nothing is undone but nothing is known durable: no read runs again.
            let again = fatal ? nil : w.depends.rerun.flatMap { answerAgain($0, on: stream) }
            ranAgain = ranAgain || again != nil
            let outcome = again ?? .failure(error)
            guard let slot = w.slot else {
                rebuilt.append(contentsOf: out[cursor..<w.range.lowerBound])
                writeResponse(id: w.id, outcome: outcome, read: !w.depends.wrote, into: &rebuilt)
                cursor = w.range.upperBound
                continue
            }
            slot.bytes.removeAll()
            writeResponse(id: w.id, outcome: outcome, read: !w.depends.wrote, into: &slot.bytes)
        }
        rebuilt.append(contentsOf: out[cursor...])
        out = rebuilt
        if ranAgain { acknowledgement.settle() }  // ends what the reads opened (on PostgreSQL, their transaction)
        return fatal
    }

    /// `stream` is gone: its refusals are forgotten and it gets no more notifications.
    func forget(_ stream: RequestStream) {
        acknowledgement.forget(stream)
        hub.remove(stream.events)
        stream.end()
    }

    /// A read whose answer showed writes the flush refused, run again now that they are undone (nothing
    /// is unsettled, so its answer depends on nothing); nil for a read with a slow part.
    private func answerAgain(_ read: (method: RegisteredMethod, params: JSONObject), on stream: RequestStream) -> Outcome? {
        guard case .answered(let outcome, _) = execute(read.method, read.params, on: stream) else { return nil }
        return outcome
    }

    /// Appends an `events.changed` line for each change made durable in this batch that the host
    /// subscribed to: after the batch's responses (never inside a batch's array), in commit order, into
    /// `out` for `stream` (whose batch ended), through their queues for the others.
    func announceChanges(to stream: RequestStream, _ out: inout [UInt8]) {
        guard let changes = journal?.takeChanges(), !changes.isEmpty else { return }
        hub.announce(changes, at: clock.now().seconds, answering: stream.events, into: &out)
    }
}
