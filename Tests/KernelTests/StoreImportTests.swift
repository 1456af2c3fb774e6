import Foundation
import JSON
import Kernel
import Testing
import TestSupport

/// `store import` takes only rows the domains could have written, all of a file or none of it, and no
/// read traps on a stored row it cannot read (PostgreSQL rows can be edited behind the kernel's back).
@Suite(.oneStoreOnly) struct StoreImportTests {
    static let user = "3f0e9a52-3c1e-4b8e-9a54-0f6f3f6c2a11"
    let secret = ["--jwt-secret", testSecret, "--log-level", "error"]

    func call(_ store: [String], _ method: String, _ params: JSON) throws -> JSON {
        let r = try runBinary(["call", method, params.serialized] + store + secret)
        return (try? JSON.parse(r.stdoutText)) ?? ["status": .int(Int64(r.status)), "stderr": .string(r.stderrText)]
    }

    /// The export lines of a data dir with two accounts, a claimed day and a session.
    func exportLines() throws -> [JSON] {
        let dir = temporaryDirectory("import-source")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = ["--data-dir", dir]
        _ = try call(store, "auth.signUp", ["email": "ann@example.com", "password": "correct horse battery"])
        _ = try call(store, "auth.signUp", ["email": "bob@example.com", "password": "correct horse battery"])
        let token = try #require(runBinary(["token", "--user", Self.user] + store + secret).stdoutText.split(separator: "\n").first)
        _ = try call(store, "screentime.claim", ["auth": .string(String(token)), "date": "2025-05-01", "minutes": 30])
        _ = try call(store, "sessions.record", ["auth": .string(String(token)), "startTime": "2025-05-01T10:00:00Z", "durationSeconds": 600])
        _ = try call(store, "kernel.snapshot", ["auth": .string(testServiceToken)])
        let export = try runBinary(["store", "export"] + store + ["--log-level", "error"])
        #expect(export.status == 0, "\(export.stderrText)")
        return try export.stdoutText.split(separator: "\n").map { try JSON.parseAllowingNul(Array($0.utf8)) }
    }

    /// Imports `lines` into a new data dir: exit status, stderr, and whether the dir then takes the
    /// untouched export (proof that nothing of the refused file stayed).
    func importRefused(_ lines: [JSON], good: [JSON]) throws -> (status: Int32, stderr: String, emptyAfter: Bool) {
        let dir = temporaryDirectory("import-target")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let input = Data(lines.map { $0.serialized + "\n" }.joined().utf8)
        let refused = try runBinary(["store", "import", "--data-dir", dir] + secret, input: input)
        let retry = try runBinary(["store", "import", "--data-dir", dir] + secret, input: Data(good.map { $0.serialized + "\n" }.joined().utf8))
        return (refused.status, refused.stderrText, retry.status == 0)
    }

    /// `lines` with the first row of `table` (and `where`) changed by `edit`; also its line number.
    func editing(_ lines: [JSON], table: String, where match: (JSON) -> Bool = { _ in true }, _ edit: (inout JSONObject) -> Void) throws -> ([JSON], Int) {
        var out = lines
        let i = try #require(out.firstIndex { $0["table"]?.stringValue == table && match($0) })
        var o = try #require(out[i].objectValue)
        edit(&o)
        out[i] = .object(o)
        return (out, i + 1)
    }

    /// `lines` (an export less its end line, or edited) with a new end line that fits them.
    func ended(_ lines: [JSON]) -> [JSON] {
        var trailer = ExportTrailer()
        let body = lines.filter { $0["type"]?.stringValue != ExportTrailer.type }
        for line in body { trailer.add(Array(line.serialized.utf8)) }
        return body + [trailer.line]
    }

