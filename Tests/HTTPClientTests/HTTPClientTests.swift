#if canImport(Glibc)
import Glibc
#endif
import Foundation
import HTTPClient
import Testing
import TestSupport

/// A one-connection HTTP server on a loopback port: reads one request, then answers with `response`
/// (or never, to test timeouts). What it read is kept for the test.
final class LoopbackServer: @unchecked Sendable {
    let port: UInt16
    private let fd: Int32
    private let lock = NSLock()
    private var received = ""

    init(response: String?) throws {
        let (listener, port) = listenOnLoopback(backlog: 1)
        self.port = port
        fd = listener
        Thread.detachNewThread { [self] in
            let conn = accept(listener, nil, nil)
            guard conn >= 0 else { return }
            var data: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            // Read headers, then as much body as Content-Length says.
            while true {
                let n = read(conn, &buffer, buffer.count)
                if n <= 0 { break }
                data += buffer[0..<n]
                let text = String(decoding: data, as: UTF8.self)
                if let end = text.range(of: "\r\n\r\n") {
                    let length = text.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                        .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                    if text.utf8.distance(from: text.utf8.startIndex, to: end.upperBound) + length <= data.count { break }
                }
            }
            lock.withLock { received = String(decoding: data, as: UTF8.self) }
            if let response {
                _ = response.withCString { write(conn, $0, strlen($0)) }
                close(conn)
            } else {
                sleep(5)
                close(conn)
            }
        }
    }

    var request: String { lock.withLock { received } }
    deinit { close(fd) }
}

@Suite(.oneStoreOnly) struct HTTPClientTests {
    @Test func aGetCarriesItsHeadersAndReadsStatusHeadersAndBody() throws {
        let server = try LoopbackServer(response: "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 5\r\n\r\nslow!")
        let response = try HTTPClient.send(HTTPRequest(url: "http://127.0.0.1:\(server.port)/inApps/v1/subscriptions/1000",
                                                       headers: [("Authorization", "Bearer abc")])).get()
        #expect(response.status == 429)
        #expect(response.headers["retry-after"] == "7")
        #expect(response.body == Array("slow!".utf8))
        #expect(server.request.hasPrefix("GET /inApps/v1/subscriptions/1000 HTTP/1.1\r\n"))
        #expect(server.request.contains("Authorization: Bearer abc\r\n"))
    }

    @Test func aPostSendsItsBody() throws {
        let server = try LoopbackServer(response: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        let body = Array(#"{"startDate":1}"#.utf8)
        let response = try HTTPClient.send(HTTPRequest(method: "POST", url: "http://127.0.0.1:\(server.port)/history",
                                                       headers: [("Content-Type", "application/json")], body: body)).get()
        #expect(response.status == 200)
        #expect(server.request.hasPrefix("POST /history HTTP/1.1\r\n"))
        #expect(server.request.hasSuffix(#"{"startDate":1}"#))
    }

    @Test func aServerThatDoesNotAnswerTimesOut() throws {
        let server = try LoopbackServer(response: nil)
        let started = Date()
        let result = HTTPClient.send(HTTPRequest(url: "http://127.0.0.1:\(server.port)/", timeoutMilliseconds: 300))
        guard case .failure(let error) = result else { Issue.record("answered: \(result)"); return }
        #expect(error.kind == .timeout)
        #expect(Date().timeIntervalSince(started) < 3)
    }

    @Test func plainHTTPGoesOnlyToThisMachineAndAClosedPortFails() {
        guard case .failure(let refused) = HTTPClient.send(HTTPRequest(url: "http://example.com/")) else { Issue.record("sent"); return }
        #expect(refused.kind == .refused)
        #expect(HTTPClient.allowed("https://api.storekit.itunes.apple.com/inApps/v1/subscriptions/1"))
        #expect(HTTPClient.allowed("http://localhost:8080/") && HTTPClient.allowed("http://[::1]:9/"))
        #expect(HTTPClient.allowed("http://127.0.0.1:8080/x"))
        #expect(!HTTPClient.allowed("http://127.evil.example/") && !HTTPClient.allowed("http://127.0.0.1.evil.example/"))
        #expect(!HTTPClient.allowed("http://localhost.evil.example/") && !HTTPClient.allowed("http://user@evil.example/"))
        guard case .failure(let closed) = HTTPClient.send(HTTPRequest(url: "http://127.0.0.1:1/", timeoutMilliseconds: 1000)) else {
            Issue.record("port 1 answered"); return
        }
        #expect(closed.kind == .connection)
    }
}
