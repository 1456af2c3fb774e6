import Chrono
import JSON
import Threads

/// A page of notification history as fetched: each notification verified or why not, and Apple's token
/// for the next page.
typealias HistoryPage = Result<(notifications: [Result<ReceivedNotification, SubscriptionsError>], next: String?), ServerAPIFailure>

/// A membership an api-mode refresh asks Apple about.
struct Lookup: Sendable {
    let user: String
    let originalTransactionId: String
    /// The environment of its latest transaction: where it is asked first.
    let environment: String
}

/// What Apple said of one membership, verified; or why nothing is known.
enum LookupResult: Sendable {
    /// Get All Subscription Statuses knew the purchase (an auto-renewable subscription).
    case status(AppleStatus)
    /// Transaction History knew it (a purchase that does not renew): its latest transaction.
    case transaction(AppleTransaction, jws: String)
    /// No answer to use; nothing changes.
    case failed(ServerAPIFailure)
    /// An answer whose signed data does not verify: nothing from it is believed.
    case rejected(String)
}

extension LookupResult {
    /// Why a lookup that failed did, and in how many seconds to ask again: after `Retry-After` when
    /// throttled, a minute when Apple could not be reached or refused the key (the cron loop still ends:
    /// a failed membership is not due meanwhile), the refresh interval when asking again soon would get
    /// the same answer (not found, an answer that does not verify).
    func problem(interval: Int64) -> (String, Int64) {
        switch self {
        case .failed(let failure):
            switch failure {
            case .throttled(let seconds): return (failure.description, Int64(seconds))
            case .unavailable, .keyRejected: return (failure.description, 60)
            case .notFound, .invalid: return (failure.description, interval)
            }
        case .rejected(let why): return ("an answer did not verify: \(why)", interval)
        case .status, .transaction: return ("", 0)
        }
    }
}

/// The calls of one refresh or recovery, made on worker threads: at most `maxConcurrentCalls` in flight,
/// every signed item verified where it arrives, and after a 429 (or a refused key) no further call in
/// this batch. Never touches stored state.
struct ServerAPILookups: Sendable {
    let client: ServerAPIClient
    let apple: AppleData
    /// Transaction history pages read for one purchase at most (newest first, so the first page almost always has it).
    static let maxHistoryPages = 10

    /// Looks up every membership; results in the same order. Calls not started `budgetSeconds` after
    /// the first fail as unavailable, so a batch always ends well inside its lease.
    func run(_ lookups: [Lookup], now: Timestamp, budgetSeconds: Int64) -> [LookupResult] {
        let halted = Locked<ServerAPIFailure?>(nil)
        let deadline = SystemClock().now().milliseconds + budgetSeconds * 1000
        let (client, lookUp) = (client, self.lookUp)
        return concurrentMap(lookups, width: client.settings.maxConcurrentCalls, makeState: { client.transport.connect() }) { connection, lookup in
            if let failure = halted.withLock({ $0 }) { return .failed(failure) }
            guard SystemClock().now().milliseconds < deadline else { return .failed(.unavailable("the refresh ran out of time")) }
            let result = lookUp(lookup, now, connection)
            if case .failed(let failure) = result, failure.stopsTheBatch { halted.withLock { $0 = $0 ?? failure } }
            return result
        }
    }

    /// One membership: its statuses, in its environment and then, when production does not know it, in
    /// sandbox (Apple's documented fallback); a purchase without statuses (one that does not renew) is
    /// read from its transaction history.
    func lookUp(_ lookup: Lookup, now: Timestamp, on connection: ServerAPIConnection) -> LookupResult {
        let otid = lookup.originalTransactionId
        guard let path = ServerAPI.statusesPath(transactionId: otid) else { return .failed(.invalid("not an App Store transaction id")) }
        var environment = lookup.environment
        var answer = client.call("GET", path, environment: environment, on: connection)
        if case .failure(.notFound) = answer, environment == "Production", apple.config.environments.contains("Sandbox") {
            environment = "Sandbox"
            answer = client.call("GET", path, environment: environment, on: connection)
        }
        let json: JSON
        switch answer {
        case .failure(let failure): return .failed(failure)
        case .success(let j): json = j
        }
        do throws(SubscriptionsError) {
            let entries: [ServerAPI.LastTransaction]
            do { entries = try ServerAPI.lastTransactions(json, of: otid) } catch { return .failed(.invalid(error.description)) }
            guard !entries.isEmpty else { return history(otid, environment: environment, now: now, on: connection) }
            // A purchase is in one subscription group; should Apple list it twice, the latest signed wins.
            var best: AppleStatus?
            for entry in entries {
                let status = try apple.status(entry, of: otid, now: now)
                if best.map({ status.transaction.signedDate > $0.transaction.signedDate }) ?? true { best = status }
            }
            return .status(best!)
        } catch {
            return .rejected(error.rpcMessage)
        }
    }

    /// The purchase's latest transaction from Get Transaction History v2, newest first, following
    /// `revision` while `hasMore`.
    func history(_ otid: String, environment: String, now: Timestamp, on connection: ServerAPIConnection) -> LookupResult {
        var revision: String?
        for _ in 0..<Self.maxHistoryPages {
            guard let path = ServerAPI.historyPath(transactionId: otid, revision: revision) else { return .failed(.invalid("not an App Store transaction id")) }
            let page: ServerAPI.Page
            switch client.call("GET", path, environment: environment, on: connection) {
            case .failure(let failure): return .failed(failure)
            case .success(let json):
                do { page = try ServerAPI.transactionPage(json) } catch { return .failed(.invalid(error.description)) }
            }
            do throws(SubscriptionsError) {
                for jws in page.items {
                    let tx = try apple.appTransaction(try apple.verified(jws, now: now))
                    if tx.originalTransactionId == otid { return .transaction(tx, jws: jws) }
                }
            } catch {
                return .rejected(error.rpcMessage)
            }
            guard let next = page.next else { break }
            revision = next
        }
        return .failed(.notFound)
    }

    /// One page of notification history, each signed payload verified; what does not verify is counted.
    func notificationPage(startDate: Int64, endDate: Int64, environment: String, paginationToken: String?, now: Timestamp) -> HistoryPage {
        let connection = client.transport.connect()
        let path = ServerAPI.notificationHistoryPath(paginationToken: paginationToken)
        let body = ServerAPI.notificationHistoryBody(startDate: startDate, endDate: endDate)
        switch client.call("POST", path, environment: environment, body: body, on: connection) {
        case .failure(let failure): return .failure(failure)
        case .success(let json):
            let page: ServerAPI.Page
            do { page = try ServerAPI.notificationPage(json) } catch { return .failure(.invalid(error.description)) }
            let notifications = page.items.map { jws -> Result<ReceivedNotification, SubscriptionsError> in
                do throws(SubscriptionsError) { return .success(try apple.notification(jws, now: now)) } catch { return .failure(error) }
            }
            return .success((notifications, page.next))
        }
    }
}

extension SubscriptionsError {
    /// For logs: the verification failure's message (never signed data itself).
    var rpcMessage: String {
        switch self {
        case .verification(let reason, let message): return "\(reason): \(message)"
        case .ownedByOtherUser: return "owned by another user"
        case .storage(let error): return "\(error)"
        }
    }
}
