import Foundation
import JSON
import Testing
import TestSupport

/// The real binary on PostgreSQL: `store migrate`, and kernels on one database seeing each other's work.
@Suite(.oneStoreOnly) struct PostgresBinaryTests {
    @Test func storeMigrateCreatesOnceAndRefusesANewerSchema() throws {
        let schema = TestPostgres.freshSchema()
        let args = ["store", "migrate", "--store", TestPostgres.url, "--config", try configFile(schema)]
        let first = try runBinary(args)
        #expect(first.status == 0, "\(first.stderrText)")
        #expect(try JSON.parse(first.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)) == ["schema": .string(schema), "from": 0, "to": 4])
        let again = try runBinary(args)
        #expect(try JSON.parse(again.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))["from"] == 4)

        // A database migrated by a newer binary: this one must not touch it.
        #expect(psql("UPDATE \(schema).schema_version SET version = 99") == 0)
        let refused = try runBinary(args)
        #expect(refused.status == 2)
        #expect(refused.stderrText.contains("version 99") && refused.stderrText.contains("binary's 4"), "\(refused.stderrText)")
    }

    @Test func aHostSubscribedToOneKernelHearsEveryKernelsChangesInOrder() throws {
        let config = try configFile(TestPostgres.freshSchema())
        let args = ["serve", "--store", TestPostgres.url, "--config", config, "--jwt-secret", testSecret, "--log-level", "error"]
        let a = try LiveKernel(args), b = try LiveKernel(args)
        defer {
            a.closeInput()
            b.closeInput()
            _ = a.finish()
            _ = b.finish()
        }
        let user = ScreenTimeBinaryTests.userToken
        let host = NotifiedCalls(subscriber: a)
        let call = host.call
        func claim(_ k: LiveKernel, _ date: String) {
            #expect(call(k, "screentime.claim", ["auth": .string(user), "date": .string(date), "minutes": 10])?["result"] != nil)
        }
        #expect(call(a, "events.subscribe", ["auth": .string(testServiceToken)])?["result"]?["subscribed"] == true)
        claim(b, "2025-04-01")
        claim(a, "2025-04-02")
        claim(b, "2025-04-03")
        claim(b, "2025-04-04")
        claim(a, "2025-04-05")
        // The other kernel's last changes arrive without a request to wake the subscribed one.
        let heard = host.waitFor(5)
        #expect(heard.compactMap { $0["params"]?["id"]?.stringValue } == ["2025-04-01", "2025-04-02", "2025-04-03", "2025-04-04", "2025-04-05"])
        let seqs = heard.compactMap { $0["params"]?["seq"]?.intValue }
        #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count, "out of order or repeated: \(seqs)")
        let feed = call(b, "sync.changes", ["auth": .string(user)])?["result"]?["changes"]?.arrayValue ?? []
        #expect(feed.compactMap { $0["seq"]?.intValue } == seqs, "the notifications and the feed disagree")
    }

    /// Feed positions on PostgreSQL are per user: a subscription must hear a user with a short history
    /// after a busy one, from either kernel (its horizon was once the busiest user's position).
    @Test func aSubscriptionHearsUsersWithLessHistoryThanTheBusiestOne() throws {
        let config = try configFile(TestPostgres.freshSchema())
        let args = ["serve", "--store", TestPostgres.url, "--config", config, "--jwt-secret", testSecret, "--log-level", "error"]
        let a = try LiveKernel(args), s = try LiveKernel(args)
        defer {
            a.closeInput()
            s.closeInput()
            _ = a.finish()
            _ = s.finish()
        }
        let host = NotifiedCalls(subscriber: s)
        let call = host.call
        // The busy user: 30 feed entries before anyone subscribes.
        let busy = ScreenTimeBinaryTests.userToken
        for day in 1...30 {
            #expect(call(a, "screentime.claim", ["auth": .string(busy), "date": .string(String(format: "2025-05-%02d", day)), "minutes": 10])?["result"] != nil)
        }
        let quiet = try #require(call(a, "auth.signUp", ["email": "quiet@example.com", "password": "correct horse battery"])?["result"]?["accessToken"])
        #expect(call(s, "events.subscribe", ["auth": .string(testServiceToken)])?["result"]?["subscribed"] == true)
        for day in 1...10 {
            let date = JSON.string(String(format: "2025-06-%02d", day))
            #expect(call(day % 2 == 0 ? a : s, "screentime.claim", ["auth": quiet, "date": date, "minutes": 5])?["result"] != nil)
        }
        let heard = host.waitFor(10)
        #expect(heard.compactMap { $0["params"]?["id"]?.stringValue } == (1...10).map { String(format: "2025-06-%02d", $0) })
        let seqs = heard.compactMap { $0["params"]?["seq"]?.intValue }
        #expect(seqs == Array(1...10).map(Int64.init), "the quiet user's own positions, in order: \(seqs)")
    }

