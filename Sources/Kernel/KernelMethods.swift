import Chrono
import DomainSupport
import JSON
import Auth
import JSONRPC
import Storage
import Store

/// `rpc.discover`: the OpenRPC document of every registered method.
struct RPCDiscover: RPCMethod {
    static let name = "rpc.discover"
    static let summary = "Returns the OpenRPC 1.3 document that describes every method of this kernel."
    static let mutates = false
    static let auth = AuthRequirement.none
    static let resultSchema = #"""
    {"type": "object", "required": ["openrpc", "info", "methods"],
     "properties": {"openrpc": {"type": "string"}, "info": {"type": "object"}, "methods": {"type": "array"}}}
    """#

    func call(_ params: NoParams, _ context: CallContext) throws(RPCError) -> JSON {
        do {
            return try context.registry.openRPCDocument()
        } catch {
            throw RPCError.internalError
        }
    }
}

/// `kernel.info`: identity, uptime, durability settings, record counts and request statistics.
struct KernelInfo: RPCMethod {
    static let name = "kernel.info"
    static let summary = "Describes the running kernel: version, uptime, durability, counts and request latencies."
    static let mutates = false
    static let auth = AuthRequirement.none
    static let resultSchema = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["name", "version", "protocolVersion", "startedAt", "uptimeSeconds", "durability", "counts", "requests"],
     "properties": {
       "name": {"const": "healthkernel"},
       "version": {"type": "string"},
       "protocolVersion": {"type": "string"},
       "startedAt": {"type": "string", "format": "date-time"},
       "uptimeSeconds": {"type": "integer", "minimum": 0},
       "durability": {"type": "object", "additionalProperties": false,
         "required": ["dataDir", "fsync", "lastSnapshotAt", "walBytes"],
         "properties": {
           "dataDir": {"type": ["string", "null"], "description": "null in memory-only mode"},
           "fsync": {"enum": ["always", "everysec", "never", null]},
           "lastSnapshotAt": {"type": ["string", "null"], "format": "date-time"},
           "walBytes": {"type": "integer", "minimum": 0}}},
       "store": {"type": "object", "additionalProperties": false, "required": ["kind"],
         "description": "which store keeps the data: memory (memory-only), dataDir, or postgres with where it is (never a password)",
         "properties": {
           "kind": {"enum": ["memory", "dataDir", "postgres"]},
           "host": {"type": "string"}, "port": {"type": "string"}, "database": {"type": "string"}, "schema": {"type": "string"}}},
       "appStore": {"type": "object", "additionalProperties": false, "required": ["serverApi"],
         "properties": {
           "serverApi": {"type": "object", "additionalProperties": false,
             "required": ["configured", "lastSuccessAt", "lastFailureAt", "lastFailure"],
             "description": "the App Store Server API: whether a key is configured (refresh in api mode), and since start-up the last call Apple answered and the last that failed, with why (never the key)",
             "properties": {
               "configured": {"type": "boolean"},
               "lastSuccessAt": {"type": ["string", "null"], "format": "date-time"},
               "lastFailureAt": {"type": ["string", "null"], "format": "date-time"},
               "lastFailure": {"type": ["string", "null"]}}}}},
       "counts": {"type": "object", "required": ["users", "records"],
         "additionalProperties": {"type": "integer", "minimum": 0}},
       "requests": {"type": "object", "additionalProperties": false,
         "required": ["total", "errors", "retries", "p50Micros", "p99Micros"],
         "properties": {
           "total": {"type": "integer", "minimum": 0},
           "errors": {"type": "integer", "minimum": 0},
           "retries": {"type": "integer", "minimum": 0},
           "p50Micros": {"type": "integer", "minimum": 0},
           "p99Micros": {"type": "integer", "minimum": 0}}}}}
    """#

    let startedAt: Timestamp
    let stats: RequestStats
    let store: any KernelStore
    let auth: AuthService
    let sections: InfoSections

    func call(_ params: NoParams, _ context: CallContext) throws(RPCError) -> JSON {
        let base: JSON = [
            "name": "healthkernel",
            "version": .string(KernelVersion.version),
            "protocolVersion": .string(KernelVersion.protocolVersion),
            "startedAt": .string(startedAt.description),
            "uptimeSeconds": .int(max(0, context.now.seconds - startedAt.seconds)),
            "durability": store.durabilityInfo,
            "store": store.storeInfo,
            "counts": ["users": .int(Int64(try count { () throws(StorageError) in try auth.userCount() })),
                       "records": .int(Int64(try count { () throws(StorageError) in try store.recordCount() }))],
            "requests": [
                "total": .int(Int64(stats.total)),
                "errors": .int(Int64(stats.errors)),
                "retries": .int(Int64(stats.retries)),
                "p50Micros": .int(Int64(stats.percentile(0.5))),
                "p99Micros": .int(Int64(stats.percentile(0.99))),
            ],
        ]
        guard var info = base.objectValue else { return base }
        for (name, render) in sections.byName { info[name] = render() }
        return .object(info)
    }
}

