import JSONRPC
import Store

/// The store is the dispatcher's commit journal: responses to writes wait for its flush.
extension Store: CommitJournal {
    public func flushCommits() -> (failed: [ClosedRange<UInt64>], fatal: Bool) {
        let outcome = flush()
        return (outcome.failedCommits, outcome.fatal)
    }
}

extension RPCError {
    /// The RPC form of a store failure: -32050 when nothing was applied, -32603 for data that does not decode.
    static func from(_ error: StoreError) -> RPCError {
        switch error {
        case .unavailable(let m): return .storageUnavailable("Storage unavailable: \(m); nothing was applied")
        case .corrupt: return .internalError
        }
    }
}
