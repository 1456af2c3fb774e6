import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

/// An entry of `health.setSourceOrder`'s `sources`: at least one of `bundleId`, `name`, `deviceModel`.
extension SourceMatcher: ParamType {
    public static func decode(_ json: JSON, at path: String) throws(FieldError) -> SourceMatcher {
        var r = ObjectReader(try JSONObject.decode(json, at: path), path: path)
        let matcher = SourceMatcher(bundleId: try text(&r, "bundleId"), name: try text(&r, "name"), deviceModel: try text(&r, "deviceModel"))
        try r.finish()
        guard matcher != SourceMatcher() else { throw .outOfRange(path, "must name a bundleId, name or deviceModel") }
        return matcher
    }

    private static func text(_ r: inout ObjectReader, _ key: String) throws(FieldError) -> String? {
        guard let value: String = try r.optional(key) else { return nil }
        guard !value.isEmpty, value.utf8.count <= 200 else { throw .outOfRange(r.path(key), "must be 1 to 200 bytes") }
        return value
    }

    public static var schema: JSON {
        let text: JSON = ["type": "string", "minLength": 1, "maxLength": 200]
        return ["type": "object", "additionalProperties": false,
                "properties": ["bundleId": text, "name": text, "deviceModel": merge(text, "HKDevice.model: Watch, iPhone, ...")],
                "description": "a source: every field named must equal the source's"]
    }

    private static func merge(_ schema: JSON, _ description: String) -> JSON {
        guard case .object(var o) = schema else { return schema }
        o["description"] = .string(description)
        return .object(o)
    }
}

/// A type a source order can be set for: a HealthKit type the kernel knows, or sleep.
func orderedType(_ name: String, at path: String) throws(FieldError) -> String {
    guard name == HealthRules.sleepType || HealthType.named(name) != nil else {
        throw FieldError(field: path, reason: "invalid_params", message: "\(path) must be a HealthKit type identifier the kernel knows (or \(HealthRules.sleepType))")
    }
    return name
}

/// `health.setSourceOrder`: the type's days are recomputed on a worker, as an ingest's are.
public struct HealthSetSourceOrder: BulkRPCMethod {
    public struct Params: RPCParams {
        let type: String
        let sources: [SourceMatcher]
        public static let declaration = ParamList(
            required("type", maxBytes: 100).described("a HealthKit type identifier, or HKCategoryTypeIdentifierSleepAnalysis for sleep"),
            required("sources", items: SourceMatcher.self, minItems: 0, maxItems: SourceOrderRow.limit)
                .described("highest first; replaces the type's earlier list; empty: back to the default order"))
        public init(_ v: (String, [SourceMatcher])) throws(FieldError) {
            type = try orderedType(v.0, at: "params.type")
            sources = v.1
        }
    }
    public static let name = "health.setSourceOrder"
    public static let summary = "Sets the person's order of a type's sources (as the Health app's Data Sources list): listed sources rank first, the rest keep the default order; the type's days are recomputed."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func prepare(_ c: CallContext) throws(RPCError) -> PreparedIngest {
        let user = try c.userID()
        do { return try service.beginIngest(user, now: c.now) } catch { throw error.rpc }
    }
    public func work(_ p: Params, _ prepared: PreparedIngest) -> PlannedIngest { prepared.plan(.sourceOrder(p.type, p.sources)) }
    public func apply(_ planned: PlannedIngest, _ prepared: PreparedIngest, _ c: CallContext) throws(RPCError) -> SourceOrderSet {
        let report = try answer { () throws(HealthError) in try service.finishIngest(prepared, planned) }
        let (type, sources) = planned.request.sourceOrder ?? ("", [])
        return SourceOrderSet(order: SourceOrderRow(sources: sources), type: type, daysRecomputed: report.daysRecomputed)
    }
}

/// `health.setSourceOrder`'s answer.
public struct SourceOrderSet: RPCResult {
    let order: SourceOrderRow
    let type: String
    let daysRecomputed: [String]
    static let fields = ResultFields<SourceOrderSet>(
        ResultField("type", Schema.string) { .string($0.type) },
        ResultField("sources", Schema.array(SourceMatcher.schema)) { .array($0.order.sources.map(\.json)) },
        ResultField("daysRecomputed", Schema.array(Schema.date)) { .array($0.daysRecomputed.map(JSON.string)) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `health.sourceOrder`.
public struct HealthSourceOrder: RPCMethod {
    public struct Params: RPCParams {
        let types: [String]?
        public static let declaration = ParamList(optional("types", strings: 1...64, maxBytes: 100).described("type identifiers; default every type with an order"))
        public init(_ v: [String]?) throws(FieldError) {
            var checked: [String] = []
            for (i, name) in (v ?? []).enumerated() { checked.append(try orderedType(name, at: "params.types[\(i)]")) }
            types = v == nil ? nil : checked
        }
    }
    public static let name = "health.sourceOrder"
    public static let summary = "The person's source orders, per type (only types with one)."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: HealthService
    public init(_ service: HealthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> SourceOrders {
        let user = try c.userID()
        return SourceOrders(orders: try answer { () throws(HealthError) in try service.sourceOrders(user, types: p.types) })
    }
}

/// `health.sourceOrder`'s answer.
public struct SourceOrders: RPCResult {
    let orders: [(type: String, row: SourceOrderRow)]
    static let entry: JSON = ["type": "object", "additionalProperties": false, "required": ["type", "sources"],
                              "properties": ["type": Schema.string, "sources": Schema.array(SourceMatcher.schema)]]
    static let fields = ResultFields<SourceOrders>(
        ResultField("orders", Schema.array(entry)) { .array($0.orders.map { $0.row.json(type: $0.type) }) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}
