import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

// The wire forms of the kernel's own methods, each with its schema from one declaration.

/// `rpc.discover`'s answer: the OpenRPC document, as the registry builds it.
struct OpenRPCDocument: RPCResult {
    let document: JSON

    static let schema: JSON = ["type": "object", "required": ["openrpc", "info", "methods"],
                               "properties": ["openrpc": Schema.string, "info": ["type": "object"], "methods": ["type": "array"]]]
    var json: JSON { document }
}

/// `kernel.info`'s answer. `durability`, `store` and the domains' sections (`appStore`) are rendered by
/// the store and the domains that know them; their schemas are stated here, where the answer is.
struct KernelInfoReport: RPCResult {
    let startedAt: Timestamp
    let uptimeSeconds: Int64
    let durability: JSON
    let store: JSON
    let users: Int
    let records: Int
    let requests: (total: UInt64, errors: UInt64, retries: UInt64, p50: UInt64, p99: UInt64)
    let sections: [(String, JSON)]

    static let requestFields = ResultFields<KernelInfoReport>(
        ResultField("total", Schema.count) { .int(Int64($0.requests.total)) },
        ResultField("errors", Schema.count) { .int(Int64($0.requests.errors)) },
        ResultField("retries", Schema.count) { .int(Int64($0.requests.retries)) },
        ResultField("p50Micros", Schema.count) { .int(Int64($0.requests.p50)) },
        ResultField("p99Micros", Schema.count) { .int(Int64($0.requests.p99)) })

    static let fields = ResultFields<KernelInfoReport>(
        ResultField("name", Schema.constant("healthkernel")) { _ in "healthkernel" },
        ResultField("version", Schema.string) { _ in .string(KernelVersion.version) },
        ResultField("protocolVersion", Schema.string) { _ in .string(KernelVersion.protocolVersion) },
        ResultField("startedAt", Schema.timestamp) { .string($0.startedAt.description) },
        ResultField("uptimeSeconds", Schema.count) { .int($0.uptimeSeconds) },
        ResultField("durability", [
            "type": "object", "additionalProperties": false, "required": ["dataDir", "fsync", "lastSnapshotAt", "walBytes"],
            "properties": [
                "dataDir": Schema.described(Schema.nullable(Schema.string), "null in memory-only mode"),
                "fsync": Schema.nullable(Schema.oneOf(FsyncMode.allCases.map(\.rawValue))),
                "lastSnapshotAt": Schema.nullable(Schema.timestamp),
                "walBytes": Schema.count,
            ],
        ]) { $0.durability },
        .optional("store", [
            "type": "object", "additionalProperties": false, "required": ["kind"],
            "description": "which store keeps the data: memory (memory-only), dataDir, or postgres with where it is (never a password)",
            "properties": ["kind": Schema.oneOf(["memory", "dataDir", "postgres"]), "host": Schema.string, "port": Schema.string,
                           "database": Schema.string, "schema": Schema.string],
        ]) { $0.store },
        .optional("appStore", [
            "type": "object", "additionalProperties": false, "required": ["serverApi"],
            "properties": ["serverApi": [
                "type": "object", "additionalProperties": false, "required": ["configured", "lastSuccessAt", "lastFailureAt", "lastFailure"],
                "description": "the App Store Server API: whether a key is configured (refresh in api mode), and since start-up the last call Apple answered and the last that failed, with why (never the key)",
                "properties": ["configured": Schema.boolean, "lastSuccessAt": Schema.nullable(Schema.timestamp),
                               "lastFailureAt": Schema.nullable(Schema.timestamp), "lastFailure": Schema.nullable(Schema.string)],
            ]],
        ]) { info in info.sections.first { $0.0 == "appStore" }?.1 },
        ResultField("counts", ["type": "object", "required": ["users", "records"], "additionalProperties": Schema.count]) {
            ["users": .int(Int64($0.users)), "records": .int(Int64($0.records))]
        },
        ResultField("requests", requestFields.schema) { requestFields.encode($0) })
    static var schema: JSON { fields.schema }
    var json: JSON { Self.fields.encode(self) }
}

/// `kernel.snapshot`'s answer.
struct SnapshotReport: RPCResult {
    let info: (seq: UInt64, bytes: Int, durationMs: Int)

    static let fields = ResultFields<SnapshotReport>(
        ResultField("seq", Schema.described(Schema.count, "last log record the snapshot covers")) { .int(Int64($0.info.seq)) },
        ResultField("bytes", Schema.count) { .int(Int64($0.info.bytes)) },
        ResultField("durationMs", Schema.count) { .int(Int64($0.info.durationMs)) })
    static var schema: JSON { fields.schema }
    var json: JSON { Self.fields.encode(self) }
}

/// `events.subscribe`'s answer.
struct Subscribed: RPCResult {
    /// nil in `events.renew`'s answer.
    let horizon: UInt64?
    /// When the subscription ends (its token's `exp`); nil: never.
    let endsAt: Int64?

    static let fields = ResultFields<Subscribed>(
        ResultField("subscribed", Schema.constant(true)) { _ in true },
        ResultField.optional("seq", Schema.described(Schema.count, "informational: the greatest feed position given so far (kernel-wide on the data dir; on PostgreSQL positions are per user, and this is the greatest of any user's); events.subscribe only")) {
            $0.horizon.map { .int(Int64($0)) }
        },
        ResultField.optional("endsAt", Schema.described(["type": "string", "format": "date-time"], "when the subscription ends: the service token's expiry; events.ending comes 5 minutes before, events.ended at it")) {
            $0.endsAt.map { .string(Timestamp(milliseconds: $0 * 1000).description) }
        })
    static var schema: JSON { fields.schema }
    var json: JSON { Self.fields.encode(self) }
}

/// `events.unsubscribe`'s answer.
struct Unsubscribed: RPCResult {
    static let fields = ResultFields<Unsubscribed>(ResultField("subscribed", Schema.constant(false)) { _ in false })
    static var schema: JSON { fields.schema }
    var json: JSON { Self.fields.encode(self) }
}

/// `kernel.setOrdering`'s answer.
struct OrderingSet: RPCResult {
    let mode: ResponseOrdering

    static let fields = ResultFields<OrderingSet>(
        ResultField("mode", Schema.oneOf(ResponseOrdering.allCases.map(\.rawValue))) { .string($0.mode.rawValue) })
    static var schema: JSON { fields.schema }
    var json: JSON { Self.fields.encode(self) }
}