    /// #51 item 4: feed positions and times are range-checked on every kind of line: a tombstone at
    /// 2^63 - 1 gave every user positions past 2^63 on the next write, and sync.changes then trapped.
    @Test func positionsAndTimesOutOfRangeAreRefusedOnEveryLine() throws {
        let good = try exportLines()
        #expect(good.last?["type"] == "end", "an export ends with its end line")
        let base = good.filter { $0["type"]?.stringValue != ExportTrailer.type }
        let tombstone: JSON = ["type": "tombstone", "table": "sessions.records", "user": .string(Self.user), "key": "x", "seq": .int(Int64.max), "at": 1]
        let row = try #require(base.first { $0["type"] == "row" && $0["table"] == "screentime.days" })
        var badTime = try #require(row.objectValue)
        badTime["seq"] = 5
        badTime["at"] = .int(Int64.min)
        var textSeq = badTime
        textSeq["at"] = 5
        textSeq["seq"] = "7"
        for (bad, what) in [(tombstone, "seq"), (JSON.object(badTime), "at"), (JSON.object(textSeq), "seq"),
                            (["type": "feed", "user": "u", "last": .int(1 << 60)], "last"), (["type": "record", "seq": .int(1 << 40), "at": 1, "changes": []], "seq")] as [(JSON, String)] {
            let r = try importRefused(ended(base + [bad]), good: good)
            #expect(r.status == 2 && r.stderr.contains("line \(base.count + 1):") && r.stderr.contains(what) && r.stderr.contains("is not an integer from 0 to"), "\(r.stderr)")
            #expect(r.emptyAfter)
        }
    }

    /// #51 item 5: an export ends with a line counting the lines before it and their CRC-32C; input
    /// without it (cut short), with lines after it, or whose lines differ, is refused whole.
    @Test func aCutShortOrAlteredExportIsRefusedWhole() throws {
        let good = try exportLines()
        let r = try importRefused(Array(good.prefix(2)), good: good)
        #expect(r.status == 2 && r.stderr.contains("without the export's end line") && r.stderr.contains("nothing was imported"), "\(r.stderr)")
        #expect(r.emptyAfter)
        let after = try importRefused(good + [good[1]], good: good)
        #expect(after.status == 2 && after.stderr.contains("comes after the export's end line"), "\(after.stderr)")
        // A row dropped from the middle, the end line kept: the count says so.
        var dropped = good
        dropped.remove(at: dropped.firstIndex { $0["table"] == "screentime.days" }!)
        let d = try importRefused(dropped, good: good)
        #expect(d.status == 2 && d.stderr.contains("lines, but"), "\(d.stderr)")
        // A row's value edited but still valid: the checksum says so.
        let (edited, _) = try editing(good, table: "auth.users") { row in
            var v = row["value"]?.objectValue ?? JSONObject()
            v["createdAt"] = v["createdAt"] == .int(1) ? .int(2) : .int(1)
            row["value"] = .object(v)
        }
        let e = try importRefused(edited, good: good)
        #expect(e.status == 2 && (e.stderr.contains("CRC-32C") || e.stderr.contains("not one the kernel writes")), "\(e.stderr)")
    }

    /// #51 item 5: an email claimed by a user whose account is not in the file would leave the address
    /// dead (sign-in: invalid_credentials; sign-up: email_taken).
    @Test func anEmailWithoutItsAccountIsRefused() throws {
        let good = try exportLines()
        let ann = try #require(good.first { $0["key"]?.stringValue == "auth.email\u{0}ann@example.com" }?["user"]?.stringValue)
        let lines = ended(good.filter { !($0["table"] == "auth.users" && $0["user"]?.stringValue == ann) })
        let r = try importRefused(lines, good: good)
        #expect(r.status == 2 && r.stderr.contains("whose account is not in the file") && r.stderr.contains("ann@example.com"), "\(r.stderr)")
        #expect(r.emptyAfter)
    }

