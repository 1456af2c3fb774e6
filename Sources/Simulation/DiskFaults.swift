#if canImport(Glibc)
import Glibc
#endif
import Store
import Synchronization

/// The disk's failures, armed by the simulator: the next few writes fail as a full disk fails them
/// (half the bytes written first: the fault injector's `write`), or the next fsync fails.
final class DiskFaults: Sendable {
    enum Armed: Sendable, CustomStringConvertible {
        case writes(Int)
        case fsync

        var description: String {
            switch self {
            case .writes(let n): "the next \(n) writes fail (disk full)"
            case .fsync: "the next fsync fails"
            }
        }
    }

    private let state = Mutex<(writes: Int, fsync: Bool)>((0, false))

    func arm(_ fault: Armed) {
        state.withLock { s in
            switch fault {
            case .writes(let n): s.writes += n
            case .fsync: s.fsync = true
            }
        }
    }

    func disarm() {
        state.withLock { $0 = (0, false) }
    }

    /// The errno an operation fails with now, or nil.
    func failure(_ operation: FaultInjector.Operation) -> Int32? {
        state.withLock { s -> Int32? in
            switch operation {
            case .write where s.writes > 0:
                s.writes -= 1
                return ENOSPC
            case .fsync where s.fsync:
                s.fsync = false
                return EIO
            default:
                return nil
            }
        }
    }
}
