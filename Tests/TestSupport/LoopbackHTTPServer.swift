import Foundation

/// An HTTP/1.1 server with keep-alive on a loopback port, for tests of the kernel's outgoing calls: a
/// thread per connection, each request answered by `handler`. Its listening thread keeps it, so it
/// lives as long as the test process.
public final class LoopbackHTTPServer: @unchecked Sendable {
    public struct Request: Sendable {
        public let method: String
        /// The path without the query.
        public let path: String
        /// The query's parameters, percent-decoded.
        public let query: [String: String]
        /// Header values by lowercased name.
        public let headers: [String: String]
        public let body: [UInt8]
    }

    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: [UInt8]
        /// Seconds to wait before answering (a server slower than the client's timeout).
        public var delay: Double

        public init(status: Int = 200, headers: [(String, String)] = [], body: [UInt8] = [], delay: Double = 0) {
            (self.status, self.headers, self.body, self.delay) = (status, headers, body, delay)
        }
    }

    public let port: UInt16
    public var baseURL: String { "http://127.0.0.1:\(port)" }
    private let handler: @Sendable (Request) -> Response

    public init(handler: @escaping @Sendable (Request) -> Response) {
        self.handler = handler
        let (fd, port) = listenOnLoopback(backlog: 64)
        self.port = port
        Thread.detachNewThread { [self] in
            while true {
                let conn = accept(fd, nil, nil)
                if conn < 0 { return }
                Thread.detachNewThread { self.serve(conn) }
            }
        }
    }

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
            let response = Self.parse(head: head, body: body).map(handler) ?? Response(status: 400)
            if response.delay > 0 { Thread.sleep(forTimeInterval: response.delay) }
            var text = "HTTP/1.1 \(response.status) X\r\nContent-Length: \(response.body.count)\r\n"
            for (name, value) in response.headers { text += "\(name): \(value)\r\n" }
            let bytes = Array((text + "\r\n").utf8) + response.body
            let sent = bytes.withUnsafeBytes { send(conn, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent != bytes.count { return }
        }
    }

    private static func parse(head: String, body: [UInt8]) -> Request? {
        let lines = head.split(separator: "\r\n")
        let parts = lines.first?.split(separator: " ") ?? []
        guard parts.count >= 2 else { return nil }
        let target = String(parts[1])
        let (path, queryText) = target.firstIndex(of: "?").map { (String(target[..<$0]), String(target[target.index(after: $0)...])) } ?? (target, "")
        var query: [String: String] = [:]
        for pair in queryText.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            query[String(kv[0])] = kv.count > 1 ? (String(kv[1]).removingPercentEncoding ?? String(kv[1])) : ""
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Request(method: String(parts[0]), path: path, query: query, headers: headers, body: body)
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
