import Foundation
import JSON
import JSONParsing
import JSONRPC
import Testing
@testable import Kernel

/// User A's token can never read or change user B's data through any method. Every registered user
/// method is called with A's token; B's rows must be unchanged and no answer to A may mention B.
/// `sampleParams` gives each method params that make it do real work; it grows with every domain.
@Suite struct IsolationTests {
    static let sampleParams: [String: JSON] = [
        "auth.signOut": ["scope": "all"],
        "screentime.updateConnection": ["enabled": true, "timezone": "Europe/Berlin", "selection": ["apps": ["OWNER"]]],
        "screentime.claim": ["date": "2025-03-01", "minutes": 30],
        "screentime.upload": ["date": "2025-03-01", "verifiedMinutes": 60, "raw": ["owner": "OWNER"]],
        "screentime.day": ["date": "2025-03-01"],
        "screentime.history": ["from": "2025-03-01", "to": "2025-03-31", "includeRaw": true],
        "screentime.logEvent": ["type": "intervalDidStart", "activity": "OWNER", "at": "2025-03-01T00:00:00Z"],
        "rewards.earn": ["xp": 100, "reason": "OWNER", "key": "OWNER-key"],
        "rewards.redeem": ["xp": 50],
        "rewards.spend": ["minutes": 2],
        "sessions.record": ["startTime": "2025-03-01T07:00:00Z", "durationSeconds": 600, "clientSessionId": "OWNER"],
        "sessions.start": ["clientSessionId": "OWNER-timer"],
        "sessions.get": ["sessionId": "OWN_SESSION"],
        "sessions.list": ["limit": 1],
        "sessions.delete": ["sessionId": "OWN_SESSION"],
        "sessions.stats": ["timezone": "Europe/Berlin", "from": "2025-02-01", "to": "2025-03-31"],
        "sync.changes": ["limit": 1000, "includeData": true],
        "subscriptions.verify": ["provider": "apple", "productId": "premium.yearly", "receipt": "RECEIPT_OWNER"],
        // Both users send the same HealthKit UUIDs: each user's items are their own.
        "health.ingest": [
            "deviceId": "OWNER-device", "timezone": "Europe/Berlin", "replaceDays": ["2025-03-01"],
            "samples": [
                ["uuid": "0a000000-0000-4000-8000-000000000001", "type": "HKQuantityTypeIdentifierStepCount", "value": 100, "unit": "count",
                 "start": "2025-03-01T10:00:00Z", "end": "2025-03-01T10:10:00Z", "source": ["name": "OWNER"]],
                ["uuid": "0a000000-0000-4000-8000-000000000002", "type": "HKQuantityTypeIdentifierHeartRate", "value": 60, "unit": "count/min",
                 "start": "2025-03-01T10:00:00Z", "end": "2025-03-01T10:00:00Z", "source": ["name": "OWNER"]],
            ],
            "workouts": [["uuid": "0a000000-0000-4000-8000-000000000003", "activityType": "running", "start": "2025-03-01T07:00:00Z",
                          "end": "2025-03-01T07:30:00Z", "durationSeconds": 1800, "source": ["name": "OWNER"]]],
            "sleep": [["uuid": "0a000000-0000-4000-8000-000000000004", "stage": "asleepCore", "start": "2025-03-01T01:00:00Z",
                       "end": "2025-03-01T06:00:00Z", "source": ["name": "OWNER"]]],
            "stateOfMind": [["uuid": "0a000000-0000-4000-8000-000000000005", "kind": "dailyMood", "valence": 0.5, "labels": ["calm"],
                             "start": "2025-03-01T20:00:00Z", "end": "2025-03-01T20:00:00Z", "source": ["name": "OWNER"]]],
            "medicationDoses": [["uuid": "0a000000-0000-4000-8000-000000000006", "logStatus": "taken", "medication": ["displayText": "OWNER"],
                                 "start": "2025-03-01T08:00:00Z", "end": "2025-03-01T08:00:00Z", "source": ["name": "OWNER"]]],
        ],
        "health.delete": ["uuids": ["0a000000-0000-4000-8000-000000000002"]],
        "health.setSourceOrder": ["type": "HKQuantityTypeIdentifierStepCount", "sources": [["deviceModel": "iPhone"]]],
        "health.summary": ["from": "2025-03-01", "to": "2025-03-07"],
        "health.weekly": ["from": "2025-03-01", "to": "2025-03-07"],
        "health.workouts": ["from": "2025-03-01", "to": "2025-03-07"],
    ]

    /// A method's sample params, with "OWNER" replaced by a marker of the user who sends them.
    /// `receipts` holds each owner's own App Store purchase (bought for that user: appAccountToken).
    static func params(_ method: String, owner: String, session: String, receipts: [String: String]) -> JSONObject {
        let text = (sampleParams[method] ?? [:]).serialized.replacingOccurrences(of: "RECEIPT_OWNER", with: receipts[owner] ?? "")
            .replacingOccurrences(of: "OWNER", with: owner).replacingOccurrences(of: "OWN_SESSION", with: session)
        return (try? JSON.parse(text))?.objectValue ?? JSONObject()
    }

    /// Methods whose effect ends A's access; they run last.
    static let runLast: Set<String> = ["auth.signOut", "auth.deleteUser"]

