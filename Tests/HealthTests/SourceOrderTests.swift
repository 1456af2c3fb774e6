import Chrono
import Foundation
import JSON
import Storage
import Testing
import TestSupport
@testable import Health

/// #56 item 2: Apple's default source order (support article HT204351): data entered by hand, then
/// iPhone, iPod touch and Apple Watch, then other apps and devices, a newly added one above the others.
@Suite struct SourceOrderTests {
    let watch = Origin(sourceName: "Ann's Apple Watch", bundleId: "com.apple.health.81D5A3B0", deviceModel: "Watch")
    let phone = Origin(sourceName: "Ann's iPhone", bundleId: "com.apple.health.5E0C7A2F", deviceModel: "iPhone")
    let health = Origin(sourceName: "Health", bundleId: "com.apple.Health")
    let garmin = Origin(sourceName: "Connect", bundleId: "com.garmin.connect.mobile")
    let strava = Origin(sourceName: "Strava", bundleId: "com.strava.stravaride", deviceModel: "Watch")

    @Test func theDefaultTiers() {
        #expect(HealthRules.defaultTier(SourceRef(watch)) == .appleWatch)
        #expect(HealthRules.defaultTier(SourceRef(phone)) == .appleDevice)
        #expect(HealthRules.defaultTier(SourceRef(health)) == .enteredByHand, "the Health app's own entries")
        #expect(HealthRules.defaultTier(SourceRef(garmin, enteredByHand: true)) == .enteredByHand, "HKWasUserEntered, whoever wrote it")
        #expect(HealthRules.defaultTier(SourceRef(garmin)) == .thirdParty)
        #expect(HealthRules.defaultTier(SourceRef(strava)) == .thirdParty, "an app running on an Apple Watch is an app")
        // Without a bundle id (earlier apps' sends) the device model, else the name, tells.
        #expect(HealthRules.defaultTier(SourceRef(Origin(sourceName: "马林康的Apple\u{00A0}Watch"))) == .appleWatch)
        #expect(HealthRules.defaultTier(SourceRef(Origin(sourceName: "Zed", deviceModel: "iPhone"))) == .appleDevice)
    }

    @Test func aNewerThirdPartySourceRanksAboveAnOlderOne() {
        let ranking = SourceRanking(firstSeen: ["com.garmin.connect.mobile": 1_000, "com.strava.stravaride": 2_000])
        let ranks = HealthRules.ranks([SourceRef(garmin), SourceRef(strava), SourceRef(phone), SourceRef(watch), SourceRef(health)], ranking)
        #expect(ranks[SourceRef(health)]! < ranks[SourceRef(watch)]!)
        #expect(ranks[SourceRef(watch)]! < ranks[SourceRef(phone)]!)
        #expect(ranks[SourceRef(phone)]! < ranks[SourceRef(strava)]!)
        #expect(ranks[SourceRef(strava)]! < ranks[SourceRef(garmin)]!, "Strava came later")
    }

    /// A step count typed into the Health app over minutes a watch also counted: the hand-entered figure
    /// counts, as the Health app shows it.
    @Test func aHandEnteredSampleWinsOverTheWatch() throws {
        let h = try Harness()
        let byWatch = try sample(1, 600, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", model: "Watch", source: "Apple Watch",
                                 bundle: "com.apple.health.81D5A3B0")
        let byHand = try sample(2, 1000, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", source: "Health", bundle: "com.apple.Health",
                                metadata: ["HKWasUserEntered": true])
        try h.ingest("UTC", samples: [byWatch, byHand])
        #expect(try h.sum("2026-03-02") == 1000)
    }

