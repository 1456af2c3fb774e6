import Kernel

/// `healthkernel serve` (or no command: serve is the default) read without ArgumentParser when every
/// argument is a flag of the settings table, which is how hosts spawn the kernel. Building the parser's
/// command tree looks up protocol conformances by scanning every conformance record of the binary
/// (5,600): a third of the time from exec to the first answer (8.5 ms; perf). Anything else (`--help`,
/// `--config`, a hidden test flag, a positional argument, another command) returns nil and goes to the
/// parser, which then also words every error; values are checked by the settings table either way.
enum QuickServe {
    /// The flags as setting overrides, or nil when the parser must read these arguments.
    static func overrides(_ arguments: ArraySlice<String>) -> ConfigOverrides? {
        var rest = arguments
        if rest.first == "serve" { rest = rest.dropFirst() }
        var overrides = ConfigOverrides()
        while let argument = rest.popFirst() {
            guard argument.hasPrefix("--") else { return nil }
            var name = argument.dropFirst(2), value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = name[..<equals]
            }
            guard let (key, isSwitch) = KernelConfig.setting(forFlag: String(name)) else { return nil }
            if isSwitch {
                guard value == nil else { return nil }
                overrides.values[key] = "true"
            } else {
                guard let given = value ?? rest.popFirst(), !given.hasPrefix("--") || value != nil else { return nil }
                overrides.values[key] = given
            }
        }
        return overrides
    }
}
