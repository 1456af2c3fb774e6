import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport
@testable import Kernel

@Suite(.oneStoreOnly) struct OpenRPCTests {
    /// protocol/openrpc.json is the published contract; rpc.discover must return exactly it.
    /// Regenerate after changing a method: `.build/debug/healthkernel call rpc.discover --memory-only | jq . > protocol/openrpc.json`
    @Test func publishedDocumentMatchesTheRegistry() throws {
        let kernel = try makeKernel()
        let generated = try kernel.registry.openRPCDocument()
        let file = try Data(contentsOf: Paths.protocolDir.appendingPathComponent("openrpc.json"))
        let published = try JSON.parse(Array(file))
        #expect(published == generated,
                "protocol/openrpc.json is out of date (\(Transcript.difference(want: published, got: generated, at: "$") ?? "")): regenerate it from rpc.discover")
    }

    @Test func everyRegisteredMethodIsPublished() throws {
        let kernel = try makeKernel()
        let file = try Data(contentsOf: Paths.protocolDir.appendingPathComponent("openrpc.json"))
        let names = try JSON.parse(Array(file))["methods"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
        for method in kernel.registry.methods {
            #expect(names.contains(method.name), "\(method.name) is missing from protocol/openrpc.json")
        }
    }

    /// A method's published errors include every code it can answer: the rate limit covers every user
    /// method, and the quotas the methods that store what they count.
    @Test func everyMethodPublishesTheRateLimitsAndQuotasItCanAnswer() throws {
        let kernel = try makeKernel()
        let document = try kernel.registry.openRPCDocument()
        for method in document["methods"]?.arrayValue ?? [] {
            let name = method["name"]?.stringValue ?? ""
            let errors = method["errors"]?.arrayValue ?? []
            let messages = errors.filter { $0["code"] == -32029 }.compactMap { $0["message"]?.stringValue }
            if kernel.registry.method(named: name)?.auth == .user {
                #expect(messages.contains { $0.hasPrefix("rate_limited") }, "\(name) does not publish -32029 rate_limited")
            }
            if ["screentime.upload", "health.ingest"].contains(name) {
                #expect(messages.contains { $0.hasPrefix("quota_exceeded") }, "\(name) does not publish -32029 quota_exceeded")
            }
        }
    }

    @Test func schemasUseOnlyCheckedKeywords() throws {
        let kernel = try makeKernel()
        for method in kernel.registry.methods {
            let schema = method.resultSchema
            #expect(unsupportedKeywords(schema).isEmpty, "\(method.name): \(unsupportedKeywords(schema))")
            for p in method.params {
                #expect(p["name"]?.stringValue != nil && p["schema"] != nil, "\(method.name): \(p)")
                if let s = p["schema"] { #expect(unsupportedKeywords(s).isEmpty, "\(method.name)") }
            }
        }
    }

    /// Keywords anywhere in `schema` that the test validator would not check.
    func unsupportedKeywords(_ schema: JSON) -> [String] {
        guard case .object(let o) = schema else { return [] }
        var found = o.keys.filter { !SchemaValidator.known.contains($0) }
        for (key, value) in o {
            switch key {
            case "properties": found += value.objectValue?.values.flatMap(unsupportedKeywords) ?? []
            case "items", "additionalProperties": found += unsupportedKeywords(value)
            case "anyOf", "oneOf": found += value.arrayValue?.flatMap(unsupportedKeywords) ?? []
            default: break
            }
        }
        return found
    }
}