    /// Two apps counting the same half hour: the one that reached the user later counts, whatever the
    /// order of the samples; and the first-seen times outlive the request.
    @Test func theAppAddedLaterWins() throws {
        let h = try Harness()
        let first = try sample(1, 300, "2026-03-02T10:00:00Z", "2026-03-02T10:30:00Z", source: "Connect", bundle: "com.garmin.connect.mobile")
        try h.ingest("UTC", samples: [first])
        #expect(try h.sum("2026-03-02") == 300)
        let later = try sample(2, 450, "2026-03-02T10:00:00Z", "2026-03-02T10:30:00Z", source: "Strava", bundle: "com.strava.stravaride")
        try h.service.ingest(h.user, IngestRequest(zone: .utc, samples: [later]), now: now.adding(seconds: 60))
        #expect(try h.sum("2026-03-02") == 450)
        let seen = try #require(try h.tables.sourcesSeen.get(user: h.user, key: steps))
        #expect(seen.firstSeen == ["com.garmin.connect.mobile": now.milliseconds, "com.strava.stravaride": now.milliseconds + 60_000])
        // Apple's devices are not third-party: none is recorded.
        try h.ingest("UTC", samples: [try sample(3, 1, "2026-03-03T10:00:00Z", "2026-03-03T10:01:00Z", model: "Watch", bundle: "com.apple.health.81D5A3B0")])
        #expect(try h.tables.sourcesSeen.get(user: h.user, key: steps)?.firstSeen.count == 2)
    }
}

/// #56 item 4: a figure explains itself: each source's counted and overridden values, the counted ones
/// adding up to the figure.
@Suite struct ProvenanceTests {
    /// protocol/health.md's worked example: iPhone 10:00-10:10 (1000), Watch 10:05-10:15 (600), Connect
    /// 10:00-10:30 (600): 1400 counted.
    @Test func theWorkedExampleExplainsItself() throws {
        let h = try Harness()
        try h.ingest("UTC", samples: [
            try sample(1, 1000, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", model: "iPhone", source: "iPhone"),
            try sample(2, 600, "2026-03-02T10:05:00Z", "2026-03-02T10:15:00Z", model: "Watch", source: "Apple Watch"),
            try sample(3, 600, "2026-03-02T10:00:00Z", "2026-03-02T10:30:00Z", source: "Connect"),
        ])
        let days = try h.service.explained(h.user, try h.service.summary(h.user, from: day("2026-03-02"), to: day("2026-03-02")), types: nil)
        let sources = try #require(days.first?.sources[HealthType.named(steps)!.code])
        #expect(sources.map(\.source.origin.sourceName) == ["Apple Watch", "iPhone", "Connect"], "highest rank first")
        #expect(sources.map(\.counted) == [600, 500, 300])
        #expect(sources.map(\.overridden) == [0, 500, 300])
        #expect(sources.map(\.counted).reduce(0, +) == (try h.sum("2026-03-02")))
        // A week adds its days up, source by source.
        let week = try #require(try h.service.weekly(h.user, from: day("2026-03-02"), to: day("2026-03-02"), explain: true).first)
        #expect(week.sources[HealthType.named(steps)!.code]?.map(\.counted) == [600, 500, 300])
    }

    /// Whatever the samples, the counted values add up to the figure exactly (thousandths apportioned).
    @Test func countedValuesAlwaysAddUpToTheFigure() throws {
        var generator = SeededRandom(seed: 56)
        for _ in 0..<200 {
            let contributions = (0..<Int.random(in: 1...12, using: &generator)).map { _ in
                let start = Int64.random(in: 0...600, using: &generator) * 1000
                let length = Int64.random(in: 0...300, using: &generator) * 1000
                return Contribution(start: start, end: start + length, value: Double.random(in: 0...997, using: &generator),
                                    duration: length, rank: Int.random(in: 0...3, using: &generator))
            }
            let total = HealthRules.mergedSum(contributions)
            let parts = HealthRules.mergedShares(contributions, total: total)
            let counted = parts.values.map { Int64(($0.counted * 1000).rounded()) }.reduce(0, +)
            #expect(counted == Int64((total * 1000).rounded()), "\(contributions)")
        }
    }
}

/// #56 item 3: each person's order per type, and the one-time recompute of days summed by the old order.
@Suite struct UserSourceOrderTests {
    func setOrder(_ h: Harness, _ type: String, _ sources: [SourceMatcher]) throws -> IngestReport {
        try h.service.ingest(h.user, .sourceOrder(type, sources), now: now)
    }

