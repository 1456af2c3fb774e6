import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

/// HealthKit samples that are a set of named members rather than one number: State of Mind (iOS 18)
/// and medication dose events (iOS 26). They are kept as sent (validated, members in a fixed order),
/// synced through the feed and exported like any item, but not summarised into days.
public enum RecordKind: String, CaseIterable, Sendable, Hashable {
    case stateOfMind
    case medicationDose

    /// The `health.ingest` param and `accepted` member that carry them.
    public var param: String { self == .stateOfMind ? "stateOfMind" : "medicationDoses" }
    /// Their table (`health.stateOfMind`) and feed entity (`health.stateOfMind`, `health.medicationDose`).
    @usableFromInline var table: String { "health." + param }
    @usableFromInline var entity: String { "health." + rawValue }
}

/// Case names of the enumerations these samples carry, as HealthKit spells them in Swift.
enum RecordNames {
    static let stateOfMindKinds = ["momentaryEmotion", "dailyMood"]
    static let valenceClassifications = ["veryUnpleasant", "unpleasant", "slightlyUnpleasant", "neutral", "slightlyPleasant", "pleasant", "veryPleasant"]
    static let labels = ["amazed", "amused", "angry", "annoyed", "anxious", "ashamed", "brave", "calm", "confident", "content",
                         "disappointed", "discouraged", "disgusted", "drained", "embarrassed", "excited", "frustrated", "grateful",
                         "guilty", "happy", "hopeful", "hopeless", "indifferent", "irritated", "jealous", "joyful", "lonely",
                         "overwhelmed", "passionate", "peaceful", "proud", "relieved", "sad", "satisfied", "scared", "stressed",
                         "surprised", "worried"]
    static let associations = ["community", "currentEvents", "dating", "education", "family", "fitness", "friends", "health",
                               "hobbies", "identity", "money", "partner", "selfCare", "spirituality", "tasks", "travel", "weather", "work"]
    static let logStatuses = ["notInteracted", "notificationNotSent", "snoozed", "taken", "skipped", "notLogged"]
    static let scheduleTypes = ["asNeeded", "schedule"]
}

/// A State of Mind sample or a medication dose event as sent: the common item members, and the rest
/// checked and put in a fixed order, so that a re-send compares equal to what is stored.
public struct RecordInput: Sendable, Equatable {
    public var item: ItemInput
    public var kind: RecordKind
    public var content: JSONObject
}

/// `stateOfMind[]` of `health.ingest`: an `HKStateOfMind`.
public struct StateOfMindInput: ParamType, Sendable, Equatable {
    public var record: RecordInput

    public static func decode(_ json: JSON, at path: String) throws(FieldError) -> StateOfMindInput {
        var r = ObjectReader(try JSONObject.decode(json, at: path), path: path)
        let item = try ItemInput(&r)
        var c = JSONObject()
        c["kind"] = .string(try name(&r, "kind", RecordNames.stateOfMindKinds))
        let valence: Double = try r.required("valence")
        guard valence.isFinite, (-1...1).contains(valence) else { throw .outOfRange(r.path("valence"), "must be from -1 to 1") }
        c["valence"] = .double(valence)
        if r.has("valenceClassification") { c["valenceClassification"] = .string(try name(&r, "valenceClassification", RecordNames.valenceClassifications)) }
        c["labels"] = .array(try names(&r, "labels", RecordNames.labels).map(JSON.string))
        c["associations"] = .array(try names(&r, "associations", RecordNames.associations).map(JSON.string))
        try r.finish()
        return StateOfMindInput(record: RecordInput(item: item, kind: .stateOfMind, content: c))
    }

    public static var schema: JSON {
        ItemInput.schema(["uuid", "start", "end", "kind", "valence"], [
            ("kind", enumSchema(RecordNames.stateOfMindKinds)),
            ("valence", ["type": "number", "minimum": -1, "maximum": 1]),
            ("valenceClassification", enumSchema(RecordNames.valenceClassifications)),
            ("labels", ["type": "array", "description": "each at most once", "items": enumSchema(RecordNames.labels)]),
            ("associations", ["type": "array", "description": "each at most once", "items": enumSchema(RecordNames.associations)]),
        ])
    }
}

/// `medicationDoses[]` of `health.ingest`: an `HKMedicationDoseEvent`, with the display text and
/// codings (RxNorm and others) of the medication concept it names.
public struct MedicationDoseInput: ParamType, Sendable, Equatable {
    public var record: RecordInput

