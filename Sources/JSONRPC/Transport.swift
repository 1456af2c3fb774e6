#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The system's read(2) and write(2), under names the transport's own methods do not hide.
private func systemRead(_ fd: Int32, _ to: UnsafeMutableRawPointer?, _ count: Int) -> Int { read(fd, to, count) }
private func systemWrite(_ fd: Int32, _ from: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, from, count) }

/// What one read of a transport gave.
public enum TransportRead: Equatable, Sendable {
    /// This many bytes, at the start of the buffer.
    case bytes(Int)
    /// Nothing yet (a read that was told not to wait).
    case nothing
    /// The input ended (EOF, or a read that failed).
    case end
    /// A stop signal (SIGTERM or SIGINT) arrived.
    case stop
}

/// Where the stdio server reads requests and writes answers: file descriptors in the product
/// (`DescriptorTransport`), a simulated host in the simulation, which so decides what each read returns
/// (a batch is what one read holds: it decides group commit and what one request sees of another).
public protocol Transport: AnyObject {
    /// Reads what has arrived into `buffer`; with `wait`, waits for input or a stop signal first.
    func read(into buffer: UnsafeMutableRawBufferPointer, wait: Bool) -> TransportRead
    /// Writes all of `bytes`; false once the other side is gone.
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool
}

/// A transport over file descriptors (stdin and a private duplicate of stdout), with the stop signals'
/// self-pipe (`StdioServer.installSignalHandlers`) beside the input.
public final class DescriptorTransport: Transport {
    let inputFD: Int32
    let outputFD: Int32
    private let signalFD: Int32
    /// Receives diagnostics for stderr.
    var log: (String) -> Void = { _ in }

    public init(inputFD: Int32, outputFD: Int32, signalFD: Int32 = StdioServer.signalPipeRead) {
        (self.inputFD, self.outputFD, self.signalFD) = (inputFD, outputFD, signalFD)
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer, wait: Bool) -> TransportRead {
        var fds = [pollfd(fd: inputFD, events: Int16(POLLIN), revents: 0)]
        if signalFD >= 0 { fds.append(pollfd(fd: signalFD, events: Int16(POLLIN), revents: 0)) }
        while true {
            for i in fds.indices { fds[i].revents = 0 }
            let ready = poll(&fds, nfds_t(fds.count), wait ? -1 : 0)
            if ready == 0 { return .nothing }
            if ready < 0 {
                if errno == EINTR { continue }
                log("poll failed: errno \(errno)")
                return .end
            }
            if signalFD >= 0, fds[1].revents != 0 { return .stop }
            let n = systemRead(inputFD, buffer.baseAddress, buffer.count)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                log("read from stdin failed: errno \(errno); treating as end of input")
            }
            return n > 0 ? .bytes(n) : .end
        }
    }

    public func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = systemWrite(outputFD, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                log("stdout closed by the host (errno \(errno)); stopping")
                return false
            }
            offset += n
        }
        return true
    }
}
