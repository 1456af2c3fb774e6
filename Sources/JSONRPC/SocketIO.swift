#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono

/// What the socket server asks of the operating system: wait for readiness, accept, read, write, close,
/// and be woken from another thread. The system's calls in the product (`SystemSocketIO`); in the
/// simulation its own peers, which so decide when a peer connects, what each read returns and how much
/// each write takes (as `Transport` does under the stdio server).
public protocol SocketIO: AnyObject, Sendable {
    /// Waits until a connection can be accepted (asked only with `accepting`), the server was poked, or
    /// one of `peers` with `readable` set has input or hung up: up to `timeoutMillis` (-1 for ever, 0 not
    /// at all). nil when waiting failed (the server stops).
    func wait(accepting: Bool, peers: [SocketInterest], timeoutMillis: Int32) -> SocketReadiness?
    /// The next pending connection, if any.
    func accept() -> SocketAccept
    /// Reads what the peer sent into `buffer`.
    func read(_ peer: Int32, into buffer: UnsafeMutableRawBufferPointer) -> SocketTransfer
    /// Writes a prefix of `bytes` (as much as the peer's socket takes now).
    func write(_ peer: Int32, _ bytes: UnsafeRawBufferPointer) -> SocketTransfer
    /// Closes the peer's connection.
    func close(_ peer: Int32)
    /// Wakes the current or next `wait` (any thread, never waiting).
    func poke()
}

/// What the server waits for on one peer: input (or its end) when `readable`, its socket's room when
/// `writable`. A peer waiting for neither is left out.
public struct SocketInterest: Sendable {
    public var peer: Int32
    public var readable: Bool
    public var writable: Bool
}

/// What a wait found: a connection to accept, a poke, and for each peer asked, in order, whether it has
/// input, hung up or failed (a read then tells which).
public struct SocketReadiness: Sendable {
    public var acceptable: Bool
    public var poked: Bool
    public var readable: [Bool]

    public init(acceptable: Bool, poked: Bool, readable: [Bool]) {
        (self.acceptable, self.poked, self.readable) = (acceptable, poked, readable)
    }
}

/// One accept's outcome.
public enum SocketAccept: Equatable, Sendable {
    case peer(Int32)
    /// Nobody waits to connect.
    case none
    /// Connections wait but cannot be accepted now (descriptors exhausted): try again later.
    case failed(String)
}

/// One read's or write's outcome.
public enum SocketTransfer: Equatable, Sendable {
    case bytes(Int)
    /// Nothing can move now (EAGAIN).
    case wouldBlock
    /// The peer ended its input (a read of 0 bytes).
    case end
    /// The connection failed.
    case failed
}

/// The operating system's sockets: a listening Unix socket, accepted connections made non-blocking,
/// `poll(2)` over them and a self-pipe that `poke` writes to. Only `poke` is called off the polling
/// thread (a write to the pipe).
public final class SystemSocketIO: SocketIO, @unchecked Sendable {
    private let listenFD: Int32
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private var fds: [pollfd] = []

    /// Adopts a listening socket, and makes the wake pipe.
    init(listening: Int32) throws(SocketError) {
        var pair: [Int32] = [0, 0]
        guard pipe(&pair) == 0 else { throw SocketError(description: "cannot create a pipe: errno \(errno)") }
        for f in pair {
            _ = fcntl(f, F_SETFD, FD_CLOEXEC)
            _ = fcntl(f, F_SETFL, fcntl(f, F_GETFL) | O_NONBLOCK)
        }
        (listenFD, wakeRead, wakeWrite) = (listening, pair[0], pair[1])
    }

    deinit {
        Glibc.close(listenFD)
        Glibc.close(wakeRead)
        Glibc.close(wakeWrite)
    }

    public func wait(accepting: Bool, peers: [SocketInterest], timeoutMillis: Int32) -> SocketReadiness? {
        fds.removeAll(keepingCapacity: true)
        fds.append(pollfd(fd: listenFD, events: accepting ? Int16(POLLIN) : 0, revents: 0))
        fds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
        for p in peers {
            let events = (p.readable ? Int32(POLLIN) : 0) | (p.writable ? Int32(POLLOUT) : 0)
            // Nothing to wait for on the socket: left out, or a hang-up would wake every round.
            fds.append(pollfd(fd: events == 0 ? -1 : p.peer, events: Int16(events), revents: 0))
        }
        while poll(&fds, nfds_t(fds.count), timeoutMillis) < 0 {
            if errno != EINTR { return nil }
        }
        let poked = fds[1].revents != 0
        if poked {
            var drain = [UInt8](repeating: 0, count: 64)
            while Glibc.read(wakeRead, &drain, drain.count) > 0 {}
        }
        let ready = Int32(POLLIN) | Int32(POLLHUP) | Int32(POLLERR)
        return SocketReadiness(acceptable: fds[0].revents != 0, poked: poked,
                               readable: fds[2...].map { Int32($0.revents) & ready != 0 })
    }

    public func accept() -> SocketAccept {
        while true {
            let fd = Glibc.accept(listenFD, nil, nil)
            if fd >= 0 {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                return .peer(fd)
            }
            let e = errno
            if e == EINTR || e == ECONNABORTED { continue }
            // EMFILE, ENFILE, ENOBUFS: the connection stays queued.
            return e == EAGAIN || e == EWOULDBLOCK ? .none : .failed(String(cString: strerror(e)))
        }
    }

    public func read(_ peer: Int32, into buffer: UnsafeMutableRawBufferPointer) -> SocketTransfer {
        let n = Glibc.read(peer, buffer.baseAddress, buffer.count)
        if n < 0 { return errno == EAGAIN || errno == EINTR ? .wouldBlock : .failed }
        return n == 0 ? .end : .bytes(n)
    }

    public func write(_ peer: Int32, _ bytes: UnsafeRawBufferPointer) -> SocketTransfer {
        while true {
            let n = Glibc.write(peer, bytes.baseAddress, bytes.count)
            if n >= 0 { return .bytes(n) }
            if errno == EINTR { continue }
            return errno == EAGAIN ? .wouldBlock : .failed
        }
    }

    public func close(_ peer: Int32) { _ = Glibc.close(peer) }

    public func poke() {
        var byte: UInt8 = 1
        _ = Glibc.write(wakeWrite, &byte, 1)
    }
}
