/// The frame around every record in log segments and snapshots (documented in protocol/storage.md):
///
///     u32 payload length | u64 sequence number | u32 CRC-32C of the payload | u32 CRC-32C of the 16 bytes before
///     payload (format 1: JSON text; format 2: the binary form)
///
/// All integers little-endian. The header has its own checksum so that a damaged length is never
/// trusted, and a torn tail can be told apart from damage in the middle.
public enum RecordFraming {
    /// Bytes before the payload.
    public static let headerSize = 20
    /// Largest payload accepted; anything claiming more is damage.
    public static let maxPayload = 256 * 1024 * 1024

    /// Appends one framed record.
    public static func append(seq: UInt64, payload: [UInt8], to out: inout [UInt8]) {
        appendRecord(seq: seq, to: &out) { $0.append(contentsOf: payload) }
    }

    /// Appends one framed record whose payload `writePayload` appends in place (no temporary buffer).
    public static func appendRecord(seq: UInt64, to out: inout [UInt8], _ writePayload: (inout [UInt8]) -> Void) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: headerSize))
        writePayload(&out)
        let length = out.count - start - headerSize
        out.withUnsafeMutableBytes { raw in
            let header = raw.baseAddress! + start
            header.storeBytes(of: UInt32(length).littleEndian, toByteOffset: 0, as: UInt32.self)
            header.storeBytes(of: seq.littleEndian, toByteOffset: 4, as: UInt64.self)
            let payload = UnsafeRawBufferPointer(start: header + headerSize, count: length)
            header.storeBytes(of: CRC32C.checksum(payload).littleEndian, toByteOffset: 12, as: UInt32.self)
            let crc = CRC32C.checksum(UnsafeRawBufferPointer(start: header, count: 16))
            header.storeBytes(of: crc.littleEndian, toByteOffset: 16, as: UInt32.self)
        }
    }

    /// One record as read back.
    public struct Record {
        public let seq: UInt64
        public let offset: Int
        public let payload: ArraySlice<UInt8>
        /// Offset just past the record.
        public var end: Int { offset + headerSize + payload.count }
    }

    /// Why a record could not be read at an offset.
    public enum Damage: Equatable {
        /// Fewer bytes remain than the record needs: a write cut short.
        case truncated
        /// The header's own checksum fails.
        case badHeader
        /// The payload's checksum fails.
        case badPayload
    }

    /// Reads the record at `offset` of `bytes`.
    public static func read(_ bytes: [UInt8], at offset: Int) -> Result<Record, DamageError> {
        guard offset + headerSize <= bytes.count else { return .failure(DamageError(damage: .truncated, offset: offset)) }
        let header = bytes[offset..<(offset + 16)]
        let headerCRC = get32(bytes, offset + 16)
        guard Array(header).withUnsafeBytes({ CRC32C.checksum($0) }) == headerCRC else {
            return .failure(DamageError(damage: .badHeader, offset: offset))
        }
        let length = Int(get32(bytes, offset))
        let seq = get64(bytes, offset + 4)
        let payloadCRC = get32(bytes, offset + 12)
        guard length <= maxPayload else { return .failure(DamageError(damage: .badHeader, offset: offset)) }
        let start = offset + headerSize
        guard start + length <= bytes.count else { return .failure(DamageError(damage: .truncated, offset: offset)) }
        let payload = bytes[start..<(start + length)]
        let ok = payload.withUnsafeBytes { CRC32C.checksum($0) } == payloadCRC
        guard ok else { return .failure(DamageError(damage: .badPayload, offset: offset)) }
        return .success(Record(seq: seq, offset: offset, payload: payload))
    }

    /// A damaged record and where it starts.
    public struct DamageError: Error, Equatable {
        public let damage: Damage
        public let offset: Int
    }

    /// Whether any intact record starts after `offset`: if one does, the damage is in the middle of the
    /// file (refuse to start); if none does, it is a torn tail (cut it off).
    public static func intactRecordExists(after offset: Int, in bytes: [UInt8]) -> Bool {
        var o = offset + 1
        while o + headerSize <= bytes.count {
            if case .success = read(bytes, at: o) { return true }
            o += 1
        }
        return false
    }

    static func get32(_ b: [UInt8], _ o: Int) -> UInt32 {
        var v: UInt32 = 0
        for i in 0..<4 { v |= UInt32(b[o + i]) << (8 * UInt32(i)) }
        return v
    }

    static func get64(_ b: [UInt8], _ o: Int) -> UInt64 {
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(b[o + i]) << (8 * UInt64(i)) }
        return v
    }
}
