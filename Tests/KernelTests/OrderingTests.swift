import Foundation
import JSON
import JSONParsing
import JSONRPC
import Testing
@testable import Kernel

/// Slow work (password hashing) runs on worker threads; answers follow the stream's ordering, and
/// requests of one user are applied in the order read. Every check here holds however fast the
/// machine is: it depends only on what was applied before what.
@Suite struct OrderingTests {
    /// A connection of an in-process kernel, speaking lines.
    struct Stream {
        var connection: Connection
        init(_ kernel: Kernel, ordering: ResponseOrdering = .read) { connection = kernel.connection(ordering: ordering) }

        /// Sends `lines` as one read; returns the answer lines written before any slow work is awaited,
        /// then every remaining one once all are done.
        mutating func send(_ lines: [JSON]) -> (early: [JSON], all: [JSON]) {
            connection.receive(Array(lines.map(\.serialized).joined(separator: "\n").utf8) + [0x0A])
            _ = connection.endBatch(waitAbove: nil)
            let early = Self.parse(connection.output)
            _ = connection.endBatch(waitAbove: 0)
            let all = Self.parse(connection.output)
            connection.output.removeAll()
            return (early, all)
        }

        static func parse(_ bytes: [UInt8]) -> [JSON] {
            String(decoding: bytes, as: UTF8.self).split(separator: "\n").compactMap { try? JSON.parse(String($0)) }
        }
    }

    static func request(_ id: Int, _ method: String, _ params: JSON = [:]) -> JSON {
        ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": .string(method), "params": params]
    }

    static func signIn(_ id: Int, _ email: String) -> JSON {
        request(id, "auth.signIn", ["email": .string(email), "password": .string("password-\(email)")])
    }

    /// Ten accounts, created in one batch.
    static func accounts(_ stream: inout Stream) -> [JSON] {
        let lines = (0..<10).map { request(100 + $0, "auth.signUp", ["email": .string("u\($0)@example.com"), "password": .string("password-u\($0)@example.com")]) }
        return stream.send(lines).all.map { $0["result"] ?? .null }
    }

    @Test func completionOrderAnswersKernelInfoBeforeTheLastSignIn() throws {
        let kernel = try makeKernel()
        var stream = Stream(kernel)
        #expect(Self.accounts(&stream).allSatisfy { $0["accessToken"] != nil })
        #expect(stream.send([Self.request(1, "kernel.setOrdering", ["mode": "completion"])]).all.first?["result"]?["mode"] == "completion")
        let lines = (0..<10).map { Self.signIn(200 + $0, "u\($0)@example.com") } + [Self.request(300, "kernel.info")]
        let (early, all) = stream.send(lines)
        // kernel.info is answered as soon as it is read, while the sign-ins still hash.
        #expect(early.first?["id"] == 300)
        let ids = all.compactMap { $0["id"]?.intValue }
        #expect(Set(ids) == Set(200..<210).union([300]))
        #expect(ids.firstIndex(of: 300)! < ids.firstIndex(of: 209)!)
        #expect(all.filter { $0["id"] != 300 }.allSatisfy { $0["result"]?["accessToken"] != nil })
    }

    @Test func readOrderKeepsAnswersInReadOrderUnderTheSameLoad() throws {
        let kernel = try makeKernel()
        var stream = Stream(kernel)
        _ = Self.accounts(&stream)
        let lines = (0..<10).map { Self.signIn(200 + $0, "u\($0)@example.com") } + [Self.request(300, "kernel.info")]
        let (early, all) = stream.send(lines)
        #expect(early.isEmpty || early.first?["id"] == 200)
        #expect(all.compactMap { $0["id"]?.intValue } == Array(200..<210) + [300])
        // In read order kernel.info waits for the sign-ins before it: it counts their sessions.
        #expect(all.last?["result"]?["counts"]?["users"] == 10)
    }

