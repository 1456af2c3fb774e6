import DomainSupport
import JSON
import JSONRPC

/// `sync.changes`.
public struct SyncChanges: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            optional("since", String.self).schema(["maxLength": 128]).described("the cursor of an earlier answer; omitted: from the beginning")
                .checked { (since, path) throws(FieldError) in
                    if let since, since.utf8.count > 128 { throw .outOfRange(path, "is not a cursor of this feed") }
                },
            optional("limit", in: 1...1000, default: 100),
            optional("entities", strings: 1...50, maxBytes: 100).described("entity names to include; omitted: every entity"),
            optional("includeData", Bool.self).described("every upsert carries the record as its read method returns it"),
            optional("userId", String.self).schema(["maxLength": 200]).described("with a service_role token: the user whose feed; never with a user's token"))
        let since: String?
        let limit: Int
        let entities: [String]?
        let includeData: Bool
        let userId: String?

        public init(_ v: (String?, Int64, [String]?, Bool?, String?)) {
            (since, limit, entities, includeData, userId) = (v.0, Int(v.1), v.2, v.3 ?? false, v.4)
        }
    }
    public static let name = "sync.changes"
    public static let summary = "The caller's change feed after a cursor: the latest committed change of each synced record, oldest first, each once; store `cursor` and call again for what changed since."
    public static let mutates = false
    public static let auth = AuthRequirement.userOrService
    public static let errors = [ErrorDoc(.invalidParams, "cursor_expired: since is older than deletes past limits.tombstonesPerUser; read again without since")]

    /// The user whose feed is read: the token's, or with a service token the one `userId` names.
    static func user(_ p: Params, _ c: CallContext) throws(RPCError) -> String {
        let identity = try c.requireIdentity()
        guard identity.role == "service_role" else {
            guard p.userId == nil else {
                throw RPCError.invalidParams("params.userId", reason: "invalid_params", "params.userId is for service tokens; a user's token reads its own feed")
            }
            return try c.userID()
        }
        guard let user = p.userId, !user.isEmpty, !user.utf8.contains(0) else {
            throw RPCError.invalidParams("params.userId", reason: "missing_field", "params.userId is required with a service token")
        }
        return user
    }
    let service: SyncService
    public init(_ service: SyncService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> ChangePage {
        let known = service.entityNames
        for (i, name) in (p.entities ?? []).enumerated() where !known.contains(name) {
            throw RPCError.invalidParams("params.entities[\(i)]", reason: "out_of_range",
                                         "params.entities[\(i)] is not a synced entity (\(known.sorted().joined(separator: ", ")))")
        }
        return try service.changes(try Self.user(p, c), since: p.since, limit: p.limit, entities: p.entities.map(Set.init),
                                   includeData: p.includeData, now: c.now)
    }
}
