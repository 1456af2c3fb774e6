/// How a type's samples make a day's figure.
public enum Aggregation: Sendable {
    /// Summed, each sample spread evenly over its interval, overlapping sources merged by priority.
    case cumulative
    /// Average, minimum, maximum and count of the samples that start on the day.
    case discrete
}

/// A unit a type accepts, and how its values become the type's canonical unit.
public struct UnitConversion: Sendable {
    public let unit: String
    let factor: Double

    init(_ unit: String, _ factor: Double = 1) {
        self.unit = unit
        self.factor = factor
    }
}

/// A HealthKit sample type the kernel keeps: its identifier, how it aggregates, its canonical unit (the
/// first one) and the units it converts from. Rows keep the type's `code`, its index in `all`: the
/// identifier is only on the wire and in the stored form.
public struct HealthType: Sendable, Hashable {
    public let code: Int

    public var identifier: String { Self.table[code].identifier }
    public var aggregation: Aggregation { Self.table[code].aggregation }
    /// The unit values are kept and summed in.
    public var unit: String { Self.table[code].units[0].unit }
    public var units: [UnitConversion] { Self.table[code].units }
    /// Values of this type are fractions (0...1); with unit `%` a value above 1 is read as a percentage.
    var isFraction: Bool { Self.table[code].fraction }

    struct Entry {
        let identifier: String
        let aggregation: Aggregation
        let units: [UnitConversion]
        var fraction = false
    }

    static let count = UnitConversion("count")
    static let kcal = [UnitConversion("kcal"), UnitConversion("Cal"), UnitConversion("kJ", 1 / 4.184), UnitConversion("J", 1 / 4184)]
    static let meters = [UnitConversion("m"), UnitConversion("km", 1000), UnitConversion("cm", 0.01), UnitConversion("mi", 1609.344),
                         UnitConversion("yd", 0.9144), UnitConversion("ft", 0.3048)]
    static let minutes = [UnitConversion("min"), UnitConversion("s", 1.0 / 60), UnitConversion("hr", 60)]
    static let perMinute = [UnitConversion("count/min"), UnitConversion("count/s", 60)]

    static let table: [Entry] = [
        Entry(identifier: "HKQuantityTypeIdentifierStepCount", aggregation: .cumulative, units: [count]),
        Entry(identifier: "HKQuantityTypeIdentifierActiveEnergyBurned", aggregation: .cumulative, units: kcal),
        Entry(identifier: "HKQuantityTypeIdentifierBasalEnergyBurned", aggregation: .cumulative, units: kcal),
        Entry(identifier: "HKQuantityTypeIdentifierDistanceWalkingRunning", aggregation: .cumulative, units: meters),
        Entry(identifier: "HKQuantityTypeIdentifierDistanceCycling", aggregation: .cumulative, units: meters),
        Entry(identifier: "HKQuantityTypeIdentifierDistanceSwimming", aggregation: .cumulative, units: meters),
        Entry(identifier: "HKQuantityTypeIdentifierFlightsClimbed", aggregation: .cumulative, units: [count]),
        Entry(identifier: "HKQuantityTypeIdentifierAppleExerciseTime", aggregation: .cumulative, units: minutes),
        Entry(identifier: "HKQuantityTypeIdentifierAppleStandTime", aggregation: .cumulative, units: minutes),
        Entry(identifier: "HKCategoryTypeIdentifierAppleStandHour", aggregation: .cumulative, units: [count]),
        Entry(identifier: "HKQuantityTypeIdentifierHeartRate", aggregation: .discrete, units: perMinute),
        Entry(identifier: "HKQuantityTypeIdentifierRestingHeartRate", aggregation: .discrete, units: perMinute),
        Entry(identifier: "HKQuantityTypeIdentifierWalkingHeartRateAverage", aggregation: .discrete, units: perMinute),
        Entry(identifier: "HKQuantityTypeIdentifierHeartRateVariabilitySDNN", aggregation: .discrete, units: [UnitConversion("ms"), UnitConversion("s", 1000)]),
        Entry(identifier: "HKQuantityTypeIdentifierRespiratoryRate", aggregation: .discrete, units: perMinute),
        Entry(identifier: "HKQuantityTypeIdentifierOxygenSaturation", aggregation: .discrete, units: [UnitConversion("%")], fraction: true),
        Entry(identifier: "HKQuantityTypeIdentifierBodyMass", aggregation: .discrete,
              units: [UnitConversion("kg"), UnitConversion("g", 0.001), UnitConversion("lb", 0.45359237), UnitConversion("st", 6.35029318)]),
        Entry(identifier: "HKQuantityTypeIdentifierVO2Max", aggregation: .discrete,
              units: [UnitConversion("ml/(kg*min)"), UnitConversion("ml/kg*min"), UnitConversion("ml/kg/min")]),
    ]

