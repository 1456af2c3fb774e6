import Crypto

/// The opaque cursors a kernel hands out (list pages, the change feed): their text sealed with an HMAC
/// under a key derived from the kernel's secret and the cursor's purpose, and bound to a user when one
/// is given, so that a cursor edited by hand, made for another purpose or another user does not open.
public struct CursorSeal: Sendable {
    /// The first seals; every one opens (the kernel's earlier secrets, during a rotation).
    private let keys: [SymmetricKey]

    /// A seal for cursors of `purpose` under the kernel's `secrets`: the current one first, then
    /// earlier ones whose cursors still open.
    public init(purpose: String, secrets: [[UInt8]]) {
        precondition(!secrets.isEmpty)
        keys = secrets.map { SymmetricKey(data: SHA256.hash(data: Array("healthkernel \(purpose) cursor".utf8) + $0)) }
    }

    /// The cursor for `text` (bound to `user` when given): base64url of the text, `|`, a 16-byte tag.
    public func seal(_ text: String, user: String? = nil) -> String {
        let payload = Array(text.utf8)
        return Base64URL.encode(payload + [0x7C] + tag(payload, user, keys[0]))
    }

    /// The text of a cursor this seal made for `user`, or nil.
    public func open(_ cursor: String, user: String? = nil, maxBytes: Int = 512) -> String? {
        guard cursor.utf8.count <= maxBytes, let bytes = Base64URL.decode(Array(cursor.utf8)), bytes.count > 17,
              bytes[bytes.count - 17] == 0x7C else { return nil }
        let payload = Array(bytes[..<(bytes.count - 17)])
        guard keys.contains(where: { tag(payload, user, $0).elementsEqual(bytes.suffix(16)) }) else { return nil }
        return String(decoding: payload, as: UTF8.self)
    }

    private func tag(_ payload: [UInt8], _ user: String?, _ key: SymmetricKey) -> [UInt8] {
        let message = user.map { Array($0.utf8) + [0] + payload } ?? payload
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: key).prefix(16))
    }
}
