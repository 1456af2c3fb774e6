import Foundation
import JSON
import JSONParsing

/// A protocol transcript: each `-->` line is sent in order, and the `<--` lines after it are the
/// responses it must produce, in order (none for a notification). `#` starts a comment. Expected values
/// may use placeholders: "$any", "$string", "$int", "$timestamp", "$uuid" match any value of that kind,
/// and "$set:NAME" matches any string and remembers it, so a later request can use it as `${NAME}`.
struct Transcript: CustomStringConvertible {
    let name: String
    let steps: [(request: String, expected: [String])]

    var description: String { name }

    /// Every request line, as written.
    var requests: [String] { steps.map(\.request) }

    /// Every transcript under protocol/transcripts.
    static func all() -> [Transcript] {
        let dir = Paths.transcripts
        let files = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return files.filter { $0.hasSuffix(".txt") }.sorted().compactMap { file in
            guard let text = try? String(contentsOf: dir.appendingPathComponent(file), encoding: .utf8) else { return nil }
            return Transcript(name: file, text: text)
        }
    }

    init(name: String, text: String) {
        self.name = name
        var steps: [(request: String, expected: [String])] = []
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(raw)
            if line.hasPrefix("--> ") { steps.append((String(line.dropFirst(4)), [])) }
            else if line.hasPrefix("<-- "), !steps.isEmpty { steps[steps.count - 1].expected.append(String(line.dropFirst(4))) }
        }
        self.steps = steps
    }

    /// Runs the transcript: `exchange(line, n)` sends one line and returns the next `n` response lines.
    /// `given` are variables set before the first line (data the test makes, such as signed receipts).
    /// Returns the differences (empty when it matches) and every (request, response) pair seen.
    func run(given: [String: String] = [:], _ exchange: (String, Int) -> [String]) -> (problems: [String], pairs: [(JSON, JSON)]) {
        var variables = given
        var problems: [String] = []
        var pairs: [(JSON, JSON)] = []
        for (index, step) in steps.enumerated() {
            var request = step.request
            for (k, v) in variables { request = request.replacingOccurrences(of: "${\(k)}", with: v) }
            let lines = exchange(request, step.expected.count)
            let where_ = "\(name) step \(index + 1)"
            if lines.count != step.expected.count {
                problems.append("\(where_): expected \(step.expected.count) response lines, got \(lines.count)")
            }
            for (rawWant, got) in zip(step.expected, lines) {
                var want = rawWant
                for (k, v) in variables { want = want.replacingOccurrences(of: "${\(k)}", with: v) }
                guard let wantJSON = try? JSON.parse(want) else {
                    problems.append("\(where_): expected line is not JSON: \(want)")
                    continue
                }
                guard let gotJSON = try? JSON.parse(got) else {
                    problems.append("\(where_): response is not JSON: \(got)")
                    continue
                }
                if let diff = Self.difference(want: wantJSON, got: gotJSON, at: "$", variables: &variables) {
                    problems.append("\(where_): \(diff)\n  want \(want)\n  got  \(got)")
                }
                if let req = try? JSON.parse(request) { pairs.append((req, gotJSON)) }
            }
        }
        return (problems, pairs)
    }

    /// The first structural difference, without captures.
    static func difference(want: JSON, got: JSON, at path: String) -> String? {
        var ignored: [String: String] = [:]
        return difference(want: want, got: got, at: path, variables: &ignored)
    }

    /// The first structural difference, honouring placeholders.
    static func difference(want: JSON, got: JSON, at path: String, variables: inout [String: String]) -> String? {
        if case .string(let s) = want, s.hasPrefix("$set:") {
            guard let value = got.stringValue else { return "\(path): \(got.serialized) is not a string" }
            variables[String(s.dropFirst(5))] = value
            return nil
        }
        if case .string(let s) = want, s.hasPrefix("$") {
            let ok: Bool
            switch s {
            case "$any": ok = true
            case "$string": ok = got.stringValue != nil
            case "$int": ok = got.intValue != nil
            case "$timestamp": ok = got.stringValue.map { Self.isTimestamp($0) } ?? false
            case "$uuid": ok = got.stringValue.map { Self.isUUID($0) } ?? false
            default: ok = got == want
            }
            return ok ? nil : "\(path): \(got.serialized) is not \(s)"
        }
        switch (want, got) {
        case (.object(let w), .object(let g)):
            for key in w.keys where g[key] == nil { return "\(path).\(key) is missing" }
            for key in g.keys where w[key] == nil { return "\(path).\(key) is unexpected" }
            for (key, value) in w {
                if let d = difference(want: value, got: g[key]!, at: "\(path).\(key)", variables: &variables) { return d }
            }
            return nil
        case (.array(let w), .array(let g)):
            guard w.count == g.count else { return "\(path): \(g.count) elements, want \(w.count)" }
            for (i, (a, b)) in zip(w, g).enumerated() {
                if let d = difference(want: a, got: b, at: "\(path)[\(i)]", variables: &variables) { return d }
            }
            return nil
        default:
            return want == got ? nil : "\(path): \(got.serialized) != \(want.serialized)"
        }
    }

    static func isTimestamp(_ s: String) -> Bool {
        s.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z/) != nil
    }

    static func isUUID(_ s: String) -> Bool {
        s.wholeMatch(of: /[0-9a-f]{8}-[0-9a-f]{4}-[47][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}/) != nil
    }
}
