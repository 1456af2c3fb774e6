import Chrono
import JSON
import Threads

/// Response lines, and the limit on how long an answer to a read may be.
extension Dispatcher {
    /// Writes a response. The answer to a `read` (a request that wrote nothing) that comes out longer
    /// than `maxAnswerBytes` is replaced by -32602 `answer_too_large`: a host reading lines up to the
    /// same limit could not take it, and a socket would be cut mid-answer. Methods that can answer
    /// that much page by bytes or name the param to narrow first; this is the net below them.
    func writeResponse(id: JSON, outcome: Outcome, read: Bool = false, room: Int? = nil, into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: #"{"jsonrpc":"2.0","id":"#.utf8)
        id.write(to: &out)
        switch outcome {
        case .success(let result):
            out.append(contentsOf: #","result":"#.utf8)
            result.write(to: &out)
            if read, let room, out.count - start > room {
                // A batch element past its share of the line: the refusal the batch kept room for.
                out.removeSubrange(start...)
                writeResponse(id: id, outcome: .failure(BatchBudget.error(maxAnswerBytes)), into: &out)
                return
            }
            if read && out.count - start > maxAnswerBytes {
                out.removeSubrange(start...)
                let error = RPCError.invalidParams("params", reason: "answer_too_large",
                                                   "the answer would be longer than \(maxAnswerBytes) bytes; ask for less (a narrower range, a smaller limit)")
                writeResponse(id: id, outcome: .failure(error), into: &out)
                return
            }
        case .failure(let error):
            if error.code == RPCError.internalError.code { onInternalError(error.logDetail ?? error.message) }
            out.append(contentsOf: #","error":"#.utf8)
            error.json.write(to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }
}
