import Chrono
import JSON
import JSONRPC

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
       "counts": {"type": "object", "required": ["users"],
         "additionalProperties": {"type": "integer", "minimum": 0}},
       "requests": {"type": "object", "additionalProperties": false,
         "required": ["total", "errors", "p50Micros", "p99Micros"],
         "properties": {
           "total": {"type": "integer", "minimum": 0},
           "errors": {"type": "integer", "minimum": 0},
           "p50Micros": {"type": "integer", "minimum": 0},
           "p99Micros": {"type": "integer", "minimum": 0}}}}}
    """#

    let startedAt: Timestamp
    let stats: RequestStats
    let durability: @Sendable () -> JSON
    let counts: @Sendable () -> JSONObject

    func call(_ params: NoParams, _ context: CallContext) throws(RPCError) -> JSON {
        [
            "name": "healthkernel",
            "version": .string(KernelVersion.version),
            "protocolVersion": .string(KernelVersion.protocolVersion),
            "startedAt": .string(startedAt.description),
            "uptimeSeconds": .int(max(0, context.now.seconds - startedAt.seconds)),
            "durability": durability(),
            "counts": .object(counts()),
            "requests": [
                "total": .int(Int64(stats.total)),
                "errors": .int(Int64(stats.errors)),
                "p50Micros": .int(Int64(stats.percentile(0.5))),
                "p99Micros": .int(Int64(stats.percentile(0.99))),
            ],
        ]
    }
}

/// Version numbers reported by `kernel.info`, `version` and the OpenRPC document.
public enum KernelVersion {
    /// The kernel's release.
    public static let version = "0.1.0"
    /// The version of the wire contract (PROTOCOL.md).
    public static let protocolVersion = "1.0"
}
