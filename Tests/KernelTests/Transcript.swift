import Foundation
import JSON

/// A protocol transcript: `-->` lines are sent in order as one stdin stream, `<--` lines are the
/// responses expected on stdout, in order. `#` starts a comment. Expected values may use placeholders:
/// "$any", "$string", "$int", "$timestamp", "$uuid" match any value of that kind.
struct Transcript: CustomStringConvertible {
    let name: String
    let requests: [String]
    let expected: [String]

    var description: String { name }

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
        var requests: [String] = [], expected: [String] = []
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(raw)
            if line.hasPrefix("--> ") { requests.append(String(line.dropFirst(4))) }
            else if line.hasPrefix("<-- ") { expected.append(String(line.dropFirst(4))) }
        }
        self.requests = requests
        self.expected = expected
    }

    /// The stdin stream.
    var input: [UInt8] { Array(requests.map { $0 + "\n" }.joined().utf8) }

    /// Compares actual stdout with the expectations; returns the differences (empty when it matches).
    func mismatches(_ output: [UInt8]) -> [String] {
        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n").map(String.init)
        var problems: [String] = []
        if lines.count != expected.count {
            problems.append("\(name): expected \(expected.count) response lines, got \(lines.count)")
        }
        for (i, (want, got)) in zip(expected, lines).enumerated() {
            guard let wantJSON = try? JSON.parse(want) else {
                problems.append("\(name): expected line \(i + 1) is not JSON: \(want)")
                continue
            }
            guard let gotJSON = try? JSON.parse(got) else {
                problems.append("\(name): response \(i + 1) is not JSON: \(got)")
                continue
            }
            if let diff = Self.difference(want: wantJSON, got: gotJSON, at: "$") {
                problems.append("\(name): response \(i + 1): \(diff)\n  want \(want)\n  got  \(got)")
            }
        }
        return problems
    }

    /// The first structural difference, honouring placeholders.
    static func difference(want: JSON, got: JSON, at path: String) -> String? {
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
                if let d = difference(want: value, got: g[key]!, at: "\(path).\(key)") { return d }
            }
            return nil
        case (.array(let w), .array(let g)):
            guard w.count == g.count else { return "\(path): \(g.count) elements, want \(w.count)" }
            for (i, (a, b)) in zip(w, g).enumerated() {
                if let d = difference(want: a, got: b, at: "\(path)[\(i)]") { return d }
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
