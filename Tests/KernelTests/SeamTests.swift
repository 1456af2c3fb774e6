import Chrono
import Foundation
import JSON
import Storage
import Synchronization
import Testing
import TestSupport
@testable import Kernel

/// A clock whose wall time stands still and whose monotonic time moves `step` microseconds each time
/// it is read: the kind of clock a simulation runs the kernel on.
final class SteppingClock: Clock {
    let step: UInt64
    private let micros = Mutex<UInt64>(0)
    init(step: UInt64) { self.step = step }
    func now() -> Timestamp { Timestamp(milliseconds: 1_763_769_600_000) }
    func monotonicMicros() -> UInt64 { micros.withLock { $0 += step; return $0 } }
}

/// Issue "Deterministic simulation", item 1 (time and randomness): the kernel takes both from what it
/// is given, never from the system behind its back, so one seed and one clock replay a run exactly.
@Suite struct SeamTests {
    /// What a short run answers: a sign-up (user id, session id, tokens), a refresh (a new refresh token)
    /// and a meditation session started and recorded (their ids).
    static func run(seed: UInt64) throws -> [JSON] {
        let kernel = try makeKernel(clock: SteppingClock(step: 10), random: SeededRandom(seed: seed)) { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        let client = InProcessClient(kernel)
        let signedUp = client.call("auth.signUp", ["email": "seed@example.com", "password": "correct horse battery"])
        let token = signedUp["result"]?["accessToken"] ?? .null
        let refreshed = client.call("auth.refresh", ["refreshToken": signedUp["result"]?["refreshToken"] ?? .null])
        let started = client.call("sessions.start", ["auth": token])
        let recorded = client.call("sessions.record", ["auth": token, "startTime": "2025-11-20T08:00:00Z", "durationSeconds": 600])
        return [signedUp, refreshed, started, recorded]
    }

    @Test func oneSeedAndOneClockGiveTheSameIdsTokensAndSecrets() throws {
        let first = try Self.run(seed: 7), again = try Self.run(seed: 7), other = try Self.run(seed: 8)
        for answer in first { #expect(answer["result"] != nil, "\(answer)") }
        #expect(first == again, "the same seed replays every id and token")
        #expect(first[0]["result"]?["user"]?["id"] != other[0]["result"]?["user"]?["id"], "another seed draws other ids")
        #expect(first[0]["result"]?["refreshToken"] != other[0]["result"]?["refreshToken"])
    }

    /// Request latencies (`kernel.info`'s percentiles) count on the kernel's monotonic clock: with one
    /// that ticks a second a reading, a `kernel.info` takes a second or more (on the system's clock it
    /// takes about a tenth of a millisecond).
    @Test func requestTimesCountOnTheKernelsClock() throws {
        let kernel = try makeKernel(clock: SteppingClock(step: 1_000_000)) { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        let client = InProcessClient(kernel)
        for _ in 0..<5 { _ = client.call("kernel.info", [:]) }
        #expect(kernel.dispatcher.stats.percentile(0.5) >= 500_000, "\(kernel.dispatcher.stats.percentile(0.5)) µs")
    }
}
