import Testing
import TestSupport
@testable import Threads

/// A thread with a `Waiter` (the simulation's) never sleeps in a wait on `Locked`: the waiter takes other
/// steps until the wait can go on; other threads, and waits released outside the kernel, sleep as always.
@Suite(.oneStoreOnly) struct WaitingTests {
    /// Releases what is waited for as its first "step" (what another simulated thread would do).
    final class Releasing: Waiter, @unchecked Sendable {
        let release: () -> Void
        var waits: [UInt64?] = []
        init(_ release: @escaping () -> Void) { self.release = release }
        func wait(until ready: () -> Bool, timeoutMicros: UInt64?) {
            waits.append(timeoutMicros)
            release()
            #expect(ready())
        }
    }

    @Test func aWaitOnTheWaitersThreadIsTheWaitersAndOthersSleep() {
        let value = Locked(0)
        let waiter = Releasing { value.withLock { $0 = 1 } }
        Waiting.install(waiter)
        #expect(value.withLock(waitingUntil: { $0 == 1 }, timeoutMicroseconds: 5_000_000) { $0 } == 1)
        #expect(waiter.waits == [5_000_000], "the waiter took the wait, with its timeout")
        #expect(value.withLock(waitingUntil: { $0 == 1 }) { $0 } == 1)
        #expect(waiter.waits.count == 1, "ready at once: no wait")
        // Another thread's wait sleeps on the condition until this one wakes it.
        let other = Locked(false), done = Locked(false)
        spawnThread {
            other.withLock(waitingUntil: { $0 }) { _ in }
            done.withLock { $0 = true }
            done.wake()
        }
        other.withLock { $0 = true }
        other.wake(all: true)
        Waiting.install(nil)
        #expect(done.withLock(waitingUntil: { $0 }, timeoutMicroseconds: 10_000_000) { $0 }, "its wait ended")
        #expect(waiter.waits.count == 1, "the other thread's wait was not the waiter's")
    }
}
