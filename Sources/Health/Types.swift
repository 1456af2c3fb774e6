
/// How a type's samples make a day's figure: HealthKit's `HKQuantityAggregationStyle` for quantity
/// types, and one rule for category types.
public enum Aggregation: String, Sendable, CaseIterable {
    /// Summed, each sample spread evenly over its interval, overlapping sources merged by priority.
    case cumulative
    /// Average (by count), minimum, maximum and count of the samples that start on the day.
    case discreteArithmetic
    /// Like `discreteArithmetic`, but the average is weighted by each sample's duration where every
    /// sample of the day has one (heart rate from a workout: a long reading counts for longer).
    case discreteTemporallyWeighted
    /// Sound levels in dB: the equivalent continuous level, the level of the average sound energy
    /// (10·log10 of the duration-weighted mean of 10^(L/10)), with minimum, maximum and count.
    case discreteEquivalentContinuousLevel
    /// A category type: how many samples start on the day, and their total duration.
    case category

    /// Whether a sample's value is shared among the days its interval covers.
    var spreads: Bool { self == .cumulative }
}

/// A unit a type accepts, and how its values become the type's canonical unit (`value * factor + offset`).
public struct UnitConversion: Sendable {
    public let unit: String
    let factor: Double
    let offset: Double

    init(_ unit: String, _ factor: Double = 1, offset: Double = 0) {
        self.unit = unit
        self.factor = factor
        self.offset = offset
    }
}

/// A HealthKit sample type the kernel keeps: its identifier, how it aggregates, its canonical unit (the
/// first one) and the units it converts from. Rows keep the type's `code`, its index in `table`: the
/// identifier is only on the wire and in the stored form.
///
/// A type not in the table (a newer iOS's) is kept as sent: it carries its identifier and the unit it came
/// in (`UnknownTypeName`), so nothing shared grows with the names clients invent; its code is
/// `unknownCode`.
public struct HealthType: Sendable, Hashable {
    public let code: Int
    /// Set only for a type the table lacks.
    let unknownName: UnknownTypeName?

    init(code: Int) {
        self.code = code
        unknownName = nil
    }

    /// A type the table lacks, named as a sample sent it.
    init(unknown identifier: String, unit: String?) {
        code = Self.unknownCode
        unknownName = UnknownTypeName(identifier: identifier, unit: unit)
    }

    /// Above any table size the kernel will reach.
    static let unknownCode = 1 << 20

    /// Whether the type is in the kernel's table (and so summarised).
    public var isKnown: Bool { unknownName == nil }
    public var identifier: String { unknownName?.identifier ?? Self.table[code].identifier }
    /// Unknown types are not summarised: never asked.
    public var aggregation: Aggregation { isKnown ? Self.table[code].aggregation : .category }
    /// The unit values are kept and summed in ("" for a category type; an unknown type's as sent).
    public var unit: String { unknownName.map { $0.unit ?? "" } ?? Self.table[code].units.first?.unit ?? "" }
    /// The canonical unit first, then other spellings the documentation shows with their factors (any
    /// HealthKit unit of the same dimension converts: `canonical(_:unit:)`).
    public var units: [UnitConversion] { isKnown ? Self.table[code].units : [] }
    /// Values of this type are fractions (0...1); with unit `%` a value above 1 is read as a percentage.
    var isFraction: Bool { isKnown && Self.table[code].fraction }

    struct Entry {
        let identifier: String
        let aggregation: Aggregation
        let units: [UnitConversion]
        var fraction = false
        /// The smallest canonical value (temperatures and depths below zero are real).
        var minimum: Double = 0
        /// Grams per mole of what the type measures, for a `mol` sent without one (`mmol/L`).
        var molarMass: Double?
    }

