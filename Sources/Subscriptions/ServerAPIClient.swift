import Chrono
import HTTPClient
import JSON
import JSONParsing
import Threads

/// Where the App Store Server API's calls go: HTTP in the kernel; tests may put anything behind it.
/// Clock mode has none.
public protocol ServerAPITransport: Sendable {
    /// What one thread sends its calls on, kept between them (an HTTP connection).
    func connect() -> any ServerAPIConnection
}

/// One thread's way to send calls.
public protocol ServerAPIConnection: AnyObject {
    func send(_ request: HTTPRequest) -> Result<HTTPResponse, HTTPError>
}

extension HTTPSession: ServerAPIConnection {}

/// HTTPS through libcurl.
public struct CurlTransport: ServerAPITransport {
    public init() {}
    public func connect() -> any ServerAPIConnection { HTTPSession() ?? Unconnected() }

    /// When libcurl cannot start: every call fails as a connection failure.
    private final class Unconnected: ServerAPIConnection {
        func send(_ request: HTTPRequest) -> Result<HTTPResponse, HTTPError> {
            .failure(HTTPError(kind: .connection, description: "libcurl cannot start"))
        }
    }
}

/// Why an App Store Server API call gave no answer to use.
public enum ServerAPIFailure: Error, Equatable, Sendable {
    /// 401 or 403: Apple refused the key (wrong key id, issuer id, key or bundle id).
    case keyRejected(String)
    /// 404: Apple does not know the transaction in this environment.
    case notFound
    /// 429: too many calls; none should be made for this many seconds.
    case throttled(retryAfterSeconds: Int)
    /// A timeout, a connection failure, a 5xx: worth trying again later.
    case unavailable(String)
    /// Any other status, or an answer without Apple's documented shape.
    case invalid(String)

    /// Whether no further call of the batch should go out: Apple asked to wait, or refuses the key.
    var stopsTheBatch: Bool {
        switch self {
        case .throttled, .keyRejected: return true
        case .notFound, .unavailable, .invalid: return false
        }
    }

    /// For logs and `kernel.info`: never quotes the key or a token.
    public var description: String {
        switch self {
        case .keyRejected(let s): return "Apple refused the key (\(s)): check appStore.serverApi keyId, issuerId, privateKey and appStore.bundleId"
        case .notFound: return "not found"
        case .throttled(let seconds): return "rate limited by Apple for \(seconds) s"
        case .unavailable(let s): return "unavailable: \(s)"
        case .invalid(let s): return "unexpected answer: \(s)"
        }
    }
}

/// Calls to Apple's App Store Server API: the bearer token, the base URL by environment, timeouts, and
/// each answer's status read as success or `ServerAPIFailure`. Shared by the threads of a refresh; the
/// token is signed once an hour whichever thread needs it.
public final class ServerAPIClient: Sendable {
    let settings: ServerAPISettings
    let transport: any ServerAPITransport
    private let signer: Locked<ServerAPIToken>
    private let record = Locked<ServerAPIRecord>(ServerAPIRecord())

    /// A client for `settings` (whose key parsed when the configuration was read).
    init(settings: ServerAPISettings, bundleId: String, transport: any ServerAPITransport) throws(ServerAPIToken.KeyError) {
        self.settings = settings
        self.transport = transport
        signer = Locked(try ServerAPIToken(p8: settings.privateKeyPEM, keyId: settings.keyId, issuerId: settings.issuerId, bundleId: bundleId))
    }

    /// What the API did lately, for `kernel.info`.
    var lately: ServerAPIRecord { record.withLock { $0 } }

    /// Sends one call for a purchase of `environment` and reads its answer. The token's times come from
    /// the system clock, never a test's shifted one: Apple checks them against the real time.
    func call(_ method: String, _ path: String, environment: String, body: JSON? = nil, on connection: ServerAPIConnection)
        -> Result<JSON, ServerAPIFailure> {
        let now = SystemClock().now()
        let token: String
        do {
            token = try signer.withLock { (signer: inout ServerAPIToken) throws(ServerAPIToken.KeyError) -> String in try signer.token(now: now) }
        } catch {
            return noted(.failure(.keyRejected(error.description)), at: now)
        }
        var headers = [(name: "Authorization", value: "Bearer " + token), (name: "Accept", value: "application/json")]
        if body != nil { headers.append((name: "Content-Type", value: "application/json")) }
        let url = ServerAPI.baseURL(environment: environment, override: settings.baseURL) + path
        let request = HTTPRequest(method: method, url: url, headers: headers, body: body.map { Array($0.serialized.utf8) },
                                  timeoutMilliseconds: settings.timeoutSeconds * 1000)
        let outcome: Result<JSON, ServerAPIFailure>
        switch connection.send(request) {
        case .failure(let error):
            outcome = .failure(.unavailable(error.kind == .timeout ? "no answer within \(settings.timeoutSeconds) s" : error.description))
        case .success(let response):
            outcome = Self.read(response, now: now)
        }
        return noted(outcome, at: now)
    }

    /// An HTTP answer as Apple documents them: 200 with JSON, else a failure by status.
    static func read(_ response: HTTPResponse, now: Timestamp) -> Result<JSON, ServerAPIFailure> {
        switch response.status {
        case 200:
            guard let json = try? JSON.parse(response.body), json.objectValue != nil else { return .failure(.invalid("200 without a JSON object")) }
            return .success(json)
        // Send Consumption Information answers 202 Accepted with no body.
        case 202: return .success([:])
        case 401, 403: return .failure(.keyRejected("HTTP \(response.status)"))
        case 404: return .failure(.notFound)
        case 429: return .failure(.throttled(retryAfterSeconds: ServerAPI.retryAfterSeconds(response.headers["retry-after"], now: now)))
        case 500...599: return .failure(.unavailable("HTTP \(response.status)"))
        default:
            // Apple's error answers are {"errorCode": N, "errorMessage": "..."}: worth a log line.
            let detail = (try? JSON.parse(response.body))?["errorMessage"]?.stringValue.map { ": " + String($0.prefix(200)) } ?? ""
            return .failure(.invalid("HTTP \(response.status)\(detail)"))
        }
    }

    private func noted(_ outcome: Result<JSON, ServerAPIFailure>, at now: Timestamp) -> Result<JSON, ServerAPIFailure> {
        record.withLock { record in
            switch outcome {
            case .success: record.lastSuccessAt = now
            // Not found is an answer: Apple was reached and the key accepted.
            case .failure(.notFound): record.lastSuccessAt = now
            case .failure(let failure):
                record.lastFailureAt = now
                record.lastFailure = failure.description
            }
        }
        return outcome
    }
}

/// The last success and failure of the API, for `kernel.info`.
struct ServerAPIRecord: Sendable {
    var lastSuccessAt: Timestamp?
    var lastFailureAt: Timestamp?
    var lastFailure: String?
}
