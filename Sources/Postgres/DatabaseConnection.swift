#if canImport(Glibc)
import FoundationEssentials
import Glibc
#endif
import CLibPQ
import Storage

/// One statement of a pipeline: SQL with `$n` placeholders and its parameters as text (nil: NULL).
public struct Statement: Sendable {
    public var sql: String
    public var params: [String?]
    /// Asks the server to send every result so far before it runs the next statement, so that they reach
    /// the client even when the connection breaks later in the pipeline.
    public var flushAfter = false

    public init(_ sql: String, _ params: [String?] = [], flushAfter: Bool = false) {
        self.sql = sql
        self.params = params
        self.flushAfter = flushAfter
    }
}

/// What one statement gave: its rows as text (nil: NULL), or the server's error.
public struct StatementResult {
    public var rows: [[String?]] = []
    /// SQLSTATE and message when the statement failed (a statement after it in the pipeline was skipped
    /// and reports none).
    public var error: (state: String, message: String)?

    public init(rows: [[String?]] = [], error: (state: String, message: String)? = nil) {
        self.rows = rows
        self.error = error
    }

    /// The first column of the first row.
    public var scalar: String? { rows.first?.first ?? nil }
}

/// A connection to PostgreSQL through libpq, in pipeline mode: the statements of one `run` go to the
/// server together and their results come back together, one round trip for all of them. Used by one
/// thread at a time (its owner serialises calls).
public final class DatabaseConnection: DatabaseSession, @unchecked Sendable {
    private var conn: OpaquePointer?
    let url: String
    /// Session settings run after every connect (the search path), so a reconnect restores them.
    private let setup: [Statement]
    /// Through a transaction-mode pooler (PgBouncer, Supavisor): each transaction may run on another
    /// server connection, so nothing may live in the session. No statement is prepared by name (they go
    /// unnamed: parsed each time), and the settings of `setup` are made `SET LOCAL` at the start of every
    /// transaction: after the `BEGIN` that opens one, or in a `BEGIN ... COMMIT` put around a pipeline
    /// that runs outside any (its results are the pipeline's own).
    public let pooled: Bool
    private let localSetup: [Statement]
    /// Whether the last pipeline left a transaction open (the next one runs in it).
    private var inTransaction = false
    /// Whether the connection was found broken: the next `run` reconnects first.
    public private(set) var broken = false
    /// The results a failed `run` received before the connection broke.
    public private(set) var received: [StatementResult] = []

    /// Where libpq's and the server's own words go: the log, never a client (they can name hosts,
    /// sockets and data). Errors thrown say what failed in the kernel's words.
    private let log: @Sendable (String) -> Void

    /// Connects to `url` and runs `setup`; throws `unavailable` when it cannot (libpq's message, never
    /// the password, goes to `log`).
    public init(url: String, setup: [Statement] = [], log: @escaping @Sendable (String) -> Void = { _ in }, pooled: Bool = false) throws(StorageError) {
        // libpq is opened on first use (CLibPQ's loader): a machine without it gets this, not a crash.
        var error: UnsafePointer<CChar>?
        guard hk_pq_load(&error) != 0 else { throw StorageError.unavailable(error.map { String(cString: $0) } ?? "libpq cannot be opened") }
        self.url = url
        self.setup = setup
        self.pooled = pooled
        localSetup = setup.map { Statement($0.sql.hasPrefix("SET ") ? "SET LOCAL " + $0.sql.dropFirst(4) : $0.sql, $0.params) }
        self.log = log
        try connect()
    }

    deinit { if conn != nil { PQfinish(conn) } }

