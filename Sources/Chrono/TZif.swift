/// A compiled tz file (RFC 8536, versions 1 to 4) as local-offset lookups: its transitions, and the
/// POSIX TZ rule of its footer for instants after the last one.
///
/// Written here rather than taken from Foundation: `TimeZone(identifier:)` needs Foundation's ICU
/// build, 34 MB of the binary's 72 for one lookup the tz file answers directly. Memory: 9 bytes per
/// transition (a zone has at most a few hundred), kept once per zone in `Zone.named`'s cache.
struct TZif: Sendable {
    /// Instants (seconds since 1970) where the offset changes, ascending.
    let transitions: [Int64]
    /// The offset (seconds east of UTC) from each transition on.
    let offsets: [Int32]
    /// The offset before the first transition (the file's first local time type).
    let initialOffset: Int32
    /// The rule after the last transition, when the file has one.
    let rule: PosixTZ?

    /// A zone that keeps one offset.
    init(fixed offset: Int32) {
        (transitions, offsets, initialOffset, rule) = ([], [], offset, nil)
    }

    /// Parses `bytes`; nil when they are not a well-formed tz file.
    init?(_ bytes: [UInt8]) {
        var r = Reader(bytes: bytes)
        guard let v1 = r.header() else { return nil }
        if v1.version >= 2 {
            // Skip the 32-bit block; the 64-bit one after the second header holds everything.
            guard r.skip(v1.blockBytes(timeSize: 4)), let v2 = r.header(), v2.version >= 2,
                  let parsed = Self.block(&r, v2, timeSize: 8) else { return nil }
            (transitions, offsets, initialOffset) = parsed
            // The footer: "\n" TZ "\n" (empty when the file has no rule).
            let footer = bytes[r.at...]
            if footer.count >= 2, footer.first == 0x0A, let end = footer.dropFirst().firstIndex(of: 0x0A), end > footer.startIndex + 1 {
                rule = PosixTZ(String(decoding: footer[(footer.startIndex + 1)..<end], as: UTF8.self))
            } else {
                rule = nil
            }
        } else {
            guard let parsed = Self.block(&r, v1, timeSize: 4) else { return nil }
            (transitions, offsets, initialOffset) = parsed
            rule = nil
        }
    }

    /// Seconds east of UTC at `seconds` since 1970.
    func offset(at seconds: Int64) -> Int {
        guard let first = transitions.first, seconds >= first else { return Int(initialOffset) }
        if seconds >= transitions[transitions.count - 1], let rule { return rule.offset(at: seconds) }
        // The last transition at or before `seconds`: O(log transitions).
        var lo = 0, hi = transitions.count - 1
        while lo < hi {
            let mid = (lo + hi + 1) / 2
            if transitions[mid] <= seconds { lo = mid } else { hi = mid - 1 }
        }
        return Int(offsets[lo])
    }

    private struct Header {
        let version: Int
        let isUTCCount, isStdCount, leapCount, timeCount, typeCount, charCount: Int

        func blockBytes(timeSize: Int) -> Int {
            timeCount * timeSize + timeCount + typeCount * 6 + charCount + leapCount * (timeSize + 4) + isStdCount + isUTCCount
        }
    }

    private static func block(_ r: inout Reader, _ h: Header, timeSize: Int) -> ([Int64], [Int32], Int32)? {
        guard h.typeCount >= 1, r.remaining >= h.blockBytes(timeSize: timeSize) else { return nil }
        var times: [Int64] = []
        times.reserveCapacity(h.timeCount)
        for _ in 0..<h.timeCount { times.append(timeSize == 8 ? r.int64() : Int64(r.int32())) }
        var indices: [Int] = []
        for _ in 0..<h.timeCount { indices.append(Int(r.byte())) }
        var types: [Int32] = []
        for _ in 0..<h.typeCount {
            types.append(r.int32())
            _ = r.byte()  // is DST
            _ = r.byte()  // abbreviation index
        }
        guard indices.allSatisfy({ $0 < types.count }), zip(times, times.dropFirst()).allSatisfy({ $0 < $1 }) else { return nil }
        _ = r.skip(h.charCount + h.leapCount * (timeSize + 4) + h.isStdCount + h.isUTCCount)
        return (times, indices.map { types[$0] }, types[0])
    }

    /// Big-endian reads over the file's bytes; callers check `remaining` first.
    private struct Reader {
        let bytes: [UInt8]
        var at = 0

        var remaining: Int { bytes.count - at }

        mutating func byte() -> UInt8 {
            defer { at += 1 }
            return bytes[at]
        }

        mutating func int32() -> Int32 {
            var v: UInt32 = 0
            for _ in 0..<4 { v = v << 8 | UInt32(byte()) }
            return Int32(bitPattern: v)
        }

        mutating func int64() -> Int64 {
            var v: UInt64 = 0
            for _ in 0..<8 { v = v << 8 | UInt64(byte()) }
            return Int64(bitPattern: v)
        }

        mutating func skip(_ n: Int) -> Bool {
            guard n >= 0, n <= remaining else { return false }
            at += n
            return true
        }

        /// "TZif", a version, 15 reserved bytes and six counts.
        mutating func header() -> Header? {
            guard remaining >= 44, Array(bytes[at..<(at + 4)]) == Array("TZif".utf8) else { return nil }
            at += 4
            let v = byte()
            let version = v == 0 ? 1 : Int(v) - 0x30
            at += 15
            let counts = (0..<6).map { _ in Int(UInt32(bitPattern: int32())) }
            guard (1...9).contains(version), counts.allSatisfy({ $0 < 1 << 20 }) else { return nil }
            return Header(version: version, isUTCCount: counts[0], isStdCount: counts[1], leapCount: counts[2],
                          timeCount: counts[3], typeCount: counts[4], charCount: counts[5])
        }
    }
}
