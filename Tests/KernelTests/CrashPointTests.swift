import Foundation
import JSON
import JSONParsing
import JSONRPC
import Logging
import Store
import Synchronization
import Testing
import TestSupport
import Auth
import Chrono
import DiskModel
@testable import Kernel

/// A kernel on a data dir whose every file operation goes through `rule`, driven one step at a time.
final class CrashRunner {
    let dir: String
    let injector: FaultInjector
    private(set) var kernel: Kernel
    private var connection: Connection

    init(dir: String, injector: FaultInjector) throws {
        self.dir = dir
        self.injector = injector
        kernel = try Self.open(dir, injector)
        connection = kernel.connection()
    }

    static func open(_ dir: String, _ injector: FaultInjector?) throws -> Kernel {
        var config = KernelConfig()
        config.dataDir = dir
        config.auth.jwtSecret = testSecret
        config.fsync = .always
        config.snapshotEveryRecords = Int(Int32.max)  // snapshots only where the workload takes them
        config.snapshotEverySeconds = 0
        config.segmentBytes = 8 << 10  // several rotations per run
        config.storeFaults = injector
        config.enableTestMethods = true
        AppStoreSetup.configure(&config)
        var logger = Logger(label: "crash")
        logger.logLevel = .critical
        return try Kernel(config: config, logger: logger)
    }

