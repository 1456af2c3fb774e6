import Crypto

/// The opaque cursors a kernel hands out (list pages, the change feed): their text sealed with an HMAC
/// under a key derived from the kernel's secret and the cursor's purpose, and bound to a user when one
/// is given, so that a cursor edited by hand, made for another purpose or another user does not open.
public struct CursorSeal: Sendable {
    private let key: SymmetricKey

    /// A seal for cursors of `purpose` under the kernel's `secret`.
    public init(purpose: String, secret: [UInt8]) {
        key = SymmetricKey(data: SHA256.hash(data: Array("healthkernel \(purpose) cursor".utf8) + secret))
    }

    /// The cursor for `text` (bound to `user` when given): base64url of the text, `|`, a 16-byte tag.
    public func seal(_ text: String, user: String? = nil) -> String {
        let payload = Array(text.utf8)
        return Base64URL.encode(payload + [0x7C] + tag(payload, user))
    }

    /// The text of a cursor this seal made for `user`, or nil.
    public func open(_ cursor: String, user: String? = nil, maxBytes: Int = 512) -> String? {
        guard cursor.utf8.count <= maxBytes, let bytes = Base64URL.decode(Array(cursor.utf8)), bytes.count > 17,
              bytes[bytes.count - 17] == 0x7C else { return nil }
        let payload = Array(bytes[..<(bytes.count - 17)])
        guard tag(payload, user).elementsEqual(bytes.suffix(16)) else { return nil }
        return String(decoding: payload, as: UTF8.self)
    }

    private func tag(_ payload: [UInt8], _ user: String?) -> [UInt8] {
        let message = user.map { Array($0.utf8) + [0] + payload } ?? payload
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: key).prefix(16))
    }
}
