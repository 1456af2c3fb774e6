import Foundation
import OpenAPIRuntime

/// RFC 3339 date-times as the kernel writes them: with or without fractional seconds, `Z` or an offset.
/// (The runtime's own transcoders take one form or the other, not both.) Writes milliseconds in UTC.
struct RFC3339Transcoder: DateTranscoder {
    func encode(_ date: Date) throws -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    func decode(_ string: String) throws -> Date {
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(string) { return date }
        if let date = try? Date.ISO8601FormatStyle().parse(string) { return date }
        throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "not an RFC 3339 date-time: \(string)"))
    }
}
