import Chrono
import Foundation
import JSON
import JSONParsing
import JSONRPC

/// The Model Context Protocol over one user's data, line by line, in both eras a client may bring:
/// 2026-07-28 (stateless: every request carries `_meta` with its protocol version and capabilities;
/// `server/discover`) and 2025-11-25 (the `initialize` handshake). Every tool and resource is a call of
/// a kernel method with the user's token, so the kernel's auth and isolation are the only way in:
/// nothing of another user is reachable whatever the arguments.
public final class MCPServer {
    public static let modernVersion = "2026-07-28"
    public static let handshakeVersions = ["2025-11-25", "2025-06-18", "2025-03-26"]
    static let versionKey = "io.modelcontextprotocol/protocolVersion"
    static let capabilitiesKey = "io.modelcontextprotocol/clientCapabilities"
    static let serverInfoKey = "io.modelcontextprotocol/serverInfo"
    /// How long a client may reuse a list or a read (the user's data changes; keep it short).
    static let ttlMs: Int64 = 60_000

    let tools: [MCPTool]
    let token: String
    let serverVersion: String
    /// Calls a kernel method with params (the token added here) and answers its JSON-RPC response.
    let call: (String, JSONObject) -> JSON
    let today: () -> CalendarDate
    /// The version the `initialize` handshake settled, for 2025 clients.
    private(set) var handshake: String?

    public init(tools: [MCPTool], token: String, serverVersion: String, today: @escaping () -> CalendarDate,
                call: @escaping (String, JSONObject) -> JSON) {
        self.tools = tools
        self.token = token
        self.serverVersion = serverVersion
        self.today = today
        self.call = call
    }

    static let instructions = """
        Reads one person's own health data kept by healthkernel: daily and weekly HealthKit summaries, \
        workouts, sleep, meditation sessions and streaks, Screen Time verification and penalties, rewards \
        and the App Store subscription. Dates are YYYY-MM-DD local days; durations are seconds.
        """

    /// The answer to one line, or nil for a notification (or a line that needs none).
    public func handle(_ line: [UInt8]) -> [UInt8]? {
        guard let message = try? JSON.parse(line), case .object(let request) = message else {
            return Self.error(nil, -32700, "Parse error").bytes
        }
        let id = request["id"]
        guard let method = request["method"]?.stringValue else { return id == nil ? nil : Self.error(id, -32600, "Invalid Request").bytes }
        let params = request["params"]?.objectValue ?? JSONObject()
        guard let id, id != .null else { return nil }  // notifications: initialized, cancelled
        return answer(id: id, method: method, params: params).bytes
    }

    private func answer(id: JSON, method: String, params: JSONObject) -> JSON {
        if method == "initialize" { return initialize(id, params) }
        let meta = params["_meta"]?.objectValue
        if let version = meta?[Self.versionKey]?.stringValue {
            guard version == Self.modernVersion else {
                return Self.error(id, -32022, "Unsupported protocol version",
                                  data: ["supported": [.string(Self.modernVersion)], "requested": .string(version)])
            }
            guard meta?[Self.capabilitiesKey]?.objectValue != nil else {
                return Self.error(id, -32602, "_meta needs \(Self.capabilitiesKey)")
            }
            return modern(id, method, params)
        }
        guard handshake != nil else {
            return Self.error(id, -32600, "Send initialize first, or _meta with \(Self.versionKey) \(Self.modernVersion) on every request")
        }
        return legacy(id, method, params)
    }

    // MARK: The eras

    private func initialize(_ id: JSON, _ params: JSONObject) -> JSON {
        let asked = params["protocolVersion"]?.stringValue ?? Self.handshakeVersions[0]
        let version = Self.handshakeVersions.contains(asked) ? asked : Self.handshakeVersions[0]
        handshake = version
        return Self.result(id, ["protocolVersion": .string(version), "capabilities": capabilities,
                                "serverInfo": serverInfo, "instructions": .string(Self.instructions)])
    }

    private func legacy(_ id: JSON, _ method: String, _ params: JSONObject) -> JSON {
        switch method {
        case "ping": return Self.result(id, [:])
        case "tools/list": return Self.result(id, ["tools": .array(tools.map(\.json))])
        case "tools/call": return callTool(id, params, modern: false)
        case "resources/list": return Self.result(id, ["resources": .array(Self.resources.map(\.json))])
        case "resources/read": return readResource(id, params, modern: false)
        default: return Self.error(id, -32601, "Method not found")
        }
    }

    private func modern(_ id: JSON, _ method: String, _ params: JSONObject) -> JSON {
        func complete(_ result: JSON, cached: Bool) -> JSON {
            var r = result.objectValue ?? JSONObject()
            r["resultType"] = "complete"
            if cached {
                r["ttlMs"] = .int(Self.ttlMs)
                // Private wherever the answer holds this user's data: a shared cache must never hand it on.
                r["cacheScope"] = "private"
            }
            return Self.result(id, .object(r))
        }
        switch method {
        case "server/discover":
            return complete(["supportedVersions": [.string(Self.modernVersion)], "capabilities": capabilities,
                             "instructions": .string(Self.instructions), "_meta": .object(JSONObject([(Self.serverInfoKey, serverInfo)]))], cached: true)
        case "tools/list": return complete(["tools": .array(tools.map(\.json))], cached: true)
        case "resources/list": return complete(["resources": .array(Self.resources.map(\.json))], cached: true)
        case "tools/call", "resources/read":
            let answer = method == "tools/call" ? callTool(id, params, modern: true) : readResource(id, params, modern: true)
            guard case .object(let o) = answer, let result = o["result"] else { return answer }
            return complete(result, cached: method == "resources/read")
        default: return Self.error(id, -32601, "Method not found")
        }
    }

