import Chrono
import JSON
import JSONParsing

/// One request as its envelope reads: the id to answer with (nil for a notification), and the method to
/// call with its params, or why none can be called.
public struct Request: Sendable {
    public let id: JSON?
    let target: Result<(RegisteredMethod, JSONObject), RPCError>

    /// The method called, when the envelope is valid.
    var method: RegisteredMethod? {
        if case .success(let (method, _)) = target { method } else { nil }
    }
}

/// A line of input after parsing: what the reading thread hands to the dispatcher.
public enum ParsedLine: Sendable {
    /// One request, and when its parsing started (request latency counts from there).
    case request(Request, started: UInt64)
    /// A batch: the array's elements in order (empty for `[]`).
    case batch([Request], started: UInt64)
    /// Not JSON; `id` is the request's id when it could still be read (else null).
    case parseError(JSONParseError, id: JSON, started: UInt64)
    /// A line longer than `limit` bytes, skipped.
    case tooLong(limit: Int)
}

/// Reads a line's JSON and each request's JSON-RPC envelope (id, version, method, params), checked
/// before anything runs. It reads only the registry, which never changes, so the reading thread does
/// it while the serving thread answers earlier lines.
public struct EnvelopeReader: Sendable {
    let registry: MethodRegistry
    /// When a line's parsing starts (request latency counts from there).
    let clock: Clock

    public init(registry: MethodRegistry, clock: Clock) {
        self.registry = registry
        self.clock = clock
    }

    static let envelopeKeys: Set<String> = ["jsonrpc", "id", "method", "params"]

    /// Parses one line (without its newline) and reads its requests' envelopes.
    public func parse(_ line: UnsafeRawBufferPointer) -> ParsedLine {
        let started = clock.monotonicMicros()
        do {
            let value = try JSON.parse(line)
            guard case .array(let items) = value else { return .request(request(value), started: started) }
            return .batch(items.map(request), started: started)
        } catch {
            return .parseError(error, id: RequestIDScan.id(in: line) ?? .null, started: started)
        }
    }

    /// The envelope of one request (a line, or a batch's element).
    func request(_ value: JSON) -> Request {
        guard case .object(let envelope) = value else {
            return Request(id: .null, target: .failure(.invalidRequest("a request must be an object")))
        }
        let rawID = envelope["id"]
        var responseID: JSON? = nil
        if let rawID {
            switch rawID {
            // An id the kernel could not echo exactly: NaN, an infinity, an integer beyond 64 bits.
            case .double(let d) where !d.isFinite || (d.rounded() == d && d.magnitude >= 0x1p63):
                return Request(id: .null, target: .failure(.invalidRequest("id must be a string, null, a 64-bit integer or a finite number")))
            case .string, .int, .double, .null: responseID = rawID
            default: return Request(id: .null, target: .failure(.invalidRequest("id must be a string, a number or null")))
            }
        }
        let replyID = responseID ?? .null
        guard envelope["jsonrpc"] == .string("2.0") else {
            return Request(id: replyID, target: .failure(.invalidRequest("jsonrpc must be \"2.0\"")))
        }
        guard case .string(let name)? = envelope["method"] else {
            return Request(id: replyID, target: .failure(.invalidRequest("method must be a string")))
        }
        if let extra = envelope.members.first(where: { !Self.envelopeKeys.contains($0.key) })?.key {
            return Request(id: replyID, target: .failure(.invalidRequest("unknown member \"\(extra)\" in the request")))
        }
        var params = JSONObject()
        switch envelope["params"] {
        case nil: break
        case .object(let o)?: params = o
        case .array(let a)? where a.isEmpty: break
        case .array?:
            return Request(id: responseID, target: .failure(.invalidParams("params", reason: "wrong_type",
                                                                          "params must be an object: methods take named params")))
        default:
            return Request(id: replyID, target: .failure(.invalidRequest("params must be an object or an array")))
        }
        guard let method = registry.method(named: name) else {
            return Request(id: responseID, target: .failure(.methodNotFound(name)))
        }
        return Request(id: responseID, target: .success((method, params)))
    }
}