    private func connect() throws(StorageError) {
        if conn != nil { PQfinish(conn) }
        unsettled = nil
        prepared.removeAll()
        preparedNames = 0
        conn = PQconnectdb(url)
        guard PQstatus(conn) == CONNECTION_OK else {
            let message = self.message(conn)
            PQfinish(conn)
            conn = nil
            broken = true
            log("cannot connect to PostgreSQL: \(message)")
            throw StorageError.unavailable("cannot connect to PostgreSQL")
        }
        // Notices ("already exists, skipping") would go to stderr unformatted: the kernel logs through swift-log.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
        guard PQenterPipelineMode(conn) == 1 else {
            log("PostgreSQL connection refused pipeline mode: \(message(conn))")
            throw StorageError.unavailable("the PostgreSQL connection refused pipeline mode")
        }
        broken = false
        inTransaction = false
        guard !setup.isEmpty, !pooled else { return }
        if let failed = try run(setup).first(where: { $0.error != nil })?.error {
            broken = true
            log("setting up the PostgreSQL session failed: \(failed.message)")
            throw StorageError.unavailable("setting up the PostgreSQL session failed (SQLSTATE \(failed.state))")
        }
    }

    private func message(_ conn: OpaquePointer?) -> String {
        guard let text = PQerrorMessage(conn) else { return "unknown error" }
        return Self.redacting(url, in: String(cString: text).trimmingWhitespace)
    }

    /// `message` with any password `url` holds replaced by `***`: libpq quotes a token it cannot parse
    /// ("invalid percent-encoded token"), and that token may be the password.
    static func redacting(_ url: String, in message: String) -> String {
        var out = message
        for secret in passwords(in: url) where !secret.isEmpty {
            out = out.replacing(secret, with: "***")
        }
        return out
    }