    static let count = UnitConversion("count")
    static let kcal = [UnitConversion("kcal"), UnitConversion("Cal"), UnitConversion("kJ", 1 / 4.184), UnitConversion("J", 1 / 4184)]
    static let meters = [UnitConversion("m"), UnitConversion("km", 1000), UnitConversion("cm", 0.01), UnitConversion("mi", 1609.344),
                         UnitConversion("yd", 0.9144), UnitConversion("ft", 0.3048)]
    static let bodyLength = [UnitConversion("cm"), UnitConversion("m", 100), UnitConversion("mm", 0.1), UnitConversion("in", 2.54),
                             UnitConversion("ft", 30.48)]
    static let minutes = [UnitConversion("min"), UnitConversion("s", 1.0 / 60), UnitConversion("hr", 60)]
    static let milliseconds = [UnitConversion("ms"), UnitConversion("s", 1000)]
    static let perMinute = [UnitConversion("count/min"), UnitConversion("count/s", 60)]
    static let bodyMass = [UnitConversion("kg"), UnitConversion("g", 0.001), UnitConversion("lb", 0.45359237), UnitConversion("st", 6.35029318)]
    static let percent = [UnitConversion("%")]
    static let celsius = [UnitConversion("degC"), UnitConversion("degF", 5.0 / 9, offset: -32 * 5.0 / 9), UnitConversion("K", 1, offset: -273.15)]
    static let speed = [UnitConversion("m/s"), UnitConversion("km/hr", 1 / 3.6), UnitConversion("mi/hr", 0.44704), UnitConversion("m/min", 1.0 / 60)]
    static let watts = [UnitConversion("W"), UnitConversion("kW", 1000)]
    static let grams = [UnitConversion("g"), UnitConversion("mg", 0.001), UnitConversion("mcg", 0.000_001), UnitConversion("kg", 1000),
                        UnitConversion("oz", 28.349523125)]
    static let milliliters = [UnitConversion("mL"), UnitConversion("L", 1000), UnitConversion("fl_oz_us", 29.5735295625),
                              UnitConversion("cup_us", 236.5882365)]
    static let liters = [UnitConversion("L"), UnitConversion("mL", 0.001)]
    static let mmHg = [UnitConversion("mmHg"), UnitConversion("kPa", 7.500_615_758)]
    static let decibels = [UnitConversion("dBASPL")]
    static let effort = [UnitConversion("appleEffortScore")]

    static func q(_ name: String, _ aggregation: Aggregation, _ units: [UnitConversion], fraction: Bool = false, minimum: Double = 0) -> Entry {
        Entry(identifier: "HKQuantityTypeIdentifier" + name, aggregation: aggregation, units: units, fraction: fraction, minimum: minimum)
    }

    static func c(_ name: String) -> Entry { Entry(identifier: "HKCategoryTypeIdentifier" + name, aggregation: .category, units: []) }

