import Testing
import TestSupport
@testable import JSON
import JSONParsing

@Suite(.oneStoreOnly) struct ParsingTests {
    func parse(_ text: String) throws(JSONParseError) -> JSON { try JSON.parse(text) }

    func failure(_ bytes: [UInt8]) -> JSONParseError.Kind? {
        do {
            _ = try JSON.parse(bytes)
            return nil
        } catch {
            return error.kind
        }
    }

    @Test func scalarsAndContainers() throws {
        #expect(try parse(#"{"a":1,"b":1.5,"c":"x","d":[true,false,null]}"#)
            == ["a": 1, "b": 1.5, "c": "x", "d": [true, false, nil]])
        #expect(try parse("7") == .int(7))
        #expect(try parse("1.0") == .double(1.0))
        #expect(try parse(#""s""#) == .string("s"))
    }

    @Test func keysKeepTheirOrder() throws {
        let o = try #require(try parse(#"{"z":1,"a":2,"m":3}"#).objectValue)
        #expect(o.keys == ["z", "a", "m"])
        #expect(try parse(#"{"z":1,"a":2,"m":3}"#).serialized == #"{"z":1,"a":2,"m":3}"#)
    }

    @Test func rejectsDuplicateKeysAtAnyDepth() {
        #expect(failure(Array(#"{"a":1,"a":2}"#.utf8)) == .duplicateKey)
        #expect(failure(Array(#"{"p":{"alg":"HS256","alg":"none"}}"#.utf8)) == .duplicateKey)
    }

    @Test func rejectsInvalidUTF8() {
        #expect(failure([0x22, 0xC3, 0x28, 0x22]) == .invalidUTF8)
        #expect(failure([0x5B, 0x22, 0xFF, 0x22, 0x5D]) == .invalidUTF8)
        #expect(failure([0x22, 0xED, 0xA0, 0x80, 0x22]) == .invalidUTF8)  // a UTF-16 surrogate encoded in UTF-8
    }

    @Test func rejectsNUL() {
        #expect(failure(Array(#"{"a":"x\u0000y"}"#.utf8)) == .nulCharacter)
        #expect(failure(Array(#"{"a\u0000":1}"#.utf8)) == .nulCharacter)
        #expect(failure([0x7B, 0x00, 0x7D]) != nil)  // a raw NUL byte
        #expect(failure([0x22, 0x61, 0x00, 0x22]) != nil)
    }

    @Test func capsNesting() throws {
        let ok = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(try parse(ok) != .null)
        let deep = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
        #expect(failure(Array(deep.utf8)) == .nestingTooDeep)
        let veryDeep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(failure(Array(veryDeep.utf8)) == .nestingTooDeep)
        let objects = String(repeating: #"{"a":"#, count: 600) + "1" + String(repeating: "}", count: 600)
        #expect(failure(Array(objects.utf8)) == .nestingTooDeep)
    }

    @Test func numbersBeyondInt64AndDoubleAreReadAsDoublesForTheirFieldToRefuse() throws {
        #expect(try parse("9223372036854775807") == .int(Int64.max))
        #expect(try parse("-9223372036854775808") == .int(Int64.min))
        #expect(try parse("9223372036854775808") == .double(9_223_372_036_854_775_808))
        #expect(try parse(#"{"n":-99999999999999999999}"#) == ["n": .double(-1e20)])
        #expect(try parse(#"[1e400,-1e400,2]"#) == [.double(.infinity), .double(-.infinity), 2])
        let nan = try parse(#"{"a":NaN,"b":Infinity,"c":-Infinity,"d":"NaN"}"#)
        #expect(nan["a"]?.numberValue?.isNaN == true)
        #expect(nan["b"] == .double(.infinity) && nan["c"] == .double(-.infinity) && nan["d"] == "NaN")
        // Readers refuse them by path.
        var reader = ObjectReader(try parse(#"{"v":1e400,"raw":{"x":[NaN]},"n":99999999999999999999}"#).objectValue!, path: "params")
        #expect(throws: FieldError.outOfRange("params.v", "must be a finite number")) { try reader.required("v", as: Double.self) }
        #expect(throws: FieldError.outOfRange("params.raw.x[0]", "must be a finite number")) { try reader.required("raw", as: JSON.self) }
        #expect(throws: FieldError.outOfRange("params.n", "must fit in 64 bits")) { try reader.required("n", as: Int64.self) }
        // Other garbage stays a parse error, with jansson's first complaint.
        for text in ["NaNa", "[nan]", "[Infinity1]", "[-NaN]", "[1e]", "[0x10]", "[.5]", "[01]"] {
            #expect(failure(Array(text.utf8)) == .invalidJSON, "\(text)")
        }
    }

    /// #51 item 3: the odd numbers of a line are found in one pass and the line parsed once more,
    /// however many it holds (the parser used to parse the whole line again for each, up to 64 times,
    /// then give up): 10,000 of them, beside strings that look like numbers, all read back.
    @Test func anyNumberOfOddNumbersIsReadInOnePass() throws {
        let items = (0..<10_000).map { $0 % 3 == 0 ? "1e400" : $0 % 3 == 1 ? "\"1e400 NaN\\\"2e999\"" : "-99999999999999999999" }
        let parsed = try parse("[" + items.joined(separator: ",") + "]")
        let values = try #require(parsed.arrayValue)
        #expect(values.count == 10_000)
        #expect(values[0] == .double(.infinity) && values[1] == .string("1e400 NaN\"2e999") && values[2] == .double(-1e20))
        #expect(values.filter { $0 == .double(.infinity) }.count == 3_334)
        // A string holding the marker's private-use character beside an odd number: the number's own error,
        // never a string read as a number.
        #expect(failure(Array(#"["\uF8FF\uF8FF0", 1e400]"#.utf8)) == .numberOutOfRange)
        #expect(failure(Array("[\"\u{F8FF}\u{F8FF}0\", 1e400]".utf8)) == .numberOutOfRange)
        #expect(try parse("[\"\u{F8FF}\u{F8FF}0\"]") == ["\u{F8FF}\u{F8FF}0"], "without odd numbers it is a string like any other")
    }

    @Test func rejectsGarbage() {
        for text in ["", "{", "{\"a\":}", "[1,]", "{} {}", "nul", "'a'", "{\"a\":1}x"] {
            #expect(failure(Array(text.utf8)) == .invalidJSON, "\(text)")
        }
    }

    @Test func errorMessagesNeverQuoteTheInput() {
        do {
            _ = try JSON.parse(#"{"password":"hunter2" "#)
            Issue.record("expected a parse error")
        } catch {
            #expect(!error.message.contains("hunter2"))
        }
    }

    @Test func stringsWithEscapesAndUnicode() throws {
        #expect(try parse(#""a\"b\\c\/d\n\u00e9\ud83d\ude00""#) == .string("a\"b\\c/d\né😀"))
    }
}

@Suite(.oneStoreOnly) struct SerializingTests {
    @Test func doublesUseShortestRoundTrip() throws {
        #expect(JSON.double(0.1).serialized == "0.1")
        #expect(JSON.double(1.5).serialized == "1.5")
        #expect(JSON.double(1.0).serialized == "1.0")
        #expect(JSON.double(-0.0).serialized == "-0.0")
        #expect(JSON.double(1e-7).serialized == "1e-07")
        #expect(JSON.double(5e-324).serialized == "5e-324")
        for value in [0.1, 1.0 / 3.0, 123456.789, 1e300, -2.5e-300] {
            let text = JSON.double(value).serialized
            #expect(try JSON.parse("[\(text)]") == [.double(value)], "\(text)")
        }
    }

    @Test func nonFiniteDoublesNeverReachTheOutput() {
        #expect(JSON.double(.nan).serialized == "null")
        #expect(JSON.double(.infinity).serialized == "null")
        #expect(JSON.double(-.infinity).serialized == "null")
    }

    @Test func integers() {
        #expect(JSON.int(0).serialized == "0")
        #expect(JSON.int(-42).serialized == "-42")
        #expect(JSON.int(Int64.max).serialized == "9223372036854775807")
        #expect(JSON.int(Int64.min).serialized == "-9223372036854775808")
    }

    @Test func stringsAreEscapedMinimallyAndStayOnOneLine() {
        #expect(JSON.string("a\"b\\c").serialized == #""a\"b\\c""#)
        #expect(JSON.string("l1\nl2\r\t\u{08}\u{0C}").serialized == #""l1\nl2\r\t\b\f""#)
        #expect(JSON.string("\u{01}\u{1F}").serialized == #""\u0001\u001f""#)
        #expect(JSON.string("é😀/").serialized == "\"é😀/\"")
    }

    @Test func compactAndRoundTrips() throws {
        let text = #"{"b":[1,2.5,"x",null,true,{"c":{}}],"a":[]}"#
        #expect(try JSON.parse(text).serialized == text)
    }
}

@Suite(.oneStoreOnly) struct ObjectReaderTests {
    @Test func readsTypedFieldsWithPaths() throws {
        let o = try #require(try JSON.parse(#"{"n":5,"s":"x","list":[1,"two"],"extra":1}"#).objectValue)
        var r = ObjectReader(o, path: "params")
        #expect(try r.required("n", in: 0...10) == 5)
        #expect(try r.required("s", as: String.self) == "x")
        #expect(throws: FieldError.wrongType("params.list[1]", expected: "an integer", got: "two")) {
            _ = try r.required("list", as: [Int64].self)
        }
        #expect(throws: FieldError(field: "params.extra", reason: "unknown_field", message: "params.extra is not a known field")) {
            try r.finish()
        }
    }

    @Test func missingWrongTypeAndRange() throws {
        let o = try #require(try JSON.parse(#"{"a":1.5,"b":"5","c":99}"#).objectValue)
        var r = ObjectReader(o, path: "params")
        #expect(throws: FieldError.self) { _ = try r.required("zz", as: Int64.self) }
        do {
            _ = try r.required("a", as: Int64.self)
        } catch {
            #expect(error.reason == "wrong_type" && error.field == "params.a")
        }
        do {
            _ = try r.required("b", as: Int64.self)
        } catch {
            #expect(error.reason == "wrong_type" && error.field == "params.b")
        }
        do {
            _ = try r.required("c", in: 0...10)
        } catch {
            #expect(error.reason == "out_of_range" && error.field == "params.c")
        }
    }

    @Test func nullableDistinguishesAbsentFromNull() throws {
        let o = try #require(try JSON.parse(#"{"a":null,"b":"x"}"#).objectValue)
        var r = ObjectReader(o, path: "p")
        let a = try r.nullable("a", as: String.self)
        let b = try r.nullable("b", as: String.self)
        let c = try r.nullable("c", as: String.self)
        #expect(a == .some(nil))
        #expect(b == .some("x"))
        #expect(c == nil)
        try r.finish()
    }
}

@Suite(.oneStoreOnly) struct BinaryFormTests {
    static func roundTrip(_ value: JSON) throws -> JSON {
        var out: [UInt8] = []
        value.writeBinary(to: &out)
        return try out.withUnsafeBytes { raw in
            var r = BinaryReader(raw)
            let back = try JSON.readBinary(&r)
            #expect(r.isAtEnd)
            return back
        }
    }

    @Test func valuesRoundTripExactly() throws {
        let values: [JSON] = [
            nil, true, false, 0, 1, -1, .int(.max), .int(.min), 63, -64, 64, -65, 300,
            0.5, -0.0, 1e300, .double(.leastNonzeroMagnitude), "", "ascii", "ünïcödé 🧘", "quote \" and \\ and \n",
            [], [:], [1, "a", [2, [3, [:]]]], ["z": 1, "a": 2, "m": ["nested": [nil, false]]],
        ]
        for value in values {
            let back = try Self.roundTrip(value)
            #expect(back == value)
            #expect(back.bytes == value.bytes, "key order and number kinds are kept")
        }
    }

    @Test func nestingIsBounded() {
        var deep: JSON = 1
        for _ in 0..<20 { deep = [deep] }
        var out: [UInt8] = []
        deep.writeBinary(to: &out)
        let result = out.withUnsafeBytes { raw in
            var r = BinaryReader(raw)
            return Result { () throws(BinaryDecodeError) in try JSON.readBinary(&r, maxDepth: 10) }
        }
        #expect(throws: BinaryDecodeError.self) { try result.get() }
    }

    @Test func countsBeyondTheDataAreRefusedBeforeAllocating() {
        // An array claiming 2^62 items in a 12-byte buffer.
        var bytes: [UInt8] = [6]
        Binary.writeVarint(1 << 62, to: &bytes)
        let result = bytes.withUnsafeBytes { raw in
            var r = BinaryReader(raw)
            return try? JSON.readBinary(&r)
        }
        #expect(result == nil)
    }
}
