import JSON

/// What became of a write, as far as its client can know.
enum Fate: Equatable {
    /// Sent, not answered yet.
    case pending
    /// Answered with its result: it must be there after any crash.
    case landed
    /// Refused (its params, a rule) or answered "not applied": it must not be there.
    case absent
    /// Never answered (the kernel crashed first), or answered "outcome unknown" or "may not be durable":
    /// either, but the same in every later read.
    case unknown

    /// The fate an answer gives a write.
    static func of(_ answer: JSON) -> Fate {
        guard let error = answer["error"] else { return .landed }
        guard error["code"]?.intValue == -32050 else { return .absent }
        let message = error["message"]?.stringValue ?? ""
        return message.hasSuffix("the write was not applied") ? .absent : .unknown
    }
}

/// One HealthKit step sample the simulation sent.
struct Sample {
    let uuid: String
    let user: Int
    let day: Int
    let minute: Int
    let value: Int
    /// How many `auth.deleteUser` of its user were sent before it (`Model.erasure`).
    var epoch = 0
    /// The device that sent it: nil, or "watch" (sent only by ingests with `replaceDays`).
    var device: String? = nil
    var ingest: Fate = .pending
    /// Whether a delete was sent, and what became of it.
    var delete: Fate?

    var date: String { Workload.date(day) }
}

/// Everything the simulation sent whose effect can be checked, and what each answer said. Each sample,
/// idempotency key and session id is written by one request (a delete only after its ingest landed), so
/// that every fate is decided by one answer.
struct Model {
    var samples: [String: Sample] = [:]
    /// Sample UUIDs in the order sent (the order deletes are drawn from).
    var sampleOrder: [String] = []
    /// Each write below carries its user's `epoch` when it was sent (how many `auth.deleteUser` of theirs
    /// came before it), so that the deletions after it are counted (`effective`).
    var earns: [String: (user: Int, xp: Int, fate: Fate, epoch: Int)] = [:]
    /// XP turned into minutes, and minutes spent, by request.
    var redeems: [String: (user: Int, xp: Int, fate: Fate, epoch: Int)] = [:]
    var spends: [String: (user: Int, minutes: Int, fate: Fate, epoch: Int)] = [:]
    var sessions: [String: (user: Int, fate: Fate, epoch: Int)] = [:]
    /// Timed sessions whose `sessions.stop` was answered: their client session id, user, duration,
    /// the request that stopped them and its epoch.
    var stopped: [String: (user: Int, seconds: Int64, request: Int64, epoch: Int)] = [:]
    /// Users whose timer was last sent a start (what the workload draws next).
    var timing: Set<Int> = []
    /// Screen Time uploads per user and day: the minutes of each.
    var uploads: [String: [(minutes: Int, fate: Fate, epoch: Int)]] = [:]
    /// Screen Time claims per user and day, the same way.
    var claims: [String: [(minutes: Int, fate: Fate, epoch: Int)]] = [:]

    /// Each App Store purchase's receipt, and its verifies: by whom, what became of each, and whether it
    /// was refused as another user's (-32009).
    var receipts: [String: String] = [:]
    var verifies: [String: [(user: Int, fate: Fate, ownedByOther: Bool, epoch: Int)]] = [:]
    /// Each App Store notification's payload, and its deliveries: what became of each, and whether its
    /// answer called it a duplicate.
    var notices: [String: (payload: String, deliveries: [(fate: Fate, duplicate: Bool?)])] = [:]

    /// User-days ("user day") with a `replaceDays` ingest in flight, and the samples it re-sends: no
    /// other request may touch them until it is answered, so that one answer decides each.
    var replacing: Set<String> = []
    var held: Set<String> = []

    /// What `events.changed` announced of each sample: "upsert" or "delete".
    var announced: [String: Set<String>] = [:]
    /// The last feed position announced per user id.
    var lastAnnounced: [String: Int64] = [:]

    /// Per user, what became of each `auth.deleteUser` sent, in order; users with one in flight (nothing
    /// else of theirs is sent meanwhile, and one is sent only when nothing of theirs is in flight).
    var deletions: [Int: [Fate]] = [:]
    var deleting: Set<Int> = []

    /// How many `auth.deleteUser` of `user` were sent so far.
    func epoch(_ user: Int) -> Int { deletions[user]?.count ?? 0 }

    /// Whether what `user` wrote in `epoch` was erased since: `.landed` (a later deletion landed),
    /// `.unknown` (one may have), nil (none did).
    func erasure(user: Int, epoch: Int) -> Fate? {
        let later = (deletions[user] ?? []).dropFirst(epoch)
        if later.contains(.landed) { return .landed }
        return later.contains(where: { $0 == .unknown || $0 == .pending }) ? .unknown : nil
    }

    /// A write's fate with the deletions after it counted: erased, it is not there (`absent`); maybe
    /// erased, it may not be (`unknown`, unless it never was).
    func effective(_ fate: Fate, user: Int, epoch: Int) -> Fate {
        switch erasure(user: user, epoch: epoch) {
        case .landed?: return .absent
        case .unknown?: return fate == .absent ? .absent : .unknown
        default: return fate
        }
    }

    static func uploadKey(user: Int, date: String) -> String { "\(user) \(date)" }
}
