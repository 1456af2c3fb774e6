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
        MCPServer(tools: MCPTool.catalogue(methods, allowWrites: false), token: "user-token", serverVersion: "test",
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
}
