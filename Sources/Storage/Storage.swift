import JSON

/// Storage as the domains see it: typed tables partitioned by user, with keys in order; global unique
/// keys; and one unit of work per request, committed all together or not at all. Reads and commits can
/// fail (a network-backed store will), and then nothing changed. Two stores implement it: `Store` (in
/// memory, journaled to a data dir) and `PostgresStore` (PostgreSQL, shared by several kernels).
public protocol Storage: AnyObject {
    /// Registers a table before the storage opens. With `orderedBy`, each user's rows are also kept in a
    /// second order, for `scanOrdered`: the string that function gives a row, then the row's key (an
    /// order key is the two together; derived, never stored).
    ///
    /// With `entity`, the table's rows are synced entities: every committed change to one appears in its
    /// user's change feed under that entity name (see `feed`).
    func table<Row: StoredRow>(_ name: String, of type: Row.Type, orderedBy orderKey: (@Sendable (Row) -> String)?,
                               entity: Entity?) -> any StorageTable<Row>
    /// Applies a request's unit of work all together, or nothing of it; it is durable (as the fsync
    /// policy says) before the request is answered.
    func commit(_ tx: Transaction) throws(StorageError)
    /// The user holding `key`, if anyone.
    func holder(of key: UniqueKey) throws(StorageError) -> String?
    /// Applies, before serving, a change that an upgrade of older stored data recomputes at every start:
    /// the data dir does not log it (it is derived again at each start); PostgreSQL commits it.
    func upgrade(_ tx: Transaction)
    /// `user`'s change feed after position `after` (from the start when nil), oldest first: at most
    /// `limit` entries, of the entities named (every entity when nil). The feed holds the latest
    /// committed change of each synced record, a delete included.
    func feed(user: String, after: UInt64?, limit: Int, entities: Set<String>?) throws(StorageError) -> FeedPage
    /// The last feed position committed so far for `user` (every later change of the user has a greater
    /// one), or over every user when nil (informational on a shared database).
    func lastFeedPosition(of user: String?) throws(StorageError) -> UInt64
    /// A read-only view of `user`'s rows of `table` that a worker thread may read while requests go on
    /// being served: the slow part of a big request reads it. In memory it is a copy as of now; on
    /// PostgreSQL it reads on a pooled connection without the user's lock, so its reads may be older
    /// than the commit, which `version(of:)` then tells. A transaction written through it changes
    /// `table` itself.
    func view<Row: StoredRow>(_ table: any StorageTable<Row>, user: String) -> any StorageTable<Row>
    /// A number that changes whenever a commit (on any kernel sharing the store), or the undo of one,
    /// changes `user`'s rows: reads made through a view are still current at commit when it has not
    /// changed since the view was made.
    func version(of user: String) throws(StorageError) -> UInt64
    /// Numbers that change whenever `user`'s rows of `tables` change (as `version(of:)` for those
    /// tables only): a plan that read only those tables is still current when they have not changed,
    /// whatever else of the user's changed. A store that cannot tell tables apart answers `version(of:)`.
    func versions(of user: String, in tables: [TableHandle]) throws(StorageError) -> [UInt64]
    /// The versions (as `versions(of:in:)`) that views of `user` made now read: what a plan read through
    /// them is checked against when it commits. Views see every commit made so far; on PostgreSQL they
    /// read committed rows on other connections, so the batch's writes of `user` not yet committed are
    /// committed first (one commit, only when the batch wrote that user). Otherwise the version would
    /// count writes the views cannot see, and a plan made without them would pass the check.
    func viewedVersions(of user: String, in tables: [TableHandle]) throws(StorageError) -> [UInt64]
    /// Ends the current request's scope. The scope opened with the request's first read: on a shared
    /// database a transaction holding the lock of every user read. A commit closes it too; this ends one
    /// that did not commit (reads only, or a refusal), and is harmless after a commit.
    func endRequest()
    /// Begins a request's unit of work (or one part of a slow request: its start, or applying its
    /// result): the reads, prefetches, writes and unique-key claims until `endUnit` are its own. With
    /// `mayFinishLater`, a big commit of it (`Transaction.bigUnit`) may finish after `commit` returns:
    /// applied in slices between other requests on the data dir, detached on PostgreSQL; whoever allows
    /// it holds the request's answer until the commit `isApplied`.
    func beginUnit(mayFinishLater: Bool)
    /// Changes that the running unit's next commit makes in front of its own, atomically with them (an
    /// account its user needs first, say); dropped when the unit commits nothing, so that a request
    /// that fails or writes nothing changes nothing.
    func attachToUnit(_ tx: Transaction)
    /// The changes attached to the running unit and not yet committed. A request planned on a worker
    /// puts them in its own transaction there (`UnitOfWork.joined`), so that the commit finds them
    /// already in place instead of copying a month of changes on the serving thread to add them.
    var attachedToUnit: [Transaction.Entry] { get }
    /// Ends the unit begun last (its scope too, as `endRequest`), and returns the numbers of the commits
    /// it made, nil when it made none: what the request's answer depends on. Commit numbers count this
    /// storage's commits (`CommittedChange.commit`).
    func endUnit() -> ClosedRange<UInt64>?
    /// Says which rows the request is about to `get`, so that a store whose reads cross the network
    /// (PostgreSQL) fetches them together: one round trip, not one each. The in-memory store ignores
    /// it, and the list is then never built.
    func prefetch(_ rows: @autoclosure () -> [(table: TableHandle, user: String, key: String)]) throws(StorageError)
    /// Does the part of committing `tx` that reads no stored state, on any thread: the slow part of a big
    /// request calls it on its worker, so that the commit on the serving thread does less (the data dir
    /// writes the log record's bytes here; a month of samples is 12 MB of them). A change to `tx` after
    /// it undoes it. Optional: the commit does whatever was not prepared.
    func prepare(_ tx: inout Transaction)
}

