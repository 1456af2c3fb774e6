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

    public let port: UInt16
    public var baseURL: String { "http://127.0.0.1:\(port)" }
    public let key = P256.Signing.PrivateKey()
    public let keyId = "TESTKEY123"
    public let issuerId = "57246542-96fe-1a63-e053-0824d011072a"
    public let bundleId: String

    private let listener: Int32
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
        let (fd, port) = listenOnLoopback(backlog: 64)
        self.port = port
        listener = fd
        Thread.detachNewThread { [self] in
            while true {
                let conn = accept(fd, nil, nil)
                if conn < 0 { return }
                Thread.detachNewThread { self.serve(conn) }
            }
        }
    }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
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

    private func serve(_ conn: Int32) {
        defer { close(conn) }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            // One request: headers, then Content-Length bytes of body.
            var headerEnd: Int?
            var needed = Int.max
            while true {
                if headerEnd == nil, let end = Self.find([13, 10, 13, 10], in: buffer) {
                    headerEnd = end + 4
                    let head = String(decoding: buffer[..<end], as: UTF8.self)
                    let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                        .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                    needed = end + 4 + length
                }
                if buffer.count >= needed { break }
                let n = read(conn, &chunk, chunk.count)
                if n <= 0 { return }
                buffer += chunk[0..<n]
            }
            let head = String(decoding: buffer[..<(headerEnd! - 4)], as: UTF8.self)
            let body = Array(buffer[headerEnd!..<needed])
            buffer.removeFirst(needed)
            let response = handle(head: head, body: body)
            if response.delay > 0 { Thread.sleep(forTimeInterval: response.delay) }
            let payload = response.body.map { Array($0.serialized.utf8) } ?? []
            var text = "HTTP/1.1 \(response.status) X\r\nContent-Length: \(payload.count)\r\nContent-Type: application/json\r\n"
            for (name, value) in response.headers { text += "\(name): \(value)\r\n" }
            let bytes = Array((text + "\r\n").utf8) + payload
            let sent = bytes.withUnsafeBytes { send(conn, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            lock.withLock { inFlight -= 1 }
            if sent != bytes.count { return }
        }
    }

    private func handle(head: String, body: [UInt8]) -> Response {
        lock.withLock {
            inFlight += 1
            maxInFlight = max(maxInFlight, inFlight)
        }
        let lines = head.split(separator: "\r\n")
        let parts = lines.first?.split(separator: " ") ?? []
        guard parts.count >= 2 else { return Response(status: 400) }
        let target = String(parts[1])
        let (path, queryText) = target.firstIndex(of: "?").map { (String(target[..<$0]), String(target[target.index(after: $0)...])) } ?? (target, "")
        var query: [String: String] = [:]
        for pair in queryText.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            query[String(kv[0])] = kv.count > 1 ? (String(kv[1]).removingPercentEncoding ?? String(kv[1])) : ""
        }
        let authorization = lines.dropFirst().first { $0.lowercased().hasPrefix("authorization:") }
            .map { String($0.drop { $0 != ":" }.dropFirst()).trimmingCharacters(in: .whitespaces) }
        if let problem = checkToken(authorization) {
            lock.withLock { rejectedTokens.append(problem) }
            return .error(401, code: 401, "Unauthenticated")
        }
        let request = Request(method: String(parts[0]), path: path, query: query, body: body.isEmpty ? nil : try? JSON.parse(body))
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

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] && Array(haystack[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }
}

/// A TCP socket listening on 127.0.0.1, on a port the system chose: the socket and the port.
public func listenOnLoopback(backlog: Int32) -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = 0
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
    listen(fd, backlog)
    _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
    return (fd, UInt16(bigEndian: addr.sin_port))
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
