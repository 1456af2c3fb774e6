import Storage

/// What the store needs of one connection to PostgreSQL: libpq's (`DatabaseConnection`) in the product,
/// the simulation's model of the server in `PostgresModel`. Used by one thread at a time.
public protocol DatabaseSession: AnyObject {
    /// Whether the connection was found broken: the next `run` reconnects first.
    var broken: Bool { get }
    /// The results a failed `run` received before the connection broke.
    var received: [StatementResult] { get }
    /// The server process serving this connection (what a notification names as its sender).
    var backendPID: Int32 { get }
    /// Host (or socket folder), port and database: what logs may show.
    var endpoint: (host: String, port: String, database: String) { get }
    /// Sends `statements` in one pipeline and returns their results in order. Throws `unavailable` when
    /// the connection fails (it is then marked broken; what the server did is unknown).
    func run(_ statements: [Statement]) throws(StorageError) -> [StatementResult]
    /// Sends `statements` in one pipeline without waiting for their results, which the next `run` reads
    /// and drops first: for statements whose outcome nobody needs (a batch of reads' `COMMIT`). A failure
    /// marks the connection broken.
    func send(_ statements: [Statement])
    /// Runs `sql`, a `COPY ... FROM STDIN`, with `data` in COPY's text format.
    func copy(_ sql: String, _ data: [UInt8]) throws(StorageError) -> StatementResult
    /// Waits up to `timeoutMilliseconds` for notifications (after `LISTEN`): each sender's process id and payload.
    func notifications(timeoutMilliseconds: Int32) throws(StorageError) -> [(pid: Int32, payload: String)]
    /// Cuts the connection under whatever runs on it, as a network failure would (a fault point).
    func cutForTest()
}

/// Where sessions come from: a server at a libpq URL (`LibPQDatabase`), or the simulation's model.
public protocol Database: Sendable {
    /// A new session with `setup` run on it (and again after each reconnect); throws `unavailable` when
    /// the server cannot be reached.
    func connect(setup: [Statement], log: @escaping @Sendable (String) -> Void) throws(StorageError) -> any DatabaseSession
}

/// A PostgreSQL server reached through libpq at `url`.
public struct LibPQDatabase: Database {
    public let url: String
    /// Through a transaction-mode pooler (`DatabaseConnection.pooled`).
    public let pooled: Bool

    public init(url: String, pooled: Bool = false) { (self.url, self.pooled) = (url, pooled) }

    public func connect(setup: [Statement], log: @escaping @Sendable (String) -> Void) throws(StorageError) -> any DatabaseSession {
        try DatabaseConnection(url: url, setup: setup, log: log, pooled: pooled)
    }
}
