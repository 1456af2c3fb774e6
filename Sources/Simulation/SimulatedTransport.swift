import JSONRPC

/// The host's end of a stdio stream in the simulation: a read returns what the simulation offered it
/// (a cut of what the client sent, drawn from the seed), and what the server writes is kept for the
/// checker.
final class SimulatedTransport: Transport {
    var offered: [UInt8] = []
    var written: [UInt8] = []

    func read(into buffer: UnsafeMutableRawBufferPointer, wait: Bool) -> TransportRead {
        guard !offered.isEmpty else { return .nothing }
        let n = min(offered.count, buffer.count)
        offered.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        offered.removeFirst(n)
        return .bytes(n)
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        written.append(contentsOf: bytes)
        return true
    }
}
