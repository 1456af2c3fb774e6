import Foundation
import JSON
import JSONParsing
import JSONRPC
import Testing
import TestSupport
@testable import Kernel

@Suite(.oneStoreOnly) struct TranscriptTests {
    @Test func transcriptsExist() {
        #expect(Transcript.all().count >= 3)
    }

    @Test(arguments: Transcript.all(), StoreKind.allCases)
    func inProcess(_ transcript: Transcript, on store: StoreKind) throws {
        let kernel = try makeKernel(on: store, AppStoreSetup.configure)
        var connection = kernel.connection()
        let (problems, pairs) = transcript.run(given: AppStoreSetup.transcriptVariables()) { line, _ in
            connection.receive(Array((line + "\n").utf8))
            _ = connection.endBatch()
            defer { connection.output.removeAll() }
            return String(decoding: connection.output, as: UTF8.self).split(separator: "\n").map(String.init)
        }
        for problem in problems { Issue.record(Comment(rawValue: problem)) }
        for problem in try resultSchemaProblems(transcript.name, pairs, kernel.registry) {
            Issue.record(Comment(rawValue: problem))
        }
    }

    @Test(arguments: Transcript.all())
    func againstTheBinary(_ transcript: Transcript) throws {
        let k = try LiveKernel(["serve", "--memory-only", "--log-level", "error", "--jwt-secret", testSecret,
                                "--config", try AppStoreSetup.configFile()])
        let (problems, _) = transcript.run(given: AppStoreSetup.transcriptVariables()) { line, count in
            k.send([line])
            return (0..<count).compactMap { _ in k.readRawLine(timeoutSeconds: 10) }
        }
        for problem in problems { Issue.record(Comment(rawValue: problem)) }
        k.closeInput()
        #expect(k.finish() == 0)
    }

    @Test func everyMethodAppearsInSomeTranscript() throws {
        let kernel = try makeKernel()
        let all = Transcript.all().flatMap(\.requests).joined(separator: "\n")
        for method in kernel.registry.methods {
            #expect(all.contains("\"method\":\"\(method.name)\""), "no transcript calls \(method.name)")
        }
    }

    /// Validates every successful result against the result schema of the method its request named.
    func resultSchemaProblems(_ name: String, _ pairs: [(JSON, JSON)], _ registry: MethodRegistry) throws -> [String] {
        var problems: [String] = []
        for (request, response) in pairs {
            let requests = request.arrayValue ?? [request]
            let responses = response.arrayValue ?? [response]
            for r in responses {
                guard let result = r["result"], let id = r["id"],
                      let req = requests.first(where: { $0["id"] == id }),
                      let method = req["method"]?.stringValue.flatMap(registry.method(named:)) else { continue }
                let schema = method.resultSchema
                problems += SchemaValidator.validate(result, schema).map { "\(name) \(method.name): \($0)" }
            }
        }
        return problems
    }
}