    /// #51 item 7: U+0000 in a user or key is refused: PostgreSQL would cut it there.
    @Test func keysAndUsersHoldingNulAreRefused() throws {
        let good = try exportLines()
        for field in ["key", "user"] {
            let (bad, line) = try editing(good, table: "screentime.days") { $0[field] = .string(($0[field]?.stringValue ?? "") + "\u{0}x") }
            let r = try importRefused(ended(bad), good: good)
            #expect(r.status == 2 && r.stderr.contains("line \(line):") && r.stderr.contains("U+0000"), "\(field): \(r.stderr)")
        }
    }

    /// #51 item 6: a line is bounded (and read in linear time): one past the bound is refused by number.
    @Test func aLineLongerThanTheBoundIsRefusedByNumber() throws {
        let dir = temporaryDirectory("import-long")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // From a file, not a pipe: the kernel stops reading at the bound, and a writer to a closed pipe
        // would take SIGPIPE.
        let file = dir + "-input", errors = dir + "-stderr"
        defer { for f in [file, errors] { try? FileManager.default.removeItem(atPath: f) } }
        var input = Data("{\"type\":\"snapshot\"}\n".utf8)
        input.append(Data(repeating: 0x20, count: (256 << 20) + 1))
        try input.write(to: URL(fileURLWithPath: file))
        let status = try runProcess("/bin/sh", ["-c", "\"$0\" store import --data-dir \"$1\" --jwt-secret \"$2\" < \"$3\" 2> \"$4\"",
                                                 Paths.binary, dir, testSecret, file, errors])
        let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
        #expect(status == 2 && stderr.contains("line 2 is longer than 256 MiB"), "\(stderr)")
    }

    @Test func aDayKeyedByADateThatDoesNotExistIsRefusedAndNothingIsImported() throws {
        let good = try exportLines()
        let (bad, line) = try editing(good, table: "screentime.days") { $0["key"] = "2026-13-45" }
        let r = try importRefused(bad, good: good)
        #expect(r.status == 2)
        #expect(r.stderr.contains("line \(line):") && r.stderr.contains("2026-13-45") && r.stderr.contains("nothing was imported"), "\(r.stderr)")
        #expect(r.emptyAfter, "the refused file left rows behind")
    }

    @Test func aSessionWithAnInstantNoMethodWritesIsRefused() throws {
        let good = try exportLines()
        let (bad, line) = try editing(good, table: "sessions.records") { row in
            var value = row["value"]?.objectValue ?? JSONObject()
            value["startTime"] = .int(-9_223_372_036_854_775_807)
            row["value"] = .object(value)
        }
        let r = try importRefused(bad, good: good)
        #expect(r.status == 2 && r.stderr.contains("line \(line):") && r.stderr.contains("startTime") as Bool, "\(r.stderr)")
        #expect(r.emptyAfter)
    }

    @Test func twoAccountsWithOneEmailAreRefusedNotMerged() throws {
        let good = try exportLines()
        let unique = { (line: JSON) in line["key"]?.stringValue == "auth.email\u{0}bob@example.com" }
        // Bob's account claims Ann's address: one of them could never sign in again.
        let (taken, _) = try editing(good, table: "store.unique", where: unique) { $0["key"] = "auth.email\u{0}ann@example.com" }
        let r = try importRefused(taken, good: good)
        #expect(r.status == 2 && r.stderr.contains("held by two users"), "\(r.stderr)")
        #expect(r.emptyAfter)
        // The same address in another case is the same account to sign-in, which looks up the normalised form only.
        let (cased, _) = try editing(good, table: "store.unique", where: unique) { $0["key"] = "auth.email\u{0}Ann@Example.com" }
        let c = try importRefused(cased, good: good)
        #expect(c.status == 2 && c.stderr.contains("not in the form the kernel claims it"), "\(c.stderr)")
    }

