import DomainSupport
import JSON
import JSONRPC
import Storage
import Store

/// A row of the test table: a value written by `test.write`.
struct TestValue: StoredRow {
    let value: String
    init(value: String) { self.value = value }
    init(stored: JSON) throws(StorageError) {
        guard let v = stored["v"]?.stringValue else { throw StorageError.corrupt("test row without v") }
        value = v
    }
    var stored: JSON { ["v": .string(value)] }
}

/// The user the test methods write as (they need no token).
let testUser = "00000000-0000-4000-8000-000000000000"

/// `test.write` (test-only, behind `--enable-test-methods`): writes the same value under `a/<key>` and
/// `b/<key>` in one transaction, so a crash test can check that no request is ever half-applied.
struct TestWrite: RPCMethod {
    struct Params: RPCParams {
        static let declaration = ParamList(
            required("key", String.self).schema(["maxLength": 200]).checked { (key, path) throws(FieldError) in
                guard key.utf8.count <= 200 else { throw .outOfRange(path, "must be at most 200 bytes") }
            },
            required("value", String.self).schema(["maxLength": 65536]).checked { (value, path) throws(FieldError) in
                guard value.utf8.count <= 65536 else { throw .outOfRange(path, "must be at most 64 KiB") }
            })
        let key: String
        let value: String
        init(_ v: (String, String)) { (key, value) = v }
    }
    static let name = "test.write"
    static let summary = "Test only: writes a value twice in one transaction."
    static let mutates = true
    static let auth = AuthRequirement.none

    let store: any KernelStore
    let table: any StorageTable<TestValue>

    func call(_ p: Params, _ context: CallContext) throws(RPCError) -> TestAnswer {
        var tx = Transaction()
        tx.put(table, user: testUser, key: "a/" + p.key, TestValue(value: p.value))
        tx.put(table, user: testUser, key: "b/" + p.key, TestValue(value: p.value))
        do {
            try store.commit(tx)
        } catch {
            throw RPCError.from(error)
        }
        return TestAnswer(json: ["seq": .int(Int64((store as? Store)?.lastRecord ?? store.lastCommitID))])
    }
}

/// `test.dump` (test-only): every key with its `a` and `b` values.
struct TestDump: RPCMethod {
    static let name = "test.dump"
    static let summary = "Test only: lists what test.write stored."
    static let mutates = false
    static let auth = AuthRequirement.none

    let table: any StorageTable<TestValue>

    func call(_ p: NoParams, _ context: CallContext) throws(RPCError) -> TestAnswer {
        do throws(StorageError) {
            var keys = Set<String>()
            for (k, _) in try table.rows(of: testUser) { keys.insert(String(k.dropFirst(2))) }
            var list: [JSON] = []
            for k in keys.sorted() {
                list.append(["key": .string(k), "a": .optional(try table.get(user: testUser, key: "a/" + k)?.value),
                             "b": .optional(try table.get(user: testUser, key: "b/" + k)?.value)])
            }
            return TestAnswer(json: ["rows": .array(list)])
        } catch {
            throw RPCError.from(error)
        }
    }
}

/// What the test-only methods answer: any object (they are never published).
struct TestAnswer: RPCResult {
    let json: JSON
    static let schema: JSON = ["type": "object"]
}