    /// Append only: a stored sample's order key holds its type's code (`HealthRules.typePrefix`).
    static let table: [Entry] = [
        q("StepCount", .cumulative, [count]),
        q("ActiveEnergyBurned", .cumulative, kcal),
        q("BasalEnergyBurned", .cumulative, kcal),
        q("DistanceWalkingRunning", .cumulative, meters),
        q("DistanceCycling", .cumulative, meters),
        q("DistanceSwimming", .cumulative, meters),
        q("FlightsClimbed", .cumulative, [count]),
        q("AppleExerciseTime", .cumulative, minutes),
        q("AppleStandTime", .cumulative, minutes),
        // Summed as a quantity (1 = stood that hour), as it was before category types had their own rule.
        Entry(identifier: "HKCategoryTypeIdentifierAppleStandHour", aggregation: .cumulative, units: [count]),
        q("HeartRate", .discreteTemporallyWeighted, perMinute),
        q("RestingHeartRate", .discreteArithmetic, perMinute),
        q("WalkingHeartRateAverage", .discreteArithmetic, perMinute),
        q("HeartRateVariabilitySDNN", .discreteArithmetic, milliseconds),
        q("RespiratoryRate", .discreteArithmetic, perMinute),
        q("OxygenSaturation", .discreteArithmetic, percent, fraction: true),
        q("BodyMass", .discreteArithmetic, bodyMass),
        q("VO2Max", .discreteArithmetic, [UnitConversion("ml/(kg*min)"), UnitConversion("ml/kg*min"), UnitConversion("ml/kg/min")]),
        // Body measurements
        q("BodyMassIndex", .discreteArithmetic, [count]),
        q("BodyFatPercentage", .discreteArithmetic, percent, fraction: true),
        q("Height", .discreteArithmetic, bodyLength),
        q("LeanBodyMass", .discreteArithmetic, bodyMass),
        q("WaistCircumference", .discreteArithmetic, bodyLength),
        q("AppleSleepingWristTemperature", .discreteArithmetic, celsius, minimum: -100),
        q("AppleSleepingBreathingDisturbances", .discreteArithmetic, [count]),
        // Fitness
        q("DistanceWheelchair", .cumulative, meters),
        q("PushCount", .cumulative, [count]),
        q("SwimmingStrokeCount", .cumulative, [count]),
        q("NikeFuel", .cumulative, [count]),
        q("DistanceDownhillSnowSports", .cumulative, meters),
        q("AppleMoveTime", .cumulative, minutes),
        q("WalkingSpeed", .discreteArithmetic, speed),
        q("WalkingDoubleSupportPercentage", .discreteArithmetic, percent, fraction: true),
        q("WalkingAsymmetryPercentage", .discreteArithmetic, percent, fraction: true),
        q("WalkingStepLength", .discreteArithmetic, bodyLength),
        q("SixMinuteWalkTestDistance", .discreteArithmetic, meters),
        q("StairAscentSpeed", .discreteArithmetic, speed),
        q("StairDescentSpeed", .discreteArithmetic, speed),
        q("AppleWalkingSteadiness", .discreteArithmetic, percent, fraction: true),
        q("RunningStrideLength", .discreteArithmetic, meters),
        q("RunningVerticalOscillation", .discreteArithmetic, bodyLength),
        q("RunningGroundContactTime", .discreteArithmetic, milliseconds),
        q("RunningPower", .discreteArithmetic, watts),
        q("RunningSpeed", .discreteArithmetic, speed),
        q("CyclingSpeed", .discreteArithmetic, speed),
        q("CyclingPower", .discreteArithmetic, watts),
        q("CyclingFunctionalThresholdPower", .discreteArithmetic, watts),
        q("CyclingCadence", .discreteArithmetic, perMinute),
        q("PhysicalEffort", .discreteArithmetic, [UnitConversion("kcal/(kg*hr)"), UnitConversion("kcal/hr·kg")]),
        q("TimeInDaylight", .cumulative, minutes),
        q("DistanceRowing", .cumulative, meters),
        q("DistancePaddleSports", .cumulative, meters),
        q("DistanceCrossCountrySkiing", .cumulative, meters),
        q("DistanceSkatingSports", .cumulative, meters),
        q("RowingSpeed", .discreteArithmetic, speed),
        q("PaddleSportsSpeed", .discreteArithmetic, speed),
        q("CrossCountrySkiingSpeed", .discreteArithmetic, speed),
        q("WorkoutEffortScore", .discreteArithmetic, effort),
        q("EstimatedWorkoutEffortScore", .discreteArithmetic, effort),
        q("UnderwaterDepth", .discreteArithmetic, meters),
        q("WaterTemperature", .discreteArithmetic, celsius, minimum: -100),
        // Vitals
        q("BodyTemperature", .discreteArithmetic, celsius, minimum: -100),
        q("BasalBodyTemperature", .discreteArithmetic, celsius, minimum: -100),
        q("BloodPressureSystolic", .discreteArithmetic, mmHg),
        q("BloodPressureDiastolic", .discreteArithmetic, mmHg),
        q("HeartRateRecoveryOneMinute", .discreteArithmetic, perMinute),
        q("AtrialFibrillationBurden", .discreteArithmetic, percent, fraction: true),
        q("HeartRateVariabilityRMSSD", .discreteArithmetic, milliseconds),
        // Lab and test results
        q("PeripheralPerfusionIndex", .discreteArithmetic, percent, fraction: true),
        Entry(identifier: "HKQuantityTypeIdentifierBloodGlucose", aggregation: .discreteArithmetic,
              units: [UnitConversion("mg/dL"), UnitConversion("mmol<180.1558800000541>/L", 18.01558800000541),
                      UnitConversion("mmol<180.15588000005408>/L", 18.015588000005408), UnitConversion("mmol/L", 18.015588000005408)],
              molarMass: 180.15588000005408),
        q("NumberOfTimesFallen", .cumulative, [count]),
        q("ElectrodermalActivity", .discreteArithmetic, [UnitConversion("mcS"), UnitConversion("S", 1_000_000)]),
        q("InhalerUsage", .cumulative, [count]),
        q("InsulinDelivery", .cumulative, [UnitConversion("IU")]),
        q("BloodAlcoholContent", .discreteArithmetic, percent, fraction: true),
        q("ForcedVitalCapacity", .discreteArithmetic, liters),
        q("ForcedExpiratoryVolume1", .discreteArithmetic, liters),
        q("PeakExpiratoryFlowRate", .discreteArithmetic, [UnitConversion("L/min"), UnitConversion("L/s", 60)]),
        q("NumberOfAlcoholicBeverages", .cumulative, [count]),
        q("UVExposure", .discreteArithmetic, [count]),
        // Hearing
        q("EnvironmentalAudioExposure", .discreteEquivalentContinuousLevel, decibels),
        q("HeadphoneAudioExposure", .discreteEquivalentContinuousLevel, decibels),
        q("EnvironmentalSoundReduction", .discreteEquivalentContinuousLevel, decibels),
        // Nutrition
        q("DietaryEnergyConsumed", .cumulative, kcal),
        q("DietaryWater", .cumulative, milliliters),
    ] + [
        "FatTotal", "FatPolyunsaturated", "FatMonounsaturated", "FatSaturated", "Cholesterol", "Sodium", "Carbohydrates", "Fiber",
        "Sugar", "Protein", "VitaminA", "VitaminB6", "VitaminB12", "VitaminC", "VitaminD", "VitaminE", "VitaminK", "Calcium", "Iron",
        "Thiamin", "Riboflavin", "Niacin", "Folate", "Biotin", "PantothenicAcid", "Phosphorus", "Iodine", "Magnesium", "Zinc",
        "Selenium", "Copper", "Manganese", "Chromium", "Molybdenum", "Chloride", "Potassium", "Caffeine",
    ].map { q("Dietary" + $0, .cumulative, grams) } + [
        "SleepAnalysis", "MindfulSession", "CervicalMucusQuality", "OvulationTestResult", "PregnancyTestResult",
        "ProgesteroneTestResult", "MenstrualFlow", "IntermenstrualBleeding", "InfrequentMenstrualCycles", "IrregularMenstrualCycles",
        "PersistentIntermenstrualBleeding", "ProlongedMenstrualPeriods", "SexualActivity", "Contraceptive", "Pregnancy", "Lactation",
        "BleedingAfterPregnancy", "BleedingDuringPregnancy", "MenopausalState", "HighHeartRateEvent", "LowHeartRateEvent",
        "IrregularHeartRhythmEvent", "LowCardioFitnessEvent", "HypertensionEvent", "AudioExposureEvent",
        "EnvironmentalAudioExposureEvent", "HeadphoneAudioExposureEvent", "ToothbrushingEvent", "HandwashingEvent",
        "AppleWalkingSteadinessEvent", "SleepApneaEvent", "AbdominalCramps", "Acne", "AppetiteChanges", "BladderIncontinence",
        "Bloating", "BreastPain", "ChestTightnessOrPain", "Chills", "Constipation", "Coughing", "Diarrhea", "Dizziness", "DrySkin",
        "Fainting", "Fatigue", "Fever", "GeneralizedBodyAche", "HairLoss", "Headache", "Heartburn", "HotFlashes", "LossOfSmell",
        "LossOfTaste", "LowerBackPain", "MemoryLapse", "MoodChanges", "Nausea", "NightSweats", "PelvicPain",
        "RapidPoundingOrFlutteringHeartbeat", "RunnyNose", "ShortnessOfBreath", "SinusCongestion", "SkippedHeartbeat",
        "SleepChanges", "SoreThroat", "VaginalDryness", "Vomiting", "Wheezing",
    ].map(c)

