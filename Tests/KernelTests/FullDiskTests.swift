import Foundation
import JSON
import Testing
import TestSupport

/// A small tmpfs mounted for one test (root only): a disk that really fills up.
struct Tmpfs {
    /// Where it is mounted; the filler lives here, beside the data dir (a data dir holds only the
    /// kernel's files: a folder with another file in it is refused as no data dir).
    let mount: String
    /// The data dir on it.
    var dir: String { mount + "/data" }

    /// Whether this process may mount one; checked once by mounting and unmounting a tiny one.
    /// `HEALTHKERNEL_TEST_NO_TMPFS=1` runs the tests as a user who cannot would.
    static let available: Bool = {
        guard ProcessInfo.processInfo.environment["HEALTHKERNEL_TEST_NO_TMPFS"] == nil, getuid() == 0, FileManager.default.isExecutableFile(atPath: "/bin/mount") else { return false }
        let probe = temporaryDirectory("tmpfs-probe")
        defer { try? FileManager.default.removeItem(atPath: probe) }
        guard (try? runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe])) == 0 else { return false }
        _ = try? runProcess("/bin/umount", [probe])
        return true
    }()

    init(kib: Int) throws {
        mount = temporaryDirectory("tmpfs")
        guard try runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=\(kib)k", "tmpfs", mount]) == 0 else {
            throw CocoaError(.fileWriteUnknown)
        }
        try FileManager.default.createDirectory(atPath: mount + "/data", withIntermediateDirectories: false)
    }

    /// Writes a filler file of `kib` KiB (space that `free()` gives back).
    func fill(kib: Int) {
        #expect(FileManager.default.createFile(atPath: mount + "/filler", contents: Data(count: kib * 1024)),
                "the filler did not fit: the disk would not fill as the test needs")
    }

    func free() { try? FileManager.default.removeItem(atPath: mount + "/filler") }

    func remove() {
        _ = try? runProcess("/bin/umount", [mount])
        try? FileManager.default.removeItem(atPath: mount)
    }

    /// Log segment names in the data dir.
    var segments: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasPrefix("wal-") }.sorted()
    }
}

/// A kernel driven with one user's token: requests are sent as one write and answered in order.
struct Driver {
    let k: LiveKernel
    let token: String
    var nextID = 1

    /// Sends `requests` (method, params) in a single write and returns their responses in order.
    mutating func group(_ requests: [(String, JSON)]) -> [JSON] {
        var lines: [String] = []
        for (method, params) in requests {
            var p = params.objectValue ?? JSONObject()
            if p["auth"] == nil { p["auth"] = .string(token) }
            lines.append(JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", .int(Int64(nextID))), ("method", .string(method)),
                                                 ("params", .object(p))])).serialized)
            nextID += 1
        }
        k.send(lines)
        return requests.map { _ in k.readLine() ?? .null }
    }

    mutating func call(_ method: String, _ params: JSON = [:]) -> JSON {
        group([(method, params)])[0]
    }

    /// Earns 10 XP under fresh keys, `batch` requests a write, until a write is refused; returns the XP
    /// acknowledged. Then small writes until one is refused too, so no page of the disk has room left.
    mutating func earnUntilFull(prefix: String) -> Int {
        var acknowledged = 0
        var round = 0
        let reason = String(repeating: "r", count: 200)
        while round < 10_000 {
            let answers = group((0..<50).map { i in
                ("rewards.earn", ["xp": 10, "reason": .string(reason), "key": .string("\(prefix)-\(round)-\(i)")])
            })
            round += 1
            var refused = false
            for a in answers {
                if a["result"] != nil { acknowledged += 10 } else {
                    #expect(a["error"]?["code"] == -32050, "\(a)")
                    refused = true
                }
            }
            if refused { break }
        }
        for i in 0..<10_000 {
            let a = call("rewards.earn", ["xp": 10, "reason": "r", "key": .string("\(prefix)-small-\(i)")])
            if a["result"] != nil { acknowledged += 10 } else { break }
        }
        return acknowledged
    }
}

