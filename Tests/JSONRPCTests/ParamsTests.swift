import JSON
import Testing
import TestSupport
@testable import JSONRPC

/// One declaration reads a method's params and describes them: what it accepts is what it documents.
@Suite(.oneStoreOnly) struct ParamsTests {
    static let list = ParamList(
        required("name", maxBytes: 5),
        optional("limit", in: 1...10, default: 3),
        optional("mode", oneOf: ["a", "b"], default: "a"),
        optional("tags", strings: 1...2, maxBytes: 4),
        nullable("note", JSONObject.self))

    func decode(_ object: JSON) throws(FieldError) -> (String, Int64, String, [String]?, JSONObject??) {
        var reader = ObjectReader(object.objectValue!, path: "params")
        let values = try Self.list.decode(&reader)
        try reader.finish()
        return values
    }

    func failure(_ object: JSON) -> FieldError? {
        do {
            _ = try decode(object)
            return nil
        } catch {
            return error
        }
    }

    @Test func decodesDefaultsAndEveryBound() throws {
        let v = try decode(["name": "abc"])
        #expect(v.0 == "abc" && v.1 == 3 && v.2 == "a" && v.3 == nil)
        if case .some = v.4 { Issue.record("an absent nullable must be nil") }
        let w = try decode(["name": "abc", "limit": 10, "mode": "b", "tags": ["x", "yz"], "note": nil])
        #expect(w.1 == 10 && w.2 == "b" && w.3 == ["x", "yz"])
        if case .some(.some) = w.4 { Issue.record("a null nullable must be .some(nil)") }
        #expect(failure([:])?.reason == "missing_field")
        #expect(failure(["name": "abcdef"])?.field == "params.name")
        #expect(failure(["name": ""])?.reason == "out_of_range")
        #expect(failure(["name": "a", "limit": 11])?.field == "params.limit")
        #expect(failure(["name": "a", "mode": "c"])?.field == "params.mode")
        #expect(failure(["name": "a", "tags": []])?.field == "params.tags")
        #expect(failure(["name": "a", "tags": ["ok", "toolong"]])?.field == "params.tags[1]")
        #expect(failure(["name": "a", "note": 5])?.reason == "wrong_type")
        #expect(failure(["name": "a", "other": 1])?.reason == "unknown_field")
    }

    @Test func describesWhatItReads() {
        let d = Self.list.descriptors
        #expect(d.map { $0["name"] } == ["name", "limit", "mode", "tags", "note"])
        #expect(d.map { $0["required"] } == [true, false, false, false, false])
        #expect(d[0]["schema"]?["maxLength"] == 5 && d[0]["schema"]?["minLength"] == 1)
        #expect(d[1]["schema"]?["minimum"] == 1 && d[1]["schema"]?["maximum"] == 10 && d[1]["schema"]?["default"] == 3)
        #expect(d[2]["schema"]?["enum"] == ["a", "b"])
        #expect(d[3]["schema"]?["maxItems"] == 2 && d[3]["schema"]?["items"]?["maxLength"] == 4)
        #expect(d[4]["schema"]?["type"] == ["object", "null"])
    }
}