    /// Watch and phone on one walk: the watch counts by default; a person who puts the phone first gets
    /// the phone's figure on every day, and back to the default when the list is emptied.
    @Test func aPersonsOrderPutsThePhoneFirstOnEveryDay() throws {
        let h = try Harness()
        for (i, date) in ["2026-03-02", "2026-04-02"].enumerated() {
            try h.ingest("UTC", samples: [
                try sample(10 * i + 1, 600, "\(date)T10:00:00Z", "\(date)T10:10:00Z", model: "Watch", bundle: "com.apple.health.81D5A3B0"),
                try sample(10 * i + 2, 1000, "\(date)T10:00:00Z", "\(date)T10:10:00Z", model: "iPhone", bundle: "com.apple.health.5E0C7A2F"),
            ])
        }
        #expect(try h.sum("2026-03-02") == 600)
        let set = try setOrder(h, steps, [SourceMatcher(deviceModel: "iPhone")])
        #expect(set.daysRecomputed == ["2026-03-02", "2026-04-02"])
        #expect(try h.sum("2026-03-02") == 1000 && h.sum("2026-04-02") == 1000)
        #expect(try h.service.sourceOrders(h.user, types: nil).map(\.row.sources) == [[SourceMatcher(deviceModel: "iPhone")]])
        // Another type keeps the default order; the same list again recomputes nothing.
        #expect(try setOrder(h, steps, [SourceMatcher(deviceModel: "iPhone")]).daysRecomputed.isEmpty)
        _ = try setOrder(h, steps, [])
        #expect(try h.sum("2026-03-02") == 600)
        #expect(try h.service.sourceOrders(h.user, types: nil).isEmpty)
    }

    /// A sleep order: the phone's in-bed sleep schedule versus the watch's stages.
    @Test func sleepHasAnOrderToo() throws {
        let h = try Harness()
        try h.ingest("UTC", sleep: [
            try sleepSample(1, "asleepCore", "2026-03-01T23:00:00Z", "2026-03-02T06:00:00Z", model: "Watch", source: "Apple Watch"),
            try sleepSample(2, "awake", "2026-03-01T23:00:00Z", "2026-03-02T01:00:00Z", source: "AutoSleep"),
        ])
        #expect(try h.service.day(h.user, "2026-03-02")?.sleep.ms[.asleepCore] == 7 * 3_600_000)
        _ = try setOrder(h, HealthRules.sleepType, [SourceMatcher(name: "AutoSleep")])
        #expect(try h.service.day(h.user, "2026-03-02")?.sleep.ms[.asleepCore] == 5 * 3_600_000)
    }

    /// Days summed by an earlier kernel's order (a profile without `ranking`) are recomputed once, at the
    /// user's next ingest: an app on a watch (a bundle id that is not Apple's) no longer outranks an
    /// Apple iPhone.
    @Test func daysSummedByTheOldOrderAreRecomputedOnce() throws {
        let h = try Harness()
        try h.ingest("UTC", samples: [
            try sample(1, 600, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", model: "Watch", bundle: "com.strava.stravaride"),
            try sample(2, 1000, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", model: "iPhone", bundle: "com.apple.health.5E0C7A2F"),
        ])
        #expect(try h.sum("2026-03-02") == 1000)
        // As an earlier kernel left it: the watch-model app counted, and the profile says nothing of ranking.
        var old = try #require(try h.service.day(h.user, "2026-03-02"))
        old.metrics[HealthType.named(steps)!.code] = .sum(600)
        var profile = try #require(try h.tables.profile.get(user: h.user, key: "profile"))
        profile.ranking = 1
        var tx = Transaction()
        tx.put(h.tables.days, user: h.user, key: "2026-03-02", old)
        tx.put(h.tables.profile, user: h.user, key: "profile", profile)
        try h.store.commit(tx)
        let report = try h.ingest("UTC", samples: [try sample(3, 5, "2026-05-01T10:00:00Z", "2026-05-01T10:01:00Z")])
        #expect(report.daysRecomputed == ["2026-03-02", "2026-05-01"])
        #expect(try h.sum("2026-03-02") == 1000)
        #expect(try h.tables.profile.get(user: h.user, key: "profile")?.ranking == ProfileRow.currentRanking)
        #expect(try h.ingest("UTC", samples: [try sample(4, 5, "2026-05-02T10:00:00Z", "2026-05-02T10:01:00Z")]).daysRecomputed == ["2026-05-02"], "once")
    }
}
