import Chrono
import JSON
import JSONRPC
import Store
import Storage
import Testing
import TestSupport
@testable import Rewards

@Suite struct RewardsRulesTests {
    @Test func rewardsArithmetic() {
        #expect(RewardsRules.minutes(forXP: 100, xpPerMinute: 10) == 10)
        #expect(RewardsRules.minutes(forXP: 15, xpPerMinute: 10) == nil)
        #expect(RewardsRules.minutes(forXP: 0, xpPerMinute: 10) == nil)
        #expect(RewardsRules.minutes(forXP: -10, xpPerMinute: 10) == nil)
        let w = RewardsRules.unlockWindow(minutes: 5, nowMs: 1000, unlockedUntilMs: nil)
        #expect(w.startsAt == 1000 && w.endsAt == 301_000)
        let next = RewardsRules.unlockWindow(minutes: 1, nowMs: 2000, unlockedUntilMs: w.endsAt)
        #expect(next.startsAt == 301_000)
        let later = RewardsRules.unlockWindow(minutes: 1, nowMs: 500_000, unlockedUntilMs: w.endsAt)
        #expect(later.startsAt == 500_000)
    }
}

/// A rewards service over a memory-only store (or PostgreSQL, in the suite's second run).
final class Harness {
    let store: any Storage
    let service: RewardsService
    init(rewardsLedgerPerUser: Int64 = 0) throws {
        let tables: RewardsTables
        (store, tables) = try testStore { RewardsTables($0) }
        service = RewardsService(config: RewardsConfig(), store: store, tables: tables, rewardsLedgerPerUser: rewardsLedgerPerUser)
    }
}

@Suite struct RewardsServiceTests {
    @Test func balancesNeverGoNegative() throws {
        let h = try Harness()
        let now = at("2025-03-10T12:00:00Z")
        _ = try h.service.earn(testUser, xp: 30, reason: "r", key: "k", now: now)
        _ = try h.service.redeem(testUser, xp: 30)
        #expect(throws: RewardsError.notEnoughXP) { _ = try h.service.redeem(testUser, xp: 10) }
        _ = try h.service.spend(testUser, minutes: 3, now: now)
        #expect(throws: RewardsError.notEnoughMinutes) {
            _ = try h.service.spend(testUser, minutes: 1, now: now)
        }
        let b = try h.service.balance(testUser)
        #expect(b.xp == 0 && b.minutes == 0)
    }

    @Test func creditsCountOncePerKeyAndTheLedgerIsBounded() throws {
        let h = try Harness(rewardsLedgerPerUser: 2)
        let now = at("2025-03-10T12:00:00Z")
        #expect(try h.service.earn(testUser, xp: 20, reason: "walk", key: "k1", now: now).xp == 20)
        #expect(try h.service.earn(testUser, xp: 20, reason: "walk", key: "k1", now: now).xp == 20, "the same key credits nothing")
        #expect(throws: RewardsError.keyReused) { _ = try h.service.earn(testUser, xp: 30, reason: "walk", key: "k1", now: now) }
        _ = try h.service.earn(testUser, xp: 10, reason: "read", key: "k2", now: now)
        #expect(throws: RewardsError.ledgerQuota(2)) { _ = try h.service.earn(testUser, xp: 10, reason: "x", key: "k3", now: now) }
        #expect(try h.service.balance(testUser).xp == 30, "the refused credit stored nothing")
    }
}
