import Foundation
import JSON
import JSONRPC
import Testing
import TestSupport
@testable import Kernel

/// What adding a method asks for (README, "Adding a method"): every registered method is shown in a
/// transcript and named in `protocol/`, and every user method with required params has sample params
/// in the isolation test, which then checks it with two users' data.
@Suite(.oneStoreOnly) struct MethodContractTests {
    /// `text` without what sits between `<!-- methods:begin -->` and `<!-- methods:end -->`.
    static func withoutGeneratedTables(_ text: String) -> String {
        var out = text
        while let begin = out.range(of: "<!-- methods:begin -->"), let end = out.range(of: "<!-- methods:end -->", range: begin.upperBound..<out.endIndex) {
            out.removeSubrange(begin.lowerBound..<end.upperBound)
        }
        return out
    }

    static func text(of folder: URL, ending suffix: String) throws -> String {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(suffix) }.sorted()
            .map { try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8) }.joined(separator: "\n")
    }

    @Test func everyMethodHasATranscriptADocumentAndAnIsolationEntry() throws {
        let kernel = try makeKernel()
        let transcripts = try Self.text(of: Paths.protocolDir.appendingPathComponent("transcripts"), ending: ".txt")
        // The prose only: the method table protocol/README.md generates from the registry names every
        // method by construction, so a method no document explains would pass on it alone (#51 item 22).
        let documents = Self.withoutGeneratedTables(try Self.text(of: Paths.protocolDir, ending: ".md"))
        #expect(!documents.contains("<!-- methods:begin -->"))
        let methods = kernel.registry.methods.filter { !$0.name.hasPrefix("test.") }
        #expect(methods.count >= 40)
        for m in methods {
            let (shown, named) = (transcripts.contains("\"method\":\"\(m.name)\""), documents.contains("`\(m.name)`"))
            #expect(shown, "\(m.name) is in no transcript of protocol/transcripts")
            #expect(named, "\(m.name) is named in no document of protocol/")
            let required = m.params.contains { $0["required"] == true && $0["name"] != "auth" }
            if (m.auth == .user || m.auth == .userOrService) && required {
                #expect(IsolationTests.sampleParams[m.name] != nil, "\(m.name) has required params but no IsolationTests.sampleParams entry")
            }
        }
    }

    /// protocol/README.md's error table lists exactly the codes of `ErrorCode`, in its order.
    @Test func theErrorTableListsEveryErrorCode() throws {
        let readme = try String(contentsOf: Paths.protocolDir.appendingPathComponent("README.md"), encoding: .utf8)
        let section = readme.components(separatedBy: "## Errors").dropFirst().first?.components(separatedBy: "\n## ").first ?? ""
        let codes = section.split(separator: "\n").compactMap { line -> Int? in
            guard line.hasPrefix("| -") else { return nil }
            return Int(line.dropFirst(2).prefix { $0 != " " })
        }
        #expect(codes == ErrorCode.allCases.map(\.rawValue))
        for code in ErrorCode.allCases { #expect(section.contains("`\(code)`"), "\(code) is not named under Errors") }
    }

    /// The methods table of protocol/README.md, from the registry.
    static func methodTable(_ methods: [RegisteredMethod]) -> String {
        var lines = ["| method | auth | writes | errors | what it does |", "|---|---|---|---|---|"]
        for m in methods where !m.name.hasPrefix("test.") {
            var seen = Set<Int>()
            let codes = m.publishedErrors.filter { seen.insert($0.code.rawValue).inserted }.map { "\($0.code.rawValue)" }.joined(separator: ", ")
            let auth = m.auth == .optionalUser ? "optional" : m.auth.rawValue
            let summary = m.summary.replacingOccurrences(of: "|", with: "\\|")
            lines.append("| `\(m.name)` | \(auth) | \(m.mutates ? "yes" : "no") | \(codes.isEmpty ? "none" : codes) | \(summary) |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    @Test func protocolReadmeListsEveryMethod() throws {
        let kernel = try makeKernel()
        let url = Paths.protocolDir.appendingPathComponent("README.md")
        let doc = try String(contentsOf: url, encoding: .utf8)
        let begin = try #require(doc.range(of: "<!-- methods:begin -->\n")), end = try #require(doc.range(of: "<!-- methods:end -->"))
        let table = Self.methodTable(kernel.registry.methods)
        if ProcessInfo.processInfo.environment["HEALTHKERNEL_UPDATE_DOCS"] == "1" {
            try (String(doc[..<begin.upperBound]) + table + String(doc[end.lowerBound...])).write(to: url, atomically: true, encoding: .utf8)
            return
        }
        let same = String(doc[begin.upperBound..<end.lowerBound]) == table
        #expect(same, "protocol/README.md's method table differs from the registry: HEALTHKERNEL_UPDATE_DOCS=1 swift test --filter protocolReadmeListsEveryMethod")
    }

}
