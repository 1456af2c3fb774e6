import Chrono
import JSONRPC
import Store

/// The store is the dispatcher's commit journal: responses to writes wait for its flush.
extension Store: CommitJournal {
    public func flushCommits() -> (failed: [ClosedRange<UInt64>], fatal: Bool) {
        let outcome = flush()
        return (outcome.failedCommits, outcome.fatal)
    }

    public func takeChanges() -> [ChangeNotice] {
        takeCommittedChanges().map {
            ChangeNotice(userId: $0.user, entity: $0.entry.entity, id: $0.entry.id, op: $0.entry.op.rawValue, seq: $0.entry.seq,
                         at: Timestamp(milliseconds: $0.entry.at).description)
        }
    }
}