    private var capabilities: JSON {
        // Resource subscriptions are not served yet: announced as such, never pretended.
        ["tools": ["listChanged": false], "resources": ["subscribe": false, "listChanged": false]]
    }

    private var serverInfo: JSON { ["name": "healthkernel", "version": .string(serverVersion)] }

    // MARK: Tools

    private func callTool(_ id: JSON, _ params: JSONObject, modern: Bool) -> JSON {
        guard let name = params["name"]?.stringValue, let tool = tools.first(where: { $0.name == name }) else {
            return Self.error(id, -32602, "Unknown tool: \(params["name"]?.stringValue ?? "(none)")")
        }
        var arguments = params["arguments"]?.objectValue ?? JSONObject()
        // The token is the server's, never the model's.
        guard arguments["auth"] == nil else { return Self.result(id, Self.toolError("auth is not an argument of \(name)")) }
        arguments["auth"] = .string(token)
        let response = call(tool.method, arguments)
        if let result = response["result"] {
            var content: [JSON] = [["type": "text", "text": .string(Render.text(tool.method, result))]]
            // The same JSON as text, for clients that read no structuredContent.
            content.append(["type": "text", "text": .string(result.serialized)])
            var r = JSONObject([("content", .array(content)), ("isError", false)])
            if tool.outputSchema != nil { r["structuredContent"] = result }
            return Self.result(id, .object(r))
        }
        // A kernel error is a tool result the model can read and correct, with the argument it names.
        let error = response["error"] ?? .null
        var text = error["message"]?.stringValue ?? "The call failed"
        if let field = error["data"]?["field"]?.stringValue {
            text = text.replacingOccurrences(of: "params.", with: "") + " (argument \(field.hasPrefix("params.") ? String(field.dropFirst(7)) : field))"
        }
        if let reason = error["data"]?["reason"]?.stringValue { text += " [\(reason)]" }
        return Self.result(id, Self.toolError(text))
    }

    static func toolError(_ text: String) -> JSON { ["content": [["type": "text", "text": .string(text)]], "isError": true] }

    // MARK: Resources

    struct Resource {
        let uri: String
        let name: String
        let description: String
        var json: JSON {
            ["uri": .string(uri), "name": .string(name), "description": .string(description), "mimeType": "application/json"]
        }
    }

    static let resources = [
        Resource(uri: "healthkernel://summary/last-7-days", name: "Last 7 days", description: "HealthKit summaries of the last 7 UTC days, as health.summary answers them."),
        Resource(uri: "healthkernel://summary/last-30-days", name: "Last 30 days", description: "HealthKit summaries of the last 30 UTC days."),
        Resource(uri: "healthkernel://meditation/stats", name: "Meditation stats", description: "Meditation totals and streaks (UTC days)."),
        Resource(uri: "healthkernel://subscription", name: "Subscription", description: "The App Store membership now."),
    ]

    private func readResource(_ id: JSON, _ params: JSONObject, modern: Bool) -> JSON {
        let uri = params["uri"]?.stringValue ?? ""
        let today = today()
        let request: (String, JSON)
        switch uri {
        case "healthkernel://summary/last-7-days": request = ("health.summary", ["from": .string(today.adding(days: -6).description), "to": .string(today.description)])
        case "healthkernel://summary/last-30-days": request = ("health.summary", ["from": .string(today.adding(days: -29).description), "to": .string(today.description)])
        case "healthkernel://meditation/stats": request = ("sessions.stats", [:])
        case "healthkernel://subscription": request = ("subscriptions.status", [:])
        // 2025 clients know -32002 (resource not found); 2026 ones classify it as invalid params.
        default: return Self.error(id, modern ? -32602 : -32002, "Resource not found", data: ["uri": .string(uri)])
        }
        var args = request.1.objectValue ?? JSONObject()
        args["auth"] = .string(token)
        let response = call(request.0, args)
        guard let result = response["result"] else {
            return Self.error(id, -32603, response["error"]?["message"]?.stringValue ?? "The kernel could not answer")
        }
        return Self.result(id, ["contents": [["uri": .string(uri), "mimeType": "application/json", "text": .string(result.serialized)]]])
    }

    // MARK: Envelopes

    static func result(_ id: JSON, _ result: JSON) -> JSON {
        ["jsonrpc": "2.0", "id": id, "result": result]
    }

    static func error(_ id: JSON?, _ code: Int64, _ message: String, data: JSON? = nil) -> JSON {
        var e = JSONObject([("code", .int(code)), ("message", .string(message))])
        if let data { e["data"] = data }
        return ["jsonrpc": "2.0", "id": id ?? .null, "error": .object(e)]
    }
}
