import Auth
import Chrono
import DomainSupport
import JSON
import JSONRPC

/// `health.importExport`: starts importing an Apple Health export the host saved on this machine, as
/// `healthkernel health import-export` would (protocol/health.md, "Importing an Apple Health export"),
/// in a child process that sends the batches to this kernel's socket as the user. Answers at once.
struct HealthImportExport: RPCMethod {
    struct Params: RPCParams {
        let userId: String
        let path: String
        let timezone: Zone?
        static let declaration = ParamList(
            required("userId", CanonicalUUID.self).described("the user the export is imported for"),
            required("path", maxBytes: 4096).described("absolute path of export.zip or export.xml on the kernel's machine"),
            optional("timezone", Zone.self).described("IANA zone for items without HKTimeZone; default the one the user's app last sent"))
        init(_ v: (CanonicalUUID, String, Zone?)) { (userId, path, timezone) = (v.0.text, v.1, v.2) }
    }
    static let name = "health.importExport"
    static let summary = "Starts importing an Apple Health export file on the kernel's machine for a user (service token), in batches on a connection of its own; answers an importId for health.importStatus."
    static let mutates = false
    static let auth = AuthRequirement.service
    static let errors = [ErrorDoc(.forbidden, "socket_required: the kernel serves no socket (serve --listen)"),
                         ErrorDoc(.limited, "rate_limited: 4 imports are running")]
    let jobs: ImportJobs
    let auth: AuthService

    func call(_ p: Params, _ c: CallContext) throws(RPCError) -> ImportJob {
        // The child's authority: a token of the user, for the two days even a very large export cannot take.
        let token = auth.mint(sub: p.userId, role: "authenticated", ttl: 2 * 86_400, now: c.now)
        let id = String(UInt64.random(in: .min ... .max), radix: 16) + String(UInt64.random(in: .min ... .max), radix: 16)
        _ = try jobs.start(userId: p.userId, path: p.path, timezone: p.timezone?.identifier, token: token, id: id, now: c.now)
        return ImportJob(job: jobs.status(id))
    }
}

/// `health.importStatus`.
struct HealthImportStatus: RPCMethod {
    struct Params: RPCParams {
        let importId: String
        static let declaration = ParamList(required("importId", maxBytes: 64).described("the importId health.importExport answered"))
        init(_ v: String) { importId = v }
    }
    static let name = "health.importStatus"
    static let summary = "An import health.importExport started: running, done (with the summary healthkernel health import-export prints) or failed (with why)."
    static let mutates = false
    static let auth = AuthRequirement.service
    static let errors = [ErrorDoc(.notFound, "not_found: no such import on this kernel (a restarted kernel forgets them; importing again is harmless)")]
    let jobs: ImportJobs

    func call(_ p: Params, _ c: CallContext) throws(RPCError) -> ImportJob {
        guard let job = jobs.status(p.importId) else { throw RPCError.notFound("No such import on this kernel") }
        return ImportJob(job: job)
    }
}

/// An import as the two methods answer it.
struct ImportJob: RPCResult {
    let job: ImportJobs.Job?
    static let fields = ResultFields<ImportJob>(
        ResultField("importId", Schema.string) { .string($0.job?.id ?? "") },
        ResultField("userId", Schema.uuid) { .string($0.job?.userId ?? "") },
        ResultField("state", Schema.oneOf(["running", "done", "failed"])) { .string($0.job?.state ?? "failed") },
        ResultField("startedAt", Schema.timestamp) { .timestamp(($0.job?.startedAt ?? Timestamp(milliseconds: 0)).milliseconds) },
        .optional("summary", ["type": "object", "description": "as healthkernel health import-export prints it: imported, unchanged, superseded, skipped, notImported, batches, bytes, seconds"]) { $0.job?.summary },
        .optional("error", Schema.string) { $0.job?.error.map(JSON.string) })
    static var schema: JSON { fields.schema }
    var json: JSON { Self.fields.encode(self) }
}