/// The disk fills up under a kernel that keeps serving: nothing acknowledged is lost, nothing refused
/// is shown, and a kernel starts on a disk that is still full. Needs root for a real tmpfs.
@Suite(.serialized, .oneStoreOnly) struct FullDiskTests {
    static let user = ScreenTimeBinaryTests.userToken

    func serve(_ dir: String, _ extra: [String] = []) -> [String] {
        ["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "critical", "--fsync", "always",
         "--snapshot-every-records", "1000000", "--snapshot-every-seconds", "0"] + extra
    }

    /// A 1 MiB tmpfs with a 512 KiB filler and a kernel that has filled the rest with acknowledged XP.
    func filledDisk() throws -> (Tmpfs, Driver, Int) {
        let disk = try Tmpfs(kib: 1024)
        disk.fill(kib: 512)
        var d = Driver(k: try LiveKernel(serve(disk.dir)), token: Self.user)
        #expect(d.call("rewards.balance")["result"]?["xp"] == 0)
        let xp = d.earnUntilFull(prefix: "a")
        #expect(xp > 0)
        return (disk, d, xp)
    }

    /// Defect: a snapshot that failed for lack of space left an empty segment; the retried snapshot then
    /// deleted the segment still being written, and every write after it was lost at the next crash.
    @Test(.enabled(if: Tmpfs.available, "needs root to mount a tmpfs"))
    func snapshotFailingForLackOfSpaceLosesNoAcknowledgedWrite() throws {
        var (disk, d, xp) = try filledDisk()
        defer { disk.remove() }
        let segmentsBefore = disk.segments
        let failed = d.call("kernel.snapshot", ["auth": .string(testServiceToken)])
        #expect(failed["error"]?["code"] == -32050)
        let message = failed["error"]?["message"]?.stringValue ?? ""
        #expect(!message.contains(disk.dir), "the message names the server's path: \(message)")
        #expect(disk.segments == segmentsBefore, "a failed snapshot changed the log segments")
        disk.free()
        #expect(d.call("kernel.snapshot", ["auth": .string(testServiceToken)])["result"]?["seq"] != nil)
        let earned = d.call("rewards.earn", ["xp": 1000, "reason": "big", "key": "after-snapshot"])
        #expect(earned["result"]?["xp"] == .int(Int64(xp + 1000)))
        xp += 1000
        for i in 0..<20 where d.call("rewards.earn", ["xp": 10, "reason": "r", "key": .string("after-\(i)")])["result"] != nil {
            xp += 10
        }
        d.k.kill9()
        _ = d.k.finish()
        var again = Driver(k: try LiveKernel(serve(disk.dir)), token: Self.user)
        #expect(again.call("rewards.balance")["result"]?["xp"] == .int(Int64(xp)), "acknowledged XP lost after the restart")
        // And once more after a crash right after a successful automatic-size snapshot.
        #expect(again.call("kernel.snapshot", ["auth": .string(testServiceToken)])["result"] != nil)
        #expect(again.call("rewards.earn", ["xp": 5, "reason": "r", "key": "last"])["result"] != nil)
        again.k.kill9()
        _ = again.k.finish()
        var third = Driver(k: try LiveKernel(serve(disk.dir)), token: Self.user)
        #expect(third.call("rewards.balance")["result"]?["xp"] == .int(Int64(xp + 5)))
        third.k.closeInput()
        #expect(third.k.finish() == 0)
    }

