/// Every error code the kernel answers: JSON-RPC 2.0's own, and the server-error range the protocol
/// gives meanings (protocol/README.md, "Errors"). `data.reason` narrows each one down.
public enum ErrorCode: Int, Sendable, CaseIterable {
    /// -32700: the line is not JSON (or not UTF-8).
    case parseError = -32700
    /// -32600: JSON, but not a request (a batch too large, an unknown envelope member).
    case invalidRequest = -32600
    /// -32601.
    case methodNotFound = -32601
    /// -32602: a param is missing, of the wrong type or out of range; `data.field` names it.
    case invalidParams = -32602
    /// -32603: a bug; the log has the details, the host never does.
    case internalError = -32603
    /// -32001: no token, or one that does not verify or has expired.
    case unauthorized = -32001
    /// -32003: a valid token without the right (a user token on a service method, a disabled connection).
    case forbidden = -32003
    /// -32004: the record does not exist (or is another user's).
    case notFound = -32004
    /// -32009: the request contradicts stored state (taken, reused, insufficient, no active session).
    case conflict = -32009
    /// -32010: signed data (a receipt, a notification, an identity token) did not verify.
    case verificationFailed = -32010
    /// -32029: a rate limit or a quota; `data.retryAfterMs` when waiting helps.
    case limited = -32029
    /// -32050: the store (or Apple) could not be used now; nothing was applied.
    case storageUnavailable = -32050
}