    @Test func aUsersRequestsKeepTheirOrderBehindTheirSignIn() throws {
        let kernel = try makeKernel()
        var stream = Stream(kernel, ordering: .completion)
        let accounts = Self.accounts(&stream)
        let token = try #require(accounts[0]["accessToken"]?.stringValue)
        let otherToken = try #require(accounts[1]["accessToken"]?.stringValue)
        // The sign-in hashes; the upload, the read and the sign-out of the same user wait for it, in
        // order; the other user's read does not.
        let lines: [JSON] = [
            Self.signIn(1, "u0@example.com"),
            Self.request(2, "screentime.updateConnection", ["auth": .string(token), "enabled": true]),
            Self.request(3, "screentime.upload", ["auth": .string(token), "date": "2025-03-01", "verifiedMinutes": 42]),
            Self.request(4, "screentime.day", ["auth": .string(token), "date": "2025-03-01"]),
            Self.request(5, "auth.signOut", ["auth": .string(token), "scope": "all"]),
            Self.request(6, "screentime.day", ["auth": .string(otherToken), "date": "2025-03-01"]),
        ]
        let (early, all) = stream.send(lines)
        #expect(early.compactMap { $0["id"]?.intValue } == [6])
        let byID = Dictionary(all.map { ($0["id"]?.intValue ?? 0, $0) }, uniquingKeysWith: { a, _ in a })
        #expect(all.compactMap { $0["id"]?.intValue } == [6, 1, 2, 3, 4, 5])
        #expect(byID[4]?["result"]?["verifiedMinutes"] == 42)
        // The sign-out came after the sign-in, so it ended both sessions (the sign-up's and the sign-in's).
        #expect(byID[5]?["result"]?["revoked"] == 2)
        let refresh = try #require(byID[1]?["result"]?["refreshToken"]?.stringValue)
        let again = stream.send([Self.request(7, "auth.refresh", ["refreshToken": .string(refresh)])]).all
        #expect(again.first?["error"]?["code"] == -32001)
    }

    @Test func aSignUpAndASignInOfOneEmailStayInOrder() throws {
        let kernel = try makeKernel()
        var stream = Stream(kernel, ordering: .completion)
        let all = stream.send([
            Self.request(1, "auth.signUp", ["email": "New@Example.com", "password": "password-new@example.com"]),
            Self.signIn(2, "new@example.com"),
        ]).all
        #expect(all.count == 2)
        #expect(all.allSatisfy { $0["result"]?["user"]?["email"] == "new@example.com" })
    }

    @Test func aBatchWithASlowElementIsAnsweredByOneArrayInItsOrder() throws {
        let kernel = try makeKernel()
        var stream = Stream(kernel, ordering: .completion)
        _ = Self.accounts(&stream)
        let batch: JSON = [Self.signIn(1, "u1@example.com"), Self.request(2, "kernel.info"),
                           ["jsonrpc": "2.0", "method": "kernel.info"], Self.signIn(3, "u2@example.com")]
        let (early, all) = stream.send([batch, Self.request(4, "kernel.info")])
        #expect(early.count == 1 && early.first?["id"] == 4)
        let array = try #require(all.last?.arrayValue)
        #expect(array.compactMap { $0["id"]?.intValue } == [1, 2, 3])
        #expect(array[0]["result"]?["accessToken"] != nil && array[2]["result"]?["accessToken"] != nil)
    }

    @Test func setOrderingRefusesUnknownModes() throws {
        let kernel = try makeKernel()
        var stream = Stream(kernel)
        let answer = stream.send([Self.request(1, "kernel.setOrdering", ["mode": "random"])]).all.first
        #expect(answer?["error"]?["code"] == -32602)
        #expect(answer?["error"]?["data"]?["field"] == "params.mode")
    }

    /// Refreshes one account's refresh token twice in one batch; the kernel's answers to both.
    static func refreshTwiceInOneBatch(_ kernel: Kernel) throws -> (Stream, [JSON]) {
        var stream = Stream(kernel)
        let refresh = try #require(Self.accounts(&stream)[0]["refreshToken"]?.stringValue)
        let request = Self.request(1, "auth.refresh", ["refreshToken": .string(refresh)])
        return (stream, try #require(stream.send([[request, request]]).all.first?.arrayValue))
    }

    @Test func twoRefreshesInOneBatchShareTheSessionTheFirstCreated() throws {
        let (opened, answers) = try Self.refreshTwiceInOneBatch(try makeKernel())
        var stream = opened
        let first = try #require(answers[0]["result"]), second = try #require(answers[1]["result"])
        #expect(first["refreshToken"] == second["refreshToken"])
        let access = try #require(second["accessToken"]?.stringValue)
        #expect(stream.send([Self.request(3, "auth.user", ["auth": .string(access)])]).all.first?["result"]?["email"] == "u0@example.com")
        // The session goes on: its current token refreshes normally.
        let next = try #require(first["refreshToken"]?.stringValue)
        #expect(stream.send([Self.request(4, "auth.refresh", ["refreshToken": .string(next)])]).all.first?["result"] != nil)
    }

    @Test func strictRevocationWhenTheReuseIntervalIsZero() throws {
        let (opened, answers) = try Self.refreshTwiceInOneBatch(try makeKernel { $0.auth.refreshReuseIntervalSeconds = 0 })
        var stream = opened
        #expect(answers[1]["error"]?["code"] == -32001)
        let access = try #require(answers[0]["result"]?["accessToken"]?.stringValue)
        #expect(stream.send([Self.request(3, "auth.user", ["auth": .string(access)])]).all.first?["error"]?["code"] == -32001)
    }
}
