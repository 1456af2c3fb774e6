#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Chrono
import HTTPClient
import Logging
import Threads

/// Signing keys that can change while the kernel runs: a JWKS file, re-read when it changes, or a JWKS
/// URL (Google's and Apple's rotate), fetched again when the answer's `Cache-Control` says it is stale,
/// in the background, and at once when a token names a key id the set lacks (at most once a minute,
/// so a stream of tokens with made-up ids cannot turn the kernel into a flood of calls).
public final class KeySource: Sendable {
    public enum Origin: Sendable, Equatable {
        case fixed
        case file(String)
        case url(String)
    }

    /// Bounds on how long a fetched set is used: Cache-Control's max-age, clamped.
    public static let minimumAgeSeconds = 60
    public static let maximumAgeSeconds = 86_400
    /// Used when the answer has no usable Cache-Control.
    public static let defaultAgeSeconds = 3_600
    /// How often an unknown key id may cause a fetch, and how soon a failed fetch is tried again.
    public static let retrySeconds = 60
    /// How often a file's modification is looked for.
    static let fileCheckSeconds: UInt64 = 1

    public let origin: Origin
    private let state: Locked<State>
    private let logger: Logger
    private let timeoutMilliseconds: Int
    /// Its monotonic time says when a file is looked at again and when a fetched set goes stale.
    private let clock: Clock

    struct State {
        var keys: KeySet
        /// Monotonic microseconds: when a file was last looked at, when a URL's set goes stale.
        var checkedAt: UInt64 = 0
        var staleAt: UInt64 = 0
        /// When an unknown key id last caused a fetch.
        var missFetchAt: UInt64?
        var fileStamp: FileStamp?
    }

    /// What tells a file's versions apart.
    struct FileStamp: Equatable {
        let device: UInt64, inode: UInt64, size: Int64, modifiedSeconds: Int, modifiedNanoseconds: Int

        init(_ st: stat) {
            (device, inode, size) = (UInt64(st.st_dev), UInt64(st.st_ino), Int64(st.st_size))
            (modifiedSeconds, modifiedNanoseconds) = (st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
        }
    }