    /// The password of a connection URL or keyword string, as written and percent-decoded.
    static func passwords(in url: String) -> [String] {
        var found: [String] = []
        if let scheme = url.firstRange(of: "://") {
            let rest = url[scheme.upperBound...]
            let authority = rest.prefix { $0 != "/" && $0 != "?" }
            if let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
                found.append(String(authority[authority.index(after: colon)..<at]))
            }
        }
        // `password=...` as a URL query parameter or a keyword/value pair.
        var search = url[...]
        while let r = search.firstRange(of: "password=") {
            let value = search[r.upperBound...].prefix { $0 != "&" && $0 != " " }
            found.append(String(value.drop { $0 == "'" }.reversed().drop { $0 == "'" }.reversed()))
            search = search[r.upperBound...]
        }
        return found + found.compactMap(Self.percentDecoded)
    }

    /// `text` with its `%XX` escapes decoded; nil when an escape is malformed or the result is not UTF-8.
    static func percentDecoded(_ text: String) -> String? {
        var out: [UInt8] = [], bytes = Array(text.utf8)[...]
        while let b = bytes.popFirst() {
            guard b == UInt8(ascii: "%") else { out.append(b); continue }
            guard bytes.count >= 2, let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) else { return nil }
            out.append(v)
            bytes = bytes.dropFirst(2)
        }
        return String(validating: out, as: UTF8.self)
    }

    /// The server process serving this connection (what a notification names as its sender).
    public var backendPID: Int32 { PQbackendPID(conn) }

    /// Whether `text` holds U+0000: memchr over its bytes (row bodies run to megabytes, and every
    /// statement's parameters are checked).
    static func holdsNul(_ text: String) -> Bool {
        text.utf8.withContiguousStorageIfAvailable { b in b.baseAddress.map { memchr($0, 0, b.count) != nil } ?? false } ?? text.utf8.contains(0)
    }

    /// Cuts the connection's socket under whatever is running on it, as a network failure would: a
    /// fault point for tests (the server process goes on until it notices).
    public func cutForTest() {
        let fd = PQsocket(conn)
        if fd >= 0 { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
    }


    /// Waits up to `timeoutMilliseconds` for notifications (after `LISTEN`) and returns each sender's
    /// process id and payload. Throws `unavailable` when the connection breaks.
    public func notifications(timeoutMilliseconds: Int32) throws(StorageError) -> [(pid: Int32, payload: String)] {
        if broken || conn == nil { try connect() }
        var out: [(pid: Int32, payload: String)] = []
        func drain() {
            while let n = PQnotifies(conn) {
                out.append((n.pointee.be_pid, String(cString: n.pointee.extra)))
                PQfreemem(n)
            }
        }
        drain()
        guard out.isEmpty else { return out }
        var fds = [pollfd(fd: PQsocket(conn), events: Int16(POLLIN), revents: 0)]
        guard poll(&fds, 1, timeoutMilliseconds) > 0 else { return out }
        guard PQconsumeInput(conn) == 1 else {
            _ = try fail()
            return out
        }
        drain()
        return out
    }

    /// Host (or socket folder), port and database: what logs may show of the URL.
    public var endpoint: (host: String, port: String, database: String) {
        func text(_ p: UnsafeMutablePointer<CChar>?) -> String { p.map { String(cString: $0) } ?? "" }
        return (text(PQhost(conn)), text(PQport(conn)), text(PQdb(conn)))
    }

    /// Sends `statements` in one pipeline and returns their results in order. Throws `unavailable` when
    /// the connection fails (the connection is then marked broken; what the server did is unknown).
    public func run(_ statements: [Statement]) throws(StorageError) -> [StatementResult] {
        drainUnsettled()
        if broken || conn == nil { try connect() }
        guard !statements.isEmpty else { return [] }
        guard pooled, !inTransaction, !localSetup.isEmpty else { return try runPipeline(statements) }
        // The transaction's settings go first in it; the results and what was received before a break
        // are the caller's statements' only.
        let opens = statements[0].sql == "BEGIN"
        let sent = opens ? [statements[0]] + localSetup + statements.dropFirst() : [Statement("BEGIN")] + localSetup + statements + [Statement("COMMIT")]
        let added = opens ? Set(1...localSetup.count) : Set(0...localSetup.count).union([sent.count - 1])
        let ours = { (results: [StatementResult]) in results.enumerated().filter { !added.contains($0.offset) }.map(\.element) }
        let results: [StatementResult]
        do {
            results = try runPipeline(sent)
        } catch {
            received = ours(received)
            throw error
        }
        // A statement that failed in the transaction put around the pipeline left it aborted.
        if !opens && inTransaction { _ = try? runPipeline([Statement("ROLLBACK")]) }
        return ours(results)
    }

    private func runPipeline(_ statements: [Statement]) throws(StorageError) -> [StatementResult] {
        let preparing = try sendPipeline(statements)
        return try receivePipeline(statements, preparing)
    }

    /// Sends a pipeline and its sync; returns, per statement, whether a Prepare went before it.
    private func sendPipeline(_ statements: [Statement]) throws(StorageError) -> [Bool] {
        // Parameters go as C strings, and PostgreSQL's text holds no NUL: a value with one would be cut
        // there (two keys becoming one, a user id landing in another's partition). No method can write
        // one; refused here before anything is sent, whatever the caller.
        for statement in statements {
            for case let p? in statement.params where Self.holdsNul(p) {
                throw StorageError.corrupt("a key or value holds U+0000, which PostgreSQL cannot store")
            }
        }
        received.removeAll()
        var preparing: [Bool] = []
        preparing.reserveCapacity(statements.count)
        for statement in statements {
            var name = prepared[statement.sql]
            var prepare = false
            if name == nil, !pooled, !statement.params.isEmpty, prepared.count < Self.maxPrepared {
                // A statement with parameters is parsed and planned once per connection, not per run. Names
                // are never reused on a connection: one forgotten below may still exist on the server.
                preparedNames += 1
                name = "hk\(preparedNames)"
                prepared[statement.sql] = name
                prepare = true
                guard PQsendPrepare(conn, name, statement.sql, Int32(statement.params.count), nil) == 1 else { _ = try fail(); return [] }
            }
            preparing.append(prepare)
            guard send(statement, as: name) else { _ = try fail(); return [] }
            if statement.flushAfter && PQsendFlushRequest(conn) != 1 { _ = try fail(); return [] }
        }
        guard PQpipelineSync(conn) == 1 else { _ = try fail(); return [] }
        return preparing
    }

    /// Reads a pipeline's results (`sendPipeline`), up to its sync.
    private func receivePipeline(_ statements: [Statement], _ preparing: [Bool]) throws(StorageError) -> [StatementResult] {
        var results: [StatementResult] = []
        results.reserveCapacity(statements.count)
        for index in statements.indices {
            var result = StatementResult()
            if preparing[index] {
                // The Prepare's own result comes first. One that failed (or was skipped after an earlier
                // error) is forgotten, and its failure is the statement's: a Prepare that fails aborts the
                // transaction, so it must never pass for a statement that ran.
                var got = false, madeIt = false
                while let res = PQgetResult(conn) {
                    got = true
                    switch PQresultStatus(res) {
                    case PGRES_COMMAND_OK: madeIt = true
                    case PGRES_FATAL_ERROR: result.error = Self.error(of: res)
                    default: break
                    }
                    PQclear(res)
                }
                if !got {
                    received = results
                    return try fail()
                }
                if !madeIt { prepared[statements[index].sql] = nil }
            }
            var got = false
            while let res = PQgetResult(conn) {
                got = true
                defer { PQclear(res) }
                switch PQresultStatus(res) {
                case PGRES_TUPLES_OK:
                    let rows = PQntuples(res), columns = PQnfields(res)
                    result.rows.reserveCapacity(Int(rows))
                    for r in 0..<rows {
                        var row: [String?] = []
                        row.reserveCapacity(Int(columns))
                        for c in 0..<columns {
                            row.append(PQgetisnull(res, r, c) == 1 ? nil : String(cString: PQgetvalue(res, r, c)))
                        }
                        result.rows.append(row)
                    }
                case PGRES_COMMAND_OK:
                    break
                case PGRES_PIPELINE_ABORTED:
                    break
                case PGRES_FATAL_ERROR:
                    result.error = Self.error(of: res)
                default:
                    if result.error == nil { result.error = ("?????", String(cString: PQresultErrorMessage(res)).trimmingWhitespace) }
                }
            }
            if !got {
                received = results
                return try fail()
            }
            results.append(result)
        }
        // The sync point closes the pipeline. A connection lost here still reports what was received
        // (the transaction id read before a COMMIT), so that the commit's fate can be asked.
        guard let sync = PQgetResult(conn) else {
            received = results
            return try fail()
        }
        let status = PQresultStatus(sync)
        PQclear(sync)
        guard status == PGRES_PIPELINE_SYNC else {
            received = results
            return try fail()
        }
        let transaction = PQtransactionStatus(conn)
        inTransaction = transaction == PQTRANS_INTRANS || transaction == PQTRANS_INERROR
        return results
    }

    /// Sends `statements` in one pipeline without waiting for their results (a batch of reads ends with its
    /// `COMMIT` so): they are read, and dropped, before the next pipeline's. A failure only marks the
    /// connection broken (the next `run` reconnects); whoever sends so must not need to know the outcome.
    public func send(_ statements: [Statement]) {
        drainUnsettled()
        guard !broken, conn != nil, !statements.isEmpty else { return }
        do {
            unsettled = (statements, try sendPipeline(statements))
        } catch {
            unsettled = nil
        }
    }

    /// A pipeline sent by `send` whose results were not read yet.
    private var unsettled: (statements: [Statement], preparing: [Bool])?

    /// Reads the results of the pipeline `send` left, logging a failure.
    private func drainUnsettled() {
        guard let (statements, preparing) = unsettled else { return }
        unsettled = nil
        guard !broken, conn != nil else { return }
        do {
            if let failed = try receivePipeline(statements, preparing).first(where: { $0.error != nil })?.error {
                log("a pipeline sent without waiting failed: SQLSTATE \(failed.state): \(failed.message)")
            }
        } catch {
            // Marked broken: the next run reconnects.
        }
    }

    /// Runs `sql`, a `COPY ... FROM STDIN`, with `data` (COPY's text format) and returns its result. COPY
    /// cannot run in pipeline mode, so the connection leaves it for the statement and enters it again.
    /// Throws `unavailable` when the connection fails.
    public func copy(_ sql: String, _ data: [UInt8]) throws(StorageError) -> StatementResult {
        drainUnsettled()
        if broken || conn == nil { try connect() }
        guard PQexitPipelineMode(conn) == 1 else { _ = try fail(); return StatementResult() }
        defer { if !broken && PQenterPipelineMode(conn) != 1 { broken = true } }
        var result = StatementResult()
        guard let started = PQexec(conn, sql) else { _ = try fail(); return result }
        let status = PQresultStatus(started)
        if status != PGRES_COPY_IN {
            result.error = status == PGRES_FATAL_ERROR ? Self.error(of: started) : ("?????", "COPY did not start")
            PQclear(started)
            while let res = PQgetResult(conn) { PQclear(res) }
            return result
        }
        PQclear(started)
        // In pieces of 1 MB: libpq buffers what it is given, and one call with 12 MB would double that.
        let piece = 1 << 20
        var sent = true
        data.withUnsafeBufferPointer { buffer in
            var at = 0
            while sent, at < buffer.count {
                let n = min(piece, buffer.count - at)
                sent = buffer.baseAddress!.advanced(by: at).withMemoryRebound(to: CChar.self, capacity: n) {
                    PQputCopyData(conn, $0, Int32(n)) == 1
                }
                at += n
            }
        }
        guard sent, PQputCopyEnd(conn, nil) == 1 else { _ = try fail(); return result }
        var got = false
        while let res = PQgetResult(conn) {
            got = true
            if PQresultStatus(res) == PGRES_FATAL_ERROR { result.error = Self.error(of: res) }
            PQclear(res)
        }
        if !got { _ = try fail() }
        return result
    }

    /// SQLSTATE and message of a failed result.
    private static func error(of res: OpaquePointer) -> (state: String, message: String) {
        let state = PQresultErrorField(res, Int32(UInt8(ascii: "C"))).map { String(cString: $0) } ?? "?????"
        let message = PQresultErrorField(res, Int32(UInt8(ascii: "M"))).map { String(cString: $0) } ?? "unknown error"
        return (state, message)
    }

    private func send(_ statement: Statement, as name: String?) -> Bool {
        // The C strings live until libpq has copied them into its output buffer.
        var cStrings = statement.params.map { $0.map { strdup($0) } ?? nil }
        defer { for p in cStrings { free(p) } }
        if cStrings.isEmpty { return PQsendQueryParams(conn, statement.sql, 0, nil, nil, nil, nil, 0) == 1 }
        return cStrings.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { values in
                let n = Int32(statement.params.count)
                if let name { return PQsendQueryPrepared(conn, name, n, values, nil, nil, 0) == 1 }
                return PQsendQueryParams(conn, statement.sql, n, nil, values, nil, nil, 0) == 1
            }
        }
    }

    /// Statements prepared on this connection, by SQL text (gone with the connection), up to
    /// `maxPrepared`: the kernel's statements are a few dozen texts, and texts that vary (a LIMIT) stop there.
    private var prepared: [String: String] = [:]
    /// Names given so far on this connection (`hk1`, `hk2`, ...).
    private var preparedNames = 0
    static let maxPrepared = 256

    private func fail() throws(StorageError) -> [StatementResult] {
        let message = self.message(conn)
        broken = true
        log("PostgreSQL connection failed: \(message)")
        throw StorageError.unavailable("the connection to PostgreSQL failed")
    }
}

extension String {
    var trimmingWhitespace: String {
        var s = Substring(self)
        while let c = s.last, c.isWhitespace { s.removeLast() }
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        return String(s)
    }
}
