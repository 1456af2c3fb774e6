#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
import TestSupport
@testable import Threads

@Suite(.oneStoreOnly) struct HandoffQueueTests {
    @Test func itemsArriveInOrderAcrossThreads() {
        let queue = HandoffQueue<Int>(capacity: 4)
        let count = 20_000
        spawnThread {
            for i in 0..<count { queue.put(i) }
        }
        var received: [Int] = []
        received.reserveCapacity(count)
        for _ in 0..<count { received.append(queue.take()) }
        #expect(received == Array(0..<count))
    }

    @Test func aFullQueueBlocksTheProducerUntilTheConsumerTakes() {
        let queue = HandoffQueue<Int>(capacity: 2)
        let produced = Atomic<Int>(0)
        spawnThread {
            for i in 0..<5 {
                queue.put(i)
                produced.store(i + 1, ordering: .releasing)
            }
        }
        // Wait until the producer has filled the queue, then give a put that failed to block time to
        // show itself (the wait can only expose a bug, never fail a correct queue).
        while produced.load(ordering: .acquiring) < 2 {}
        usleep(20_000)
        #expect(produced.load(ordering: .acquiring) == 2)
        #expect((0..<5).map { _ in queue.take() } == [0, 1, 2, 3, 4])
    }

    @Test func closingReleasesABlockedProducerAndDropsLaterItems() {
        let queue = HandoffQueue<Int>(capacity: 1)
        queue.put(1)
        let outcome = Atomic<Int>(-1)
        spawnThread {
            let accepted = queue.put(2)  // blocks: the queue is full
            outcome.store(accepted ? 1 : 0, ordering: .releasing)
        }
        queue.close()
        while outcome.load(ordering: .acquiring) == -1 {}
        #expect(outcome.load(ordering: .acquiring) == 0)
        #expect(queue.put(3) == false)
        #expect(queue.take() == 1)
    }

    /// The serving loop's typed wakes: signals never wait (not even on a full queue), merge until taken,
    /// come after the items queued, and wake a consumer that sleeps with nothing queued. (`take` alone
    /// never returns them.)
    @Test func signalsMergeComeAfterItemsAndWakeASleepingConsumer() {
        let queue = HandoffQueue<Int>(capacity: 1)
        queue.put(7)
        queue.signal(0b01)  // the queue is full: still returns at once
        queue.signal(0b10)
        guard case .item(7) = queue.takeOrSignals(spin: false) else { Issue.record("the item first"); return }
        guard case .signals(0b11) = queue.takeOrSignals(spin: false) else { Issue.record("then both signals, merged"); return }
        let taken = Atomic<UInt32>(0)
        let started = Atomic<Bool>(false)
        spawnThread {
            started.store(true, ordering: .releasing)
            if case .signals(let bits) = queue.takeOrSignals(spin: false) { taken.store(bits, ordering: .releasing) }
        }
        while !started.load(ordering: .acquiring) {}
        queue.signal(0b100)  // whether the consumer sleeps yet or not, it gets the signal
        // Bounded, so that a lost signal fails the test instead of hanging it.
        for _ in 0..<10_000 where taken.load(ordering: .acquiring) == 0 { usleep(1000) }
        #expect(taken.load(ordering: .acquiring) == 0b100)
        queue.signal(0b1)
        queue.put(8)
        #expect(queue.take() == 8, "take gives items only")
    }
}

@Suite(.oneStoreOnly) struct ConcurrentMapTests {
    @Test func resultsKeepTheItemsOrderWithAtMostWidthRunningAndStatePerThread() {
        let running = Atomic<Int>(0), most = Atomic<Int>(0), states = Atomic<Int>(0)
        let results = concurrentMap(Array(0..<64), width: 4, makeState: { states.add(1, ordering: .relaxed).newValue }) { state, i in
            let now = running.add(1, ordering: .relaxed).newValue
            var seen = most.load(ordering: .relaxed)
            while now > seen, !most.compareExchange(expected: seen, desired: now, ordering: .relaxed).exchanged { seen = most.load(ordering: .relaxed) }
            usleep(2000)  // long enough for the threads to overlap
            running.subtract(1, ordering: .relaxed)
            return (i * i, state)
        }
        #expect(results.map(\.0) == (0..<64).map { $0 * $0 })
        #expect(most.load(ordering: .relaxed) <= 4 && most.load(ordering: .relaxed) > 1)
        #expect(states.load(ordering: .relaxed) == 4)
        #expect(Set(results.map(\.1)).count == 4)
        #expect(concurrentMap([Int](), width: 8, makeState: {}) { _, i in i }.isEmpty)
    }
}

/// The kernel's one lock type. Named after the first ThreadSanitizer finding: a value guarded by the
/// standard library's `Mutex` was reported as a race, because ThreadSanitizer does not see `Mutex` on
/// Linux. `Locked` is a pthread mutex, which it sees: under `scripts/sanitize thread` this test reports
/// nothing, and in any build no increment is lost.
@Suite(.oneStoreOnly) struct LockedTests {
    @Test func valuesGuardedByLockedAreSeenAsGuardedByThreadSanitizer() {
        let counter = Locked(0)
        let done = Inbox<Int>()
        for _ in 0..<4 {
            spawnThread {
                for _ in 0..<10_000 { counter.withLock { $0 += 1 } }
                done.put(1)
            }
        }
        var finished = 0
        while finished < 4 { finished += done.takeAll(wait: true).count }
        #expect(counter.withLock { $0 } == 40_000)
    }
}
