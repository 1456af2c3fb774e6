import Chrono
import JSON
import Threads

/// Answers to writes wait until the writes are durable: the flush at the end of each batch, the answers
/// a failed flush refuses, and the change events it announces.
extension Dispatcher {
    /// Runs a request's call (`body`); returns its outcome and the commits its answer depends on (see
    /// `execute`), nil for an answer that depends on none. A request that committed depends on its own
    /// commits only: a store reports every commit a failure undid (the batch's transaction on
    /// PostgreSQL, every queued record on the data dir), and a commit of its own (PostgreSQL's detached
    /// commit) has its own fate, whatever became of the batch around it.
    func tracked(_ method: RegisteredMethod, _ body: () -> Outcome) -> (Outcome, ClosedRange<UInt64>?) {
        if !method.mutates, let journal, journal.lastCommitID > settledCommitID { settle() }
        let before = journal?.lastCommitID ?? 0
        let outcome = body()
        let after = journal?.lastCommitID ?? 0
        if after > before { return (outcome, (before + 1)...after) }
        if method.mutates, before > settledCommitID { return (outcome, (settledCommitID + 1)...before) }
        return (outcome, nil)
    }

    /// Flushes the journal; answers that depend on writes that failed are marked for -32050.
    func settle() {
        guard let journal else { return }
        let (failed, unknown, fatal) = journal.flushCommits()
        settledCommitID = journal.lastCommitID
        if fatal { syncFailed = true }
        if fatal || !failed.isEmpty || !unknown.isEmpty {
            for w in pendingWrites {
                if fatal || failed.contains(where: { $0.overlaps(w.commits) }) {
                    refusedWrites.append((w, fatal ? Self.syncFailedError : Self.notAppliedError))
                } else if unknown.contains(where: { $0.overlaps(w.commits) }) {
                    refusedWrites.append((w, Self.outcomeUnknownError))
                }
            }
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
                if let journal, current.applying > 0 || heldAcross.contains(where: { $0 === current }) {
                    // Waiting for commits being applied (this stream's, or another's of the same user): apply
                    // them now, after ending the batch (a detached commit on PostgreSQL waits for the locks
                    // the batch holds).
                    settle()
                    while journal.applyBacklog(budgetMicros: .max) {}
                    pruneApplying(journal)
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
        guard !refusedWrites.isEmpty else { return fatal }
        // Refusals of answers in another stream's output wait for that stream's end of batch (a read here
        // may have flushed its writes): ranges count in their own stream's output only.
        let mine = ObjectIdentifier(current)
        let here = refusedWrites.filter { $0.0.slot != nil || $0.0.stream == mine }
        refusedWrites.removeAll { $0.0.slot != nil || $0.0.stream == mine }
        // Ranges in `out` were recorded in output order and nothing before them has moved since.
        var rebuilt: [UInt8] = []
        rebuilt.reserveCapacity(out.count)
        var cursor = 0
        for (w, error) in here {
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

    static let syncFailedError = RPCError.storageUnavailable(
        "Storage failed: syncing the log failed, the kernel is stopping; the write may not be durable")
    static let notAppliedError = RPCError.storageUnavailable("Storage failed: the write was not applied")
    static let outcomeUnknownError = RPCError.outcomeUnknown(
        "the connection to the database broke while the write was committed, and whether it landed cannot be learnt")

    /// Appends an `events.changed` line for each change made durable in this batch that the host
    /// subscribed to: after the batch's responses (never inside a batch's array), in commit order.
    func announceChanges(_ out: inout [UInt8]) {
        guard let changes = journal?.takeChanges(), !changes.isEmpty else { return }
        hub.announce(changes, at: clock.now().seconds, into: &out)
    }
}
