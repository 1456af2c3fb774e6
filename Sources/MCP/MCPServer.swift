import Chrono
import FoundationEssentials
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
    /// The user's access token now (a kept-alive session refreshes it: `SessionToken`).
    let token: () -> String
    let serverVersion: String
    /// Calls a kernel method with params (the token added here) and answers its JSON-RPC response.
    let call: (String, JSONObject) -> JSON
    let today: () -> CalendarDate
    /// The version the `initialize` handshake settled, for 2025 clients.
    private(set) var handshake: String?
    /// Resources a 2025 client subscribed to (`resources/subscribe`).
    private var subscribed = Set<String>()
    /// Open `subscriptions/listen` streams (2026-07-28): the listen request's id and the URIs honoured.
    private var listens: [(id: JSON, uris: Set<String>)] = []
    /// Where the user's change feed was read up to (`sync.changes`), once anyone subscribed.
    private var feedCursor: String?

    public init(tools: [MCPTool], token: @escaping () -> String, serverVersion: String, today: @escaping () -> CalendarDate,
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

    /// The lines to write for one line read: its answer (none for a notification), and for a
    /// `subscriptions/listen` its acknowledgement (the answer comes when the stream ends).
    public func handle(_ line: [UInt8]) -> [[UInt8]] {
        guard let message = try? JSON.parse(line) else { return [Self.error(nil, -32700, "Parse error").bytes] }
        switch message {
        case .object(let request): return handle(request)
        case .array(let elements):
            // Batches exist in 2025-03-26 only (later versions removed them): answered there as JSON-RPC
            // says, one array of the answers, none for notifications; in any other version a batch is
            // an invalid request, never a parse error.
            guard handshake == Self.batchVersion else {
                return [Self.error(nil, -32600, "Invalid Request: batches are part of MCP \(Self.batchVersion) only").bytes]
            }
            guard !elements.isEmpty else { return [Self.error(nil, -32600, "Invalid Request: an empty batch").bytes] }
            var answers: [JSON] = []
            var extra: [[UInt8]] = []
            for element in elements {
                guard case .object(let request) = element else {
                    answers.append(Self.error(nil, -32600, "Invalid Request"))
                    continue
                }
                for line in handle(request) {
                    if let answer = try? JSON.parse(line), answer["id"] != nil, answer["method"] == nil { answers.append(answer) } else { extra.append(line) }
                }
            }
            return extra + (answers.isEmpty ? [] : [JSON.array(answers).bytes])
        default:
            return [Self.error(nil, -32600, "Invalid Request").bytes]
        }
    }

    /// The answer to a line longer than the kernel takes (it is skipped to its newline, unread).
    public static func lineTooLong(_ limit: Int) -> JSON {
        error(nil, -32600, "Invalid Request: the line is longer than \(limit) bytes (kernel.maxLineBytes)")
    }

    /// The one protocol version with JSON-RPC batches.
    static let batchVersion = "2025-03-26"

    private func handle(_ request: JSONObject) -> [[UInt8]] {
        let id = request["id"]
        guard let method = request["method"]?.stringValue else { return id == nil ? [] : [Self.error(id, -32600, "Invalid Request").bytes] }
        let params = request["params"]?.objectValue ?? JSONObject()
        guard let id, id != .null else {
            // notifications/cancelled of a listen stream ends it, answered as a graceful close.
            if method == "notifications/cancelled", let target = params["requestId"], let i = listens.firstIndex(where: { $0.id == target }) {
                listens.remove(at: i)
                return [Self.result(target, ["resultType": "complete", "_meta": .object(JSONObject([(Self.subscriptionKey, target)]))]).bytes]
            }
            return []
        }
        if method == "subscriptions/listen", params["_meta"]?[Self.versionKey] == .string(Self.modernVersion) {
            return listen(id, params)
        }
        return [answer(id: id, method: method, params: params).bytes]
    }

    static let subscriptionKey = "io.modelcontextprotocol/subscriptionId"

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
        case "resources/subscribe", "resources/unsubscribe":
            let uri = params["uri"]?.stringValue ?? ""
            guard Self.resources.contains(where: { $0.uri == uri }) else { return Self.error(id, -32002, "Resource not found", data: ["uri": .string(uri)]) }
            if method == "resources/subscribe" { subscribed.insert(uri); startFeed() } else { subscribed.remove(uri) }
            return Self.result(id, [:])
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
        ["tools": ["listChanged": false], "resources": ["subscribe": true, "listChanged": false]]
    }

    private var serverInfo: JSON { ["name": "healthkernel", "version": .string(serverVersion)] }

    // MARK: Subscriptions

    /// Opens a 2026-07-28 listen stream: acknowledges the resource URIs it honours (the known ones).
    private func listen(_ id: JSON, _ params: JSONObject) -> [[UInt8]] {
        let asked = params["notifications"]?["resourceSubscriptions"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let honored = asked.filter { uri in Self.resources.contains { $0.uri == uri } }
        listens.append((id, Set(honored)))
        startFeed()
        let ack: JSON = ["jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                         "params": ["notifications": ["resourceSubscriptions": .array(honored.map(JSON.string))],
                                    "_meta": .object(JSONObject([(Self.subscriptionKey, id)]))]]
        return [ack.bytes]
    }

    /// Reads the feed to its end once, so that only later changes are announced.
    private func startFeed() {
        guard feedCursor == nil else { return }
        feedCursor = ""
        _ = changedURIs()
    }

    /// Whether anyone listens for changes.
    public var hasSubscribers: Bool { !subscribed.isEmpty || !listens.isEmpty }

    /// The notifications due for changes made since the last look (by any host: the feed has them all).
    public func poll() -> [[UInt8]] {
        guard hasSubscribers else { return [] }
        let changed = changedURIs()
        var lines: [[UInt8]] = []
        for uri in Self.resources.map(\.uri) where changed.contains(uri) {
            if subscribed.contains(uri) {
                lines.append((["jsonrpc": "2.0", "method": "notifications/resources/updated", "params": ["uri": .string(uri)]] as JSON).bytes)
            }
            for listen in listens where listen.uris.contains(uri) {
                lines.append((["jsonrpc": "2.0", "method": "notifications/resources/updated",
                               "params": ["uri": .string(uri), "_meta": .object(JSONObject([(Self.subscriptionKey, listen.id)]))]] as JSON).bytes)
            }
        }
        return lines
    }

    /// The resources whose answers the feed's new entries change, reading it to its end.
    private func changedURIs() -> Set<String> {
        var uris = Set<String>()
        for _ in 0..<100 {
            var args = JSONObject([("auth", .string(token())), ("limit", 1000)])
            if let cursor = feedCursor, !cursor.isEmpty { args["since"] = .string(cursor) }
            let response = call("sync.changes", args)
            guard let page = response["result"] else {
                // Deletes older than the cursor were dropped (protocol/sync.md): read the feed again from
                // the start, and since anything may have changed meanwhile, announce every resource.
                if response["error"]?["data"]?["reason"] == "cursor_expired", feedCursor?.isEmpty == false {
                    feedCursor = ""
                    uris.formUnion(Self.resources.map(\.uri))
                    continue
                }
                break
            }
            for change in page["changes"]?.arrayValue ?? [] {
                let entity = change["entity"]?.stringValue ?? ""
                if entity.hasPrefix("health.") { uris.formUnion(["healthkernel://summary/last-7-days", "healthkernel://summary/last-30-days"]) }
                if entity.hasPrefix("sessions.") { uris.insert("healthkernel://meditation/stats") }
                if entity.hasPrefix("subscriptions.") { uris.insert("healthkernel://subscription") }
            }
            feedCursor = page["cursor"]?.stringValue ?? feedCursor
            if page["hasMore"] != true { break }
        }
        return uris
    }

    // MARK: Tools

    private func callTool(_ id: JSON, _ params: JSONObject, modern: Bool) -> JSON {
        guard let name = params["name"]?.stringValue, let tool = tools.first(where: { $0.name == name }) else {
            return Self.error(id, -32602, "Unknown tool: \(params["name"]?.stringValue ?? "(none)")")
        }
        var arguments = params["arguments"]?.objectValue ?? JSONObject()
        // The token is the server's, never the model's.
        guard arguments["auth"] == nil else { return Self.result(id, Self.toolError("auth is not an argument of \(name)")) }
        arguments["auth"] = .string(token())
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
            text = text.replacing("params.", with: "") + " (argument \(field.hasPrefix("params.") ? String(field.dropFirst(7)) : field))"
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
        args["auth"] = .string(token())
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
