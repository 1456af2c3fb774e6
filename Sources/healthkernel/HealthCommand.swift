import ArgumentParser
import Auth
import Chrono
import DomainSupport
import HealthImport
import JSON
import JSONParsing
import JSONRPC
import Logging
import Kernel

#if canImport(Glibc)
import Glibc
#endif

struct HealthCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "HealthKit data from outside the phone's sync.",
        subcommands: [ImportExport.self]
    )

    struct ImportExport: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "import-export",
            abstract: "Import an Apple Health export (export.zip or export.xml) for one user, as health.ingest batches; prints a summary as JSON.",
            discussion: """
                The file is read as a stream (never whole in memory); progress goes to stderr. Importing the same \
                export again changes nothing. Example: healthkernel health import-export --user 3f1c... --timezone Europe/Paris export.zip
                """
        )

        @Option(help: "The user (a user id).")
        var user: String

        @Argument(help: "export.zip (read through unzip) or export.xml.")
        var file: String

        @Option(help: "IANA zone for the local days of items without HKTimeZone (default: the one the user's app last sent, else UTC).")
        var timezone: String?

        @Option(help: "Items per health.ingest request.")
        var batchSize: Int = 5_000

        @Option(help: "Send the batches to the kernel listening on this Unix socket (unix:PATH or PATH); needs --token.")
        var connect: String?

        @Option(help: "With --connect: the user's access token.")
        var token: String?

        @OptionGroup var options: KernelOptions

        func run() throws {
            guard (1...50_000).contains(batchSize) else { fail("healthkernel health import-export: --batch-size must be 1 to 50000", status: ExitStatus.startupFailed) }
            guard (try? CanonicalUUID.decode(.string(user), at: "--user")) != nil else { fail("healthkernel health import-export: --user must be a user id (UUID)", status: ExitStatus.startupFailed) }
            let clock = SystemClock()
            let config = options.load()
            let logger = bootstrapLogging(level: config.logLevel)
            let progress = { (line: String) in logger.notice("\(line)") }
            let summary: ImportSummary
            do {
                if let connect {
                    guard let token else { fail("healthkernel health import-export: --connect needs --token (the user's access token)", status: ExitStatus.startupFailed) }
                    let link = try SocketLink(path: connect.hasPrefix("unix:") ? String(connect.dropFirst(5)) : connect, waitSeconds: 5,
                                              command: "healthkernel health import-export")
                    defer { link.close() }
                    summary = try importer(now: clock.now(), progress: progress, clock: clock) { params in
                        var p = params
                        p["auth"] = .string(token)
                        return link.call("health.ingest", p)
                    }.run(path: file)
                } else {
                    let kernel = options.start(config, logger: logger)
                    defer { kernel.shutdown() }
                    let auth = kernel.auth.mint(sub: user, role: "authenticated", ttl: 7 * 86_400, now: clock.now())
                    var connection = kernel.connection()
                    defer { connection.close() }
                    var id: Int64 = 0
                    summary = try importer(now: clock.now(), progress: progress, clock: clock) { params in
                        var p = params
                        p["auth"] = .string(auth)
                        id += 1
                        let request: JSON = ["jsonrpc": "2.0", "id": .int(id), "method": "health.ingest", "params": .object(p)]
                        let (out, fatal) = connection.exchange(request.bytes + [UInt8(ascii: "\n")])
                        if fatal { fail("healthkernel health import-export: syncing the log failed", status: ExitStatus.storageFailed) }
                        return (try? JSON.parse(out)) ?? .null
                    }.run(path: file)
                }
            } catch {
                fail("healthkernel health import-export: \(error)", status: ExitStatus.callFailed)
            }
            writeStdout(summary.json.serialized + "\n")
        }

        func importer(now: Timestamp, progress: @escaping (String) -> Void, clock: SystemClock, send: @escaping (JSONObject) -> JSON) -> ExportImporter {
            ExportImporter(timezone: timezone, batchSize: batchSize, now: now, progress: progress, clock: { clock.monotonicMicros() }, send: send)
        }
    }
}