    @Test func userAcannotReachUserB() throws {
        let kernel = try makeKernel(AppStoreSetup.configure)
        let client = InProcessClient(kernel)
        func call(_ method: String, _ params: JSON) -> JSON { client.call(method, params) }
        let a = call("auth.signUp", ["email": "a@example.com", "password": "password-a"])["result"]
        let b = call("auth.signUp", ["email": "b@example.com", "password": "password-b"])["result"]
        #expect(a?["accessToken"] != nil)
        let tokenB = try #require(b?["accessToken"]?.stringValue)
        let idB = try #require(b?["user"]?["id"]?.stringValue)
        let idA = try #require(a?["user"]?["id"]?.stringValue)
        let receipts = ["A-marker": AppStoreSetup.receipt(original: "A-purchase", token: idA),
                         "B-marker": AppStoreSetup.receipt(original: "B-purchase", token: idB)]
        let userMethods = kernel.registry.methods.filter { $0.auth == .user || $0.auth == .userOrService }
        #expect(userMethods.count >= 3)
        let ordered = userMethods.filter { !Self.runLast.contains($0.name) } + userMethods.filter { Self.runLast.contains($0.name) }
        // B first uses every method, so that B has data in every table for A to (fail to) reach.
        var sessionB = ""
        // A second session, so that B's first page of sessions has a next one.
        _ = call("sessions.record", ["auth": .string(tokenB), "startTime": "2025-02-01T07:00:00Z", "durationSeconds": 60])
        var cursorsB: [String: String] = [:]  // method -> a cursor B was given
        for method in ordered where !Self.runLast.contains(method.name) && method.name != "sessions.delete" {
            var params = Self.params(method.name, owner: "B-marker", session: sessionB, receipts: receipts)
            params["auth"] = .string(tokenB)
            let response = call(method.name, .object(params))
            #expect(response["result"] != nil, "\(method.name) failed for B")
            if method.name == "sessions.record" { sessionB = response["result"]?["sessionId"]?.stringValue ?? "" }
            if let cursor = (response["result"]?["nextCursor"] ?? response["result"]?["cursor"])?.stringValue { cursorsB[method.name] = cursor }
        }
        #expect(cursorsB.keys.contains("sessions.list") && cursorsB.keys.contains("sync.changes"))
        let before = partition(kernel, idB)
        var sessionA = ""
        #expect(before.count >= 8)
        for method in ordered {
            // A fresh session each time, since some methods end the previous one.
            let signIn = call("auth.signIn", ["email": "a@example.com", "password": "password-a"])
            let tokenA = try #require(signIn["result"]?["accessToken"]?.stringValue)
            var params = Self.params(method.name, owner: "A-marker", session: sessionA, receipts: receipts)
            params["auth"] = .string(tokenA)
            if method.name == "subscriptions.verify" {
                // B's purchase, with A's token, belongs to another account.
                var theirs = params
                theirs["receipt"] = .string(receipts["B-marker"]!)
                #expect(call(method.name, .object(theirs))["error"]?["code"] == -32009, "A took B's purchase")
            }
            if params["sessionId"] != nil {
                // B's session id, with A's token, is not found: A is never told it exists.
                var theirs = params
                theirs["sessionId"] = .string(sessionB)
                #expect(call(method.name, .object(theirs))["error"]?["code"] == -32004, "\(method.name) reached B's session")
            }
            // A cursor B was given does not page through B's data for A.
            if let cursor = cursorsB[method.name] {
                var theirs = params
                theirs[method.name == "sync.changes" ? "since" : "cursor"] = .string(cursor)
                #expect(call(method.name, .object(theirs))["error"]?["code"] == -32602, "\(method.name) took B's cursor")
            }
            // A user id smuggled into params is refused, never used.
            var smuggled = params
            smuggled["userId"] = .string(idB)
            // (A method that takes userId from service tokens refuses it on a user's token.)
            let refusal = call(method.name, .object(smuggled))["error"]?["data"]
            #expect(refusal?["reason"] == (method.auth == .userOrService ? "invalid_params" : "unknown_field") && refusal?["field"] == "params.userId",
                    "\(method.name) took a userId")
            let response = call(method.name, .object(params))
            #expect(response["result"] != nil, "\(method.name) failed for its own user: \(response)")
            if method.name == "sessions.record" { sessionA = response["result"]?["sessionId"]?.stringValue ?? "" }
            let text = response.serialized
            #expect(!text.contains(idB) && !text.contains("b@example.com") && !text.contains("B-marker"),
                    "\(method.name) revealed B: \(text)")
        }
        #expect(partition(kernel, idB) == before, "B's data changed")
        let stillB = call("auth.user", ["auth": .string(tokenB)])
        #expect(stillB["result"]?["id"] == .string(idB))
    }

    /// Every row stored under a user's partition, in every table.
    func partition(_ kernel: Kernel, _ user: String) -> [String: JSON] {
        var rows: [String: JSON] = [:]
        guard let store = kernel.store else {
            // PostgreSQL: every row, as store export lists them.
            try? kernel.exportRows { line in
                guard line["user"]?.stringValue == user, let table = line["table"]?.stringValue, let key = line["key"]?.stringValue else { return }
                rows["\(table)/\(key)"] = line["value"]
            }
            return rows
        }
        for (table, key, value) in store.rows(of: user) { rows["\(table)/\(key)"] = value }
        return rows
    }
}
