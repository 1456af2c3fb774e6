import Storage

/// The simulator's own draws (`SeededRandom`), apart from the kernel's: what the kernel draws never shifts
/// the schedule, so one seed gives one schedule.
struct Dice {
    private let random: SeededRandom

    init(seed: UInt64) { random = SeededRandom(seed: seed ^ 0x5DEE_CE66_D1CE_5EED) }

    func next() -> UInt64 { random.next() }

    /// 0 ..< n.
    mutating func below(_ n: Int) -> Int { n <= 1 ? 0 : Int(next() % UInt64(n)) }

    /// true with probability `p` in a million.
    mutating func chance(perMillion p: Int) -> Bool { below(1_000_000) < p }

    /// One of `choices`, each as likely as its weight.
    mutating func weighted<T>(_ choices: [(T, Int)]) -> T {
        var pick = below(choices.reduce(0) { $0 + $1.1 })
        for (choice, weight) in choices {
            if pick < weight { return choice }
            pick -= weight
        }
        return choices[choices.count - 1].0
    }

    /// A version 4 UUID, upper case as HealthKit writes them.
    mutating func uuid() -> String {
        let (a, b) = (next(), next())
        let hex = { (v: UInt64, n: Int) in String(String(v, radix: 16, uppercase: true).suffix(n)).leftPadded(n) }
        return "\(hex(a >> 32, 8))-\(hex((a >> 16) & 0xFFFF, 4))-4\(hex(a & 0xFFF, 3))-\(hex(0x8000 | (b >> 48) & 0x3FFF, 4))-\(hex(b & 0xFFFF_FFFF_FFFF, 12))"
    }
}

extension String {
    func leftPadded(_ n: Int) -> String { count >= n ? self : String(repeating: "0", count: n - count) + self }
}
