import DomainSupport
import JSON
import JSONRPC

/// `sync.changes`.
public struct SyncChanges: RPCMethod {
    public struct Params: RPCParams {
        let since: String?
        let limit: Int
        let entities: [String]?
        let includeData: Bool

        public init(from p: inout ObjectReader) throws(FieldError) {
            since = try p.optional("since")
            if let since, since.utf8.count > 128 { throw .outOfRange(p.path("since"), "is not a cursor of this feed") }
            limit = Int(try p.optional("limit", in: 1...1000) ?? 100)
            entities = try p.optional("entities")
            if let entities, !(1...50).contains(entities.count) {
                throw .outOfRange(p.path("entities"), "must name 1 to 50 entities")
            }
            includeData = try p.optional("includeData") ?? false
        }
    }
    public static let name = "sync.changes"
    public static let summary = "The caller's change feed after a cursor: the latest committed change of each synced record, oldest first, each once; store `cursor` and call again for what changed since."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let paramsDoc = #"""
    [{"name": "since", "required": false, "schema": {"type": "string", "description": "the cursor of an earlier answer; omitted: from the beginning"}},
     {"name": "limit", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
     {"name": "entities", "required": false, "schema": {"type": "array", "minItems": 1, "maxItems": 50, "items": {"type": "string"}}},
     {"name": "includeData", "required": false, "schema": {"type": "boolean", "description": "every upsert carries the record as its read method returns it"}}]
    """#
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false, "required": ["changes", "cursor", "hasMore"],
     "properties": {
       "changes": {"type": "array", "items": {"type": "object", "additionalProperties": false,
         "required": ["seq", "entity", "id", "op", "at"],
         "properties": {"seq": {"type": "integer", "minimum": 0}, "entity": {"type": "string"}, "id": {"type": "string"},
           "op": {"enum": ["upsert", "delete"]}, "at": {"type": "string", "format": "date-time"}, "data": {}}}},
       "cursor": {"type": "string"},
       "hasMore": {"type": "boolean"}}}
    """#
    let service: SyncService
    public init(_ service: SyncService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let known = service.entityNames
        for (i, name) in (p.entities ?? []).enumerated() where !known.contains(name) {
            throw RPCError.invalidParams("params.entities[\(i)]", reason: "out_of_range",
                                         "params.entities[\(i)] is not a synced entity (\(known.sorted().joined(separator: ", ")))")
        }
        return try service.changes(try c.userID(), since: p.since, limit: p.limit, entities: p.entities.map(Set.init),
                                   includeData: p.includeData, now: c.now)
    }
}