    private init(origin: Origin, keys: KeySet, logger: Logger, clock: Clock, timeoutMilliseconds: Int = 5000) {
        self.clock = clock
        self.origin = origin
        self.state = Locked(State(keys: keys))
        self.logger = logger
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// Keys that never change.
    public static func fixed(_ keys: KeySet) -> KeySource {
        KeySource(origin: .fixed, keys: keys, logger: Logger(label: "healthkernel.auth"), clock: SystemClock())
    }

    /// The JWKS file at `path`; it must be readable and valid now (start-up stops otherwise). Later
    /// versions that do not parse are logged and the last good set stays.
    public static func file(_ path: String, logger: Logger, clock: Clock = SystemClock()) throws(AuthSetupError) -> KeySource {
        guard let (keys, stamp) = readFile(path) else { throw AuthSetupError("cannot read JWKS file \(path)") }
        let source = KeySource(origin: .file(path), keys: try parse(keys, from: "JWKS file \(path)"), logger: logger, clock: clock)
        source.state.withLock {
            $0.fileStamp = stamp
            $0.checkedAt = clock.monotonicMicros()
        }
        return source
    }

    /// The JWKS at `url` (https, or http to this machine), fetched now and kept fresh by a thread of its
    /// own. A first fetch that fails is logged, not fatal: tokens are refused until one succeeds.
    public static func url(_ url: String, logger: Logger, clock: Clock = SystemClock(), timeoutMilliseconds: Int = 5000) -> KeySource {
        let source = KeySource(origin: .url(url), keys: KeySet(), logger: logger, clock: clock, timeoutMilliseconds: timeoutMilliseconds)
        source.refresh()
        spawnThread { [weak source] in
            // Wakes once a second; ends when the source is gone (a kernel that was shut down).
            while true {
                sleep(1)
                guard let current = source else { return }
                if current.clock.monotonicMicros() >= current.state.withLock({ $0.staleAt }) { current.refresh() }
            }
        }
        return source
    }

    /// The key `kid` names, without waiting on the network (for the serving thread): a file is looked at
    /// again when a second has passed since the last look; a URL's set is what was last fetched.
    public func cachedKey(_ kid: String) -> VerificationKey? {
        if case .file(let path) = origin { reloadIfChanged(path) }
        return state.withLock { $0.keys.keys[kid] }
    }

    /// The key `kid` names, fetching the set again when it does not have it and no fetch was made in the
    /// last minute. May wait on the network: call it on a worker thread.
    public func key(_ kid: String) -> VerificationKey? {
        if let key = cachedKey(kid) { return key }
        guard case .url = origin else { return nil }
        let mayFetch = state.withLock { state in
            guard state.missFetchAt.map({ clock.monotonicMicros() - $0 >= UInt64(Self.retrySeconds) * 1_000_000 }) ?? true else { return false }
            state.missFetchAt = clock.monotonicMicros()  // claimed now, so concurrent misses do not all fetch
            return true
        }
        guard mayFetch else { return nil }
        refresh()
        return state.withLock { $0.keys.keys[kid] }
    }

    /// Marks the set stale, as if its max-age had passed (tests of the background refresh).
    func expireForTests() { state.withLock { $0.staleAt = 0 } }

    /// Fetches a URL's set now; on failure keeps the last set and tries again in a minute.
    func refresh() {
        guard case .url(let url) = origin else { return }
        let started = clock.monotonicMicros()
        let result = HTTPClient.send(HTTPRequest(url: url, headers: [(name: "Accept", value: "application/json")],
                                                 timeoutMilliseconds: timeoutMilliseconds))
        var problem: String?
        var fetched: (KeySet, Int)?
        switch result {
        case .failure(let error): problem = error.description
        case .success(let response) where response.status != 200: problem = "HTTP \(response.status)"
        case .success(let response):
            do {
                fetched = (try Self.parse(response.body, from: "JWKS at \(url)"), Self.maxAge(response.headers["cache-control"]))
            } catch {
                problem = error.description
            }
        }
        state.withLock { state in
            if let (keys, age) = fetched {
                state.keys = keys
                state.staleAt = started + UInt64(age) * 1_000_000
            } else {
                state.staleAt = started + UInt64(Self.retrySeconds) * 1_000_000
            }
        }
        if let problem { logger.warning("cannot fetch the JWKS at \(url): \(problem); keeping the last keys, trying again in \(Self.retrySeconds) s") }
    }

    /// Seconds a fetched set may be used: `max-age` (or `s-maxage`) clamped to a minute..a day; no-store
    /// or no-cache count as the minimum; absent, an hour.
    static func maxAge(_ cacheControl: String?) -> Int {
        guard let cacheControl else { return defaultAgeSeconds }
        var age: Int?
        for directive in cacheControl.lowercased().split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { $0.filter { $0 != " " && $0 != "\t" && $0 != "\"" } }
            switch parts[0] {
            case "no-store", "no-cache": return minimumAgeSeconds
            case "max-age", "s-maxage": if parts.count == 2, let n = Int(parts[1]) { age = n }
            default: break
            }
        }
        return min(max(age ?? defaultAgeSeconds, minimumAgeSeconds), maximumAgeSeconds)
    }

    private func reloadIfChanged(_ path: String) {
        let due = state.withLock { state in
            let now = clock.monotonicMicros()
            guard now - state.checkedAt >= Self.fileCheckSeconds * 1_000_000 else { return false }
            state.checkedAt = now
            return true
        }
        guard due, let stamp = Self.stamp(path), stamp != state.withLock({ $0.fileStamp }) else { return }
        do {
            guard let (bytes, readStamp) = Self.readFile(path) else { throw AuthSetupError("cannot read it") }
            let keys = try Self.parse(bytes, from: "JWKS file \(path)")
            state.withLock {
                $0.keys = keys
                $0.fileStamp = readStamp
            }
            logger.info("JWKS file \(path) changed: \(keys.keys.count) keys")
        } catch {
            // Remembered, so one bad version is logged once rather than every second.
            state.withLock { $0.fileStamp = stamp }
            logger.warning("JWKS file \(path) changed but is not usable (\(error)); keeping the last keys")
        }
    }

    private static func parse(_ bytes: [UInt8], from what: String) throws(AuthSetupError) -> KeySet {
        do {
            return try KeySet.load(jwks: bytes)
        } catch {
            throw AuthSetupError("\(what) is not usable: \(error)")
        }
    }

    private static func stamp(_ path: String) -> FileStamp? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return FileStamp(st)
    }

    /// The file's bytes and the stamp of the version read (taken from the open file, so they match).
    private static func readFile(_ path: String) -> ([UInt8], FileStamp)? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_size <= 1 << 20 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            done += n
        }
        return (bytes, FileStamp(st))
    }
}
