import JSON
import ScreenTime

/// The guarantees a history must keep. Answers are checked as they come; the final state after the
/// last crash is checked against every answer given.
struct Checker {
    let simulation: Simulation

    /// A feed page continues its client's cursor: every change after what the cursor saw, in order.
    func checkAnswer(_ request: Sent, _ answer: JSON, client: Simulation.Client) throws {
        if case .verify(let original, _) = request.operation, let result = answer["result"] {
            // A verified purchase bought a day ago for a month: the membership is that purchase's, active.
            guard result["originalTransactionId"]?.stringValue == original, result["status"]?.stringValue == "active" else {
                throw Failure("verify \(request.id) of purchase \(original) answered \(result.serialized)")
            }
        }
        guard case .feed(let since) = request.operation, let result = answer["result"] else { return }
        let seqs = (result["changes"]?.arrayValue ?? []).compactMap { $0["seq"]?.intValue }
        guard zip(seqs, seqs.dropFirst()).allSatisfy({ $0 < $1 }) else { throw Failure("feed page \(request.id) out of order: \(seqs)") }
        // Only a page read with the client's latest cursor continues its chain (one sent before the
        // previous page was answered repeats it, rightly).
        guard since == client.cursors[request.user] else { return }
        if let last = client.lastSeen[request.user], let first = seqs.first, first <= last {
            throw Failure("feed page \(request.id) for user \(request.user) repeats position \(first) (the cursor had seen up to \(last))")
        }
        if let cursor = result["cursor"]?.stringValue { client.cursors[request.user] = cursor }
        if let last = seqs.last { client.lastSeen[request.user] = last }
    }

    /// An `events.changed` line: each user's positions strictly increase (commit order), and what it
    /// announces of a sample is noted, to be held against the answers at the end.
    func checkEvent(_ line: JSON, in model: inout Model) throws {
        guard line["method"]?.stringValue == "events.changed", let p = line["params"] else { return }
        guard let user = p["userId"]?.stringValue, let seq = p["seq"]?.intValue else { throw Failure("an events.changed line without userId or seq: \(line.serialized)") }
        if let last = model.lastAnnounced[user], seq <= last { throw Failure("events for \(user): position \(seq) announced after \(last)") }
        model.lastAnnounced[user] = seq
        if p["entity"]?.stringValue == "health.sample", let id = p["id"]?.stringValue, let op = p["op"]?.stringValue {
            model.announced[id.uppercased(), default: []].insert(op)
        }
    }