extension Storage {
    public func versions(of user: String, in tables: [TableHandle]) throws(StorageError) -> [UInt64] { [try version(of: user)] }

    public func viewedVersions(of user: String, in tables: [TableHandle]) throws(StorageError) -> [UInt64] {
        try versions(of: user, in: tables)
    }

    public func prefetch(_ rows: @autoclosure () -> [(table: TableHandle, user: String, key: String)]) throws(StorageError) {}

    public func prepare(_ tx: inout Transaction) {}

    /// Registers a table kept in key order only.
    @inlinable
    public func table<Row: StoredRow>(_ name: String, of type: Row.Type, entity: Entity? = nil) -> any StorageTable<Row> {
        table(name, of: type, orderedBy: nil, entity: entity)
    }

    /// Registers a table with a second order (see `table(_:of:orderedBy:entity:)`).
    @inlinable
    public func table<Row: StoredRow>(_ name: String, of type: Row.Type, orderedBy orderKey: @escaping @Sendable (Row) -> String,
                                      entity: Entity? = nil) -> any StorageTable<Row> {
        table(name, of: type, orderedBy: .some(orderKey), entity: entity)
    }
}

/// What a store keeps of the unit of work now running (`Storage.beginUnit`): whether its big commit may
/// finish later, and the last commit number before it began, so that `end` names the unit's own commits.
public struct UnitOfWork: Sendable {
    public private(set) var mayFinishLater = false
    private var before: UInt64 = 0
    /// Changes the unit's next commit makes in front of its own (`Storage.attachToUnit`).
    private var attached: [Transaction.Entry] = []

    public init() {}

    public mutating func begin(mayFinishLater: Bool, lastCommit: UInt64) {
        self.mayFinishLater = mayFinishLater
        before = lastCommit
        attached = []
    }

    /// The unit's commits, nil when it made none; the next unit must begin again. Changes attached and
    /// not committed are dropped.
    public mutating func end(lastCommit: UInt64) -> ClosedRange<UInt64>? {
        mayFinishLater = false
        attached = []
        return lastCommit > before ? (before + 1)...lastCommit : nil
    }

    /// Whether the commit's change `own` decides what becomes of the attached change `attached`: it puts
    /// or deletes the same row, or deletes the user whole.
    static func overrides(_ own: Transaction.Entry, _ attached: Transaction.Entry) -> Bool {
        switch (own, attached) {
        case (.deleteUser(let user), _): return user == attached.user
        case (.put(let t, let u, let k, _), .put(let at, let au, let ak, _)), (.put(let t, let u, let k, _), .delete(let at, let au, let ak)),
             (.delete(let t, let u, let k), .put(let at, let au, let ak, _)), (.delete(let t, let u, let k), .delete(let at, let au, let ak)):
            return t === at && u == au && k == ak
        default: return false
        }
    }