    @Test func killingOneKernelUnderLoadLosesNothingItAnsweredAndTheOtherServesOn() throws {
        let config = try configFile(TestPostgres.freshSchema())
        let args = ["serve", "--store", TestPostgres.url, "--config", config, "--enable-test-methods", "--log-level", "error"]
        let a = try LiveKernel(args), b = try LiveKernel(args)
        defer {
            b.closeInput()
            _ = b.finish()
        }
        func writes(_ prefix: String, _ range: Range<Int>) -> [String] {
            range.map { i in
                JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", .string("\(prefix)\(i)")), ("method", "test.write"),
                                        ("params", ["key": .string("\(prefix)\(i)"), "value": .string("v\(i)")])])).serialized
            }
        }
        /// Reads up to `count` responses; returns the ids answered with a result.
        func answered(_ k: LiveKernel, _ count: Int) -> [String] {
            var ids: [String] = []
            for _ in 0..<count {
                guard let text = k.readRawLine(timeoutSeconds: 10), let line = try? JSON.parse(text) else { break }
                if line["result"] != nil, let id = line["id"]?.stringValue { ids.append(id) }
            }
            return ids
        }
        var fromA: [String] = [], fromB: [String] = []
        for round in 0..<3 {
            a.send(writes("a", round * 200..<(round + 1) * 200))
            b.send(writes("b", round * 200..<(round + 1) * 200))
            fromA += answered(a, 200)
            fromB += answered(b, 200)
        }
        // The fourth round: A dies with requests in flight, some answered.
        a.send(writes("a", 600..<800))
        b.send(writes("b", 600..<800))
        fromA += answered(a, 50)
        a.kill9()
        _ = a.finish()
        fromB += answered(b, 200)
        b.send(writes("b", 800..<1000))
        fromB += answered(b, 200)
        #expect(fromB.count == 1000, "the other kernel answers every request")

        b.send([#"{"jsonrpc":"2.0","id":"dump","method":"test.dump"}"#])
        let dump = try #require(b.readRawLine(timeoutSeconds: 60).flatMap { try? JSON.parse($0) })
        let rows = dump["result"]?["rows"]?.arrayValue ?? []
        let stored = Set(rows.compactMap { $0["key"]?.stringValue })
        #expect(fromA.count >= 650)
        #expect(fromA.allSatisfy(stored.contains), "a write the killed kernel answered is missing")
        #expect(fromB.allSatisfy(stored.contains))
        #expect(rows.allSatisfy { $0["a"] == $0["b"] }, "no write half-applied")
    }

    @Test func aDataDirMovesToPostgresAndBackWithTheSameAnswers() throws {
        let dir = temporaryDirectory("move"), back = temporaryDirectory("move-back")
        defer {
            try? FileManager.default.removeItem(atPath: dir)
            try? FileManager.default.removeItem(atPath: back)
        }
        let config = try configFile(TestPostgres.freshSchema())
        let user = ScreenTimeBinaryTests.userToken
        let secret = ["--jwt-secret", testSecret, "--log-level", "error"]
        func call(_ store: [String], _ method: String, _ params: JSON) throws -> JSON {
            let r = try runBinary(["call", method, params.serialized] + store + secret)
            return (try? JSON.parse(r.stdoutText)) ?? ["status": .int(Int64(r.status)), "stderr": .string(r.stderrText)]
        }
        let source = ["--data-dir", dir]
        _ = try call(source, "auth.signUp", ["email": "mover@example.com", "password": "correct horse battery"])
        _ = try call(source, "screentime.claim", ["auth": .string(user), "date": "2025-05-01", "minutes": 30])
        // A device's cursor from before the move, which must go on working after it, both ways.
        let cursor = try #require(try call(source, "sync.changes", ["auth": .string(user)])["cursor"])
        _ = try call(source, "screentime.claim", ["auth": .string(user), "date": "2025-05-02", "minutes": 45])
        _ = try call(source, "rewards.earn", ["auth": .string(user), "xp": 70, "reason": "walk", "key": "k1"])
        _ = try call(source, "rewards.redeem", ["auth": .string(user), "xp": 20])
        // One commit with two synced changes in an order of its own (the timer goes, the session comes),
        // and a deleted record (a tombstone in the feed).
        _ = try call(source, "sessions.start", ["auth": .string(user)])
        _ = try call(source, "sessions.stop", ["auth": .string(user)])
        let gone = try #require(try call(source, "sessions.record", ["auth": .string(user), "startTime": "2025-05-01T10:00:00Z", "durationSeconds": 60])["sessionId"])
        _ = try call(source, "sessions.delete", ["auth": .string(user), "sessionId": gone])

        /// What a client sees of a store: its records, its whole feed with positions and times, and the
        /// feed after a cursor taken before the move.
        func answers(_ store: [String]) throws -> [JSON] {
            let feed = try call(store, "sync.changes", ["auth": .string(user)])["changes"]?.arrayValue ?? []
            let since = try call(store, "sync.changes", ["auth": .string(user), "since": cursor])["changes"]?.arrayValue ?? []
            return [
                try call(store, "rewards.balance", ["auth": .string(user)]),
                try call(store, "screentime.history", ["auth": .string(user), "from": "2025-05-01", "to": "2025-05-31"]),
                .array(feed), .array(since),
                .bool(try call(store, "auth.signIn", ["email": "mover@example.com", "password": "correct horse battery"])["accessToken"] != nil),
                .bool(try call(store, "rewards.earn", ["auth": .string(user), "xp": 70, "reason": "walk", "key": "k1"])["xp"] == 50),
            ]
        }
        let before = try answers(source)
        #expect(before[4] == true && before[5] == true, "the source answers as expected: \(before)")
        #expect(before[3].arrayValue?.count == (before[2].arrayValue?.count ?? 0) - 1, "the cursor skips the first claim only")

        func move(_ from: [String], _ to: [String]) throws {
            let export = try runBinary(["store", "export"] + from + ["--log-level", "error"])
            #expect(export.status == 0, "\(export.stderrText)")
            let imported = try runBinary(["store", "import"] + to + secret, input: export.stdout)
            #expect(imported.status == 0, "\(imported.stderrText)")
            #expect(try JSON.parse(imported.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))["imported"]?.intValue ?? 0 > 5)
        }
        let postgres = ["--store", TestPostgres.url, "--config", config]
        try move(source, postgres)
        #expect(try answers(postgres) == before, "PostgreSQL answers as the data dir did")
        // An import goes only into an empty store.
        let again = try runBinary(["store", "import"] + postgres + secret, input: Data("{\"type\":\"snapshot\"}\n".utf8))
        #expect(again.status == 2 && again.stderrText.contains("not empty"))
        try move(postgres, ["--data-dir", back])
        #expect(try answers(["--data-dir", back]) == before, "and so does the data dir it moves back to")
        // A change after the move comes after everything moved, in the feed and to the old cursor.
        _ = try call(["--data-dir", back], "screentime.claim", ["auth": .string(user), "date": "2025-05-03", "minutes": 5])
        let after = try call(["--data-dir", back], "sync.changes", ["auth": .string(user), "since": cursor])["changes"]?.arrayValue ?? []
        let last = try #require(after.last)
        #expect(last["id"] == "2025-05-03" && after.count == (before[3].arrayValue?.count ?? 0) + 1, "\(after)")
        #expect((last["seq"]?.intValue ?? 0) > (before[2].arrayValue?.compactMap { $0["seq"]?.intValue }.max() ?? .max))
    }

    @Test func thePasswordInTheURLNeverShows() throws {
        let config = NSTemporaryDirectory() + "hk-timeout-\(UUID().uuidString).json"
        try Data(#"{"store":{"connectTimeoutSeconds":1,"schema":"\#(TestPostgres.freshSchema())"}}"#.utf8).write(to: URL(fileURLWithPath: config))
        let socket = TestPostgres.url.components(separatedBy: "host=").last ?? "/tmp"
        let urls = [
            "postgresql://hk:s3cretPass@/hk?host=/nonexistent",  // unreachable
            "postgresql://hk:s3%zzcretPass@/hk?host=/nonexistent",  // libpq quotes the token it cannot decode
            "postgresql://hk@/hk?host=/nonexistent&password=s3cretPass",
            "postgresql://hk:s3cretPass@/hk?host=\(socket)",  // reachable (the test server trusts local users)
        ]
        for url in urls {
            let r = try runBinary(["call", "kernel.info", "--store", url, "--config", config, "--log-level", "trace"])
            #expect(!(r.stdoutText + r.stderrText).contains("cretPass"), "\(url): \(r.stdoutText) \(r.stderrText)")
            #expect(r.status == (url.contains("nonexistent") ? 2 : 0), "\(url): \(r.stderrText)")
        }
    }

    /// A config file naming `schema` (the schema has no flag of its own).
    func configFile(_ schema: String) throws -> String {
        let path = NSTemporaryDirectory() + "hk-config-\(schema).json"
        try Data(#"{"store":{"schema":"\#(schema)"}}"#.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Runs one SQL command on the test server; returns psql's exit status.
    func psql(_ sql: String) -> Int32 {
        system("psql -q '\(TestPostgres.url)' -c '\(sql)' > /dev/null")
    }
}

/// Security round 2, item 4: the schema's name reached SQL inside a string literal, and PostgreSQL's
/// own error text reached clients.
extension PostgresBinaryTests {
    @Test func aSchemaNameIsDataAndPostgresTextNeverReachesAClient() throws {
        let hostile = "b'||current_user::int||'" + String(TestPostgres.freshSchema().suffix(8))
        let path = NSTemporaryDirectory() + "hk-config-hostile-\(UUID().uuidString).json"
        let hostileConfig: JSON = ["store": ["schema": .string(hostile)]]
        try hostileConfig.serialized.write(toFile: path, atomically: true, encoding: .utf8)
        let store = ["--store", TestPostgres.url, "--config", path, "--jwt-secret", testSecret, "--log-level", "error"]
        let info = try runBinary(["call", "kernel.info"] + store)
        #expect(info.status == 0, "\(info.stdoutText) \(info.stderrText)")
        #expect(!info.stdoutText.contains("invalid input syntax"), "\(info.stdoutText)")

        // A store that fails under the kernel: the answer says what failed in the kernel's words.
        let schema = TestPostgres.freshSchema()
        let config = try configFile(schema)
        let kernel = try LiveKernel(["serve", "--store", TestPostgres.url, "--config", config, "--jwt-secret", testSecret, "--log-level", "error"])
        defer {
            kernel.closeInput()
            _ = kernel.finish()
        }
        let user = JSON.string(ScreenTimeBinaryTests.userToken)
        func call(_ method: String, _ params: JSON) -> JSON? {
            _ = kernel.send([JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", 1), ("method", .string(method)), ("params", params)])).serialized])
            return kernel.readRawLine(timeoutSeconds: 20).flatMap { try? JSON.parse($0) }
        }
        #expect(call("rewards.earn", ["auth": user, "xp": 10, "reason": "walk", "key": "a"])?["result"] != nil)
        #expect(psql("ALTER TABLE \(schema).rows RENAME TO rows_gone") == 0)
        let failed = try #require(call("rewards.earn", ["auth": user, "xp": 10, "reason": "walk", "key": "b"]))
        #expect(failed["error"]?["code"] == -32050, "\(failed)")
        let message = failed["error"]?["message"]?.stringValue ?? ""
        #expect(!message.contains("rows") && !message.contains("does not exist") && !message.contains(schema), "PostgreSQL's text reached the client: \(message)")
    }
}

/// Calls kernel processes one request at a time, keeping the `events.changed` lines the subscribed one
/// writes on the way.
final class NotifiedCalls {
    let subscriber: LiveKernel
    private(set) var heard: [JSON] = []
    private var id = 0

    init(subscriber: LiveKernel) { self.subscriber = subscriber }

    /// Sends one request to `k` and returns its response.
    func call(_ k: LiveKernel, _ method: String, _ params: JSON) -> JSON? {
        id += 1
        k.send([JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", .int(Int64(id))), ("method", .string(method)), ("params", params)])).serialized])
        while let text = k.readRawLine(timeoutSeconds: 10), let line = try? JSON.parse(text) {
            if line["id"] == nil { if k === subscriber { heard.append(line) }; continue }
            return line
        }
        return nil
    }

    /// The notifications heard, once there are `count` of them or 10 seconds have passed.
    func waitFor(_ count: Int) -> [JSON] {
        let deadline = Date().addingTimeInterval(10)
        while heard.count < count && Date() < deadline {
            if let text = subscriber.readRawLine(timeoutSeconds: 1), let line = try? JSON.parse(text) { heard.append(line) }
        }
        return heard
    }
}