    /// What the kernel holds after the last crash, read back through the user's whole feed, against
    /// every answer: each write answered is there, each refused one is not, and every derived row (a
    /// day's summary, a balance) equals what its base rows give.
    func checkFinalState() throws {
        let model = simulation.model
        try checkPurchases()
        for user in 0..<simulation.settings.users {
            let feed = try readFeed(user)
            // Samples.
            var live: [String: (value: Int64, date: String)] = [:]
            for change in feed where change.entity == "health.sample" && change.upsert {
                // HealthKit writes UUIDs in upper case; the kernel may keep them in either.
                live[change.id.uppercased()] = (Int64(change.data?["value"]?.numberValue ?? -1), change.data?["date"]?.stringValue ?? "")
            }
            for (uuid, sample) in model.samples where sample.user == user {
                let there = live[uuid]
                let erased = model.erasure(user: user, epoch: sample.epoch)
                let mustBe = sample.ingest == .landed && sample.delete != .landed && sample.delete != .unknown && erased == nil
                let mustNot = sample.ingest == .absent || sample.delete == .landed || erased == .landed
                if mustBe, there == nil { throw Failure("user \(user): sample \(uuid), answered as ingested, is gone (delete: \(sample.delete.map { "\($0)" } ?? "none sent"))\(simulation.storedRows(containing: uuid))") }
                if mustNot, there != nil { throw Failure("user \(user): sample \(uuid) is there, but its ingest was refused or its delete answered") }
                if let there, there.value != Int64(sample.value) || there.date != sample.date {
                    throw Failure("user \(user): sample \(uuid) holds \(there), sent as \(sample.value) on \(sample.date)")
                }
            }
            for uuid in live.keys where model.samples[uuid]?.user != user { throw Failure("user \(user): sample \(uuid) was never sent by them") }
            // Events announce durable changes only.
            for (uuid, sample) in model.samples where sample.user == user {
                let ops = model.announced[uuid] ?? []
                if ops.contains("upsert"), sample.ingest == .absent { throw Failure("user \(user): sample \(uuid) was announced, but its ingest was refused") }
                // (A watch sample whose ingest is unknown may have been there and gone with a replaced day.)
                if ops.contains("delete"), sample.device == nil, sample.delete == nil || sample.delete == .absent,
                   model.erasure(user: user, epoch: sample.epoch) == nil {
                    throw Failure("user \(user): the deletion of sample \(uuid) was announced, but no delete of it landed")
                }
            }
            // Day summaries against the samples.
            var sums: [String: Int64] = [:]
            for (_, sample) in live { sums[sample.date, default: 0] += sample.value }
            var summarized: [String: Int64] = [:]
            for change in feed where change.entity == "health.day" && change.upsert {
                summarized[change.id] = Int64(change.data?["metrics"]?[Workload.stepType]?["sum"]?.numberValue ?? 0)
            }
            for date in Set(sums.keys).union(summarized.keys) where (sums[date] ?? 0) != (summarized[date] ?? 0) {
                let on = live.filter { $0.value.date == date }.map { uuid, s in "\(uuid.prefix(8)) \(s.value) \(model.samples[uuid].map { "\($0.ingest) \($0.device ?? "phone")" } ?? "?")" }.sorted()
                throw Failure("user \(user): the summary of \(date) says \(summarized[date] ?? 0) steps, its samples \(sums[date] ?? 0): \(on.joined(separator: ", "))")
            }
            // The balance against the credits, redemptions and spends answered: each may count only
            // if it landed or may have.
            let balance = try simulation.ask("rewards.balance", user: user)["result"]
            let (xp, minutes) = (balance?["xp"]?.intValue ?? -1, balance?["minutes"]?.intValue ?? -1)
            func sum(_ amounts: [(amount: Int, fate: Fate)], _ fates: Set<Fate>) -> Int { amounts.filter { fates.contains($0.fate) }.reduce(0) { $0 + $1.amount } }
            let earned = model.earns.values.filter { $0.user == user }.map { ($0.xp, model.effective($0.fate, user: user, epoch: $0.epoch)) }
            let redeemed = model.redeems.values.filter { $0.user == user }.map { ($0.xp, model.effective($0.fate, user: user, epoch: $0.epoch)) }
            let spent = model.spends.values.filter { $0.user == user }.map { ($0.minutes, model.effective($0.fate, user: user, epoch: $0.epoch)) }
            let (sure, maybe): (Set<Fate>, Set<Fate>) = ([.landed], [.landed, .unknown])
            let xpRange = max(0, sum(earned, sure) - sum(redeemed, maybe))...max(0, sum(earned, maybe) - sum(redeemed, sure))
            let minuteRange = max(0, (sum(redeemed, sure) / Workload.rewardRate) - sum(spent, maybe))...max(0, (sum(redeemed, maybe) / Workload.rewardRate) - sum(spent, sure))
            guard xpRange.contains(Int(xp)), minuteRange.contains(Int(minutes)) else {
                throw Failure("user \(user): balance \(xp) XP and \(minutes) minutes, answers say \(xpRange) and \(minuteRange)")
            }
            // Sessions.
            let recorded = Set(feed.filter { $0.entity == "sessions.session" && $0.upsert }.compactMap { $0.data?["clientSessionId"]?.stringValue })
            for (id, stop) in model.stopped where stop.user == user && !recorded.contains(id)
                && model.erasure(user: user, epoch: stop.epoch) == nil {
                throw Failure("user \(user): timed session \(id), answered as stopped (\(stop.seconds) s), is gone")
            }
            for (id, session) in model.sessions where session.user == user {
                let fate = model.effective(session.fate, user: user, epoch: session.epoch)
                if fate == .landed, !recorded.contains(id) { throw Failure("user \(user): session \(id), answered as recorded, is gone") }
                if fate == .absent, recorded.contains(id) { throw Failure("user \(user): session \(id) is there, but was refused") }
            }
            // Screen Time days: each holds an upload and a claim that may have landed (or none when none
            // landed for sure), and its verdict is the rule's for the two.
            for change in feed where change.entity == "screentime.day" && change.upsert {
                let key = Model.uploadKey(user: user, date: change.id)
                for (field, sent) in [("verifiedMinutes", effective(model.uploads[key] ?? [], user)), ("claimedMinutes", effective(model.claims[key] ?? [], user))] {
                    let minutes = change.data?[field]?.intValue
                    let possible = minutes.map { m in sent.contains { Int64($0.minutes) == m && $0.fate != .absent } }
                        ?? !sent.contains { $0.fate == .landed }
                    guard possible else {
                        throw Failure("user \(user): Screen Time day \(change.id) holds \(field) \(minutes.map(String.init) ?? "none"), which no answer allows")
                    }
                }
                let config = ScreenTimeConfig()
                let verdict = Rules.verdict(claimed: change.data?["claimedMinutes"]?.intValue, verified: change.data?["verifiedMinutes"]?.intValue,
                                            toleranceMinutes: config.toleranceMinutes, pointsPerMinute: config.pointsPerMinute)
                let stored = (change.data?["status"]?.stringValue, change.data?["deltaMinutes"]?.intValue, change.data?["penaltyPoints"]?.intValue)
                guard stored == (verdict.status.rawValue, verdict.deltaMinutes, verdict.penaltyPoints) else {
                    throw Failure("user \(user): Screen Time day \(change.id) says \(stored), its minutes give \(verdict)")
                }
            }
            let days = Set(feed.filter { $0.entity == "screentime.day" && $0.upsert }.map(\.id))
            for date in (0..<Workload.days).map(Workload.date) where !days.contains(date) {
                let key = Model.uploadKey(user: user, date: date)
                if (effective(model.uploads[key] ?? [], user) + effective(model.claims[key] ?? [], user)).contains(where: { $0.fate == .landed }) {
                    throw Failure("user \(user): Screen Time day \(date), answered as uploaded or claimed, is gone")
                }
            }
        }
    }

