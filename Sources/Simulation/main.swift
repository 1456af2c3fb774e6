import ArgumentParser
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#if SIMULATION
import Mutants
#endif
#endif

/// `scripts/sim`: runs seeds of the deterministic simulation (protocol/README.md, "Reliability").
struct Sim: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "healthkernel-sim",
                                                    abstract: "Runs healthkernel under a seeded simulation of its clients, threads, clock and disk.")

    @Option(help: "Run this one seed.") var seed: UInt64?
    @Option(help: "Run this many seeds.") var seeds: Int?
    @Option(help: "The first of --seeds.") var from: UInt64 = 1
    @Option(help: "Run seeds until this many minutes have passed.") var minutes: Double?
    @Option(help: "Steps (client sends, reads, batch ends, jobs, faults) a seed takes.") var steps = 400
    @Option(help: "Kernels sharing the store: 1 to 3 on the model of PostgreSQL, 1 on a data dir; with --mutant, as many as the defect needs unless given.") var kernels = 1
    @Option(help: "data-dir, or postgres-model (the kernel on the model of PostgreSQL, Sources/PostgresModel); with --mutant, the store the defect lives on unless given.")
    var store: String?
    @Option(help: "Run every Nth seed twice and fail when the two digests differ (0: never).") var replayEvery = 0
    @Flag(help: "With --seed: print the run's trace, one event a line.") var trace = false
    @Flag(help: "List the defects that can be re-introduced, one name a line.") var mutants = false
    @Option(help: "Re-introduce this defect and run --seeds until one finds it.") var mutant: String?

    func validate() throws {
        guard store == nil || store == "data-dir" || store == "postgres-model" else { throw ValidationError("--store \(store!): data-dir or postgres-model") }
        guard (1...3).contains(kernels), kernels == 1 || store == "postgres-model" else {
            throw ValidationError("--kernels \(kernels): 1 to 3, and more than one only with --store postgres-model (one kernel owns a data dir)")
        }
        guard mutants || (seed != nil ? 1 : 0) + (seeds != nil ? 1 : 0) + (minutes != nil ? 1 : 0) == 1 else {
            throw ValidationError("give one of --seed, --seeds or --minutes")
        }
    }

    func run() throws {
        var onPostgres = store == "postgres-model"
        var kernels = self.kernels
        if mutants || mutant != nil {
            #if SIMULATION
            if mutants {
                for m in Mutant.allCases { print(m.rawValue) }
                return
            }
            guard let m = Mutant(rawValue: mutant!) else { throw ValidationError("no mutant \(mutant!) (--mutants lists them)") }
            Mutant.activate(m)
            onPostgres = (store ?? m.store) == "postgres-model"
            if kernels == 1 && onPostgres { kernels = m.kernels }
            #else
            throw ValidationError("this build has no mutants: they are compiled into debug builds only")
            #endif
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("hk-sim-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        if let seed {
            let outcome = Runner(root: root, steps: steps, onPostgres: onPostgres, kernels: kernels).run(seed)
            if let failure = outcome.failure {
                report(failure, seed: seed, runner: Runner(root: root, steps: steps, onPostgres: onPostgres, kernels: kernels))
                throw ExitCode(1)
            }
            if trace { for line in outcome.trace { print("  " + line) } }
            print("seed \(seed) digest \(outcome.digest) requests \(outcome.requests) faults \(outcome.faults)")
            return
        }
        let began = Date()
        var (count, requests, faults) = (0, 0, 0)
        var failed: [UInt64] = []
        var seed = from
        while seeds.map({ count < $0 }) ?? (Date().timeIntervalSince(began) < minutes! * 60) {
            let runner = Runner(root: root, steps: steps, onPostgres: onPostgres, kernels: kernels)
            let outcome = runner.run(seed)
            if let failure = outcome.failure, let mutant {
                print("seed \(seed): \(failure)")
                print("mutant \(mutant) found by seed \(seed) after \(count + 1) seeds")
                throw ExitCode(1)
            } else if let failure = outcome.failure {
                report(failure, seed: seed, runner: runner)
                failed.append(seed)
            } else if let threads = Self.threadCount(), threads > 64 {
                // Given an executor, a kernel starts no thread: threads that pile up seed after seed are
                // threads some kernel started anyway, and never end (once one per PostgreSQL store).
                print("seed \(seed): the process has \(threads) threads after it: a kernel started threads of its own")
                print("seed \(seed) FAILED")
                failed.append(seed)
                break
            } else if replayEvery > 0, count % replayEvery == 0, runner.run(seed).digest != outcome.digest {
                print("seed \(seed): a second run gave another history (digest \(outcome.digest) first)")
                print("seed \(seed) FAILED")
                failed.append(seed)
            }
            (count, requests, faults) = (count + 1, requests + outcome.requests, faults + outcome.faults)
            seed += 1
        }
        let rate = Double(count) / max(Date().timeIntervalSince(began), 0.001)
        if let mutant { print("mutant \(mutant) not found in \(count) seeds") }
        if !failed.isEmpty { print("failing seeds: " + failed.map(String.init).joined(separator: " ")) }
        print("seeds \(count) failures \(failed.count) requests \(requests) faults \(faults) seeds/s \(String(format: "%.1f", rate))")
        if !failed.isEmpty { throw ExitCode(1) }
    }

    /// The process's threads (Linux: /proc/self/status), nil elsewhere.
    static func threadCount() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Threads:") }) else { return nil }
        return Int(line.dropFirst("Threads:".count).trimmingCharacters(in: .whitespaces))
    }

    /// The failure, with the trace of the shortest run of the seed that still fails.
    private func report(_ failure: String, seed: UInt64, runner: Runner) {
        let shortest = runner.shortestFailing(seed)
        print("seed \(seed): \(failure)")
        print("the shortest run that fails takes \(shortest.steps) of \(steps) steps (\(shortest.outcome.failure ?? failure)); its trace:")
        for line in shortest.outcome.trace { print("  " + line) }
        print("seed \(seed) FAILED")
    }
}

