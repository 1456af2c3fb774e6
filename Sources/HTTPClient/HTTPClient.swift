import CCurl

/// One HTTP exchange: what is sent.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]?
    /// The whole exchange, connecting included, must end within this.
    public var timeoutMilliseconds: Int

    public init(method: String = "GET", url: String, headers: [(name: String, value: String)] = [], body: [UInt8]? = nil,
                timeoutMilliseconds: Int = 10_000) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMilliseconds = timeoutMilliseconds
    }
}

/// What came back.
public struct HTTPResponse: Sendable {
    public let status: Int
    /// Header names lowercased.
    public let headers: [String: String]
    public let body: [UInt8]
}

/// Why no response came.
public struct HTTPError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable { case timeout, connection, refused }
    public let kind: Kind
    public let description: String

    public init(kind: Kind, description: String) {
        self.kind = kind
        self.description = description
    }
}

/// A synchronous HTTP client on libcurl (Debian's libcurl4-openssl-dev), for worker threads: the kernel's
/// calls out wait there, never on the serving thread. libcurl rather than async-http-client or URLSession:
/// a first release build of async-http-client took 212 s here and a NIO event loop the kernel has no use
/// for; URLSession links libcurl anyway, through FoundationNetworking (a static hello world is 71.6 MB with
/// 36 shared libraries). A session is one easy handle: sessions on different threads are independent.
public enum HTTPClient {
    /// Why libcurl cannot be used, or nil when it was opened and set up (once per process, on first use).
    static let unavailable: String? = {
        var error: UnsafePointer<CChar>?
        guard hk_curl_load(&error) != 0 else { return error.map { String(cString: $0) } ?? "libcurl cannot be opened" }
        return curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK ? nil : "libcurl cannot start"
    }()

    /// Plain `http://` only to loopback addresses; anything else must be `https://`.
    public static func allowed(_ url: String) -> Bool {
        if url.hasPrefix("https://") { return true }
        guard url.hasPrefix("http://") else { return false }
        let authority = url.dropFirst(7).prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.contains("@") else { return false }
        if authority == "[::1]" || authority.hasPrefix("[::1]:") { return true }
        let host = authority.prefix { $0 != ":" }
        if host == "localhost" { return true }
        // An IPv4 address in 127.0.0.0/8, digits only (a name such as 127.example.com is not this machine).
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { p in !p.isEmpty && p.count <= 3 && p.allSatisfy(\.isASCII) && p.allSatisfy(\.isNumber) }
    }

    /// Sends `request` on a connection of its own and waits for the whole response.
    public static func send(_ request: HTTPRequest) -> Result<HTTPResponse, HTTPError> {
        guard let session = HTTPSession() else { return .failure(HTTPError(kind: .connection, description: "libcurl cannot start")) }
        return session.send(request)
    }
}

/// Calls from one thread that keep their connection between calls (libcurl's cache is per handle): a
/// run of calls to one host pays the TCP and TLS handshakes once. Not for use by two threads at once.
public final class HTTPSession {
    private let handle: UnsafeMutableRawPointer

    /// A session, or nil when libcurl cannot start.
    public init?() {
        guard HTTPClient.unavailable == nil, let handle = curl_easy_init() else { return nil }
        self.handle = handle
    }

    deinit { curl_easy_cleanup(handle) }

    /// Sends `request` and waits for the whole response.
    public func send(_ request: HTTPRequest) -> Result<HTTPResponse, HTTPError> {
        guard HTTPClient.allowed(request.url) else {
            return .failure(HTTPError(kind: .refused, description: "only https:// URLs (or http:// to this machine) are called"))
        }
        // Options go back to their defaults; the connection cache stays.
        curl_easy_reset(handle)
        let sink = Sink()
        let unmanaged = Unmanaged.passRetained(sink)
        defer { unmanaged.release() }
        var list: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(list) }
        for (name, value) in request.headers { list = curl_slist_append(list, "\(name): \(value)") }
        // Without a body curl would send `Expect: 100-continue` on POST; servers that do not answer it stall a second.
        list = curl_slist_append(list, "Expect:")
        _ = hk_curl_set_string(handle, CURLOPT_URL, request.url)
        _ = hk_curl_set_string(handle, CURLOPT_CUSTOMREQUEST, request.method)
        _ = hk_curl_set_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(list))
        _ = hk_curl_set_long(handle, CURLOPT_TIMEOUT_MS, request.timeoutMilliseconds)
        _ = hk_curl_set_long(handle, CURLOPT_CONNECTTIMEOUT_MS, min(request.timeoutMilliseconds, 5000))
        _ = hk_curl_set_long(handle, CURLOPT_NOSIGNAL, 1)  // timeouts without SIGALRM: safe on any thread
        _ = hk_curl_set_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        _ = hk_curl_set_pointer(handle, CURLOPT_WRITEDATA, unmanaged.toOpaque())
        _ = hk_curl_set_write(handle) { data, size, count, context in
            let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
            let n = size * count
            if let data { sink.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n)) }
            return n
        }
        _ = hk_curl_set_pointer(handle, CURLOPT_HEADERDATA, unmanaged.toOpaque())
        _ = hk_curl_set_header_function(handle) { data, size, count, context in
            let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
            let n = size * count
            if let data {
                let line = String(decoding: UnsafeRawBufferPointer(start: data, count: n), as: UTF8.self)
                if let colon = line.firstIndex(of: ":") {
                    let name = line[..<colon].lowercased()
                    var value = line[line.index(after: colon)...]
                    while let c = value.first, c == " " || c == "\t" { value.removeFirst() }
                    while let c = value.last, c == " " || c == "\t" || c == "\r" || c == "\n" || c == "\r\n" { value.removeLast() }
                    sink.headers[name] = String(value)
                } else if line.hasPrefix("HTTP/") {
                    sink.headers.removeAll()  // a new response (after a 100 Continue): only its headers count
                }
            }
            return n
        }
        let body = request.body ?? []
        let code: CURLcode = body.withUnsafeBufferPointer { buffer in
            if request.body != nil {
                _ = hk_curl_set_pointer(handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress))
                _ = hk_curl_set_long(handle, CURLOPT_POSTFIELDSIZE, buffer.count)
            }
            return curl_easy_perform(handle)
        }
        guard code == CURLE_OK else {
            let text = String(cString: curl_easy_strerror(code))
            let kind: HTTPError.Kind = code == CURLE_OPERATION_TIMEDOUT ? .timeout : .connection
            return .failure(HTTPError(kind: kind, description: text))
        }
        var status = 0
        _ = hk_curl_info_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return .success(HTTPResponse(status: status, headers: sink.headers, body: sink.body))
    }

    private final class Sink {
        var body: [UInt8] = []
        var headers: [String: String] = [:]
    }
}
