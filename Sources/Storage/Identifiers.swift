import Synchronization

/// Where the kernel draws its ids, secrets and salts: passed in, so that a run can be replayed from one
/// seed (`SeededRandom`); the system's generator (`SystemRandom`) everywhere else.
public protocol RandomSource: Sendable {
    /// 64 random bits.
    func next() -> UInt64
}

extension RandomSource {
    /// `count` random bytes.
    public func bytes(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count {
            var word = next()
            for _ in 0..<8 {
                bytes.append(UInt8(truncatingIfNeeded: word))
                word >>= 8
            }
        }
        return Array(bytes.prefix(count))
    }

    /// A new random (version 4) UUID, lowercase, e.g. `3f2c...-4...-[89ab]...`.
    public func uuid() -> String { Identifiers.uuid(from: bytes(16)) }
}

/// The operating system's generator (`getrandom`): what secrets are drawn from outside a simulation.
public struct SystemRandom: RandomSource {
    public init() {}

    public func next() -> UInt64 {
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }
}

/// A generator that gives the same draws for the same seed (splitmix64), for a simulated run that must
/// replay exactly. Not for secrets of a real deployment: anyone who knows the seed knows them.
public final class SeededRandom: RandomSource {
    private let state: Mutex<UInt64>

    public init(seed: UInt64) {
        state = Mutex(seed)
    }

    public func next() -> UInt64 {
        state.withLock { s in
            s &+= 0x9E37_79B9_7F4A_7C15
            var z = s
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }
}

/// Identifiers the kernel makes: random (version 4) UUIDs, lowercase.
public enum Identifiers {
    /// A new random UUID from the system's generator (the kernel draws its own from its `RandomSource`).
    public static func uuid() -> String { SystemRandom().uuid() }

    /// The version 4 UUID made of 16 random bytes.
    static func uuid(from random: [UInt8]) -> String {
        var bytes = random
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
    public static func randomBytes(_ count: Int) -> [UInt8] { SystemRandom().bytes(count) }
}