/// Runs seeds, each in a data dir of its own under `root`.
struct Runner {
    let root: String
    let steps: Int
    let onPostgres: Bool
    let kernels: Int

    struct Outcome {
        let failure: String?
        let digest: String
        let requests: Int
        let faults: Int
        let trace: [String]
    }

    func run(_ seed: UInt64, steps: Int? = nil) -> Outcome {
        let dir = root + "/seed-\(seed)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let simulation = Simulation(.init(seed: seed, steps: steps ?? self.steps, onPostgres: onPostgres, kernels: kernels), dir: dir)
        simulation.run()
        return Outcome(failure: simulation.failure, digest: simulation.hexDigest, requests: simulation.requests,
                       faults: simulation.faultCount, trace: simulation.trace)
    }

    /// The fewest steps with which the seed still fails (the schedule of fewer steps is a prefix of the
    /// longer one's, then the same settling): a binary search, so a dozen runs at most.
    func shortestFailing(_ seed: UInt64) -> (steps: Int, outcome: Outcome) {
        var best = (steps, run(seed))
        var (low, high) = (0, steps)
        while low < high {
            let mid = (low + high) / 2
            let outcome = run(seed, steps: mid)
            if outcome.failure != nil {
                best = (mid, outcome)
                high = mid
            } else {
                low = mid + 1
            }
        }
        return best
    }
}

// Swift seeds its hashing per process, and a dictionary's order shows in some answers: one seed must
// give one history, so the process runs with deterministic hashing, re-executing itself to get it.
if ProcessInfo.processInfo.environment["SWIFT_DETERMINISTIC_HASHING"] == nil {
    setenv("SWIFT_DETERMINISTIC_HASHING", "1", 1)
    let args = CommandLine.arguments.map { strdup($0) } + [nil]
    execv("/proc/self/exe", args)
}
// The kernel's warnings go into the trace (HK_SIM_LOG=1: to stderr as well).
LoggingSystem.bootstrap { label in TraceLog(label: label, echo: ProcessInfo.processInfo.environment["HK_SIM_LOG"] != nil) }
Sim.main()