    /// Changes for the unit's next commit (`Storage.attachToUnit`).
    public mutating func attach(_ tx: Transaction) {
        attached += tx.entries
    }

    /// The changes attached and not yet committed.
    public var pending: [Transaction.Entry] { attached }

    /// `tx` with the attached changes in front (once): the commit a store makes. A `tx` that already
    /// holds them (joined on a worker) is taken as it is; otherwise see `joined`. A `tx` prepared on a
    /// worker keeps its prepared form, extended by `extend` with the attached changes (nil: the store
    /// plans the whole commit again). O(changes of `tx`) when something is attached, nothing otherwise.
    public mutating func merge(_ tx: Transaction,
                               extend: (_ prepared: any Sendable, _ attached: [Transaction.Entry]) -> (any Sendable)? = { _, _ in nil })
        -> Transaction {
        guard !attached.isEmpty, !tx.isEmpty else { return tx }
        defer { attached = [] }
        let kept = Self.notOverridden(attached, by: tx)
        guard !kept.isEmpty else { return tx }
        var merged = Transaction(entries: kept + tx.entries)
        if let prepared = tx.prepared { merged.prepared = extend(prepared, kept) }
        return merged
    }

    /// `tx` with `attached` in front, where `tx`'s own changes win: an attached change of a row `tx`
    /// puts or deletes, or of a user it deletes whole, is left out. Pure, so a worker planning a month
    /// joins them there (a copy of the month's changes, off the serving thread); the commit then finds
    /// each attached change overridden by the same change of `tx` and copies nothing.
    public static func joined(_ attached: [Transaction.Entry], _ tx: Transaction) -> Transaction {
        let kept = notOverridden(attached, by: tx)
        return kept.isEmpty ? tx : Transaction(entries: kept + tx.entries)
    }

    /// One pass over the commit's changes per attached change (one account): no key is built per
    /// change, which for a month of samples cost the serving thread milliseconds.
    private static func notOverridden(_ attached: [Transaction.Entry], by tx: Transaction) -> [Transaction.Entry] {
        attached.filter { attached in !tx.entries.contains { overrides($0, attached) } }
    }
}

/// A table whose rows are synced entities: their public name (`screentime.day`) and how a row key
/// becomes the entity's id on the wire.
public struct Entity: Sendable {
    public let name: String
    public let id: @Sendable (String) -> String

    public init(_ name: String, id: @escaping @Sendable (String) -> String = { $0 }) {
        self.name = name
        self.id = id
    }
}

/// One entry of a user's change feed: the latest committed change of one entity.
public struct FeedEntry: Sendable, Equatable {
    public enum Op: String, Sendable { case upsert, delete }
    /// Its feed position (`seq` on the wire): increasing within the user's feed in commit order. On the
    /// data dir the positions also increase across users (kernel-wide); on PostgreSQL they are per user.
    public let position: UInt64
    public let entity: String
    public let id: String
    public let op: Op
    /// Commit time, milliseconds since 1970.
    public let at: Int64

    public init(position: UInt64, entity: String, id: String, op: Op, at: Int64) {
        self.position = position
        self.entity = entity
        self.id = id
        self.op = op
        self.at = at
    }
}

/// A committed change of a synced record, as host events announce it.
public struct CommittedChange: Sendable {
    public let user: String
    public let entry: FeedEntry
    /// The number of this kernel's commit that made it (the count `CommitTracker.lastCommitID` keeps), or
    /// nil for a change another kernel made (heard on a shared database). A subscription compares it
    /// with the count when it began; feed positions cannot serve, being per user on PostgreSQL.
    public let commit: UInt64?

    public init(user: String, entry: FeedEntry, commit: UInt64?) {
        self.user = user
        self.entry = entry
        self.commit = commit
    }
}

/// A page of a change feed.
public struct FeedPage: Sendable {
    public var entries: [FeedEntry]
    /// Whether more entries follow the last one.
    public var hasMore: Bool
    /// The greatest position of a delete the feed no longer holds (tombstones past the limit are
    /// dropped oldest first; see `Tombstones`), over the entities asked for; 0 when none was dropped. A
    /// cursor before it would miss that delete: its holder reads the feed again from the start.
    public var forgottenThrough: UInt64

    public init(entries: [FeedEntry], hasMore: Bool, forgottenThrough: UInt64 = 0) {
        self.entries = entries
        self.hasMore = hasMore
        self.forgottenThrough = forgottenThrough
    }
}

