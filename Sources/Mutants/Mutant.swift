#if SIMULATION
import Synchronization

/// Defects once fixed, re-introduced on demand so that the simulation can show it finds them
/// (`scripts/sim --mutant NAME`). Compiled into debug builds only (the builds the tests and the
/// simulation run): a release binary has neither the switches nor the code behind them.
public enum Mutant: String, CaseIterable, Sendable {
    /// `health.ingest` commits a plan made on rows that another write of the user changed since
    /// (issue #52, defect 1, on the data dir: the version check skipped).
    case stalePlan = "stale-plan"
    /// An automatic snapshot takes its image while records are queued and not yet in the log, so a
    /// write refused afterwards comes back from the image after a restart (#52, defect 2).
    case snapshotAheadOfLog = "snapshot-ahead-of-log"
    /// A write whose log record failed is answered as if it had landed.
    case failureUnsaid = "failure-unsaid"
    /// A file's fsync is skipped and reported done: an answered write lives in the page cache only, and
    /// a power loss takes it.
    case fsyncSkipped = "fsync-skipped"
    /// Changes are announced to `events.subscribe` streams before their log record is durable, so a
    /// write then refused by a full disk has been announced.
    case eventsBeforeDurable = "events-before-durable"
    /// On PostgreSQL, a detached commit skips its check that the user's version is still the one its
    /// plan was made on, so a plan made before another write of the user overwrites it (#52, defect 1).
    case detachedVersionUnchecked = "detached-version-unchecked"
    /// The socket server answers a peer's short line at once although a longer line the peer sent
    /// before it still waits for its parser: answers out of the order the lines were sent in.
    case socketLinesOutOfOrder = "socket-lines-out-of-order"
    /// On PostgreSQL, a commit whose connection broke is settled by its transaction id's status on
    /// whatever server answers, though a standby that took over gives that id to another transaction.
    case outcomeAcrossFailover = "outcome-across-failover"
    /// On PostgreSQL, rows a batch read ahead keep the value read although a request of the batch
    /// wrote them since: a later request of the user in the batch decides on what was there before.
    case readAheadStale = "read-ahead-stale"

    /// The store the defect lives on (the simulation's `--store`).
    public var store: String { [.detachedVersionUnchecked, .outcomeAcrossFailover, .readAheadStale].contains(self) ? "postgres-model" : "data-dir" }

    /// How many kernels share the store to find it (another kernel must reuse the transaction id).
    public var kernels: Int { self == .outcomeAcrossFailover ? 3 : 1 }

    private static let active = Atomic<Int>(-1)

    /// Switches `mutant` on (nil: every one off).
    public static func activate(_ mutant: Mutant?) {
        active.store(mutant.flatMap { m in allCases.firstIndex(of: m) } ?? -1, ordering: .relaxed)
    }

    /// Whether the defect is switched on.
    public var isOn: Bool { Self.active.load(ordering: .relaxed) == Self.allCases.firstIndex(of: self) }
}
#endif
