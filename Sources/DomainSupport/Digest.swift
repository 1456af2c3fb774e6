import Crypto

/// SHA-256 as lowercase hex: the one way domains name a secret or a long key by a fixed-length digest.
public enum Digest {
    public static func sha256Hex(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    public static func sha256Hex(_ text: String) -> String { sha256Hex(Array(text.utf8)) }
}
