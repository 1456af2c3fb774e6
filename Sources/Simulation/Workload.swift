import Foundation
import JSON
import TestSupport

/// The requests the simulation sends, over every domain with state a crash could lose: HealthKit
/// ingests and deletes (with the day summaries they recompute), reward credits, recorded and timed
/// sessions, Screen Time uploads, App Store purchases and notifications, and reads of summaries,
/// balances and the change feed between them.
enum Operation {
    case ingest([String])
    /// The watch re-sends day `day`: `kept` and `added` are its samples now; `removed` goes.
    case replace(day: Int, kept: [String], added: [String], removed: [String])
    case delete([String])
    case earn(String)
    case redeem(String)
    case spend(String)
    case record(String)
    /// The user's server-side session timer: started with a client session id, paused, resumed, stopped.
    case start(String)
    case pause
    case resume
    case stop
    case enable
    case upload(date: String, minutes: Int, index: Int)
    case claim(date: String, minutes: Int, index: Int)
    case summary(String)
    case balance
    /// A page of the user's feed after the cursor this client held for them when it sent it.
    case feed(since: String?)
    /// The stream asks for every change as an `events.changed` line (with a service token).
    case subscribe
    /// The user's App Store purchase `original` (one of a few per seed, so two users may claim one), the
    /// `index`th verify of it.
    case verify(original: String, index: Int)
    /// The App Store's notification `uuid` (one of a few, so some come again), its `index`th delivery.
    case notify(uuid: String, index: Int)
    /// The user deletes their account: every record of theirs goes (their token stays valid, and later
    /// writes start afresh); the user's `index`th.
    case deleteUser(index: Int)

    var name: String {
        switch self {
        case .ingest, .replace: "health.ingest"
        case .delete: "health.delete"
        case .earn: "rewards.earn"
        case .redeem: "rewards.redeem"
        case .spend: "rewards.spend"
        case .record: "sessions.record"
        case .start: "sessions.start"
        case .pause: "sessions.pause"
        case .resume: "sessions.resume"
        case .stop: "sessions.stop"
        case .enable: "screentime.updateConnection"
        case .upload: "screentime.upload"
        case .claim: "screentime.claim"
        case .summary: "health.summary"
        case .balance: "rewards.balance"
        case .feed: "sync.changes"
        case .subscribe: "events.subscribe"
        case .verify: "subscriptions.verify"
        case .notify: "subscriptions.notify"
        case .deleteUser: "auth.deleteUser"
        }
    }
}

/// One request sent: on which stream, for which user.
struct Sent {
    let id: Int64
    let stream: Int
    let user: Int
    let operation: Operation
}

enum Workload {
    static let days = 4
    static func date(_ day: Int) -> String { "2025-03-0\(day + 1)" }
    static let stepType = "HKQuantityTypeIdentifierStepCount"
    /// XP a minute of unlock costs (the kernel's default).
    static let rewardRate = 10
    /// Signs App Store data as Apple would; the kernels trust its root.
    static let appStore = AppStoreTestCA(name: "healthkernel simulation root")
    static let productId = "premium.monthly"
    static let dayMs: Int64 = 86_400_000
    static let purchases = 3

