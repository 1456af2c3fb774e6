/// A HealthKit unit string read with HealthKit's own grammar (`HKUnit(from:)`): SI units with an
/// optional prefix, `mol<molar mass>` in any precision, Apple's named non-SI units, and compound units
/// built with `*` or `·`, `/` and integer `^` powers, in parentheses or not. HealthKit reads everything
/// after the first `/` as the denominator (`kcal/hr·kg` is kcal per hour per kilogram), and so does this.
///
/// A unit is a factor and a dimension: two units convert when their dimensions agree. Temperatures
/// alone carry an offset (`degF`); inside a compound unit only their scale counts, as in HealthKit.
/// Parsing walks the string once and allocates nothing but a molar mass's digits.
public struct HealthKitUnit: Sendable, Equatable {
    /// Exponents of the base dimensions (`Dimension`'s cases, by raw value).
    var dimension: SIMD16<Int8>
    /// How much of the base unit one of this unit is (grams, metres, seconds, kelvin, moles, ...).
    var factor: Double
    /// Added after the factor: a lone temperature's zero (degC: 273.15).
    var offset: Double

    init(dimension: SIMD16<Int8>, factor: Double, offset: Double = 0) {
        self.dimension = dimension
        self.factor = factor
        self.offset = offset
    }

    /// The base quantities a unit is built from. Those HealthKit cannot convert into each other (a
    /// volt is no combination of the others here) are dimensions of their own.
    enum Dimension: Int {
        case mass, length, time, temperature, amount, percent, conductance, internationalUnit, soundPressureLevel,
             hearingLevel, effort, angle, illuminance, prismDiopter, voltage
    }

    static func base(_ d: Dimension, _ factor: Double = 1, offset: Double = 0) -> HealthKitUnit {
        var v = SIMD16<Int8>(repeating: 0)
        v[d.rawValue] = 1
        return HealthKitUnit(dimension: v, factor: factor, offset: offset)
    }

    static let one = HealthKitUnit(dimension: .init(repeating: 0), factor: 1)

    static func * (a: HealthKitUnit, b: HealthKitUnit) -> HealthKitUnit {
        HealthKitUnit(dimension: a.dimension &+ b.dimension, factor: a.factor * b.factor)
    }

    func power(_ n: Int8) -> HealthKitUnit {
        var f = 1.0
        for _ in 0..<Int(n.magnitude) { f *= factor }
        return HealthKitUnit(dimension: dimension &* SIMD16(repeating: n), factor: n < 0 ? 1 / f : f)
    }

    /// `value` in this unit as a value in `target`, or nil when the two measure different things.
    public func convert(_ value: Double, to target: HealthKitUnit) -> Double? {
        guard dimension == target.dimension else { return nil }
        return (value * factor + offset - target.offset) / target.factor
    }

    /// The unit `text` names, or nil when it is not a HealthKit unit string. A `mol` without a molar
    /// mass is an amount of substance, which converts to mass only through `molarMass` (a type that
    /// measures one substance, blood glucose, gives its own).
    public init?(_ text: String, molarMass: Double? = nil) {
        var parser = Parser(bytes: Array(text.utf8), molarMass: molarMass)
        guard !parser.bytes.isEmpty, parser.bytes.count <= 100, let unit = parser.expression(depth: 0), parser.atEnd else { return nil }
        self = unit
    }

    /// Grams, metres and seconds; joules, pascals and watts are combinations of them.
    private static let joule = HealthKitUnit(dimension: dims([.mass: 1, .length: 2, .time: -2]), factor: 1000)
    private static let pascal = HealthKitUnit(dimension: dims([.mass: 1, .length: -1, .time: -2]), factor: 1000)
    private static let watt = HealthKitUnit(dimension: dims([.mass: 1, .length: 2, .time: -3]), factor: 1000)
    private static let liter = HealthKitUnit(dimension: dims([.length: 3]), factor: 0.001)

