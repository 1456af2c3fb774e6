import Storage

/// Records of the log that hold no changes but say how records are numbered (format 3 only; a change
/// record starts with its commit time, which is never 0).
///
/// Under `--fsync everysec` a power cut may take the last second of records, whose feed positions
/// hosts already saw (in answers, events and feed pages). Were those numbers given again, a host's
/// cursor past them would skip the new changes, and events would go back in `seq`. So a start after a
/// stop that was not clean numbers its records `jump` past the last one recovered, after making a
/// `jumped` marker durable; a clean stop ends the log with a `stopped` marker, and the next start
/// numbers on without a jump. (`always` needs neither: nothing is answered before it is durable;
/// `never` promises nothing of a power cut, the positions included.)
enum NumberingMarker: Equatable {
    /// The next record is numbered `next`.
    case jumped(next: UInt64)
    /// The kernel stopped cleanly after this record: everything answered is durable.
    case stopped

    /// Records a power cut may take under `everysec` (a second of the fastest writes measured, about
    /// 100,000 records, with a margin): feed positions grow by `jump << 20` per start after a crash, so
    /// JavaScript hosts, whose numbers are exact to 2^53, stay exact for 32,768 such starts.
    static let jump: UInt64 = 1 << 18

    var payload: [UInt8] {
        switch self {
        case .stopped: return [0]
        case .jumped(let next): return [0] + withUnsafeBytes(of: next.littleEndian) { Array($0) }
        }
    }

    /// The marker a record's payload holds, or nil for a change record.
    init?(payload: ArraySlice<UInt8>, format: PayloadFormat) {
        guard format == .stamped, payload.first == 0 else { return nil }
        switch payload.count {
        case 1: self = .stopped
        case 9:
            var next: UInt64 = 0
            for (i, byte) in payload.dropFirst().enumerated() { next |= UInt64(byte) << (8 * i) }
            self = .jumped(next: next)
        default: return nil
        }
    }
}
