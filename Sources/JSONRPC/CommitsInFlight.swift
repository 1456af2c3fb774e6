/// Commits whose requests are answered but which are still being applied (in slices on the data dir,
/// detached on PostgreSQL), each with the stream whose answer waits for it and that request's ordering
/// keys; and the streams holding a request behind one of them. A request of the same user on another
/// stream is held in its stream until the commit is applied, instead of waiting for the user's lock on
/// the serving thread, where every other user would wait with it (#52 defect 8). Used by whoever holds
/// the dispatcher.
final class CommitsInFlight {
    private var commits: [(commit: UInt64, stream: RequestStream, keys: Set<String>?)] = []
    /// Streams holding a request behind one of `commits`, woken when one is applied.
    private var held: [RequestStream] = []

    var isEmpty: Bool { commits.isEmpty }

    /// A commit `stream`'s request (ordered by `keys`) is applying.
    func add(_ commit: UInt64, of stream: RequestStream, keys: Set<String>?) {
        commits.append((commit, stream, keys))
    }

    /// Whether a request of `stream` with `keys` waits for a commit another stream's request is applying
    /// (one of the same user); the stream is then woken when one is applied. O(commits in flight), a
    /// handful at most.
    func holds(_ keys: Set<String>?, on stream: RequestStream, _ journal: CommitTracker) -> Bool {
        guard let keys, !keys.isEmpty, !commits.isEmpty else { return false }
        let waits = commits.contains { commit, other, theirs in
            other !== stream && !(theirs?.isDisjoint(with: keys) ?? true) && !journal.isApplied(commit)
        }
        if waits && !isHolding(stream) { held.append(stream) }
        return waits
    }

    /// Whether `stream` holds a request behind another stream's commit.
    func isHolding(_ stream: RequestStream) -> Bool { held.contains { $0 === stream } }

    /// Forgets the commits now applied, and wakes the streams that waited for them.
    func prune(_ journal: CommitTracker) {
        let before = commits.count
        commits.removeAll { commit, stream, _ in
            guard journal.isApplied(commit) else { return false }
            stream.wake(.commitDone)
            return true
        }
        guard commits.count < before, !held.isEmpty else { return }
        for stream in held { stream.wake(.commitDone) }
        held.removeAll()
    }
}
