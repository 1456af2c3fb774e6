import Chrono
import JSON
import Logging
import Postgres
import PostgresModel
import Storage
import Testing
import Threads
@testable import Kernel

/// Counts the pipelines (round trips) the kernel sends on its connections.
final class CountingDatabase: Database, @unchecked Sendable {
    let inner: any Database
    let pipelines = Locked(0)
    /// The statements of every pipeline, in order.
    let sent = Locked<[[String]]>([])
    init(_ inner: any Database) { self.inner = inner }

    func connect(setup: [Statement], log: @escaping @Sendable (String) -> Void) throws(StorageError) -> any DatabaseSession {
        CountingSession(try inner.connect(setup: setup, log: log), self)
    }

    func reset() {
        pipelines.withLock { $0 = 0 }
        sent.withLock { $0 = [] }
    }
}

final class CountingSession: DatabaseSession {
    let inner: any DatabaseSession
    let counter: CountingDatabase
    init(_ inner: any DatabaseSession, _ counter: CountingDatabase) { (self.inner, self.counter) = (inner, counter) }
    var broken: Bool { inner.broken }
    var received: [StatementResult] { inner.received }
    var backendPID: Int32 { inner.backendPID }
    var endpoint: (host: String, port: String, database: String) { inner.endpoint }
    func run(_ statements: [Statement]) throws(StorageError) -> [StatementResult] {
        counter.pipelines.withLock { $0 += 1 }
        counter.sent.withLock { $0.append(statements.map(\.sql)) }
        return try inner.run(statements)
    }
    func send(_ statements: [Statement]) {
        counter.sent.withLock { $0.append(["(not waited for)"] + statements.map(\.sql)) }
        inner.send(statements)
    }
    func copy(_ sql: String, _ data: [UInt8]) throws(StorageError) -> StatementResult {
        counter.pipelines.withLock { $0 += 1 }
        return try inner.copy(sql, data)
    }
    func notifications(timeoutMilliseconds: Int32) throws(StorageError) -> [(pid: Int32, payload: String)] {
        try inner.notifications(timeoutMilliseconds: timeoutMilliseconds)
    }
    func cutForTest() { inner.cutForTest() }
}

/// A batch of requests whose reads follow from their params costs two round trips on PostgreSQL,
/// whatever its size: every request's rows (and its token's account) in one pipeline, every write and
/// the COMMIT in a second (#54 item 1).
@Suite(.oneStoreOnly) struct ReadAheadTests {
    let database = CountingDatabase(ModelServer())

    func kernel() throws -> Kernel {
        var config = KernelConfig()
        config.storeURL = "postgres://model"
        config.storeSchema = "read_ahead"
        config.auth.jwtSecret = testSecret
        config.limits.requestsPerSecond = 0
        return try Kernel(config: config, logger: Logger(label: "test"), database: database)
    }