    /// Category types' values by their `HKCategoryValue...` case names, as raw values. A category type
    /// not listed takes raw values only (`HKCategoryValue.notApplicable`, 0, for most events).
    static let enumerations: [String: [(name: String, raw: Int)]] = {
        let severity = [("unspecified", 0), ("notPresent", 1), ("mild", 2), ("moderate", 3), ("severe", 4)]
        let presence = [("present", 0), ("notPresent", 1)]
        let testResult = [("negative", 1), ("positive", 2), ("indeterminate", 3)]
        var out: [String: [(name: String, raw: Int)]] = [
            "SleepAnalysis": [("inBed", 0), ("asleepUnspecified", 1), ("awake", 2), ("asleepCore", 3), ("asleepDeep", 4), ("asleepREM", 5)],
            "MenstrualFlow": [("unspecified", 1), ("light", 2), ("medium", 3), ("heavy", 4), ("none", 5)],
            "CervicalMucusQuality": [("dry", 1), ("sticky", 2), ("creamy", 3), ("watery", 4), ("eggWhite", 5)],
            "OvulationTestResult": [("negative", 1), ("luteinizingHormoneSurge", 2), ("indeterminate", 3), ("estrogenSurge", 4)],
            "PregnancyTestResult": testResult, "ProgesteroneTestResult": testResult,
            "Contraceptive": [("unspecified", 1), ("implant", 2), ("injection", 3), ("intrauterineDevice", 4), ("intravaginalRing", 5),
                              ("oral", 6), ("patch", 7)],
            "AppetiteChanges": [("unspecified", 0), ("noChange", 1), ("decreased", 2), ("increased", 3)],
            "MoodChanges": presence, "SleepChanges": presence,
            "EnvironmentalAudioExposureEvent": [("momentaryLimit", 1)],
            "HeadphoneAudioExposureEvent": [("sevenDayLimit", 1)],
            "LowCardioFitnessEvent": [("lowFitness", 1)],
            "AppleWalkingSteadinessEvent": [("initialLow", 1), ("initialVeryLow", 2), ("repeatLow", 3), ("repeatVeryLow", 4)],
        ]
        for symptom in ["AbdominalCramps", "Acne", "BladderIncontinence", "Bloating", "BreastPain", "ChestTightnessOrPain", "Chills",
                        "Constipation", "Coughing", "Diarrhea", "Dizziness", "DrySkin", "Fainting", "Fatigue", "Fever", "GeneralizedBodyAche",
                        "HairLoss", "Headache", "Heartburn", "HotFlashes", "LossOfSmell", "LossOfTaste", "LowerBackPain", "MemoryLapse",
                        "Nausea", "NightSweats", "PelvicPain", "RapidPoundingOrFlutteringHeartbeat", "RunnyNose", "ShortnessOfBreath",
                        "SinusCongestion", "SkippedHeartbeat", "SoreThroat", "VaginalDryness", "Vomiting", "Wheezing"] {
            out[symptom] = severity
        }
        return Dictionary(uniqueKeysWithValues: out.map { ("HKCategoryTypeIdentifier" + $0.key, $0.value) })
    }()