/// How many deleted rows' feed entries a user keeps per synced table. Deleting is never refused, so
/// without a bound delete-and-add cycles would grow a user's tombstones past any quota; past the limit
/// the oldest are dropped down to three quarters of it (so a drop happens once per quarter of the
/// limit of deletes, not on each), and the position of the newest one dropped is kept as the table's
/// *floor*: the tombstone of the empty key (no row has it), so that it is stored, snapshotted, moved
/// and deleted with the user exactly as tombstones are, on both stores, with no format of its own.
public enum Tombstones {
    /// The key of the floor's tombstone.
    public static let floorKey = ""
    /// How many a drop keeps of `limit`.
    public static func kept(of limit: Int) -> Int { limit - limit / 4 }
}

/// A table as a transaction names it: its name, and the slot the storage that made it keeps it in.
open class TableHandle: @unchecked Sendable {
    /// The table's name (`domain.things`).
    public let name: String
    /// Where the storage that registered the table finds it again.
    public let slot: Int

    public init(name: String, slot: Int) {
        self.name = name
        self.slot = slot
    }
}

/// A table of typed rows: one partition per user, keys in order within it.
public protocol StorageTable<Row>: TableHandle {
    associatedtype Row: StoredRow

    /// Row `key` of `user`.
    func get(user: String, key: String) throws(StorageError) -> Row?
    /// The rows of `user` among `keys` that exist, by key: many keys in one call (a network-backed
    /// store makes it one round trip; a month of samples is 43,200 keys).
    func get(user: String, keys: [String]) throws(StorageError) -> [String: Row]
    /// Rows of `user` in key order, or reverse key order: keys from `from` through `to` (either end open),
    /// beyond `after` in the scan direction (where the previous page ended), at most `limit`.
    func scan(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int)
        throws(StorageError) -> [(key: String, row: Row)]
    /// The same over the table's second order (see `Storage.table(_:of:orderedBy:)`).
    func scanOrdered(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int)
        throws(StorageError) -> [(key: String, row: Row)]
    /// Says that the request will make this `scanOrdered`, while the batch's reads are named ahead
    /// (`RPCMethod.declareReads`): a store across a network reads it with them, in one round trip. Other
    /// stores ignore it.
    func prefetchScanOrdered(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int)
    /// Rows of `user` whose order keys fall in any of `ranges` (both ends included), range after range,
    /// each in order: several runs of days in one call.
    func scanOrdered(user: String, ranges: [OrderRange]) throws(StorageError) -> [(key: String, row: Row)]
    /// Rows of every user in the table's second order, order keys up to `through`: the first `limit` of
    /// them, and how many such rows there are in all. For work that spans users, such as the daily
    /// re-check of every App Store membership, least recently checked first. On a store several kernels
    /// share, the rows returned are claimed until the request ends: another request's scan skips them.
    func scanAllOrdered(through: String, limit: Int) throws(StorageError) -> (rows: [(user: String, key: String, row: Row)], total: Int)
    /// How many users have rows.
    func userCount() throws(StorageError) -> Int
}

extension StorageTable {
    public func prefetchScanOrdered(user: String, from: String?, to: String?, after: String?, reverse: Bool, limit: Int) {}

    /// Every row of `user`, in key order.
    @inlinable
    public func rows(of user: String) throws(StorageError) -> [(key: String, row: Row)] {
        try scan(user: user, from: nil, to: nil, after: nil, reverse: false, limit: .max)
    }
}

/// A range of order keys, both ends included.
public struct OrderRange: Sendable, Equatable {
    public var from: String
    public var to: String

    public init(from: String, to: String) {
        self.from = from
        self.to = to
    }
}

/// A request's unit of work: puts, deletes and unique-key claims, applied all together or not at all.
/// It keeps the typed rows, so committing needs no decoding.
public struct Transaction {
    /// One change.
    public enum Entry: Sendable {
        case put(TableHandle, user: String, key: String, row: any StoredRow)
        case delete(TableHandle, user: String, key: String)
        /// Every row of the user in every table, and every unique key the user holds.
        case deleteUser(String)
        case claim(UniqueKey, user: String)
        case release(UniqueKey, user: String)

        /// The user whose rows the change touches.
        public var user: String? {
            switch self {
            case .put(_, let user, _, _), .delete(_, let user, _), .deleteUser(let user), .claim(_, let user), .release(_, let user): return user
            }
        }
    }