    /// Every type, in table order.
    public static let all: [HealthType] = table.indices.map { HealthType(code: $0) }

    private static let byIdentifier: [String: HealthType] = Dictionary(uniqueKeysWithValues: all.map { ($0.identifier, $0) })

    /// The type with HealthKit identifier `identifier`, if the kernel keeps it.
    public static func named(_ identifier: String) -> HealthType? { byIdentifier[identifier] }

    /// `value` in `unit` as this type's canonical value, or nil when the type does not take that unit.
    /// Fractions given in `%` are fractions up to 1 (HealthKit's own form) and percentages above.
    public func canonical(_ value: Double, unit: String) -> Double? {
        guard let conversion = units.first(where: { $0.unit == unit }) else { return nil }
        if isFraction, value > 1 { return value / 100 }
        return value * conversion.factor
    }

    /// The largest canonical value a sample may have: 1 for fractions, else a billion (far beyond any
    /// real measurement, so that a client's overflow or unit mix-up is refused rather than summed).
    var maximum: Double { isFraction ? 1 : 1e9 }
}

/// A stage of sleep, as HealthKit's `HKCategoryValueSleepAnalysis` names it.
public enum SleepStage: String, Sendable, CaseIterable {
    case inBed, asleepUnspecified, asleepCore, asleepDeep, asleepREM, awake

    /// Which stage counts where one source reports several at once: the more specific asleep stage
    /// first, awake last. (In-bed time is reckoned apart.)
    var precedence: Int {
        switch self {
        case .asleepDeep: return 0
        case .asleepREM: return 1
        case .asleepCore: return 2
        case .asleepUnspecified: return 3
        case .awake: return 4
        case .inBed: return 5
        }
    }

    var isAsleep: Bool { self == .asleepUnspecified || self == .asleepCore || self == .asleepDeep || self == .asleepREM }
}

/// HealthKit's workout activity types (`HKWorkoutActivityType`), by the names its cases have in Swift.
public enum ActivityTypes {
    public static let names: Set<String> = [
        "americanFootball", "archery", "australianFootball", "badminton", "baseball", "basketball", "bowling", "boxing",
        "climbing", "cricket", "crossTraining", "curling", "cycling", "dance", "danceInspiredTraining", "elliptical",
        "equestrianSports", "fencing", "fishing", "functionalStrengthTraining", "golf", "gymnastics", "handball", "hiking",
        "hockey", "hunting", "lacrosse", "martialArts", "mindAndBody", "mixedMetabolicCardioTraining", "paddleSports",
        "play", "preparationAndRecovery", "racquetball", "rowing", "rugby", "running", "sailing", "skatingSports",
        "snowSports", "soccer", "softball", "squash", "stairClimbing", "surfingSports", "swimming", "tableTennis",
        "tennis", "trackAndField", "traditionalStrengthTraining", "volleyball", "walking", "waterFitness", "waterPolo",
        "waterSports", "wrestling", "yoga", "barre", "coreTraining", "crossCountrySkiing", "downhillSkiing", "flexibility",
        "highIntensityIntervalTraining", "jumpRope", "kickboxing", "pilates", "snowboarding", "stairs", "stepTraining",
        "wheelchairWalkPace", "wheelchairRunPace", "taiChi", "mixedCardio", "handCycling", "discSports", "fitnessGaming",
        "cardioDance", "socialDance", "pickleball", "cooldown", "swimBikeRun", "transition", "underwaterDiving", "other",
    ]
}
