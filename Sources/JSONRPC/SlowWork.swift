import Chrono
import JSON
import Threads

/// Slow work: the parts of requests that run on workers, their results applied on the serving thread,
/// and big commits whose answers wait until they are applied (in slices, or detached on PostgreSQL).
extension Dispatcher {
    /// Runs an entry's slow part on a worker; its value comes back through the stream's `finished`.
    func run(_ entry: Entry, _ call: SlowCall<JSON>, on stream: RequestStream) {
        if let keys = entry.keys { entry.keys = keys.union(call.users.map { "user:" + $0 }) }
        let (finished, wake, ticket, work) = (stream.finished, stream.wake, entry.ticket, call.work)
        workers.submit {
            finished.put(Finished(ticket: ticket, value: work()))
            wake(.slowWorkDone)
        }
    }

    /// Applies the slow work the workers finished for `stream`, then whatever was held behind it.
    func applyFinished(_ stream: RequestStream, wait: Bool, into out: inout [UInt8]) {
        for done in stream.finished.takeAll(wait: wait) {
            guard let index = stream.entries.firstIndex(where: { $0.ticket == done.ticket }),
                  case .running(let method, let params, let call) = stream.entries[index].state else { continue }
            let entry = stream.entries[index]
            // A big unit of work committed here may be applied in slices between other users' requests.
            let (outcome, depends) = acknowledgement.tracked(mutates: method.mutates, mayFinishLater: true) {
                do throws(RPCError) { return .success(try call.apply(done.value)) } catch { return .failure(error) }
            }
            // Lost a race with another kernel: the whole request runs again, its slow part included.
            if case .failure(let error) = outcome, error.isConflict, entry.attempts < Self.attempts {
                entry.attempts += 1
                stats.recordRetry()
                switch execute(method, params, on: stream, attempts: entry.attempts) {
                case .slow(let again):
                    entry.state = .running(method, params, again)
                    run(entry, again, on: stream)
                case .answered(let outcome, let depends):
                    stream.entries.remove(at: index)
                    deliver(id: entry.id, outcome, depends: depends, started: entry.started, slot: entry.slot, on: stream, into: &out)
                }
                continue
            }
            // Only a request's own commits hold its answer: one that committed nothing cannot have seen a
            // commit still being applied (a detached commit is in a transaction of its own; a read of a
            // user settles their sliced units first), and a commit's failure is told once, to its owner.
            // (A request that committed nothing held on another's detached commit once took its failure,
            // and the owner's write, never made, was answered as made: found by the simulation.)
            if let commits = depends?.commits, depends?.own == true, let journal, !journal.isApplied(commits.upperBound) {
                // Answered (so it shares the batch's flush and its fate) but written once applied.
                deliver(id: entry.id, outcome, depends: depends, started: entry.started, slot: entry.slot, on: stream, into: &out)
                entry.slot.gate = commits.upperBound
                // The request's params and its plan are a month of samples (hundreds of thousands of
                // allocations): they are freed on a worker, not on the thread every other request waits for.
                release(Garbage((entry.state, done)))
                entry.state = .applying(commit: commits.upperBound)
                stream.applying += 1
                inFlight.add(commits.upperBound, of: stream, keys: entry.keys)
                continue
            }
            stream.entries.remove(at: index)
            deliver(id: entry.id, outcome, depends: depends, started: entry.started, slot: entry.slot, on: stream, into: &out)
        }
        releaseApplied(stream)
        release(stream, into: &out)
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

    /// Ends the entries of `stream` whose commits are now wholly applied (or were undone): their
    /// answers may be written, and requests held behind them run.
    func releaseApplied(_ stream: RequestStream) {
        guard let journal, stream.applying > 0 else { return }
        stream.entries.removeAll { entry in
            guard case .applying(let commit) = entry.state, journal.isApplied(commit) else { return false }
            if let failure = journal.takeFailure(of: commit), entry.id != nil {
                entry.slot.bytes.removeAll()
                let error = failure == .outcomeUnknown ? Acknowledgement.outcomeUnknownError : Acknowledgement.notAppliedError
                writeResponse(id: entry.slot.id, outcome: .failure(error), into: &entry.slot.bytes)
            }
            entry.slot.gate = nil
            stream.applying -= 1
            return true
        }
    }

    /// Applies the store's backlog for one slice (`backlogSliceMicros`), and wakes the streams whose
    /// answers it finished. The servers call it between rounds of requests; returns whether any is left.
    public func applyBacklog() -> Bool {
        guard let journal, !inFlight.isEmpty else { return false }
        let more = journal.applyBacklog(budgetMicros: Self.backlogSliceMicros)
        inFlight.prune(journal)
        return more
    }
}

/// Values handed to a worker only to be freed there; nothing reads them.
private final class Garbage: @unchecked Sendable {
    private var value: Any?
    init(_ value: Any) { self.value = value }
    func drop() { value = nil }
}