    /// The changes, in order.
    public private(set) var entries: [Entry] = [] {
        didSet { prepared = nil }
    }
    /// The entries in the store's own form, as `Storage.prepare` made them; nil once the entries change.
    public var prepared: (any Sendable)?

    /// An empty transaction.
    public init() {}

    init(entries: [Entry]) {
        self.entries = entries
    }

    /// Sets a row.
    public mutating func put<Row: StoredRow>(_ table: any StorageTable<Row>, user: String, key: String, _ row: Row) {
        entries.append(.put(table, user: user, key: key, row: row))
    }

    /// Removes a row.
    public mutating func delete<Row: StoredRow>(_ table: any StorageTable<Row>, user: String, key: String) {
        entries.append(.delete(table, user: user, key: key))
    }

    /// Removes every row of a user in every table, and releases every unique key the user holds.
    public mutating func deleteUser(_ user: String) {
        entries.append(.deleteUser(user))
    }

    /// Takes `key` for `user`. The commit fails with `StorageError.taken` when another user holds it.
    public mutating func claim(_ key: UniqueKey, for user: String) {
        entries.append(.claim(key, user: user))
    }

    /// Gives up `key`, if `user` holds it.
    public mutating func release(_ key: UniqueKey, of user: String) {
        entries.append(.release(key, user: user))
    }

    /// Whether there is nothing to commit.
    public var isEmpty: Bool { entries.isEmpty }

    /// Changes from which a unit of work is big (a month of samples is 43,000): a store prepares it on the
    /// worker (`Storage.prepare`) and, when the dispatcher allows (`mayFinishLater`), finishes it after
    /// `commit` returns, in slices or detached. Below it a commit takes under about 40 ms, and finishing
    /// it later would cost more than it saves.
    public static let bigUnit = 4096
}

/// A change moved in from another store (`store import`), with the feed stamp it had there, so that
/// every user's feed positions and their order survive a move and a device's cursor keeps working.
public struct RestoredChange {
    public enum Kind {
        /// A change of a unit of work (a row put or deleted, a user deleted, a unique key claimed or released).
        case change(Transaction.Entry)
        /// A deleted synced row's feed entry, without the row.
        case tombstone(TableHandle, user: String, key: String)
        /// The user's last feed position given (a user whose latest changes left nothing behind, after
        /// `auth.deleteUser`, keeps it, so an old cursor never skips what comes after).
        case feedCounter(user: String)
    }
    public let kind: Kind
    /// Feed position in the user's feed; 0 when the source gave none (a row of a table that is not
    /// synced, or an export from before positions were carried: the target then gives one).
    public let position: UInt64
    /// Commit time, milliseconds since 1970.
    public let at: Int64

    public init(_ kind: Kind, position: UInt64, at: Int64) {
        self.kind = kind
        self.position = position
        self.at = at
    }
}

/// Stages changes to one table given in the stored form, by table name: how `store import` moves rows
/// between stores without knowing their types. Each store makes one per table it registers.
public struct StoredAccess {
    public let put: (inout Transaction, _ user: String, _ key: String, _ stored: JSON) throws(StorageError) -> Void
    public let delete: (inout Transaction, _ user: String, _ key: String) -> Void
    /// The table, as a transaction names it.
    public let handle: TableHandle

    public init<Row: StoredRow>(_ table: any StorageTable<Row>) {
        handle = table
        put = { tx, user, key, stored throws(StorageError) in
            guard Row.isValidKey(key) else { throw .corrupt("the key is not one this table can hold") }
            tx.put(table, user: user, key: key, try Row(stored: stored))
        }
        delete = { tx, user, key in tx.delete(table, user: user, key: key) }
    }
}

/// How the data dir makes writes durable before they are acknowledged (PostgreSQL's commit decides
/// there). Part of the storage contract: a write is answered only once it is as durable as this says.
public enum FsyncMode: String, Sendable, CaseIterable {
    /// fsync before answering; all requests of one read share one fsync.
    case always
    /// fsync at most a second later: up to one second of acknowledged writes at risk on power loss.
    case everysec
    /// Leave it to the operating system (tests, benchmarks): a crash of the machine may lose recent writes.
    case never

    /// What a data dir uses unless told otherwise.
    public static let standard = FsyncMode.always
}
