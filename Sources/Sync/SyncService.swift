import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

/// The per-user change feed as clients read it (`sync.changes`): every committed change to one of the
/// user's synced records, the latest per record, in feed order, from a cursor. Confined to the serving
/// thread.
public final class SyncService: @unchecked Sendable {
    let store: any Storage
    /// How each entity is shown with `includeData`, by entity name: the record as its read method gives it.
    let renderers: EntityRenderers
    private let cursors: CursorSeal
    /// Bytes of records a page with `includeData` carries at most; it ends early (`hasMore`) past them.
    let pageBytes: Int

    /// A service over `store`'s feed; `cursorSecrets` (the first signs, all open) cursors so a foreign or altered one is refused.
    public init(store: any Storage, renderers: EntityRenderers, cursorSecrets: [[UInt8]], maxAnswerBytes: Int = 16 << 20) {
        self.store = store
        pageBytes = maxAnswerBytes - AnswerSize.margin
        self.renderers = renderers
        cursors = CursorSeal(purpose: "sync", secrets: cursorSecrets)
    }

    /// The entity names a feed can hold.
    public var entityNames: Set<String> { Set(renderers.byName.keys) }

    // MARK: Cursors

    /// A cursor: the feed position, and a tag binding it to the user (a cursor of another user, or one
    /// changed by hand, does not verify).
    func encodeCursor(user: String, position: UInt64) -> String {
        cursors.seal(String(position), user: user)
    }

    func decodeCursor(user: String, _ text: String) -> UInt64? {
        cursors.open(text, user: user, maxBytes: 128).flatMap { UInt64($0) }
    }

    // MARK: Reading the feed

    func changes(_ user: String, since: String?, limit: Int, entities: Set<String>?, includeData: Bool,
                 now: Timestamp) throws(RPCError) -> ChangePage {
        var position: UInt64? = nil
        if let since {
            guard let p = decodeCursor(user: user, since) else {
                throw RPCError.invalidParams("params.since", reason: "invalid_params", "params.since is not a cursor of this feed")
            }
            guard p <= (try horizon(user)) else {
                throw RPCError.invalidParams("params.since", reason: "out_of_range", "params.since is ahead of this feed")
            }
            position = p
        }
        let page: FeedPage
        do {
            page = try store.feed(user: user, after: position, limit: limit, entities: entities)
        } catch {
            throw RPCError.from(error)
        }
        if let position, position < page.forgottenThrough {
            throw RPCError.invalidParams("params.since", reason: "cursor_expired",
                                         "params.since is older than deletes the feed no longer holds (limits.tombstonesPerUser); read the feed again from the start, without since, and keep only what it returns")
        }
        var out: [JSON] = []
        out.reserveCapacity(page.entries.count)
        var bytes = 0
        var cut: UInt64?  // the last entry of a page ended early by its size
        for entry in page.entries {
            let change = try json(user, entry, includeData: includeData, now: now)
            if includeData {
                // Records with `raw` are up to 256 KiB: a page of 1,000 could pass the answer limit.
                bytes += change.bytes.count + 1
                if bytes > pageBytes, let last = out.last?["seq"]?.intValue {
                    cut = UInt64(last)
                    break
                }
            }
            out.append(change)
        }
        // Past the last entry, the cursor moves to the feed's horizon: every later change lies beyond it,
        // whatever the entities asked for, so a filtered feed does not rescan what it skipped.
        let more = page.hasMore || cut != nil
        let next: UInt64
        if let cut { next = cut } else if page.hasMore { next = page.entries.last?.position ?? position ?? 0 } else { next = try horizon(user) }
        return ChangePage(changes: out, cursor: encodeCursor(user: user, position: next), hasMore: more)
    }

    /// The user's last feed position: a cursor past the end of a page points there.
    private func horizon(_ user: String) throws(RPCError) -> UInt64 {
        do { return try store.lastFeedPosition(of: user) } catch { throw RPCError.from(error) }
    }

    private func json(_ user: String, _ entry: FeedEntry, includeData: Bool, now: Timestamp) throws(RPCError) -> JSON {
        var data: JSON?
        if includeData && entry.op == .upsert { data = try renderers.byName[entry.entity]?(user, entry.id, now) ?? JSON.null }
        return Change.fields.encode(Change(entry: entry, data: data))
    }
}

/// One entry of the feed as answered: with `includeData`, an upsert carries its record as the entity's
/// read method shows it (null when it is gone).
struct Change: Sendable {
    let entry: FeedEntry
    let data: JSON?

    static let fields = ResultFields<Change>(
        ResultField("seq", Schema.count) { .int(Int64($0.entry.position)) },
        ResultField("entity", Schema.string) { .string($0.entry.entity) },
        ResultField("id", Schema.string) { .string($0.entry.id) },
        ResultField("op", Schema.oneOf(["upsert", "delete"])) { .string($0.entry.op.rawValue) },
        ResultField("at", Schema.timestamp) { .timestamp($0.entry.at) },
        .optional("data", [:]) { $0.data })
}

/// `sync.changes`' answer: a page of changes (encoded as they were sized) and the cursor after it.
public struct ChangePage: RPCResult {
    let changes: [JSON]
    let cursor: String
    let hasMore: Bool

    static let fields = ResultFields<ChangePage>(
        ResultField("changes", Schema.array(Change.fields.schema)) { .array($0.changes) },
        ResultField("cursor", Schema.string) { .string($0.cursor) },
        ResultField("hasMore", Schema.boolean) { .bool($0.hasMore) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}
