import Chrono
import JSON
import JSONParsing
import Testing
import TestSupport
import Threads
@testable import MCP

/// The protocol eras and their refusals, on a server whose kernel is a stand-in.
@Suite(.oneStoreOnly) struct MCPServerTests {
    let methods = [MCPMethod(name: "rewards.balance", params: [["name": "auth", "required": true, "schema": ["type": "string"]]],
                             resultSchema: ["type": "object", "properties": ["xp": ["type": "integer"]]])]

    func server(calls: Locked<[String]> = Locked([])) -> MCPServer {
        MCPServer(tools: MCPTool.catalogue(methods, allowWrites: false), token: { "user-token" }, serverVersion: "test",
                  today: { CalendarDate("2026-11-28")! }) { method, params in
            calls.withLock { $0.append(method + " " + (params["auth"]?.stringValue ?? "-")) }
            return ["jsonrpc": "2.0", "id": 1, "result": ["xp": 5]]
        }
    }

    func ask(_ s: MCPServer, _ request: JSON) throws -> JSON { try JSON.parse(try #require(s.handle(request.bytes).first)) }

    static let meta: JSON = ["io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": [:]]

    @Test func modernRequestsCarryTheirVersionAndGetResultTypeAndCacheHints() throws {
        let s = server()
        let found = try ask(s, ["jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": ["_meta": Self.meta]])
        #expect(found["result"]?["supportedVersions"] == ["2026-07-28"] && found["result"]?["resultType"] == "complete")
        #expect(found["result"]?["cacheScope"] == "private" && found["result"]?["ttlMs"]?.intValue != nil)
        #expect(found["result"]?["_meta"]?["io.modelcontextprotocol/serverInfo"]?["name"] == "healthkernel")
        let old = try ask(s, ["jsonrpc": "2.0", "id": 2, "method": "tools/list",
                              "params": ["_meta": ["io.modelcontextprotocol/protocolVersion": "2027-01-01", "io.modelcontextprotocol/clientCapabilities": [:]]]])
        #expect(old["error"]?["code"] == -32022 && old["error"]?["data"]?["supported"] == ["2026-07-28"])
        #expect(old["error"]?["data"]?["requested"] == "2027-01-01")
        let bare = try ask(s, ["jsonrpc": "2.0", "id": 3, "method": "tools/list"])
        #expect(bare["error"]?["code"] == -32600, "neither _meta nor a handshake")
        let noCaps = try ask(s, ["jsonrpc": "2.0", "id": 4, "method": "tools/list",
                                 "params": ["_meta": ["io.modelcontextprotocol/protocolVersion": "2026-07-28"]]])
        #expect(noCaps["error"]?["code"] == -32602)
    }

    @Test func theHandshakeEraNegotiatesAndPings() throws {
        let s = server()
        let hello = try ask(s, ["jsonrpc": "2.0", "id": 1, "method": "initialize", "params": ["protocolVersion": "2024-01-01", "capabilities": [:]]])
        #expect(hello["result"]?["protocolVersion"] == "2025-11-25", "an unknown version is answered with the newest handshake one")
        #expect(s.handle((["jsonrpc": "2.0", "method": "notifications/initialized"] as JSON).bytes).isEmpty)
        #expect(try ask(s, ["jsonrpc": "2.0", "id": 2, "method": "ping"])["result"] == [:])
        let tools = try ask(s, ["jsonrpc": "2.0", "id": 3, "method": "tools/list"])["result"]?["tools"]?.arrayValue ?? []
        #expect(tools.map { $0["name"] } == ["rewards_balance"])
        #expect(tools.first?["inputSchema"]?["properties"] == [:], "auth is the server's, never an argument")
        let gone = try ask(s, ["jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": ["uri": "healthkernel://nothing"]])
        #expect(gone["error"]?["code"] == -32002)
    }

    @Test func theModelNeverSendsTheToken() throws {
        let calls = Locked<[String]>([])
        let s = server(calls: calls)
        _ = try ask(s, ["jsonrpc": "2.0", "id": 1, "method": "initialize", "params": ["protocolVersion": "2025-11-25", "capabilities": [:]]])
        let sneaky = try ask(s, ["jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ["name": "rewards_balance", "arguments": ["auth": "service-token"]]])
        #expect(sneaky["result"]?["isError"] == true)
        _ = try ask(s, ["jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ["name": "rewards_balance", "arguments": [:]]])
        #expect(calls.withLock { $0 } == ["rewards.balance user-token"])
    }

    @Test func aListenStreamIsAcknowledgedThenClosedWhenCancelled() throws {
        let s = server()
        let lines = s.handle((["jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
                               "params": ["_meta": Self.meta, "notifications": ["resourceSubscriptions": ["healthkernel://subscription", "healthkernel://nope"]]]] as JSON).bytes)
        let ack = try JSON.parse(try #require(lines.first))
        #expect(ack["method"] == "notifications/subscriptions/acknowledged")
        #expect(ack["params"]?["notifications"]?["resourceSubscriptions"] == ["healthkernel://subscription"], "only known URIs are honoured")
        #expect(ack["params"]?["_meta"]?["io.modelcontextprotocol/subscriptionId"] == "listen-1")
        #expect(s.hasSubscribers)
        let closed = s.handle((["jsonrpc": "2.0", "method": "notifications/cancelled", "params": ["requestId": "listen-1"]] as JSON).bytes)
        let close = try JSON.parse(try #require(closed.first))
        #expect(close["id"] == "listen-1" && close["result"]?["resultType"] == "complete")
        #expect(!s.hasSubscribers)
    }

    /// #51 item 11: one `cursor_expired` ended a resource subscription for good. The server now reads the
    /// feed again from the start, announces every resource it was asked for, and goes on announcing.
    @Test func anExpiredCursorAnnouncesEverythingAndTheSubscriptionGoesOn() throws {
        // A stand-in feed: positions as cursors; "expire" makes every cursor short of the end expired once.
        let state = Locked((end: 3, expired: false, calls: [String]()))
        let s = MCPServer(tools: [], token: { "user-token" }, serverVersion: "test", today: { CalendarDate("2026-11-28")! }) { method, params in
            state.withLock { st -> JSON in
                let since = params["since"]?.stringValue.flatMap { Int($0) } ?? 0
                st.calls.append("\(method) \(since)")
                if st.expired, since > 0 {
                    st.expired = false
                    return ["jsonrpc": "2.0", "id": 1, "error": ["code": -32602, "message": "expired", "data": ["reason": "cursor_expired", "field": "params.since"]]]
                }
                let changes: [JSON] = (since..<st.end).map { _ in ["entity": "sessions.record"] }
                return ["jsonrpc": "2.0", "id": 1, "result": ["changes": .array(changes), "cursor": .string(String(st.end)), "hasMore": false]]
            }
        }
        _ = try ask(s, ["jsonrpc": "2.0", "id": 1, "method": "initialize", "params": ["protocolVersion": "2025-11-25", "capabilities": [:]]])
        for uri in ["healthkernel://meditation/stats", "healthkernel://subscription"] {
            _ = try ask(s, ["jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": ["uri": .string(uri)]])
        }
        #expect(s.poll().isEmpty, "nothing new")
        state.withLock { $0.end = 5; $0.expired = true }
        let announced = Set(try s.poll().map { try JSON.parse($0)["params"]?["uri"]?.stringValue ?? "" })
        #expect(announced == ["healthkernel://meditation/stats", "healthkernel://subscription"], "every subscribed resource, after an expired cursor")
        #expect(state.withLock { $0.calls.suffix(2) } == ["sync.changes 3", "sync.changes 0"], "read again from the start")
        // And the subscription carries on from the new cursor.
        #expect(s.poll().isEmpty)
        state.withLock { $0.end = 6 }
        #expect(try s.poll().map { try JSON.parse($0)["params"]?["uri"]?.stringValue ?? "" } == ["healthkernel://meditation/stats"])
    }

    /// #51 item 12: valid JSON is never a parse error: a batch is answered in 2025-03-26 (whose servers
    /// must take batches) and is an invalid request in any other version.
    @Test func batchesAreAnsweredIn20250326AndRefusedAsInvalidElsewhere() throws {
        let s = server()
        let batch: JSON = [["jsonrpc": "2.0", "id": 1, "method": "ping"], ["jsonrpc": "2.0", "method": "notifications/initialized"],
                           ["jsonrpc": "2.0", "id": 2, "method": "tools/list"], 7]
        let before = try JSON.parse(try #require(s.handle(batch.bytes).first))
        #expect(before["error"]?["code"] == -32600, "no handshake yet: a batch is invalid, not a parse error")
        _ = try ask(s, ["jsonrpc": "2.0", "id": 0, "method": "initialize", "params": ["protocolVersion": "2025-03-26", "capabilities": [:]]])
        let answers = try JSON.parse(try #require(s.handle(batch.bytes).first)).arrayValue ?? []
        #expect(answers.count == 3, "two requests and the element that is no request; no answer to the notification")
        #expect(answers[0]["id"] == 1 && answers[0]["result"] == [:])
        #expect(answers[1]["id"] == 2 && answers[1]["result"]?["tools"]?.arrayValue?.count == 1)
        #expect(answers[2]["error"]?["code"] == -32600)
        #expect(try JSON.parse(try #require(s.handle(JSON.array([]).bytes).first))["error"]?["code"] == -32600)
        #expect(try JSON.parse(try #require(s.handle(Array("42".utf8)).first))["error"]?["code"] == -32600)
        let later = server()
        _ = try ask(later, ["jsonrpc": "2.0", "id": 0, "method": "initialize", "params": ["protocolVersion": "2025-11-25", "capabilities": [:]]])
        #expect(try JSON.parse(try #require(later.handle(batch.bytes).first))["error"]?["code"] == -32600)
        #expect(try JSON.parse(try #require(later.handle(Array("{".utf8)).first))["error"]?["code"] == -32700)
    }
}
