import CCRC32C

/// CRC-32C (Castagnoli), the checksum of every log and snapshot record (as in etcd, ext4 and iSCSI).
public enum CRC32C {
    private static let table: [[UInt32]] = {
        var t = [[UInt32]](repeating: [UInt32](repeating: 0, count: 256), count: 8)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = c & 1 != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
            t[0][i] = c
        }
        for i in 0..<256 {
            for k in 1..<8 { t[k][i] = (t[k - 1][i] >> 8) ^ t[0][Int(t[k - 1][i] & 0xFF)] }
        }
        return t
    }()

    /// Whether the CPU computes CRC-32C itself (SSE4.2 on x86-64): about ten times faster.
    static let hardware = hk_crc32c_hardware() != 0

    /// Continues `crc` over `bytes`, with the CPU's instruction where there is one.
    public static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard hardware, let base = bytes.baseAddress else { return software(crc, bytes) }
        return ~hk_crc32c_update(~crc, base, bytes.count)
    }

    /// Continues `crc` over `bytes` with tables (slicing-by-8), on any CPU.
    static func software(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var c = ~crc
        var i = 0
        let n = bytes.count
        table.withUnsafeBufferPointer { t in
            let t0 = t[0], t1 = t[1], t2 = t[2], t3 = t[3], t4 = t[4], t5 = t[5], t6 = t[6], t7 = t[7]
            while i + 8 <= n {
                let lo = c ^ (UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24)
                c = t7[Int(lo & 0xFF)] ^ t6[Int((lo >> 8) & 0xFF)] ^ t5[Int((lo >> 16) & 0xFF)] ^ t4[Int(lo >> 24)]
                    ^ t3[Int(bytes[i + 4])] ^ t2[Int(bytes[i + 5])] ^ t1[Int(bytes[i + 6])] ^ t0[Int(bytes[i + 7])]
                i += 8
            }
            while i < n {
                c = t0[Int((c ^ UInt32(bytes[i])) & 0xFF)] ^ (c >> 8)
                i += 1
            }
        }
        return ~c
    }

    /// The checksum of `bytes`.
    public static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 { update(0, bytes) }

    /// The checksum of a byte array.
    public static func checksum(_ bytes: [UInt8]) -> UInt32 { bytes.withUnsafeBytes { checksum($0) } }
}
