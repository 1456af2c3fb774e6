import Foundation
import Logging
import Synchronization

/// The kernel's log lines (warning and up) go into the trace of the simulation running: a failing
/// seed's trace then says what the kernel saw (a write that failed, a torn record cut off) between the
/// steps that led there. The simulation runs on one thread, so one sink serves every run.
struct TraceLog: LogHandler {
    static let sink = Mutex<(@Sendable (String) -> Void)?>(nil)

    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]
    let label: String
    /// Also to stderr (`HK_SIM_LOG`).
    let echo: Bool

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
             file: String, function: String, line: UInt) {
        let sink = Self.sink.withLock { $0 }
        sink?("kernel \(level): \(message)")
        if echo { FileHandle.standardError.write(Data("\(label) \(level): \(message)\n".utf8)) }
    }
}

/// The simulation, handed to the log sink: every log call comes on the simulation's one thread.
final class SimulationRef: @unchecked Sendable {
    unowned let simulation: Simulation
    init(_ simulation: Simulation) { self.simulation = simulation }
}
