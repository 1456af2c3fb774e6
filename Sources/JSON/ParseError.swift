/// Why a byte sequence is not acceptable JSON.
public struct JSONParseError: Error, Sendable, Equatable {
    /// The class of failure; each maps to one `data.reason` on the wire.
    public enum Kind: String, Sendable {
        case invalidUTF8 = "invalid_utf8"
        case invalidJSON = "invalid_json"
        case duplicateKey = "duplicate_key"
        case nestingTooDeep = "nesting_too_deep"
        case numberOutOfRange = "number_out_of_range"
        case nulCharacter = "nul_character"
    }

    /// The class of failure.
    public var kind: Kind
    /// jansson's description (or ours), safe to show: it names a position, never echoes input.
    public var message: String
    /// Byte offset where the parser stopped, when known.
    public var position: Int?

    public init(kind: Kind, message: String, position: Int? = nil) {
        self.kind = kind
        self.message = message
        self.position = position
    }
}

extension JSON {
    /// Deepest nesting of arrays and objects accepted; jansson itself stops at 2048.
    public static let maxDepth = 512
}
