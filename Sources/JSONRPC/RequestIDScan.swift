import JSON
import JSONParsing

/// Finds the `id` of a request line that failed to parse (a NUL character or a lone surrogate in its
/// params, nesting past the limit, invalid UTF-8 inside a string), so the error can carry the request's
/// own id. A host that matches answers by id would otherwise wait for a timeout: an error with id null
/// matches none of its calls.
///
/// It walks the top-level object's members without building values, in one pass over the line (O(bytes),
/// no recursion, so any depth is fine), and reads only an `id` whose value is a string, a number or null
/// that parses on its own. It gives up (nil, the answer keeps id null) when the line is not an object,
/// a member name holds an escape, `id` appears twice, or the structure breaks before the `id` is read.
enum RequestIDScan {
    static func id(in line: UnsafeRawBufferPointer) -> JSON? {
        var scanner = Scanner(bytes: line)
        return scanner.topLevelID()
    }

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var at = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        mutating func topLevelID() -> JSON? {
            skipSpace()
            guard take(0x7B) else { return nil }  // {
            var found: JSON?
            while true {
                skipSpace()
                if found == nil, take(0x7D) { return nil }  // } (an empty object)
                guard let key = string() else { return found }
                skipSpace()
                guard take(0x3A) else { return found }  // :
                skipSpace()
                let isID = key.count == 2 && bytes[key.lowerBound] == 0x69 && bytes[key.lowerBound + 1] == 0x64
                if bytes[key].contains(0x5C) { return nil }  // an escaped name could spell "id"
                if isID {
                    guard found == nil, let value = scalar() else { return nil }
                    found = value
                } else if !skipValue() {
                    return found
                }
                skipSpace()
                if take(0x2C) { continue }  // ,
                return found
            }
        }

        mutating func skipSpace() {
            while at < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[at]) { at += 1 }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard at < bytes.count, bytes[at] == byte else { return false }
            at += 1
            return true
        }

        /// The bytes between the quotes of a string starting here, or nil.
        mutating func string() -> Range<Int>? {
            guard take(0x22) else { return nil }
            let start = at
            while at < bytes.count {
                switch bytes[at] {
                case 0x5C: at += 2
                case 0x22:
                    at += 1
                    return start..<(at - 1)
                default: at += 1
                }
            }
            return nil
        }

        /// A string, number or null that parses on its own as an id the envelope accepts.
        mutating func scalar() -> JSON? {
            let start = at
            if bytes[safe: at] == 0x22 {
                guard string() != nil else { return nil }
            } else {
                while at < bytes.count, !([0x2C, 0x7D, 0x20, 0x09, 0x0A, 0x0D] as [UInt8]).contains(bytes[at]) { at += 1 }
            }
            guard let value = try? JSON.parse(UnsafeRawBufferPointer(rebasing: bytes[start..<at])) else { return nil }
            switch value {
            case .string, .int, .null: return value
            case .double(let d) where d.isFinite && !(d.rounded() == d && d.magnitude >= 0x1p63): return value
            default: return nil
            }
        }

        /// Skips one value of any kind; false when the line ends first.
        mutating func skipValue() -> Bool {
            var depth = 0
            while at < bytes.count {
                switch bytes[at] {
                case 0x22:
                    guard string() != nil else { return false }
                    if depth == 0 { return true }
                    continue
                case 0x7B, 0x5B: depth += 1
                case 0x7D, 0x5D:
                    if depth == 0 { return true }  // the end of the enclosing object: an empty value
                    depth -= 1
                    if depth == 0 {
                        at += 1
                        return true
                    }
                case 0x2C where depth == 0: return true
                default: break
                }
                at += 1
            }
            return false
        }
    }
}

private extension UnsafeRawBufferPointer {
    subscript(safe index: Int) -> UInt8? { index < count ? self[index] : nil }
}