    /// The type's enumeration (`HKCategoryValue...` case names and raw values), for category types that
    /// have one.
    public var enumeration: [(name: String, raw: Int)]? { isKnown ? Self.enumerations[identifier] : nil }

    /// The case name of raw value `value`, when the type has an enumeration naming it.
    public func caseName(_ value: Double) -> String? { enumeration?.first { Double($0.raw) == value }?.name }

    /// Every type, in table order.
    public static let all: [HealthType] = table.indices.map { HealthType(code: $0) }

    private static let byIdentifier: [String: HealthType] = Dictionary(uniqueKeysWithValues: all.map { ($0.identifier, $0) })

    /// The type with HealthKit identifier `identifier`, if the kernel keeps it.
    public static func named(_ identifier: String) -> HealthType? { byIdentifier[identifier] }

    /// `value` in `unit` as this type's canonical value, or nil when `unit` is no HealthKit unit string of
    /// the type's dimension (`HealthKitUnit`). Fractions take `%` only: up to 1 a fraction (HealthKit's own
    /// form), above it a percentage. A category type's value is its enumeration case's raw value, with no
    /// unit. The canonical spelling itself is converted without parsing (a month of heart rate is 44,640).
    public func canonical(_ value: Double, unit: String?) -> Double? {
        guard let unit else { return aggregation == .category ? value : nil }
        guard isKnown, let target = Self.canonicalUnits[code] else { return nil }
        if isFraction { return unit == "%" ? (value > 1 ? value / 100 : value) : nil }
        if unit == self.unit { return value }
        return HealthKitUnit(unit, molarMass: Self.table[code].molarMass)?.convert(value, to: target)
    }

