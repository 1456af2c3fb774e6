import Chrono
import Threads

/// Wakes a stream when its subscription is about to end and when it has ended, so that `events.ending`
/// and `events.ended` reach a host whose stream is idle (nothing else would make its server write).
/// One thread for the kernel, started with the first alarm, sleeping until the earliest one is due; or
/// none, when whoever runs the kernel's time calls `fireDue()` itself (a simulation, whose clock moves
/// only when it says so). Alarms hold their subscription weakly: a closed stream's alarm does nothing.
/// Memory: two alarms a subscription or renewal, each gone once due.
public final class SubscriptionAlarm: Sendable {
    private struct Alarm {
        let atMs: Int64
        weak var subscription: EventSubscription?
    }

    private let state = Locked<(alarms: [Alarm], started: Bool)>(([], false))
    private let clock: any Clock
    private let ownThread: Bool

    public init(clock: any Clock, ownThread: Bool = true) {
        self.clock = clock
        self.ownThread = ownThread
    }

    /// Wakes `subscription`'s stream at `atMs` (wall clock, milliseconds since 1970).
    func schedule(_ subscription: EventSubscription, atMs: Int64) {
        let start = state.withLock { s -> Bool in
            s.alarms.append(Alarm(atMs: atMs, subscription: subscription))
            defer { s.started = true }
            return !s.started
        }
        state.wake()
        if start && ownThread { spawnThread { [self] in run() } }
    }

    private func run() {
        while true {
            let due = state.withLock(waitingUntil: { s in s.alarms.contains { $0.atMs <= clock.now().milliseconds } },
                                     timeoutMicroseconds: waitMicros()) { s in Self.takeDue(&s.alarms, now: clock.now().milliseconds) }
            for subscription in due { subscription.alarmFired() }
        }
    }

    /// Fires the alarms due now (what the thread does when it wakes).
    public func fireDue() {
        let due = state.withLock { s in Self.takeDue(&s.alarms, now: clock.now().milliseconds) }
        for subscription in due { subscription.alarmFired() }
    }

    private static func takeDue(_ alarms: inout [Alarm], now: Int64) -> [EventSubscription] {
        let fired = alarms.filter { $0.atMs <= now }.compactMap(\.subscription)
        alarms.removeAll { $0.atMs <= now || $0.subscription == nil }
        return fired
    }

    /// Until the earliest alarm (at least 1 ms, at most a minute, so a clock that jumps is noticed).
    private func waitMicros() -> Int {
        let next = state.withLock { s in s.alarms.map(\.atMs).min() }
        guard let next else { return 60_000_000 }
        return Int(max(1, min(60_000, next - clock.now().milliseconds))) * 1000
    }
}