    /// Draws the next operation for `user` (and records in `model` what it writes). An account deletion
    /// only when nothing of the user is in flight (`idle`), so that every write is before or after it.
    static func draw(user: Int, idle: Bool, dice: inout Dice, model: inout Model, minutes: inout [Int]) -> Operation {
        let epoch = model.epoch(user)
        let deletable = model.sampleOrder.filter {
            let s = model.samples[$0]!
            return s.user == user && s.ingest == .landed && s.delete == nil && !model.held.contains($0) && !model.replacing.contains("\(user) \(s.day)")
                && model.erasure(user: user, epoch: s.epoch) == nil
        }
        let kind = dice.weighted([("ingest", 30), ("replace", 6), ("delete", deletable.isEmpty ? 0 : 8), ("earn", 12), ("redeem", 5), ("spend", 4), ("record", 8), ("timer", 8), ("enable", 3),
                                  ("upload", 10), ("claim", 6), ("summary", 8), ("balance", 5), ("feed", 12),
                                  ("verify", 3), ("notify", 2), ("deleteUser", idle ? 15 : 0)])
        switch kind {
        case "ingest":
            var uuids: [String] = []
            for _ in 0..<(1 + dice.below(6)) {
                let day = dice.below(days)
                // Minutes never repeat within a user's day: the day's steps are a plain sum.
                minutes[day] += 1
                let sample = Sample(uuid: dice.uuid(), user: user, day: day, minute: minutes[day], value: 1 + dice.below(500), epoch: epoch)
                model.samples[sample.uuid] = sample
                model.sampleOrder.append(sample.uuid)
                uuids.append(sample.uuid)
            }
            return .ingest(uuids)
        case "replace":
            // Mostly a day the watch has sent before, so that something is replaced.
            let watched = Set(model.samples.values.filter { $0.user == user && $0.device == "watch" }.map(\.day)).sorted()
            let day = !watched.isEmpty && dice.below(4) > 0 ? watched[dice.below(watched.count)] : dice.below(days)
            let watch = model.sampleOrder.filter { model.samples[$0]!.user == user && model.samples[$0]!.day == day && model.samples[$0]!.device == "watch" }
            // Only when its answer alone decides each sample: nothing of that day in flight. A sample whose
            // ingest or delete is unknown may or may not be there, and stays so whatever the replace does.
            let inFlight = watch.contains { model.samples[$0]!.ingest == .pending || model.samples[$0]!.delete == .pending }
            guard !inFlight, !model.replacing.contains("\(user) \(day)") else { return .summary(date(day)) }
            // Not what an account deletion took (or may have): re-sent, it would be there again.
            let alive = watch.filter { model.samples[$0]!.ingest == .landed && [nil, .absent].contains(model.samples[$0]!.delete)
                && model.erasure(user: user, epoch: model.samples[$0]!.epoch) == nil }
            var (kept, removed): ([String], [String]) = ([], [])
            for uuid in alive { if dice.below(3) == 0 { kept.append(uuid) } else { removed.append(uuid) } }
            var added: [String] = []
            for _ in 0..<dice.below(4) {
                minutes[day] += 1
                var sample = Sample(uuid: dice.uuid(), user: user, day: day, minute: minutes[day], value: 1 + dice.below(500), epoch: epoch)
                sample.device = "watch"
                model.samples[sample.uuid] = sample
                model.sampleOrder.append(sample.uuid)
                added.append(sample.uuid)
            }
            for uuid in removed { model.samples[uuid]!.delete = .pending }
            model.held.formUnion(kept)
            model.replacing.insert("\(user) \(day)")
            return .replace(day: day, kept: kept, added: added, removed: removed)
        case "delete":
            var uuids: [String] = []
            for _ in 0..<(1 + dice.below(3)) {
                let uuid = deletable[dice.below(deletable.count)]
                guard model.samples[uuid]!.delete == nil else { continue }
                model.samples[uuid]!.delete = .pending
                uuids.append(uuid)
            }
            return .delete(uuids)
        case "earn":
            let key = "k\(dice.next() % 1_000_000_000)"
            model.earns[key] = (user, 1 + dice.below(50), .pending, epoch)
            return .earn(key)
        case "redeem":
            let key = "r\(dice.next() % 1_000_000_000)"
            model.redeems[key] = (user, rewardRate * (1 + dice.below(5)), .pending, epoch)
            return .redeem(key)
        case "spend":
            let key = "p\(dice.next() % 1_000_000_000)"
            model.spends[key] = (user, 1 + dice.below(10), .pending, epoch)
            return .spend(key)
        case "record":
            let id = "s\(dice.next() % 1_000_000_000)"
            model.sessions[id] = (user, .pending, epoch)
            return .record(id)
        case "timer":
            // Mostly the next step of the user's timer as last sent (a start, then pauses and resumes,
            // then a stop), now and then one out of turn (refused as conflicts).
            let running = model.timing.contains(user)
            switch dice.weighted([("start", running ? 1 : 6), ("pause", running ? 2 : 1), ("resume", running ? 2 : 1), ("stop", running ? 5 : 1)]) {
            case "start":
                model.timing.insert(user)
                return .start("t\(dice.next() % 1_000_000_000)")
            case "pause": return .pause
            case "resume": return .resume
            default:
                model.timing.remove(user)
                return .stop
            }
        case "enable":
            return .enable
        case "upload":
            let date = date(dice.below(days))
            let minutes = dice.below(600)
            let key = Model.uploadKey(user: user, date: date)
            model.uploads[key, default: []].append((minutes, .pending, epoch))
            return .upload(date: date, minutes: minutes, index: model.uploads[key]!.count - 1)
        case "claim":
            let date = date(dice.below(days))
            let minutes = dice.below(600)
            let key = Model.uploadKey(user: user, date: date)
            model.claims[key, default: []].append((minutes, .pending, epoch))
            return .claim(date: date, minutes: minutes, index: model.claims[key]!.count - 1)
        case "verify":
            let original = "2000000\(dice.below(purchases))"
            if model.receipts[original] == nil { model.receipts[original] = receipt(original: original) }
            model.verifies[original, default: []].append((user, .pending, false, epoch))
            return .verify(original: original, index: model.verifies[original]!.count - 1)
        case "notify":
            let n = dice.below(purchases + 1)
            let uuid = "3f1c7c1e-0000-4000-8000-00000000000\(n)"
            if model.notices[uuid] == nil { model.notices[uuid] = (notification(uuid: uuid, original: "2000000\(n)"), []) }
            model.notices[uuid]!.deliveries.append((.pending, nil))
            return .notify(uuid: uuid, index: model.notices[uuid]!.deliveries.count - 1)
        case "deleteUser":
            model.deletions[user, default: []].append(.pending)
            model.deleting.insert(user)
            model.timing.remove(user)
            return .deleteUser(index: model.deletions[user]!.count - 1)
        case "summary":
            return .summary(date(dice.below(days)))
        case "balance":
            return .balance
        default:
            return .feed(since: nil)
        }
    }