    /// Lines uploading `days` of each of `users` (the first batch of a user turns its connection on).
    func uploads(_ kernel: Kernel, users: [String], days: Range<Int>, minutes: Int, id: inout Int, enable: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        for user in users {
            let token = kernel.auth.mint(sub: user, role: "authenticated", ttl: 3600, now: kernel.clock.now())
            if enable {
                let line: JSON = ["jsonrpc": "2.0", "id": 0, "method": "screentime.updateConnection", "params": ["auth": .string(token), "enabled": true]]
                out += Array(line.serialized.utf8) + [0x0A]
            }
            for day in days {
                id += 1
                let line: JSON = ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": "screentime.upload",
                                  "params": ["auth": .string(token), "date": .string("2025-03-\(10 + day)"), "verifiedMinutes": .int(Int64(minutes + day))]]
                out += Array(line.serialized.utf8) + [0x0A]
            }
        }
        return out
    }

    /// Every answer of `output`, by id.
    func answers(_ output: [UInt8]) throws -> [Int64: JSON] {
        var out: [Int64: JSON] = [:]
        for line in output.split(separator: 10) {
            let answer = try JSON.parse(Array(line))
            if let id = answer["id"]?.intValue, id > 0 { out[id] = answer }
        }
        return out
    }

    @Test func aBatchOfUploadsCostsTwoRoundTripsWhateverItsSize() throws {
        let kernel = try kernel()
        defer { kernel.shutdown() }
        var connection = kernel.connection()
        let users = ["00000000-0000-4000-8000-0000000000a1", "00000000-0000-4000-8000-0000000000b2", "00000000-0000-4000-8000-0000000000c3"]
        var id = 0
        func batch(_ days: Range<Int>, minutes: Int, enable: Bool = false) throws -> (roundTrips: Int, answers: [Int64: JSON]) {
            database.reset()
            connection.receive(uploads(kernel, users: users, days: days, minutes: minutes, id: &id, enable: enable))
            _ = connection.endBatch()
            defer { connection.output.removeAll() }
            return (database.pipelines.withLock { $0 }, try answers(connection.output))
        }
        // The first batch makes the accounts and the connections too.
        let first = try batch(0..<2, minutes: 10, enable: true)
        #expect(first.answers.count == 6 && first.answers.values.allSatisfy { $0["result"] != nil })
        #expect(first.roundTrips == 2, "\(database.sent.withLock { $0 })")
        for (size, minutes) in [(1, 20), (5, 30), (15, 40)] {
            let (trips, answers) = try batch(0..<size, minutes: minutes)
            #expect(answers.count == size * users.count && answers.values.allSatisfy { $0["result"] != nil }, "\(answers)")
            #expect(trips == 2, "\(size * users.count) uploads: \(database.sent.withLock { $0 })")
        }
        // Each upload decided on the rows as the batch's earlier uploads left them: every day holds the
        // last upload's minutes, read back on a fresh connection.
        var reader = kernel.connection()
        let token = kernel.auth.mint(sub: users[1], role: "authenticated", ttl: 3600, now: kernel.clock.now())
        for day in 0..<15 {
            let line: JSON = ["jsonrpc": "2.0", "id": 1, "method": "screentime.day", "params": ["auth": .string(token), "date": .string("2025-03-\(10 + day)")]]
            reader.receive(Array(line.serialized.utf8) + [0x0A])
            _ = reader.endBatch()
            let answer = try JSON.parse(Array(reader.output.dropLast()))
            reader.output.removeAll()
            #expect(answer["result"]?["verifiedMinutes"]?.intValue == Int64(40 + day), "\(answer)")
        }
    }

    /// Two uploads of one day in one batch: the second decides on the first's write (read ahead before
    /// either ran, then laid over by the first's commit), so the day's upload count and minutes are the
    /// second's. With the rows left as read (`Mutant.readAheadStale`), the simulation finds it at seed 1.
    @Test func aLaterRequestOfTheBatchReadsAnEarlierOnesWrite() throws {
        let kernel = try kernel()
        defer { kernel.shutdown() }
        var connection = kernel.connection()
        let user = "00000000-0000-4000-8000-0000000000d4"
        var id = 0
        connection.receive(uploads(kernel, users: [user], days: 0..<1, minutes: 5, id: &id, enable: true))
        _ = connection.endBatch()
        connection.output.removeAll()
        database.reset()
        let token = kernel.auth.mint(sub: user, role: "authenticated", ttl: 3600, now: kernel.clock.now())
        let claim: JSON = ["jsonrpc": "2.0", "id": 100, "method": "screentime.claim", "params": ["auth": .string(token), "date": "2025-03-10", "minutes": 7]]
        let day: JSON = ["jsonrpc": "2.0", "id": 101, "method": "screentime.day", "params": ["auth": .string(token), "date": "2025-03-10"]]
        var lines = uploads(kernel, users: [user], days: 0..<1, minutes: 50, id: &id)
        lines += Array(claim.serialized.utf8) + [0x0A] + Array(day.serialized.utf8) + [0x0A]
        connection.receive(lines)
        _ = connection.endBatch()
        let answers = try answers(connection.output)
        #expect(answers[101]?["result"]?["verifiedMinutes"]?.intValue == 50, "\(answers)")
        #expect(answers[101]?["result"]?["claimedMinutes"]?.intValue == 7, "\(answers)")
    }

    /// A batch of reads that named all they read (`sessions.list`) costs one round trip: its reads in a
    /// snapshot the same pipeline ends, with no lock and no transaction id; a page's answer is the
    /// server's, cursor pages included. A batch of reads that cannot name them ahead costs one too: its
    /// COMMIT is not waited for.
    @Test func aBatchOfListsCostsOneRoundTrip() throws {
        let kernel = try kernel()
        defer { kernel.shutdown() }
        var connection = kernel.connection()
        let user = "00000000-0000-4000-8000-0000000000e5"
        let token = kernel.auth.mint(sub: user, role: "authenticated", ttl: 3600, now: kernel.clock.now())
        func call(_ method: String, _ params: [(String, JSON)]) throws -> JSON {
            let line: JSON = ["jsonrpc": "2.0", "id": 1, "method": .string(method), "params": .object(JSONObject([("auth", .string(token))] + params))]
            connection.receive(Array(line.serialized.utf8) + [0x0A])
            _ = connection.endBatch()
            defer { connection.output.removeAll() }
            return try JSON.parse(Array(connection.output.dropLast()))
        }
        for i in 0..<5 {
            let made = try call("sessions.record", [("startTime", .string("2025-03-0\(i + 1)T10:00:00Z")), ("durationSeconds", 600),
                                                   ("clientSessionId", .string("c\(i)"))])
            #expect(made["result"] != nil, "\(made)")
        }
        database.reset()
        let first = try call("sessions.list", [("limit", 3)])
        #expect(database.pipelines.withLock { $0 } == 1, "\(database.sent.withLock { $0 })")
        #expect(database.sent.withLock { $0 }.joined().allSatisfy { !$0.contains("pg_current_xact_id") && !$0.contains("advisory") })
        let sessions = try #require(first["result"]?["sessions"]?.arrayValue)
        #expect(sessions.compactMap { $0["startTime"]?.stringValue } == ["2025-03-05T10:00:00.000Z", "2025-03-04T10:00:00.000Z", "2025-03-03T10:00:00.000Z"], "\(first)")
        let cursor = try #require(first["result"]?["nextCursor"]?.stringValue)
        database.reset()
        let second = try call("sessions.list", [("limit", 3), ("cursor", .string(cursor))])
        #expect(database.pipelines.withLock { $0 } == 1)
        #expect(second["result"]?["sessions"]?.arrayValue?.count == 2, "\(second)")
        // sessions.stats names no reads: it locks and reads in a round trip of its own, and its batch's
        // COMMIT goes without waiting for it (no answer depends on it).
        database.reset()
        let stats = try call("sessions.stats", [])
        #expect(stats["result"] != nil, "\(stats)")
        #expect(database.pipelines.withLock { $0 } == 1, "\(database.sent.withLock { $0 })")
        #expect(database.sent.withLock { $0 }.last == ["(not waited for)", "ROLLBACK TO SAVEPOINT request", "RELEASE SAVEPOINT request", "COMMIT"])
    }
}
