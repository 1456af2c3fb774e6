import JSON

/// A short text a person can read, beside the structured result: a table of days or weeks for the
/// health summaries, the main figures for the others.
enum Render {
    static func text(_ method: String, _ result: JSON) -> String {
        switch method {
        case "health.summary": return periods(result["days"], key: "date", unit: "day")
        case "health.weekly": return periods(result["weeks"], key: "week", unit: "week")
        default: return summary(result)
        }
    }

    /// One line per day (or week): each metric's sum or average, workouts, sleep.
    static func periods(_ list: JSON?, key: String, unit: String) -> String {
        let items = list?.arrayValue ?? []
        guard !items.isEmpty else { return "No \(unit) in that range has data." }
        var lines = ["\(items.count) \(unit)\(items.count == 1 ? "" : "s") with data:"]
        for item in items {
            var parts: [String] = []
            for (type, m) in item["metrics"]?.objectValue?.members ?? [] {
                let short = shortName(type)
                if let sum = m["sum"]?.numberValue {
                    parts.append("\(short) \(number(sum))\(unitSuffix(m["unit"]))" + sources(m["sources"]))
                } else if let avg = m["avg"]?.numberValue {
                    parts.append("\(short) avg \(number(avg))\(unitSuffix(m["unit"]))")
                } else if let count = m["count"]?.intValue {
                    parts.append("\(short) ×\(count)")
                }
            }
            for (activity, w) in item["workouts"]?.objectValue?.members ?? [] {
                parts.append("\(activity) \((w["durationSeconds"]?.intValue ?? 0) / 60) min")
            }
            if let asleep = item["sleep"]?["asleep"]?.intValue { parts.append("asleep \(asleep / 3600)h\(String(format2((asleep % 3600) / 60)))") }
            lines.append("\(item[key]?.stringValue ?? "?"): " + (parts.isEmpty ? "no figures" : parts.joined(separator: ", ")))
        }
        return lines.joined(separator: "\n")
    }

    /// ` (Apple Watch 600, iPhone 500 [500 overridden])` from an explained figure's sources; empty without.
    static func sources(_ list: JSON?) -> String {
        guard let items = list?.arrayValue, !items.isEmpty else { return "" }
        let parts = items.map { s -> String in
            let name = s["name"]?.stringValue ?? s["bundleId"]?.stringValue ?? "unnamed source"
            let overridden = s["overridden"]?.numberValue ?? 0
            return "\(name)\(s["enteredByHand"] == true ? " (entered by hand)" : "") \(number(s["counted"]?.numberValue ?? 0))"
                + (overridden > 0 ? " [\(number(overridden)) overridden]" : "")
        }
        return " (" + parts.joined(separator: ", ") + ")"
    }

    /// Top-level numbers and strings as `name: value`, lists by their length.
    static func summary(_ result: JSON) -> String {
        guard case .object(let o) = result else { return result == .null ? "Nothing." : result.serialized }
        var lines: [String] = []
        for (name, value) in o.members {
            switch value {
            case .int(let i): lines.append("\(name): \(i)")
            case .double(let d): lines.append("\(name): \(number(d))")
            case .string(let s): lines.append("\(name): \(s)")
            case .bool(let b): lines.append("\(name): \(b)")
            case .array(let a): lines.append("\(name): \(a.count) item\(a.count == 1 ? "" : "s")")
            default: continue
            }
        }
        return lines.isEmpty ? "Done." : lines.joined(separator: "\n")
    }

    static func shortName(_ identifier: String) -> String {
        for prefix in ["HKQuantityTypeIdentifier", "HKCategoryTypeIdentifier"] where identifier.hasPrefix(prefix) {
            return String(identifier.dropFirst(prefix.count))
        }
        return identifier
    }

    static func number(_ x: Double) -> String {
        x == x.rounded() && abs(x) < 1e15 ? String(Int64(x)) : String((x * 10).rounded() / 10)
    }

    static func unitSuffix(_ unit: JSON?) -> String {
        guard let u = unit?.stringValue, u != "count" else { return "" }
        return " " + u
    }

    static func format2(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
}