    /// Each type's canonical unit, parsed once (nil for category types).
    private static let canonicalUnits: [HealthKitUnit?] = table.map { entry in
        entry.units.first.map { HealthKitUnit($0.unit, molarMass: entry.molarMass)! }
    }

    /// The smallest and largest canonical value a sample may have: up to 1 for fractions, else a
    /// billion (far beyond any real measurement, so that a client's overflow or unit mix-up is refused
    /// rather than summed). An unknown type's value may be negative (who knows what it measures).
    var minimum: Double { isKnown ? Self.table[code].minimum : -1e9 }
    var maximum: Double { isFraction ? 1 : 1e9 }
}

/// The name of a type the kernel's table lacks, as a sample sent it: its identifier and unit. Each row of
/// such a type holds its own (a few dozen bytes); nothing is shared between users or requests.
final class UnknownTypeName: Sendable, Hashable {
    let identifier: String
    let unit: String?

    init(identifier: String, unit: String?) {
        self.identifier = identifier
        self.unit = unit
    }

    static func == (a: UnknownTypeName, b: UnknownTypeName) -> Bool { a.identifier == b.identifier && a.unit == b.unit }
    func hash(into h: inout Hasher) {
        h.combine(identifier)
        h.combine(unit)
    }
}

/// Rules for samples of types the kernel's table lacks.
public enum UnknownTypes {
    /// Distinct unknown type and unit pairs one `health.ingest` may bring: a new iOS adds a handful.
    public static let perRequest = 64
    /// Distinct unknown type and unit pairs one user may keep (counted in their profile).
    public static let perUser = 256

    /// Whether `identifier` has the form of a HealthKit quantity or category type identifier (a newer
    /// one than the table's): `HKQuantityTypeIdentifier` or `HKCategoryTypeIdentifier` and a name of
    /// letters and digits, 100 bytes at most.
    public static func isHealthKitName(_ identifier: String) -> Bool {
        let bytes = Array(identifier.utf8)
        guard bytes.count <= 100 else { return false }
        for prefix in ["HKQuantityTypeIdentifier", "HKCategoryTypeIdentifier"] where identifier.hasPrefix(prefix) {
            let rest = bytes.dropFirst(prefix.utf8.count)
            return !rest.isEmpty && rest.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) }
        }
        return false
    }
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