    public static func decode(_ json: JSON, at path: String) throws(FieldError) -> MedicationDoseInput {
        var r = ObjectReader(try JSONObject.decode(json, at: path), path: path)
        let item = try ItemInput(&r)
        var c = JSONObject()
        c["logStatus"] = .string(try name(&r, "logStatus", RecordNames.logStatuses))
        if r.has("scheduleType") { c["scheduleType"] = .string(try name(&r, "scheduleType", RecordNames.scheduleTypes)) }
        for key in ["doseQuantity", "scheduledDoseQuantity"] {
            guard let q: Double = try r.optional(key) else { continue }
            guard q.isFinite, q >= 0, q <= 1e6 else { throw .outOfRange(r.path(key), "must be from 0 to 1e6") }
            c[key] = .double(q)
        }
        if let unit = try text(&r, "unit", max: 50) { c["unit"] = .string(unit) }
        if let scheduled: Timestamp = try r.optional("scheduledDate") {
            try DateFloor.check(scheduled, notBefore: DateFloor.health, at: r.path("scheduledDate"))
            c["scheduledDate"] = .timestamp(scheduled.milliseconds)
        }
        var m = try r.object("medication")
        var medication = JSONObject()
        if let id = try text(&m, "conceptId", max: 200) { medication["conceptId"] = .string(id) }
        guard let display = try text(&m, "displayText", max: 200) else {
            throw FieldError(field: m.path("displayText"), reason: "missing_field", message: "\(m.path("displayText")) is required")
        }
        medication["displayText"] = .string(display)
        if let form = try text(&m, "generalForm", max: 50) { medication["generalForm"] = .string(form) }
        let codings: [JSON] = try m.optional("codings") ?? []
        guard codings.count <= 20 else { throw .outOfRange(m.path("codings"), "must hold at most 20 codings") }
        var kept: [JSON] = []
        for (i, coding) in codings.enumerated() {
            var k = ObjectReader(try JSONObject.decode(coding, at: m.path("codings") + "[\(i)]"), path: m.path("codings") + "[\(i)]")
            var o = JSONObject()
            o["system"] = .string(try requiredText(&k, "system", max: 200))
            if let version = try text(&k, "version", max: 50) { o["version"] = .string(version) }
            o["code"] = .string(try requiredText(&k, "code", max: 100))
            try k.finish()
            kept.append(.object(o))
        }
        medication["codings"] = .array(kept)
        try m.finish()
        c["medication"] = .object(medication)
        try r.finish()
        return MedicationDoseInput(record: RecordInput(item: item, kind: .medicationDose, content: c))
    }

    public static var schema: JSON {
        let coding: JSON = ["type": "object", "additionalProperties": false, "required": ["system", "code"],
                            "properties": ["system": ["type": "string", "maxLength": 200, "description": "RxNorm is http://www.nlm.nih.gov/research/umls/rxnorm"],
                                           "version": ["type": "string", "maxLength": 50], "code": ["type": "string", "maxLength": 100]]]
        return ItemInput.schema(["uuid", "start", "end", "logStatus", "medication"], [
            ("logStatus", enumSchema(RecordNames.logStatuses)),
            ("scheduleType", enumSchema(RecordNames.scheduleTypes)),
            ("doseQuantity", ["type": "number", "minimum": 0, "maximum": 1_000_000]),
            ("scheduledDoseQuantity", ["type": "number", "minimum": 0, "maximum": 1_000_000]),
            ("unit", ["type": "string", "minLength": 1, "maxLength": 50, "description": "the dose's HKUnit, as its unitString"]),
            ("scheduledDate", Timestamp.schema),
            ("medication", ["type": "object", "additionalProperties": false, "required": ["displayText"],
                            "description": "the HKMedicationConcept the event names",
                            "properties": ["conceptId": ["type": "string", "maxLength": 200, "description": "its HKHealthConceptIdentifier"],
                                           "displayText": ["type": "string", "minLength": 1, "maxLength": 200],
                                           "generalForm": ["type": "string", "maxLength": 50],
                                           "codings": ["type": "array", "maxItems": 20, "items": coding]]]),
        ])
    }
}

private func enumSchema(_ names: [String]) -> JSON { ["enum": .array(names.map(JSON.string))] }

/// One case name of `cases`.
private func name(_ r: inout ObjectReader, _ key: String, _ cases: [String]) throws(FieldError) -> String {
    let sent: String = try r.required(key)
    guard cases.contains(sent) else { throw .outOfRange(r.path(key), "must be one of \(cases.joined(separator: ", "))") }
    return sent
}

/// Case names of `cases`, each at most once, in the order sent; none when absent.
private func names(_ r: inout ObjectReader, _ key: String, _ cases: [String]) throws(FieldError) -> [String] {
    let sent: [String] = try r.optional(key) ?? []
    var seen = Set<String>()
    for (i, s) in sent.enumerated() {
        guard cases.contains(s) else { throw .outOfRange(r.path(key) + "[\(i)]", "must be one of \(cases.joined(separator: ", "))") }
        guard seen.insert(s).inserted else { throw .outOfRange(r.path(key) + "[\(i)]", "repeats \(s)") }
    }
    return sent
}

/// An optional text member of 1 to `max` bytes.
func text(_ r: inout ObjectReader, _ key: String, max: Int) throws(FieldError) -> String? {
    guard let s: String = try r.optional(key) else { return nil }
    guard !s.isEmpty, s.utf8.count <= max else { throw .outOfRange(r.path(key), "must be 1 to \(max) bytes") }
    return s
}

private func requiredText(_ r: inout ObjectReader, _ key: String, max: Int) throws(FieldError) -> String {
    guard let s = try text(&r, key, max: max) else {
        throw FieldError(field: r.path(key), reason: "missing_field", message: "\(r.path(key)) is required")
    }
    return s
}

/// A State of Mind sample or medication dose event (`health.stateOfMind`, `health.medicationDoses`,
/// key: its HealthKit UUID). Its day is the local day it starts.
public struct RecordRow: StoredRow {
    public var kind: RecordKind
    public var content: JSONObject
    public var placement: Placement

    public init(kind: RecordKind, content: JSONObject, placement: Placement) {
        self.kind = kind
        self.content = content
        self.placement = placement
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "record")
        guard let kind = RecordKind(rawValue: try f.string("record")) else { throw StorageError.corrupt("unknown record kind") }
        guard let content = f.object["content"]?.objectValue else { throw StorageError.corrupt("record without content") }
        self.kind = kind
        self.content = content
        placement = try Placement(f)
    }

    public var stored: JSON {
        .object(JSONObject([("record", .string(kind.rawValue)), ("content", .object(content))] + placement.stored.filter { $0.1 != .null }))
    }

    func sameContent(_ other: RecordRow) -> Bool { kind == other.kind && content == other.content && placement.sameContent(other.placement) }
}
