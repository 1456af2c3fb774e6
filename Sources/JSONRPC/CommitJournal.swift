/// What the dispatcher needs from the store to acknowledge writes only once they are durable:
/// a counter of commits, and a flush that reports which commits failed. Keeps JSONRPC free of Store.
public protocol CommitJournal: AnyObject {
    /// Id of the last commit made; unchanged by a call that wrote nothing.
    var lastCommitID: UInt64 { get }
    /// Makes queued commits durable; reports commits that failed (and were undone) and whether syncing failed.
    func flushCommits() -> (failed: [ClosedRange<UInt64>], fatal: Bool)
}

/// A write answered in the current batch, kept until its commit is durable.
struct PendingWrite {
    /// Where its response sits in the output buffer.
    let range: Range<Int>
    let id: JSON
    let commits: ClosedRange<UInt64>
}

import JSON