    /// Defect: reads sent in the same write as a refused write answered with the refused state. Every
    /// domain's reads, after a write of that domain that the full disk refuses, in one write each.
    @Test func readsInARefusedGroupShowOnlyDurableState() throws {
        let mounted = Tmpfs.available ? try Tmpfs(kib: 1024) : nil
        defer { mounted?.remove() }
        let dir = mounted?.dir ?? temporaryDirectory("refused-group")
        defer { if mounted == nil { try? FileManager.default.removeItem(atPath: dir) } }
        let hook = mounted == nil ? ["--fail-log-appends-beyond-bytes", "200000"] : []
        mounted?.fill(kib: 700)
        let k = try LiveKernel(serve(dir, hook))
        var d = Driver(k: k, token: Self.user)
        let signUp = d.call("auth.signUp", ["email": "full@example.com", "password": "correct horse battery"])
        let own = try #require(signUp["result"]?["accessToken"]?.stringValue)
        d = Driver(k: k, token: own, nextID: d.nextID)
        #expect(d.call("screentime.updateConnection", ["enabled": true, "timezone": "Europe/Berlin"])["result"] != nil)
        #expect(d.call("screentime.claim", ["date": "2025-03-01", "minutes": 30])["result"] != nil)
        #expect(d.call("sessions.record", ["startTime": "2025-03-01T08:00:00Z", "durationSeconds": 600])["result"] != nil)
        #expect(d.call("rewards.earn", ["xp": 100, "reason": "r", "key": "setup"])["result"] != nil)
        _ = d.earnUntilFull(prefix: "fill")

        func refused(_ a: JSON) -> Bool { a["error"]?["code"] == -32050 }
        // Each group starts with a write bigger than any room left after the fill, so the group's one
        // flush is refused whatever the sizes of the records after it.
        var pads = 0
        func refusedGroup(_ requests: [(String, JSON)]) -> [JSON] {
            pads += 1
            let pad: (String, JSON) = ("rewards.earn", ["xp": 10, "reason": .string(String(repeating: "p", count: 200)), "key": .string("pad-\(pads)")])
            let answers = d.group([pad] + requests)
            #expect(refused(answers[0]))
            return Array(answers.dropFirst())
        }
        let day = "2025-03-02"
        var g = refusedGroup([("screentime.upload", ["date": .string(day), "verifiedMinutes": 7]), ("screentime.day", ["date": .string(day)]),
                         ("screentime.history", ["from": .string(day), "to": .string(day)])])
        #expect(refused(g[0]))
        #expect(g[1]["error"]?["code"] == -32004, "the read showed a refused upload: \(g[1])")
        #expect(g[2]["result"]?["days"] == [])
        g = refusedGroup([("screentime.upload", ["date": "2025-03-01", "verifiedMinutes": 100]), ("screentime.penalties", [:]),
                     ("screentime.day", ["date": "2025-03-01"])])
        #expect(refused(g[0]))
        #expect(g[1]["result"] == ["totalPoints": 0, "entries": []])
        #expect(g[2]["result"]?["verifiedMinutes"] == .null)
        g = refusedGroup([("screentime.claim", ["date": "2025-03-01", "minutes": 500]), ("screentime.day", ["date": "2025-03-01"])])
        #expect(refused(g[0]))
        #expect(g[1]["result"]?["claimedMinutes"] == 30)
        g = refusedGroup([("screentime.updateConnection", ["timezone": "Asia/Tokyo"]), ("screentime.getConnection", [:])])
        #expect(refused(g[0]))
        #expect(g[1]["result"]?["timezone"] == "Europe/Berlin")
        g = refusedGroup([("screentime.logEvent", ["type": "intervalDidStart", "activity": "a", "at": "2025-03-01T10:00:00Z"]),
                     ("screentime.events", [:])])
        #expect(refused(g[0]))
        #expect(g[1]["result"]?["events"] == [])
        g = refusedGroup([("rewards.earn", ["xp": 50, "reason": "r", "key": "refused"]), ("rewards.earn", ["xp": 50, "reason": "r", "key": "refused"]),
                     ("rewards.balance", [:])])
        #expect(refused(g[0]))
        #expect(refused(g[1]), "an idempotent repeat answered with a refused earn: \(g[1])")
        let balance = g[2]["result"]?["xp"]?.intValue ?? -1
        g = refusedGroup([("rewards.redeem", ["xp": 10]), ("rewards.balance", [:])])
        #expect(refused(g[0]))
        #expect(g[1]["result"]?["xp"]?.intValue == balance)
        g = refusedGroup([("sessions.record", ["startTime": "2025-03-02T08:00:00Z", "durationSeconds": 60]), ("sessions.list", [:]),
                     ("sessions.stats", [:])])
        #expect(refused(g[0]))
        #expect(g[1]["result"]?["sessions"]?.arrayValue?.count == 1)
        #expect(g[2]["result"]?["totalSessions"] == 1)
        g = refusedGroup([("sessions.start", [:]), ("sessions.active", [:])])
        #expect(refused(g[0]))
        #expect(g[1]["result"] == .null)
        g = refusedGroup([("auth.signOut", ["scope": "all"]), ("auth.user", [:])])
        #expect(refused(g[0]))
        #expect(g[1]["result"]?["email"] == "full@example.com", "a refused sign-out revoked the token: \(g[1])")
        g = refusedGroup([("auth.deleteUser", [:]), ("auth.user", [:]), ("rewards.balance", [:])])
        #expect(refused(g[0]))
        #expect(g[1]["result"]?["email"] == "full@example.com")
        #expect(g[2]["result"]?["xp"]?.intValue == balance)

        // Nothing refused comes back after a crash either.
        k.kill9()
        _ = k.finish()
        var again = Driver(k: try LiveKernel(serve(dir, hook)), token: own)
        #expect(again.call("screentime.day", ["date": .string(day)])["error"]?["code"] == -32004)
        #expect(again.call("rewards.balance")["result"]?["xp"]?.intValue == balance)
        #expect(again.call("sessions.list")["result"]?["sessions"]?.arrayValue?.count == 1)
        #expect(again.call("screentime.getConnection")["result"]?["timezone"] == "Europe/Berlin")
        again.k.kill9()
        _ = again.k.finish()
    }