    /// One purchase unlocks one account, across kernels and crashes: at most one user's verify of it is
    /// answered as made, and a verify refused as another user's has someone else's that landed or may
    /// have; the user it went to has a membership. A notification applies once: at most one delivery is
    /// answered as new, and one called a duplicate has another that was applied or may have been.
    func checkPurchases() throws {
        let model = simulation.model
        for (original, verifies) in model.verifies.sorted(by: { $0.key < $1.key }) {
            // A deleted account released its purchases: only verifies no deletion erased own one now.
            let owners = Set(verifies.filter { model.effective($0.fate, user: $0.user, epoch: $0.epoch) == .landed }.map(\.user))
            guard owners.count <= 1 else { throw Failure("purchase \(original) was verified for users \(owners.sorted()), one purchase unlocks one account") }
            for refused in verifies where refused.ownedByOther {
                guard verifies.contains(where: { $0.user != refused.user && [.landed, .unknown].contains($0.fate) }) else {
                    throw Failure("user \(refused.user)'s verify of purchase \(original) was refused as another user's, but no other user's landed")
                }
            }
            if let owner = owners.first {
                let status = try simulation.ask("subscriptions.status", user: owner)["result"]?["status"]?.stringValue
                guard status == "active" else { throw Failure("user \(owner), whose verify of \(original) landed, has membership \(status ?? "nil")") }
            }
        }
        for (uuid, notice) in model.notices.sorted(by: { $0.key < $1.key }) {
            // An account deletion releases the notifications applied to its purchases: one may apply again.
            let applied = notice.deliveries.filter { $0.fate == .landed && $0.duplicate == false }.count
            let deletions = model.deletions.values.reduce(0) { $0 + $1.filter { $0 != .absent }.count }
            guard applied <= 1 + deletions else { throw Failure("notification \(uuid) was applied \(applied) times") }
            if notice.deliveries.contains(where: { $0.fate == .landed && $0.duplicate == true }) {
                guard applied >= 1 || notice.deliveries.contains(where: { $0.fate == .unknown }) else {
                    throw Failure("notification \(uuid) was called a duplicate, but no delivery of it was applied")
                }
            }
        }
    }

    /// Screen Time uploads or claims with the deletions after each counted.
    private func effective(_ sent: [(minutes: Int, fate: Fate, epoch: Int)], _ user: Int) -> [(minutes: Int, fate: Fate)] {
        sent.map { ($0.minutes, simulation.model.effective($0.fate, user: user, epoch: $0.epoch)) }
    }

    struct Change {
        let seq: Int64
        let entity: String
        let id: String
        let upsert: Bool
        let data: JSON?
    }

    /// The user's whole feed from the beginning, page by page: positions strictly increasing, and each
    /// record once.
    private func readFeed(_ user: Int) throws -> [Change] {
        var changes: [Change] = []
        var seen = Set<String>()
        var cursor: String?
        for _ in 0..<10_000 {
            var params = JSONObject()
            params["includeData"] = true
            params["limit"] = 1000
            if let cursor { params["since"] = .string(cursor) }
            let answer = try simulation.ask("sync.changes", user: user, params)
            guard let result = answer["result"] else { throw Failure("user \(user): the feed could not be read: \(answer.serialized)") }
            for item in result["changes"]?.arrayValue ?? [] {
                let change = Change(seq: item["seq"]?.intValue ?? 0, entity: item["entity"]?.stringValue ?? "", id: item["id"]?.stringValue ?? "",
                                    upsert: item["op"]?.stringValue == "upsert", data: item["data"])
                if let last = changes.last, change.seq <= last.seq { throw Failure("user \(user): feed position \(change.seq) after \(last.seq)") }
                guard seen.insert(change.entity + " " + change.id).inserted else { throw Failure("user \(user): \(change.entity) \(change.id) twice in one read of the feed") }
                changes.append(change)
            }
            cursor = result["cursor"]?.stringValue
            if result["hasMore"] != .bool(true) { return changes }
        }
        throw Failure("user \(user): the feed never ended")
    }
}