    private static func dims(_ exponents: [Dimension: Int8]) -> SIMD16<Int8> {
        var v = SIMD16<Int8>(repeating: 0)
        for (d, e) in exponents { v[d.rawValue] = e }
        return v
    }

    private static func scaled(_ u: HealthKitUnit, _ f: Double) -> HealthKitUnit { HealthKitUnit(dimension: u.dimension, factor: u.factor * f, offset: u.offset) }

    /// Units that take an SI prefix (`kg`, `mL`, `mcS`, `kcal`).
    static let prefixable: [(String, HealthKitUnit)] = [
        ("g", base(.mass)), ("m", base(.length)), ("L", liter), ("l", liter), ("Pa", pascal), ("s", base(.time)), ("J", joule),
        ("K", base(.temperature)), ("S", base(.conductance)), ("Hz", base(.time).power(-1)), ("V", base(.voltage)), ("W", watt),
        ("cal", scaled(joule, 4.184)), ("IU", base(.internationalUnit)),
    ]

    /// HealthKit's prefixes, longest first where one begins another (`mc` before `m`, `da` before `d`).
    static let prefixes: [(String, Double)] = [
        ("mc", 1e-6), ("da", 10), ("f", 1e-15), ("p", 1e-12), ("n", 1e-9), ("m", 1e-3), ("c", 1e-2), ("d", 1e-1), ("h", 1e2),
        ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12),
    ]

    /// Apple's named units, taken whole (no prefix).
    static let named: [(String, HealthKitUnit)] = [
        ("count", one), ("%", base(.percent)),
        ("oz", base(.mass, 28.349523125)), ("lb", base(.mass, 453.59237)), ("st", base(.mass, 6350.29318)),
        ("in", base(.length, 0.0254)), ("ft", base(.length, 0.3048)), ("yd", base(.length, 0.9144)), ("mi", base(.length, 1609.344)),
        ("min", base(.time, 60)), ("hr", base(.time, 3600)), ("d", base(.time, 86_400)),
        ("mmHg", scaled(pascal, 133.322387415)), ("cmAq", scaled(pascal, 98.0665)), ("inHg", scaled(pascal, 3386.389)),
        ("atm", scaled(pascal, 101_325)),
        ("Cal", scaled(joule, 4184)), ("kcal", scaled(joule, 4184)),
        ("degC", base(.temperature, 1, offset: 273.15)), ("degF", base(.temperature, 5.0 / 9, offset: 273.15 - 32 * 5.0 / 9)),
        ("fl_oz_us", scaled(liter, 0.0295735295625)), ("fl_oz_imp", scaled(liter, 0.0284130625)),
        ("cup_us", scaled(liter, 0.2365882365)), ("cup_imp", scaled(liter, 0.284130625)),
        ("pt_us", scaled(liter, 0.473176473)), ("pt_imp", scaled(liter, 0.56826125)),
        ("dBASPL", base(.soundPressureLevel)), ("dBHL", base(.hearingLevel)), ("appleEffortScore", base(.effort)),
        ("rad", base(.angle)), ("deg", base(.angle, Double.pi / 180)), ("lx", base(.illuminance)),
        ("D", base(.length).power(-1)), ("pD", base(.prismDiopter)),
    ]

    private struct Parser {
        let bytes: [UInt8]
        let molarMass: Double?
        var i = 0

        var atEnd: Bool { i == bytes.count }

        init(bytes: [UInt8], molarMass: Double?) {
            self.bytes = bytes
            self.molarMass = molarMass
        }

        /// factors ("/" factors)?: after the first `/`, every factor divides (`ml/kg/min`, `kcal/hr·kg`).
        mutating func expression(depth: Int) -> HealthKitUnit? {
            guard depth < 4, var unit = factors(depth: depth, denominator: false) else { return nil }
            if peek("/") {
                i += 1
                guard let denominator = factors(depth: depth, denominator: true) else { return nil }
                unit = unit * denominator.power(-1)
            }
            return unit
        }

        /// factor (("*" | "·") factor)*; in a denominator `/` joins factors too.
        mutating func factors(depth: Int, denominator: Bool) -> HealthKitUnit? {
            guard var unit = factor(depth: depth) else { return nil }
            while true {
                if peek("*") || (denominator && peek("/")) {
                    i += 1
                } else if i + 1 < bytes.count, bytes[i] == 0xC2, bytes[i + 1] == 0xB7 {
                    i += 2
                } else {
                    return unit
                }
                guard let next = factor(depth: depth) else { return nil }
                unit = unit * next
            }
        }

        /// atom or "(" expression ")", then an optional "^" integer.
        mutating func factor(depth: Int) -> HealthKitUnit? {
            var unit: HealthKitUnit
            if peek("(") {
                i += 1
                guard let inner = expression(depth: depth + 1), peek(")") else { return nil }
                i += 1
                unit = inner
            } else {
                guard let atom = atom() else { return nil }
                unit = atom
            }
            if peek("^") {
                i += 1
                let negative = peek("-")
                if negative { i += 1 }
                let start = i
                var n = 0
                while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39, n < 100 { n = n * 10 + Int(bytes[i] - 0x30); i += 1 }
                guard i > start, n <= 9 else { return nil }
                unit = unit.power(Int8(negative ? -n : n))
            }
            return unit
        }

        func peek(_ c: Character) -> Bool { i < bytes.count && bytes[i] == c.asciiValue! }

        /// A unit name, with its prefix and molar mass.
        mutating func atom() -> HealthKitUnit? {
            let start = i
            while i < bytes.count, !"*/^()<".utf8.contains(bytes[i]), bytes[i] != 0xC2 { i += 1 }
            let name = bytes[start..<i]
            guard !name.isEmpty else { return nil }
            if peek("<") { return mole(prefix: name) }
            if let (_, u) = HealthKitUnit.named.first(where: { $0.0.utf8.elementsEqual(name) }) { return u }
            if let (_, u) = HealthKitUnit.prefixable.first(where: { $0.0.utf8.elementsEqual(name) }) { return u }
            if name.elementsEqual("mol".utf8) { return mole(scale: 1, molarMass: molarMass) }
            for (p, scale) in HealthKitUnit.prefixes where name.starts(with: p.utf8) {
                let rest = name.dropFirst(p.utf8.count)
                if rest.elementsEqual("mol".utf8) { return mole(scale: scale, molarMass: molarMass) }
                if let (_, u) = HealthKitUnit.prefixable.first(where: { $0.0.utf8.elementsEqual(rest) }) {
                    return HealthKitUnit(dimension: u.dimension, factor: u.factor * scale, offset: u.offset)
                }
            }
            return nil
        }

        /// `mol<180.15588000005408>` with an optional prefix: a mass, by the molar mass given.
        mutating func mole(prefix: ArraySlice<UInt8>) -> HealthKitUnit? {
            var scale = 1.0
            if !prefix.elementsEqual("mol".utf8) {
                guard prefix.count > 3, prefix.suffix(3).elementsEqual("mol".utf8),
                      let p = HealthKitUnit.prefixes.first(where: { $0.0.utf8.elementsEqual(prefix.dropLast(3)) }) else { return nil }
                scale = p.1
            }
            i += 1
            let start = i
            while i < bytes.count, bytes[i] != UInt8(ascii: ">"), i - start < 40 { i += 1 }
            guard peek(">"), let mass = Double(String(decoding: bytes[start..<i], as: UTF8.self)), mass.isFinite, mass > 0 else { return nil }
            i += 1
            return mole(scale: scale, molarMass: mass)
        }

        func mole(scale: Double, molarMass: Double?) -> HealthKitUnit {
            guard let molarMass else { return HealthKitUnit.base(.amount, scale) }
            return HealthKitUnit.base(.mass, scale * molarMass)
        }
    }
}