    /// The request's params (its user's token added by the caller).
    static func params(_ operation: Operation, model: Model) -> JSONObject {
        var p = JSONObject()
        switch operation {
        case .ingest(let uuids):
            p["timezone"] = "UTC"
            p["samples"] = .array(uuids.map { uuid in
                let s = model.samples[uuid]!
                let at = "\(s.date)T\(String(s.minute / 60).leftPadded(2)):\(String(s.minute % 60).leftPadded(2)):00Z"
                return ["uuid": .string(uuid), "type": .string(stepType), "value": .int(Int64(s.value)), "unit": "count",
                        "start": .string(at), "end": .string(at)]
            })
        case .replace(let day, let kept, let added, _):
            p = params(.ingest(kept + added), model: model)
            p["deviceId"] = "watch"
            p["replaceDays"] = [.string(date(day))]
        case .delete(let uuids):
            p["uuids"] = .array(uuids.map { .string($0) })
        case .earn(let key):
            p["xp"] = .int(Int64(model.earns[key]!.xp))
            p["reason"] = "simulated"
            p["key"] = .string(key)
        case .redeem(let key):
            p["xp"] = .int(Int64(model.redeems[key]!.xp))
        case .spend(let key):
            p["minutes"] = .int(Int64(model.spends[key]!.minutes))
        case .record(let id):
            p["startTime"] = "2025-03-01T10:00:00Z"
            p["durationSeconds"] = 600
            p["clientSessionId"] = .string(id)
        case .start(let id):
            p["clientSessionId"] = .string(id)
        case .pause, .resume, .stop:
            break
        case .enable:
            p["enabled"] = true
        case .upload(let date, let minutes, _):
            p["date"] = .string(date)
            p["verifiedMinutes"] = .int(Int64(minutes))
        case .claim(let date, let minutes, _):
            p["date"] = .string(date)
            p["minutes"] = .int(Int64(minutes))
        case .summary(let date):
            p["from"] = .string(date)
            p["to"] = .string(date)
        case .balance, .subscribe, .deleteUser:
            break
        case .verify(let original, _):
            p["provider"] = "apple"
            p["productId"] = .string(productId)
            p["receipt"] = .string(model.receipts[original]!)
        case .notify(let uuid, _):
            p["signedPayload"] = .string(model.notices[uuid]!.payload)
        case .feed(let cursor):
            if let cursor { p["since"] = .string(cursor) }
            p["limit"] = 50
        }
        return p
    }

