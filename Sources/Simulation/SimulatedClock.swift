import Chrono
import Synchronization

/// Time as a simulation runs it. The wall clock moves only when the simulator advances it; the
/// monotonic clock also moves a fixed step each time it is read, so that time slices and deadlines end
/// after a fixed amount of work, the same on every run of a seed (a frozen monotonic clock would make
/// every slice endless).
final class SimulatedClock: Clock {
    private let state: Mutex<(wall: Int64, monotonic: UInt64)>
    /// What one read of the monotonic clock costs in simulated time.
    static let microsPerRead: UInt64 = 20

    init(wallMs: Int64) {
        state = Mutex((wallMs, 1_000_000))
    }

    func now() -> Timestamp {
        Timestamp(milliseconds: state.withLock { $0.wall })
    }

    func monotonicMicros() -> UInt64 {
        state.withLock { s in
            s.monotonic += Self.microsPerRead
            return s.monotonic
        }
    }

    /// Spends a pause of a kernel thread in other steps of the simulation (set by it): while a kernel
    /// waits to retry, other kernels and clients go on, as they would.
    nonisolated(unsafe) var onPause: ((UInt64) -> Void)?

    /// A pause costs no real time: the simulated time moves on (through other steps, with `onPause`).
    func pause(micros: UInt64) {
        let until = state.withLock { $0.monotonic } + micros
        onPause?(micros)
        state.withLock { s in
            guard s.monotonic < until else { return }
            s.wall += Int64((until - s.monotonic) / 1000)
            s.monotonic = until
        }
    }

    /// Lets `ms` milliseconds pass on both clocks.
    func advance(ms: Int64) {
        state.withLock { s in
            s.wall += ms
            s.monotonic += UInt64(ms) * 1000
        }
    }
}
