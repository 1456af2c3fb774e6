import JSONRPC

/// The peers of a kernel's socket server in the simulation: a client connects, the bytes the simulation
/// lets arrive wait in its socket until the server reads them (all of them in one read: what arrived
/// between two reads decides the batch), and each write takes as much as the seed says the peer's socket
/// has room for (nothing: EAGAIN, and the server waits to write). Everything runs on the simulation's
/// thread, pokes included.
final class SimulatedSocketIO: SocketIO, @unchecked Sendable {
    /// One peer's socket, seen from both ends.
    final class End {
        var arrived: [UInt8] = []
        var written: [UInt8] = []
        var closedByServer = false
    }

    private var ends: [Int32: End] = [:]
    private var connecting: [Int32] = []
    private var poked = false
    private var nextFD: Int32 = 3
    /// How many of `n` bytes a write takes now (drawn from the seed).
    private let room: (Int) -> Int

    init(room: @escaping (Int) -> Int) { self.room = room }

    /// A client connects; the server accepts it at its next round.
    func connect() -> Int32 {
        nextFD += 1
        ends[nextFD] = End()
        connecting.append(nextFD)
        return nextFD
    }

    /// Bytes of the client's reach the peer's socket.
    func arrive(_ bytes: [UInt8], at peer: Int32) { ends[peer]?.arrived += bytes }

    /// What the server wrote to the peer since the last call.
    func takeWritten(_ peer: Int32) -> [UInt8] {
        guard let end = ends[peer] else { return [] }
        defer { end.written.removeAll() }
        return end.written
    }

    /// Whether the server closed the peer's connection.
    func isClosed(_ peer: Int32) -> Bool { ends[peer]?.closedByServer ?? true }

    func wait(accepting: Bool, peers: [SocketInterest], timeoutMillis: Int32) -> SocketReadiness? {
        defer { poked = false }
        return SocketReadiness(acceptable: accepting && !connecting.isEmpty, poked: poked,
                               readable: peers.map { $0.readable && !(ends[$0.peer]?.arrived.isEmpty ?? true) })
    }

    func accept() -> SocketAccept {
        connecting.isEmpty ? .none : .peer(connecting.removeFirst())
    }

    func read(_ peer: Int32, into buffer: UnsafeMutableRawBufferPointer) -> SocketTransfer {
        guard let end = ends[peer], !end.closedByServer else { return .failed }
        guard !end.arrived.isEmpty else { return .wouldBlock }
        let n = min(end.arrived.count, buffer.count)
        end.arrived.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        end.arrived.removeFirst(n)
        return .bytes(n)
    }

    func write(_ peer: Int32, _ bytes: UnsafeRawBufferPointer) -> SocketTransfer {
        guard let end = ends[peer], !end.closedByServer else { return .failed }
        let n = room(bytes.count)
        guard n > 0 else { return .wouldBlock }
        end.written.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[0..<n]))
        return .bytes(n)
    }

    func close(_ peer: Int32) { ends[peer]?.closedByServer = true }

    func poke() { poked = true }
}
