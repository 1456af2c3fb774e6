import Foundation
import Testing
@testable import HealthKernelClient

@Suite struct UnitTests {
    @Test func dateTimesWithAndWithoutFractionsAndOffsets() throws {
        let t = RFC3339Transcoder()
        let whole = try t.decode("2026-03-01T12:00:00Z")
        #expect(try t.decode("2026-03-01T12:00:00.000Z") == whole)
        #expect(try t.decode("2026-03-01T14:00:00+02:00") == whole)
        #expect(try t.decode("2026-03-01T12:00:00.250Z") == whole.addingTimeInterval(0.25))
        #expect(try t.decode(t.encode(whole.addingTimeInterval(0.25))) == whole.addingTimeInterval(0.25))
        #expect(throws: DecodingError.self) { try t.decode("2026-03-01") }
    }

    /// The operations the client sends no token with are those the document says take none (or take
    /// one only to link an identity): a route that gains or loses a token is caught here.
    @Test func operationsWithoutTokenMatchTheDocument() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../../../protocol/rest-openapi.json").standardized
        let document = try JSONSerialization.jsonObject(with: Data(contentsOf: path)) as? [String: Any]
        let paths = try #require(document?["paths"] as? [String: [String: [String: Any]]])
        var withoutToken: Set<String> = []
        for operation in paths.values.flatMap(\.values) {
            let security = try #require(operation["security"] as? [[String: Any]])
            if security.isEmpty || security.contains(where: \.isEmpty) {
                withoutToken.insert(try #require(operation["operationId"] as? String))
            }
        }
        #expect(withoutToken == AuthMiddleware.withoutToken)
    }
}
