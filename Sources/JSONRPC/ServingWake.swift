/// Why a server's serving loop is woken with no input to answer: each a reason to end a round again.
/// Servers keep them as bits, so that wakes between two rounds are one round, and each round does what
/// its reasons ask (a slice of a big commit alone applies the slice, nothing else).
public struct ServingWake: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// A worker finished a request's slow part: the serving thread applies it and answers.
    public static let slowWorkDone = ServingWake(rawValue: 1 << 0)
    /// A commit applied after its answer (in slices, or detached on PostgreSQL) finished: the answers
    /// that waited for it are written, the requests held behind it run.
    public static let commitDone = ServingWake(rawValue: 1 << 1)
    /// Notifications wait for the stream: another stream's or another kernel's changes, or its
    /// subscription's end is near.
    public static let events = ServingWake(rawValue: 1 << 2)
    /// Big commits are left to apply, a slice between rounds of requests.
    public static let sliceDue = ServingWake(rawValue: 1 << 3)
    /// A parser thread finished a long line (socket server).
    public static let lineParsed = ServingWake(rawValue: 1 << 4)
}