    /// A purchase made a day before the simulation began, renewing monthly.
    static func receipt(original: String, n: Int = 1, purchase: Int64 = Simulation.began - dayMs) -> String {
        appStore.sign(AppStorePayloads.transaction(id: "\(original)-\(n)", original: original, product: productId, purchase: purchase,
                                                   expires: purchase + 30 * dayMs, signed: purchase))
    }

    /// Purchase `original` renewed when the simulation began.
    static func notification(uuid: String, original: String) -> String {
        let at = Simulation.began
        return appStore.sign(AppStorePayloads.notification(uuid: uuid, type: "DID_RENEW", signed: at,
                                                           transaction: receipt(original: original, n: 2, purchase: at),
                                                           renewal: appStore.sign(AppStorePayloads.renewal(original: original, product: productId, signed: at))))
    }

    /// The App Store settings of the simulation's kernels: its signer's root, the payloads' bundle.
    static var appStoreRoots: [String] { [appStore.rootPEM] }
    static var bundleId: String { AppStorePayloads.bundleId }

    /// Records in `model` what the answer to `sent` says of its writes (nil: never answered).
    static func settle(_ sent: Sent, answer: JSON?, in model: inout Model) {
        let fate = answer.map(Fate.of) ?? .unknown
        switch sent.operation {
        case .ingest(let uuids):
            for uuid in uuids { model.samples[uuid]!.ingest = fate }
        case .replace(let day, let kept, let added, let removed):
            for uuid in added { model.samples[uuid]!.ingest = fate }
            for uuid in removed { model.samples[uuid]!.delete = fate }
            model.held.subtract(kept)
            model.replacing.remove("\(sent.user) \(day)")
        case .delete(let uuids):
            for uuid in uuids { model.samples[uuid]!.delete = fate }
        case .earn(let key):
            model.earns[key]!.fate = fate
        case .redeem(let key):
            model.redeems[key]!.fate = fate
        case .spend(let key):
            model.spends[key]!.fate = fate
        case .record(let id):
            model.sessions[id]!.fate = fate
        case .upload(let date, _, let index):
            model.uploads[Model.uploadKey(user: sent.user, date: date)]![index].fate = fate
        case .claim(let date, _, let index):
            model.claims[Model.uploadKey(user: sent.user, date: date)]![index].fate = fate
        case .verify(let original, let index):
            model.verifies[original]![index].fate = fate
            model.verifies[original]![index].ownedByOther = answer?["error"]?["code"]?.intValue == -32009
        case .notify(let uuid, let index):
            model.notices[uuid]!.deliveries[index] = (fate, answer?["result"]?["duplicate"].map { $0 == .bool(true) })
        case .deleteUser(let index):
            model.deletions[sent.user]![index] = fate
            model.deleting.remove(sent.user)
        case .enable, .summary, .balance, .feed, .subscribe, .start, .pause, .resume, .stop:
            break
        }
    }
}
