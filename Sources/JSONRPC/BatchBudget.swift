import JSON

/// Keeps a batch's answer within one line: each element's answer gets what is left of the limit after
/// the room the elements after it need for their smallest answer (`answer_too_large`, with their id),
/// so a batch of 1,000 elements whose early answers are large still ends with an answer for every
/// element, and the whole array is never longer than the limit. Costs O(elements) to set up, O(1) a
/// question.
struct BatchBudget {
    let limit: Int
    /// For each element, the room the elements from it on need at least (their error answers and commas).
    private let reserved: [Int]

    /// A budget for elements with these ids (nil: a notification, which has no answer); nil when even
    /// the smallest answers of all of them would not fit.
    init?(limit: Int, ids: [JSON?]) {
        self.limit = limit
        var reserved = [Int](repeating: 0, count: ids.count + 1)
        for i in stride(from: ids.count - 1, through: 0, by: -1) {
            reserved[i] = reserved[i + 1] + (ids[i].map { Self.errorLine($0).count + 1 } ?? 0)
        }
        guard reserved[0] + 2 <= limit else { return nil }
        self.reserved = reserved
    }

    /// Bytes element `index` may answer with when the array holds `used` bytes so far: the rest of the
    /// limit, less the room of the elements after it and the closing bracket.
    func room(for index: Int, used: Int) -> Int { limit - used - reserved[index + 1] - 2 }

    /// The answer of an element that does not fit.
    static func error(_ limit: Int) -> RPCError {
        .invalidParams("params", reason: "answer_too_large", "the batch's answer would pass \(limit) bytes; send this alone")
    }

    /// The response line of an element that does not fit (without its newline).
    static func errorLine(_ id: JSON, limit: Int = 1 << 40) -> [UInt8] {
        var out: [UInt8] = []
        (["jsonrpc": "2.0", "id": id, "error": error(limit).json] as JSON).write(to: &out)
        return out
    }
}
