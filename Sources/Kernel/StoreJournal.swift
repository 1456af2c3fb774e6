import JSONRPC
import Store

/// The store is the dispatcher's commit journal: responses to writes wait for its flush.
extension Store: CommitJournal {
    public func flushCommits() -> (failed: [ClosedRange<UInt64>], fatal: Bool) {
        let outcome = flush()
        return (outcome.failedCommits, outcome.fatal)
    }
}

