import Crypto
import CryptoExtras
import DomainSupport
import Storage

/// Password hashing with scrypt (N=16384, r=8, p=1; about 35 ms here): slow on purpose, salted per
/// password, compared in constant time. Stored as `scrypt$16384$8$1$<salt>$<hash>` (base64url).
public enum Passwords {
    static let n = 16384, r = 8, p = 1, saltBytes = 16, hashBytes = 32

    /// Whether `password` has an acceptable length: 8 to 256 characters.
    public static func acceptable(_ password: String) -> Bool { (8...256).contains(password.count) }

    /// A new salted hash of `password`, its salt drawn from `random`.
    public static func hash(_ password: String, random: RandomSource = SystemRandom()) -> String {
        let salt = random.bytes(saltBytes)
        return encode(salt: salt, derived: derive(password, salt: salt, n: n, r: r, p: p))
    }

    /// Whether `password` matches `stored`; always does the full work, so timing says nothing.
    public static func verify(_ password: String, against stored: String) -> Bool {
        let parts = stored.split(separator: "$").map(String.init)
        guard parts.count == 6, parts[0] == "scrypt", let n = Int(parts[1]), let r = Int(parts[2]), let p = Int(parts[3]),
              let salt = Base64URL.decode(Array(parts[4].utf8)), let expected = Base64URL.decode(Array(parts[5].utf8)),
              n <= 1 << 20, r <= 32, p <= 16 else {
            _ = derive(password, salt: [UInt8](repeating: 0, count: saltBytes), n: self.n, r: self.r, p: self.p)
            return false
        }
        return constantTimeEqual(derive(password, salt: salt, n: n, r: r, p: p), expected)
    }

    /// A hash to check against when the email is unknown, so that case costs the same as a wrong password.
    static let decoy = hash("decoy-password-for-unknown-accounts")

    static func derive(_ password: String, salt: [UInt8], n: Int, r: Int, p: Int) -> [UInt8] {
        let key = try? KDF.Scrypt.deriveKey(from: Array(password.utf8), salt: salt, outputByteCount: hashBytes,
                                            rounds: n, blockSize: r, parallelism: p)
        return key?.withUnsafeBytes { Array($0) } ?? []
    }

    static func encode(salt: [UInt8], derived: [UInt8]) -> String {
        "scrypt$\(n)$\(r)$\(p)$\(Base64URL.encode(salt))$\(Base64URL.encode(derived))"
    }

    /// Compares without stopping at the first difference.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count, !a.isEmpty else { return false }
        var diff: UInt8 = 0
        for (x, y) in zip(a, b) { diff |= x ^ y }
        return diff == 0
    }
}
