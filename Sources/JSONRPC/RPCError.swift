import JSON

/// A JSON-RPC error object: `{code, message, data: {reason, field?, ...}}`.
public struct RPCError: Error, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    /// `data.reason`: a stable slug hosts can switch on.
    public var reason: String
    /// `data.field`: the offending param's path, for -32602.
    public var field: String?
    /// Further `data` members, in order.
    public var extra: [(String, JSON)]
    /// What the log says about an internal error (never sent: it may name stored keys).
    public var logDetail: String?
    /// The request lost a race with a concurrent one and changed nothing: running it again may succeed
    /// (`storageConflict`). The dispatcher's to know, not the wire's (the final answer says `retried`).
    public var isConflict = false

    /// An error object.
    public init(code: ErrorCode, message: String, reason: String, field: String? = nil, extra: [(String, JSON)] = []) {
        self.code = code
        self.message = message
        self.reason = reason
        self.field = field
        self.extra = extra
    }

    public static func == (a: RPCError, b: RPCError) -> Bool {
        a.code == b.code && a.message == b.message && a.reason == b.reason && a.field == b.field
            && a.extra.map(\.0) == b.extra.map(\.0) && a.extra.map(\.1) == b.extra.map(\.1)
    }

    /// The wire form.
    public var json: JSON {
        var data = JSONObject([("reason", .string(reason))])
        if let field { data["field"] = .string(field) }
        for (k, v) in extra { data[k] = v }
        return .object(JSONObject([("code", .int(Int64(code.rawValue))), ("message", .string(message)), ("data", .object(data))]))
    }
}

extension RPCError {
    /// -32700: the line is not acceptable JSON.
    public static func parse(_ e: JSONParseError) -> RPCError {
        let reason = e.kind == .invalidUTF8 ? "invalid_utf8" : (e.kind == .invalidJSON ? "invalid_json" : e.kind.rawValue)
        return RPCError(code: .parseError, message: "Parse error: \(e.message)", reason: reason)
    }

    /// -32600: the JSON is not a valid request.
    public static func invalidRequest(_ message: String, reason: String = "invalid_request") -> RPCError {
        RPCError(code: .invalidRequest, message: "Invalid Request: \(message)", reason: reason)
    }

    /// -32601.
    public static func methodNotFound(_ name: String) -> RPCError {
        RPCError(code: .methodNotFound, message: "Method not found", reason: "method_not_found")
    }

    /// -32602 from a field error.
    public static func invalidParams(_ e: FieldError) -> RPCError {
        RPCError(code: .invalidParams, message: "Invalid params: \(e.message)", reason: e.reason, field: e.field)
    }

    /// -32602 with an explicit reason and field.
    public static func invalidParams(_ field: String, reason: String, _ message: String) -> RPCError {
        .invalidParams(FieldError(field: field, reason: reason, message: message))
    }

    /// -32603: a bug; details go to the log, never to the host.
    public static let internalError = RPCError(code: .internalError, message: "Internal error", reason: "internal")

    /// -32001.
    public static func unauthorized(_ reason: String, _ message: String) -> RPCError {
        RPCError(code: .unauthorized, message: message, reason: reason)
    }

    /// -32003.
    public static func forbidden(_ reason: String, _ message: String) -> RPCError {
        RPCError(code: .forbidden, message: message, reason: reason)
    }

    /// -32004.
    public static func notFound(_ message: String = "Not found") -> RPCError {
        RPCError(code: .notFound, message: message, reason: "not_found")
    }

    /// -32009.
    public static func conflict(_ reason: String, _ message: String) -> RPCError {
        RPCError(code: .conflict, message: message, reason: reason)
    }

    /// -32010.
    public static func verificationFailed(_ reason: String, _ message: String) -> RPCError {
        RPCError(code: .verificationFailed, message: message, reason: reason)
    }

    /// -32029.
    public static func rateLimited(_ message: String) -> RPCError {
        RPCError(code: .limited, message: message, reason: "too_many_attempts")
    }

    /// -32050: the write was not applied.
    public static func storageUnavailable(_ message: String) -> RPCError {
        RPCError(code: .storageUnavailable, message: message, reason: "storage_unavailable")
    }

    /// The kernel cannot learn whether a write landed (the database connection broke during its COMMIT,
    /// and the answer could not be had in time): it may have been applied. Never said as "not applied";
    /// a client retries only methods idempotent by key, and checks the others (protocol/storage.md).
    public static func outcomeUnknown(_ message: String) -> RPCError {
        RPCError(code: .storageUnavailable, message: "Storage unavailable: \(message); the write may have been applied",
                 reason: "outcome_unknown")
    }

    /// The request lost a race with a concurrent one (another kernel on the same database) and changed
    /// nothing: the dispatcher runs it again, reads included, a bounded number of times; a host sees
    /// it only when every attempt lost, as -32050.
    public static func storageConflict(_ message: String) -> RPCError {
        var error = RPCError(code: .storageUnavailable, message: "Storage unavailable: \(message); nothing was applied", reason: "storage_unavailable",
                             extra: [("retried", .bool(true))])
        error.isConflict = true
        return error
    }
}

/// Documentation of one error a method can return, for the OpenRPC document.
public struct ErrorDoc: Sendable {
    public let code: ErrorCode
    public let message: String
    /// An error a method documents.
    public init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }
}
