/// Identifiers the kernel makes: random (version 4) UUIDs, lowercase.
public enum Identifiers {
    /// A new random UUID, e.g. `3f2c...-4...-[89ab]...`.
    public static func uuid() -> String {
        var rng = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = bytes.map { b -> String in
            let s = String(b, radix: 16)
            return s.count == 1 ? "0" + s : s
        }.joined()
        let c = Array(hex)
        return String(c[0..<8]) + "-" + String(c[8..<12]) + "-" + String(c[12..<16]) + "-" + String(c[16..<20]) + "-" + String(c[20..<32])
    }

    /// The UUID in canonical lowercase form, or nil when `text` is not a UUID.
    public static func canonicalUUID(_ text: String) -> String? {
        let b = Array(text.lowercased().utf8)
        guard b.count == 36 else { return nil }
        for (i, c) in b.enumerated() {
            if [8, 13, 18, 23].contains(i) {
                guard c == UInt8(ascii: "-") else { return nil }
            } else {
                guard (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f")) else { return nil }
            }
        }
        return String(decoding: b, as: UTF8.self)
    }

    /// Random bytes from the system's generator.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        var rng = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }
}