    /// Sends one request line; its response lines.
    func send(_ line: String) -> [String] {
        connection.receive(Array((line + "\n").utf8))
        _ = connection.endBatch()
        defer { connection.output.removeAll() }
        return String(decoding: connection.output, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// A clean stop and a start on the same folder.
    func restart() throws {
        connection.close()
        kernel.store?.shutdown()
        kernel = try Self.open(dir, injector)
        connection = kernel.connection()
    }

    var fingerprint: UInt64 { kernel.store?.fingerprint() ?? 0 }
}

/// The crash tests' workload: every domain's transcript that writes (Screen Time and rewards, sessions,
/// a subscription with its notifications, HealthKit ingest and delete, `auth.deleteUser`, the change
/// feed), for `replicas` pairs of users, with snapshots while writes go on, log segments of 8 KiB (a
/// rotation every few writes) and a restart in the middle.
enum CrashWorkload {
    enum Step {
        case transcript(Transcript)
        case snapshot
        case restart
    }

    static let replicas = 12
    static let userA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", userB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"

    static let steps: [Step] = {
        let byName = Dictionary(uniqueKeysWithValues: Transcript.all().map { ($0.name, $0) })
        let tokenA = ScreenTimeBinaryTests.userToken, tokenB = SubscriptionsBinaryTests.otherUser
        let minter = try! TokenMinter(secret: Array(testSecret.utf8), ttl: 100 * 365 * 86_400)
        /// Transcript `name` for the `r`-th pair of users (0: the transcript's own).
        func t(_ name: String, _ r: Int) -> Step {
            let transcript = byName[name]!
            guard r > 0 else { return .transcript(transcript) }
            let n = String(String(r).reversed()).padding(toLength: 11, withPad: "0", startingAt: 0)
            let a = "aaaaaaaa-aaaa-4aaa-8aaa-a" + n, b = "bbbbbbbb-bbbb-4bbb-8bbb-b" + n
            let now = Timestamp(milliseconds: 1_763_769_600_000)
            var text = transcript.steps.map { "--> " + $0.request }.joined(separator: "\n")
            for (from, to) in [(tokenA, minter.mint(sub: a, role: "authenticated", now: now)), (tokenB, minter.mint(sub: b, role: "authenticated", now: now)),
                               (userA, a), (userB, b)] {
                text = text.replacingOccurrences(of: from, with: to)
            }
            return .transcript(Transcript(name: "\(name)#\(r)", text: text))
        }
        // Two snapshots in a row: the second replaces the first's file (same seq) by a rename.
        var steps: [Step] = [t("screentime.txt", 0), t("rewards.txt", 0), .snapshot, .snapshot, t("sessions.txt", 0), .restart, t("subscriptions.txt", 0),
                             t("health.txt", 0), .snapshot, t("sync.txt", 0)]
        for r in 1..<replicas {
            steps += [t("screentime.txt", r), t("rewards.txt", r), t("sessions.txt", r), .snapshot, t("health.txt", r), t("sync.txt", r)]
        }
        return steps
    }()

    /// Signed receipts and notifications, made once so every run sends the same bytes.
    static let variables = AppStoreSetup.transcriptVariables()

    static let snapshotRequest = #"{"jsonrpc":"2.0","id":"snap","method":"kernel.snapshot","params":{"auth":"\#(testServiceToken)"}}"#

    /// One step as run: a request line (a transcript's, or a snapshot), or a restart.
    enum Done {
        case request(String, [String])
        case restart
    }

    /// Runs every step; `after` follows each and returns false to stop.
    static func run(_ runner: CrashRunner, after: (Done) -> Bool) throws {
        for step in steps {
            switch step {
            case .transcript(let transcript):
                var stopped = false
                _ = transcript.run(given: variables) { line, _ in
                    if stopped { return [] }
                    let responses = runner.send(line)
                    stopped = !after(.request(line, responses))
                    return responses
                }
                if stopped { return }
            case .snapshot:
                if !after(.request(snapshotRequest, runner.send(snapshotRequest))) { return }
            case .restart:
                try runner.restart()
                if !after(.restart) { return }
            }
        }
    }
}

/// The folder `CrashRecording.shared` keeps its copies in, removed at exit.
nonisolated(unsafe) var crashRecordingFolder: String?

/// One run of the workload with every file operation watched: the states it went through, the data dir
/// at each step's end, and which file operations each step made. Made once, shared by the tests.
final class CrashRecording: @unchecked Sendable {
    /// The fingerprint before any step, then after each.
    var states: [UInt64] = []
    /// What each step was.
    var done: [CrashWorkload.Done] = []
    /// Copies of the data dir after each step (index 0: before any).
    var boundaries: [String] = []
    /// The file operations each step made (index: step number, from 1).
    var opsPerStep: [Int] = [0]
    /// Crash images checked while recording.
    var crashes: [(op: Int, answered: Int, keep: Int, recovered: Result<UInt64, Error>)] = []
    var operations = 0
    let base = CrashPointTests.scratch("recording")

    static let shared: CrashRecording = {
        let recording = try! CrashRecording()
        // Its data dir copies (one per step) go when the test process ends, whichever test used them last.
        crashRecordingFolder = recording.base
        atexit { if let folder = crashRecordingFolder { try? FileManager.default.removeItem(atPath: folder) } }
        return recording
    }()

    private init() throws {
        let dir = base + "/live"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let model = CrashModel(dir: dir)
        let injector = FaultInjector { [self] operation, name in
            operations += 1
            opsPerStep[opsPerStep.count - 1] += 1
            let tail = model.unsyncedTail
            for keep in Set([0, 1, 9, tail / 2, max(0, tail - 1), tail]).sorted() where keep <= tail {
                let image = CrashPointTests.scratch("image")
                defer { try? FileManager.default.removeItem(atPath: image) }
                let recovered: Result<UInt64, Error>
                do {
                    try model.image(into: image, keep: keep)
                    let kernel = try CrashRunner.open(image, nil)
                    recovered = .success(kernel.store?.fingerprint() ?? 0)
                    kernel.store?.abandon()
                } catch {
                    recovered = .failure(error)
                }
                // Before the first state (the first start syncs its folder) the state to recover is the empty one.
                crashes.append((operations, max(0, states.count - 1), keep, recovered))
            }
            model.observe(operation, name)
            return nil
        }
        let runner = try CrashRunner(dir: dir, injector: injector)
        states.append(runner.fingerprint)
        boundaries.append(try copy(dir, "0"))
        opsPerStep.append(0)
        try CrashWorkload.run(runner) { step in
            states.append(runner.fingerprint)
            done.append(step)
            boundaries.append(try! copy(dir, "\(done.count)"))
            opsPerStep.append(0)
            return true
        }
        opsPerStep.removeLast()
        runner.kernel.store?.shutdown()
    }

    /// A copy of `dir` (without its lock) named `name` under the recording's folder.
    private func copy(_ dir: String, _ name: String) throws -> String {
        let to = base + "/step-" + name
        try FileManager.default.createDirectory(atPath: to, withIntermediateDirectories: true)
        for file in try FileManager.default.contentsOfDirectory(atPath: dir) where file != "LOCK" {
            try FileManager.default.copyItem(atPath: dir + "/" + file, toPath: to + "/" + file)
        }
        return to
    }
}

/// Every file operation of the workload, failed and crashed at: nothing acknowledged is lost, the
/// recovered state is the state after some prefix of the writes (never a mix), start-up succeeds, and
/// an injected error is answered -32050 with the same kernel writing again once errors stop.
@Suite(.oneStoreOnly) struct CrashPointTests {
    /// A folder for data dirs: tmpfs when the machine has one (the walk makes thousands of them).
    static func scratch(_ tag: String) -> String {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        let path = base + "/hk-\(tag)-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Crashes: before every file operation of the recording run, each image a crash there could leave
    /// (the last written file's unsynced tail cut at several places) is recovered. It must start, and hold
    /// a state the writes went through, no earlier than the last answered step.
    @Test func aCrashAtEveryFileOperationRecoversAPrefix() throws {
        let r = CrashRecording.shared
        var problems = 0
        for c in r.crashes where problems < 10 {
            switch c.recovered {
            case .failure(let error):
                Issue.record("a crash before file operation \(c.op) (tail kept \(c.keep)) does not start: \(error)")
                problems += 1
            case .success(let fp):
                // The step being run when it crashed may or may not have reached the disk.
                if !r.states[c.answered...min(r.states.count - 1, c.answered + 1)].contains(fp) {
                    Issue.record("a crash before file operation \(c.op) (tail kept \(c.keep), \(c.answered) steps answered) recovers a state no prefix had")
                    problems += 1
                }
            }
        }
        #expect(r.operations > 1000, "the workload made only \(r.operations) file operations")
        let failures = Self.modes.count * r.opsPerStep.reduce(0, +)
        print("crash-point walk: \(r.crashes.count + failures) points = \(r.crashes.count) crash images before \(r.operations) file operations "
              + "of \(r.done.count) steps + \(failures) failures (\(Self.modes.count) modes x every operation)")
    }

    /// The ways an operation is failed: the errno, and whether the disk stays broken until the step ends.
    static let modes: [(errno: Int32, persistent: Bool)] = [(EIO, false), (ENOSPC, false), (EIO, true), (ENOSPC, true),
                                                              (EROFS, false), (EDQUOT, true)]

    /// Failures: every file operation of every step fails in each mode (a failed write keeps half its
    /// bytes: a short write), the step starting from the data dir as the recording left it before it.
    @Test(arguments: 0..<modes.count)
    func aFailureAtEveryFileOperationIsRefusedAndChangesNothing(_ mode: Int) throws {
        let r = CrashRecording.shared
        let (code, persistent) = Self.modes[mode]
        var points = 0, refused = 0, problems = 0
        for step in 1...r.done.count where problems < 10 {
            for j in 1...max(1, r.opsPerStep[step]) where r.opsPerStep[step] > 0 && problems < 10 {
                points += 1
                let outcome = try Self.fail(step: step, at: j, errno: code, persistent: persistent, r)
                if outcome.refused { refused += 1 }
                for problem in outcome.problems {
                    Issue.record("step \(step), operation \(j), errno \(code)\(persistent ? " until the step ends" : ""): \(problem)")
                    problems += 1
                }
            }
        }
        print("failure points (errno \(code)\(persistent ? ", persistent" : "")): \(points), \(refused) answered -32050")
    }

    /// What failing operation `j` of `step` did.
    static func fail(step: Int, at j: Int, errno code: Int32, persistent: Bool, _ r: CrashRecording)
        throws -> (refused: Bool, problems: [String]) {
        let dir = scratch("fail")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for file in try FileManager.default.contentsOfDirectory(atPath: r.boundaries[step - 1]) {
            try FileManager.default.copyItem(atPath: r.boundaries[step - 1] + "/" + file, toPath: dir + "/" + file)
        }
        final class Plan: @unchecked Sendable {
            var armed = false, fired = false, freed = false, count = 0
            var syncFailed = false
        }
        let plan = Plan()
        let injector = FaultInjector { op, _ in
            guard plan.armed, !plan.freed else { return nil }
            plan.count += 1
            guard plan.count == j || (persistent && plan.count > j) else { return nil }
            plan.fired = true
            if op == .fsync { plan.syncFailed = true }
            return code
        }
        var problems: [String] = []
        let runner: CrashRunner
        do { runner = try CrashRunner(dir: dir, injector: injector) } catch { return (false, ["the step's starting data dir does not open: \(error)"]) }
        let before = runner.fingerprint
        if before != r.states[step - 1] { problems.append("the starting data dir does not hold the recorded state") }
        plan.armed = true
        var refused = false
        switch r.done[step - 1] {
        case .request(let line, _):
            let responses = runner.send(line)
            plan.freed = true
            let after = runner.fingerprint
            refused = responses.contains { $0.contains("\"code\":-32050") }
            if refused && after != before && !plan.syncFailed { problems.append("a request answered -32050 changed the state") }
            if !plan.fired { return (false, problems) }  // this step made fewer operations here than when recorded
        case .restart:
            do {
                try runner.restart()
            } catch {
                // Start-up refused while the disk fails; once it works again it must start.
                plan.freed = true
                do {
                    let again = try CrashRunner(dir: dir, injector: injector)
                    if again.fingerprint != before { problems.append("after a failed start-up, the state changed") }
                    again.kernel.store?.abandon()
                } catch {
                    problems.append("start-up fails after the disk works again: \(error)")
                }
                return (true, problems)
            }
            plan.freed = true
        }
        // Errors have stopped: the same kernel writes again, unless an fsync failed (then it stops, by design).
        let write = runner.send(#"{"jsonrpc":"2.0","id":"w","method":"test.write","params":{"key":"after","value":"x"}}"#)
        let wrote = write.first?.contains("\"result\"") == true
        if !wrote && !plan.syncFailed { problems.append("the kernel does not write again once errors stop: \(write.first ?? "no answer")") }
        let memory = runner.fingerprint
        runner.kernel.store?.abandon()
        do {
            let again = try CrashRunner.open(dir, nil)
            let recovered = again.store?.fingerprint() ?? 0
            again.store?.abandon()
            // After a failed fsync the kernel stops; what it had not made durable may be there or not.
            if recovered != memory && !(plan.syncFailed && r.states[(step - 1)...step].contains(recovered)) {
                problems.append("what was answered differs from what a restart finds")
            }
        } catch {
            problems.append("start-up fails: \(error)")
        }
        return (refused, problems)
    }
}