/// A count for `kernel.info`, or -32050 when the store cannot give it.
private func count(_ body: () throws(StorageError) -> Int) throws(RPCError) -> Int {
    do { return try body() } catch { throw RPCError.from(error) }
}

/// `kernel.snapshot`: writes a snapshot now and answers once it is durable.
struct KernelSnapshot: RPCMethod {
    static let name = "kernel.snapshot"
    static let summary = "Writes a snapshot of all data now; answers once it is durable. Older log segments are then removed."
    static let auth = AuthRequirement.service
    static let mutates = false
    static let errors = [ErrorDoc(.storageUnavailable, "Storage unavailable (memory-only kernel, or the snapshot could not be written)")]
    static let resultSchema = #"""
    {"type": "object", "additionalProperties": false, "required": ["seq", "bytes", "durationMs"],
     "properties": {
       "seq": {"type": "integer", "minimum": 0, "description": "last log record the snapshot covers"},
       "bytes": {"type": "integer", "minimum": 0},
       "durationMs": {"type": "integer", "minimum": 0}}}
    """#

    let store: any KernelStore

    func call(_ params: NoParams, _ context: CallContext) throws(RPCError) -> JSON {
        do {
            let info = try store.takeSnapshot()
            return ["seq": .int(Int64(info.seq)), "bytes": .int(Int64(info.bytes)), "durationMs": .int(Int64(info.durationMs))]
        } catch {
            throw RPCError.from(error)
        }
    }
}

/// `events.subscribe`: from the next batch on, an `events.changed` notification for every committed
/// change (of the topics named), written after the responses of the batch that made it durable.
struct EventsSubscribe: RPCMethod {
    struct Params: RPCParams {
        static let declaration = ParamList(
            optional("topics", strings: 1...50, maxBytes: 100)
                .described("entity names (screentime.day) or domains (screentime); omitted: every change"))
        let topics: [String]?
        init(_ topics: [String]?) { self.topics = topics }
    }
    static let name = "events.subscribe"
    static let summary = "Asks for an events.changed notification line for every committed change (filtered by topics: entity names or domain prefixes), written once the change is durable, after the responses of its batch."
    static let mutates = false
    static let auth = AuthRequirement.service
    static let resultSchema = #"""
    {"type": "object", "additionalProperties": false, "required": ["subscribed", "seq"],
     "properties": {"subscribed": {"const": true},
       "seq": {"type": "integer", "minimum": 0, "description": "informational: the greatest feed position given so far (kernel-wide on the data dir; on PostgreSQL positions are per user, and this is the greatest of any user's)"}}}
    """#

    let events: EventHub
    let store: any KernelStore

    func call(_ p: Params, _ context: CallContext) throws(RPCError) -> JSON {
        let horizon: UInt64
        do { horizon = try store.lastFeedPosition(of: nil) } catch { throw RPCError.from(error) }
        events.current.subscribe(p.topics ?? [], afterCommit: store.lastCommitID, endsAt: context.identity?.expiresAt)
        store.collectsChanges = true
        return ["subscribed": true, "seq": .int(Int64(horizon))]
    }
}

/// `events.unsubscribe`: no more `events.changed` notifications on this stream.
struct EventsUnsubscribe: RPCMethod {
    static let name = "events.unsubscribe"
    static let summary = "Stops the events.changed notifications of this stream."
    static let mutates = false
    /// No token needed: it only stops this stream's own notifications, and a host whose service token
    /// expired must still be able to.
    static let auth = AuthRequirement.none
    static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["subscribed"], "properties": {"subscribed": {"const": false}}}"#

    let events: EventHub
    let store: any KernelStore

    func call(_ p: NoParams, _ context: CallContext) throws(RPCError) -> JSON {
        events.current.unsubscribe()
        store.collectsChanges = events.anySubscribed
        return ["subscribed": false]
    }
}

/// `kernel.setOrdering`: the order this stream's responses are written in, from the next request on.
struct KernelSetOrdering: RPCMethod {
    struct Params: RPCParams {
        static let declaration = ParamList(
            required("mode", oneOf: ResponseOrdering.allCases.map(\.rawValue))
                .described("read: in the order requests were read; completion: each as soon as it is done and durable"))
        let mode: ResponseOrdering
        init(_ mode: String) { self.mode = ResponseOrdering(rawValue: mode) ?? .read }
    }
    static let name = "kernel.setOrdering"
    static let summary = "Sets the order of this stream's responses from the next request on: read order (the default) or completion order, for hosts that match answers by id. Requests of one user are applied in read order either way."
    static let mutates = false
    static let auth = AuthRequirement.none
    static let readsState = false
    static let resultSchema = #"{"type": "object", "additionalProperties": false, "required": ["mode"], "properties": {"mode": {"enum": ["read", "completion"]}}}"#

    func call(_ p: Params, _ context: CallContext) throws(RPCError) -> JSON {
        context.stream.ordering = p.mode
        return ["mode": .string(p.mode.rawValue)]
    }
}