    /// Defect: after a clean stop on a full disk (its final snapshot failed), the kernel would not start
    /// again until space came back. It must start, serve reads, refuse writes, and take them once space
    /// is back.
    @Test(.enabled(if: Tmpfs.available, "needs root to mount a tmpfs"))
    func kernelStartsAndServesReadsOnAFullDisk() throws {
        var (disk, d, xp) = try filledDisk()
        defer { disk.remove() }
        d.k.closeInput()
        #expect(d.k.finish() == 0)
        for round in 0..<2 {
            var full = Driver(k: try LiveKernel(serve(disk.dir)), token: Self.user)
            #expect(full.call("rewards.balance")["result"]?["xp"] == .int(Int64(xp)), "round \(round)")
            #expect(full.call("rewards.earn", ["xp": 10, "reason": "r", "key": .string("full-\(round)")])["error"]?["code"] == -32050)
            full.k.closeInput()
            #expect(full.k.finish() == 0, "round \(round): a kernel on a full disk did not start or stop cleanly")
        }
        var k = Driver(k: try LiveKernel(serve(disk.dir)), token: Self.user)
        #expect(k.call("rewards.earn", ["xp": 10, "reason": "r", "key": "still-full"])["error"]?["code"] == -32050)
        disk.free()
        #expect(k.call("rewards.earn", ["xp": 10, "reason": "r", "key": "space-back"])["result"]?["xp"] == .int(Int64(xp + 10)))
        xp += 10
        k.k.kill9()
        _ = k.k.finish()
        var last = Driver(k: try LiveKernel(serve(disk.dir)), token: Self.user)
        #expect(last.call("rewards.balance")["result"]?["xp"] == .int(Int64(xp)))
        last.k.closeInput()
        #expect(last.k.finish() == 0)
        #expect(try runBinary(["store", "verify", "--data-dir", disk.dir]).status == 0)
    }
}
