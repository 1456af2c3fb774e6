import Crypto
import Foundation
import JSON
import JSONParsing

/// A stand-in for Apple's App Store Server API on a loopback port, for tests: HTTP/1.1 with keep-alive,
/// a thread per connection. Every call's bearer token is checked as Apple does (ES256 signature with the
/// key's public half, `kid`, `iss`, `aud`, `bid`, `iat`/`exp` at most an hour apart and not expired);
/// a token that fails is answered 401. Calls that pass go to `handler`, which answers as Apple documents.
public final class FakeAppStoreServer: @unchecked Sendable {
    public struct Request: Sendable {
        public let method: String
        /// The path without the query; the Sandbox environment is under `/sandbox` (see `ServerAPI.baseURL`).
        public let path: String
        public let query: [String: String]
        public let body: JSON?
        public var environment: String { path.hasPrefix("/sandbox/") ? "Sandbox" : "Production" }
        /// The path without the environment's prefix.
        public var apiPath: String { path.hasPrefix("/sandbox/") ? String(path.dropFirst("/sandbox".count)) : path }
    }

    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: JSON?
        /// Seconds to wait before answering (a server slower than the client's timeout).
        public var delay: Double = 0

        public init(status: Int = 200, headers: [(String, String)] = [], body: JSON? = nil, delay: Double = 0) {
            (self.status, self.headers, self.body, self.delay) = (status, headers, body, delay)
        }

        public static func json(_ body: JSON) -> Response { Response(body: body) }
        /// Apple's error answer.
        public static func error(_ status: Int, code: Int64, _ message: String) -> Response {
            Response(status: status, body: ["errorCode": .int(code), "errorMessage": .string(message)])
        }
    }

    public var port: UInt16 { server.port }
    public var baseURL: String { server.baseURL }
    public let key = P256.Signing.PrivateKey()
    public let keyId = "TESTKEY123"
    public let issuerId = "57246542-96fe-1a63-e053-0824d011072a"
    public let bundleId: String

    private var server: LoopbackHTTPServer!
    private let lock = NSLock()
    private var handler: @Sendable (Request) -> Response
    private var calls: [Request] = []
    private var rejectedTokens: [String] = []
    private var inFlight = 0
    private var maxInFlight = 0

    /// A server for `bundleId`'s calls, answering with `handler`.
    public init(bundleId: String, handler: @escaping @Sendable (Request) -> Response = { _ in .error(404, code: 4040010, "Transaction id not found.") }) throws {
        self.bundleId = bundleId
        self.handler = handler
        // Held strongly, as the listener's threads hold the server: a call may still be answering (a slow
        // answer's delay) after the test let go of it.
        server = LoopbackHTTPServer { [self] request in
            let response = handle(request)
            // The delay counts as in flight: calls are concurrent while the server is slow.
            if response.delay > 0 { Thread.sleep(forTimeInterval: response.delay) }
            lock.withLock { inFlight -= 1 }
            return LoopbackHTTPServer.Response(status: response.status, headers: [("Content-Type", "application/json")] + response.headers,
                                               body: response.body.map { Array($0.serialized.utf8) } ?? [])
        }
    }

    /// The `.p8` text of the key the server trusts.
    public var keyPEM: String { key.pemRepresentation }

    /// Answers calls with `handler` from now on.
    public func answer(_ handler: @escaping @Sendable (Request) -> Response) { lock.withLock { self.handler = handler } }
    /// The calls whose token passed, in arrival order.
    public var received: [Request] { lock.withLock { calls } }
    /// Why tokens were refused.
    public var refused: [String] { lock.withLock { rejectedTokens } }
    /// The most calls that were being answered at once.
    public var mostInFlight: Int { lock.withLock { maxInFlight } }
    public func reset() { lock.withLock { calls = []; rejectedTokens = []; maxInFlight = 0 } }

    private func handle(_ http: LoopbackHTTPServer.Request) -> Response {
        lock.withLock {
            inFlight += 1
            maxInFlight = max(maxInFlight, inFlight)
        }
        if let problem = checkToken(http.headers["authorization"]) {
            lock.withLock { rejectedTokens.append(problem) }
            return .error(401, code: 401, "Unauthenticated")
        }
        let request = Request(method: http.method, path: http.path, query: http.query, body: http.body.isEmpty ? nil : try? JSON.parse(http.body))
        let handler = lock.withLock {
            calls.append(request)
            return self.handler
        }
        return handler(request)
    }

    /// Why `authorization` is not a token Apple would take, or nil.
    func checkToken(_ authorization: String?) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return "no bearer token" }
        let parts = authorization.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Self.base64URL(parts[0]), let claimBytes = Self.base64URL(parts[1]),
              let signatureBytes = Self.base64URL(parts[2]),
              let header = try? JSON.parse(headerBytes), let claims = try? JSON.parse(claimBytes) else { return "not a JWS" }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
              key.publicKey.isValidSignature(signature, for: Array((parts[0] + "." + parts[1]).utf8)) else { return "bad signature" }
        guard header["alg"]?.stringValue == "ES256", header["kid"]?.stringValue == keyId else { return "wrong alg or kid" }
        guard claims["iss"]?.stringValue == issuerId else { return "wrong iss" }
        guard claims["aud"]?.stringValue == "appstoreconnect-v1" else { return "wrong aud" }
        guard claims["bid"]?.stringValue == bundleId else { return "wrong bid" }
        guard let iat = claims["iat"]?.intValue, let exp = claims["exp"]?.intValue else { return "no iat or exp" }
        let now = Int64(Date().timeIntervalSince1970)
        guard exp > now, exp - iat <= 3600, iat <= now + 60 else { return "expired or too long" }
        return nil
    }

    static func base64URL(_ s: Substring) -> [UInt8]? {
        var t = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while t.count % 4 != 0 { t += "=" }
        return Data(base64Encoded: t).map { Array($0) }
    }
}


extension AppStorePayloads {
    /// A Get All Subscription Statuses answer with one entry, as Apple shapes it.
    public static func statuses(bundleId: String = AppStorePayloads.bundleId, environment: String, original: String, status: Int64,
                                transaction: String, renewal: String?) -> JSON {
        var entry = JSONObject([("originalTransactionId", .string(original)), ("status", .int(status)), ("signedTransactionInfo", .string(transaction))])
        if let renewal { entry["signedRenewalInfo"] = .string(renewal) }
        return ["environment": .string(environment), "bundleId": .string(bundleId),
                "data": [["subscriptionGroupIdentifier": "21000001", "lastTransactions": [.object(entry)]]]]
    }
}

extension AppStoreTestCA {
    /// Apple's Get All Subscription Statuses answer for purchase `original`: status `status`, its latest
    /// transaction `n` bought `purchase` (a monthly period), all signed `signed` by this CA.
    public func statuses(_ status: Int64, original: String = "1000", n: Int, purchase: Int64, signed: Int64, environment: String = "Sandbox",
                  revoked: Int64? = nil, grace: Int64? = nil, autoRenew: Int64 = 1) -> JSON {
        let tx = sign(AppStorePayloads.transaction(id: "\(original)-\(n)", original: original, purchase: purchase,
                                                   expires: purchase + 30 * 86_400_000, signed: signed, environment: environment, revoked: revoked))
        let renewal = sign(AppStorePayloads.renewal(original: original, autoRenew: autoRenew, grace: grace, signed: signed,
                                                    environment: environment))
        return AppStorePayloads.statuses(environment: environment, original: original, status: status, transaction: tx, renewal: renewal)
    }
}