    @Test func rowContentInMessagesCannotDriveTheTerminal() throws {
        let good = try exportLines()
        let (bad, _) = try editing(good, table: "screentime.days") { $0["key"] = "\u{1b}[2J\u{9b}31m\n{\"imported\": 5}" }
        let r = try importRefused(bad, good: good)
        #expect(r.status == 2)
        #expect(!r.stderr.unicodeScalars.contains { $0.value == 0x1b || $0.value == 0x9b }, "a raw escape reached stderr")
        #expect(r.stderr.contains("\\u{1b}[2J") && !r.stderr.contains("\n{\"imported\""), "\(r.stderr)")
    }

    /// Rows edited in PostgreSQL behind the kernel: each read that meets one answers -32603, and the
    /// kernel serves on (it trapped before, taking every user's requests with it).
    @Test func aStoredRowThatCannotBeReadFailsOneRequestNotTheKernel() throws {
        let schema = TestPostgres.freshSchema()
        let config = NSTemporaryDirectory() + "hk-config-\(schema).json"
        try Data(#"{"store":{"schema":"\#(schema)"}}"#.utf8).write(to: URL(fileURLWithPath: config))
        let kernel = try LiveKernel(["serve", "--store", TestPostgres.url, "--config", config] + secret)
        defer {
            kernel.closeInput()
            _ = kernel.finish()
        }
        let token = try #require(runBinary(["token", "--user", Self.user] + secret).stdoutText.split(separator: "\n").first).description
        var id = 0
        func call(_ method: String, _ params: JSON) -> JSON? {
            id += 1
            var p = params.objectValue ?? JSONObject()
            p["auth"] = .string(token)
            _ = kernel.send([JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", .int(Int64(id))), ("method", .string(method)), ("params", .object(p))])).serialized])
            return kernel.readRawLine(timeoutSeconds: 20).flatMap { try? JSON.parse($0) }
        }
        #expect(call("screentime.claim", ["date": "2025-05-01", "minutes": 30])?["result"] != nil)
        #expect(call("sessions.record", ["startTime": "2025-05-01T10:00:00Z", "durationSeconds": 600])?["result"] != nil)
        #expect(call("health.ingest", ["samples": [["uuid": "5b7d2c7e-1f2a-4c3b-9d8e-7f6a5b4c3d2e", "type": "HKQuantityTypeIdentifierStepCount",
                                                     "value": 100, "unit": "count", "start": "2025-05-01T10:00:00Z", "end": "2025-05-01T10:10:00Z"]]])?["result"] != nil)
        func sql(_ statement: String) {
            #expect(system("psql -q -X -v ON_ERROR_STOP=1 '\(TestPostgres.url)' -c \"\(statement)\" > /dev/null") == 0, "\(statement)")
        }
        sql("INSERT INTO \(schema).rows (tbl, usr, key, body) SELECT tbl, usr, '2025-02-30', body FROM \(schema).rows WHERE tbl = 'screentime.days'")
        sql("INSERT INTO \(schema).rows (tbl, usr, key, body) SELECT tbl, usr, '2025-05-3x', body FROM \(schema).rows WHERE tbl = 'health.days'")
        sql("UPDATE \(schema).rows SET body = replace(body, '\\\"startTime\\\":', '\\\"startTime\\\":-9223372036854775807') WHERE tbl = 'sessions.records'")
        let history = call("screentime.history", ["from": "2025-01-01", "to": "2025-12-31"])
        #expect(history?["error"]?["code"] == -32603, "\(String(describing: history))")
        let weekly = call("health.weekly", ["from": "2025-05-01", "to": "2025-06-30"])
        #expect(weekly?["error"]?["code"] == -32603, "\(String(describing: weekly))")
        let sessions = call("sessions.list", [:])
        #expect(sessions?["error"]?["code"] == -32603, "\(String(describing: sessions))")
        // The kernel serves on, the same user included.
        #expect(call("screentime.day", ["date": "2025-05-01"])?["result"]?["claimedMinutes"] == 30)
        #expect(call("rewards.balance", [:])?["result"] != nil)
    }
}
