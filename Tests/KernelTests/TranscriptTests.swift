import Foundation
import JSON
import JSONRPC
import Testing
@testable import Kernel

@Suite struct TranscriptTests {
    @Test func transcriptsExist() {
        #expect(Transcript.all().count >= 3)
    }

    @Test(arguments: Transcript.all())
    func inProcess(_ transcript: Transcript) throws {
        let kernel = try makeKernel()
        let output = kernel.run(input: transcript.input)
        for problem in transcript.mismatches(output) { Issue.record(Comment(rawValue: problem)) }
        for problem in try resultSchemaProblems(transcript, output, kernel.registry) {
            Issue.record(Comment(rawValue: problem))
        }
    }

    @Test(arguments: Transcript.all())
    func againstTheBinary(_ transcript: Transcript) throws {
        let result = try runBinary(["serve", "--memory-only", "--log-level", "error"], input: Data(transcript.input))
        #expect(result.status == 0, "\(result.stderrText)")
        for problem in transcript.mismatches(Array(result.stdout)) { Issue.record(Comment(rawValue: problem)) }
    }

    @Test func everyMethodAppearsInSomeTranscript() throws {
        let kernel = try makeKernel()
        let all = Transcript.all().flatMap(\.requests).joined(separator: "\n")
        for method in kernel.registry.methods {
            #expect(all.contains("\"method\":\"\(method.name)\""), "no transcript calls \(method.name)")
        }
    }

    /// Validates every successful result against the result schema of the method its request named.
    func resultSchemaProblems(_ t: Transcript, _ output: [UInt8], _ registry: MethodRegistry) throws -> [String] {
        var methodByID: [String: String] = [:]
        var duplicated: Set<String> = []
        func note(_ request: JSON) {
            guard let id = request["id"], id != .null, let method = request["method"]?.stringValue else { return }
            if methodByID[id.serialized] != nil { duplicated.insert(id.serialized) }
            methodByID[id.serialized] = method
        }
        for line in t.requests {
            guard let json = try? JSON.parse(line) else { continue }
            if case .array(let items) = json { items.forEach(note) } else { note(json) }
        }
        var problems: [String] = []
        let responses = String(decoding: output, as: UTF8.self).split(separator: "\n").compactMap { try? JSON.parse(String($0)) }
        for response in responses.flatMap({ $0.arrayValue ?? [$0] }) {
            guard let result = response["result"], let id = response["id"]?.serialized, !duplicated.contains(id),
                  let name = methodByID[id], let method = registry.method(named: name) else { continue }
            let schema = try JSON.parse(method.resultSchema)
            problems += SchemaValidator.validate(result, schema).map { "\(t.name) \(name): \($0)" }
        }
        return problems
    }
}
