import JSONRPC
import Testing
import TestSupport

/// The stdio server over a transport whose every read the test decides, its reader and serving threads'
/// rounds taken one at a time (as the simulation takes them).
@Suite(.oneStoreOnly) struct TransportTests {
    final class Scripted: Transport {
        var reads: [[UInt8]] = []
        var written: [[UInt8]] = []
        func read(into buffer: UnsafeMutableRawBufferPointer, wait: Bool) -> TransportRead {
            guard !reads.isEmpty else { return .end }
            let chunk = reads.removeFirst()
            chunk.withUnsafeBytes { buffer.copyMemory(from: $0) }
            return .bytes(chunk.count)
        }
        func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
            written.append(Array(bytes))
            return true
        }
    }

    static func line(_ id: Int) -> [UInt8] {
        Array(#"{"jsonrpc":"2.0","id":\#(id),"method":"math.subtract","params":{"minuend":\#(id),"subtrahend":1}}"#.utf8) + [10]
    }

    /// A batch is what one read holds: a line cut across two reads is answered after the second, the
    /// lines of one read are answered with one write, in order, and the input's end stops the server.
    @Test func eachReadIsOneBatchAndItsAnswersOneWrite() throws {
        let transport = Scripted()
        let server = StdioServer(connection: Connection(dispatcher: try makeDispatcher(), maxLineBytes: 1 << 20), transport: transport)
        let first = Self.line(1), rest = Self.line(2) + Self.line(3)
        transport.reads = [Array(first.prefix(10)), Array(first.dropFirst(10)) + rest]
        #expect(server.readStep())
        #expect(server.serveStep().served == false, "half a line: nothing to answer")
        #expect(server.readStep())
        #expect(server.serveStep() == (true, nil))
        #expect(transport.written.count == 1)
        let answers = transport.written.first.map { String(decoding: $0, as: UTF8.self).split(separator: "\n") } ?? []
        #expect(answers.map { $0.contains(#""result":0"#) || $0.contains(#""result":1"#) || $0.contains(#""result":2"#) } == [true, true, true])
        #expect(answers.first?.contains(#""id":1"#) == true && answers.last?.contains(#""id":3"#) == true)
        #expect(!server.readStep(), "the input ended")
        #expect(server.serveStep() == (true, nil), "what was read before the end (nothing)")
        #expect(server.serveStep() == (true, .endOfInput))
    }
}
