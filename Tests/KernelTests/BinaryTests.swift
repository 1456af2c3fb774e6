import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport

/// The real binary as a host drives it: framing, limits, signals, exit codes, one-shot `call`.
@Suite(.oneStoreOnly) struct BinaryTests {
    let serve = ["serve", "--memory-only", "--log-level", "error"]
    let info = #"{"jsonrpc":"2.0","id":1,"method":"kernel.info"}"#

    @Test func oneRequestOneLineExitZero() throws {
        let r = try runBinary(serve, input: stream([info]))
        #expect(r.status == 0)
        #expect(r.stdoutText.filter { $0 == "\n" }.count == 1)
        #expect(try r.responses().first?["result"]?["name"] == "healthkernel")
    }

    @Test func invalidUTF8AndNULBytesAreErrorsAndServingGoesOn() throws {
        var input = Data(#"{"jsonrpc":"2.0","id":1,"method":"x\#u{00}"}"#.utf8)
        input = Data(#"{"jsonrpc":"2.0","id":"a","method":""#.utf8) + Data([0xC3, 0x28]) + Data("\"}\n".utf8)
        input += Data(#"{"jsonrpc":"2.0","id":"b","method":"k"#.utf8) + Data([0x00]) + Data("\"}\n".utf8)
        input += Data([0xFF, 0xFE, 0x0A])
        input += stream([info])
        let r = try runBinary(serve, input: input)
        let responses = try r.responses()
        #expect(r.status == 0)
        #expect(responses.count == 4)
        #expect(responses[0]["error"]?["data"]?["reason"] == "invalid_utf8")
        #expect(responses[1]["error"]?["code"] == -32700)
        #expect(responses[2]["error"]?["code"] == -32700)
        #expect(responses[3]["result"] != nil)
    }

    @Test func hugeLineIsRejectedAndTheNextOneAnswered() throws {
        var input = Data(#"{"jsonrpc":"2.0","id":1,"method":"kernel.info","params":{"pad":""#.utf8)
        input += Data(repeating: UInt8(ascii: "x"), count: 20 * 1024 * 1024)
        input += Data("\"}}\n".utf8)
        input += stream([#"{"jsonrpc":"2.0","id":2,"method":"kernel.info"}"#])
        let r = try runBinary(serve, input: input)
        let responses = try r.responses()
        #expect(r.status == 0)
        #expect(responses.count == 2)
        #expect(responses.first?["error"]?["data"]?["reason"] == "line_too_long")
        #expect(responses.first?["id"] == .null)
        #expect(responses.last?["id"] == 2 && responses.last?["result"] != nil)
    }

    @Test func maxLineBytesFlagIsHonoured() throws {
        let r = try runBinary(serve + ["--max-line-bytes", "60"], input: stream([
            #"{"jsonrpc":"2.0","id":1,"method":"kernel.info","params":{"pad":"xxxxxxxxxxxxxxx"}}"#, info,
        ]))
        let responses = try r.responses()
        #expect(responses.map { $0["error"]?["data"]?["reason"] } == [.string("line_too_long"), nil])
    }

    @Test func crlfLastLineWithoutNewlineAndBlankLines() throws {
        let input = Data("\r\n\(info)\r\n\n   \n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"kernel.info\"}".utf8)
        let r = try runBinary(serve, input: input)
        #expect(try r.responses().map { $0["id"] } == [1, 2])
    }

    @Test func stdinClosedMidLineGetsAParseErrorAndExitZero() throws {
        let r = try runBinary(serve, input: Data((info + "\n" + #"{"jsonrpc":"2.0","id":2,"meth"#).utf8))
        let responses = try r.responses()
        #expect(r.status == 0)
        #expect(responses.count == 2)
        #expect(responses.last?["error"]?["code"] == -32700)
    }

    @Test func hundredThousandPipelinedRequestsAnsweredInOrder() throws {
        let count = 100_000
        var text = ""
        text.reserveCapacity(count * 60)
        for i in 0..<count { text += #"{"jsonrpc":"2.0","id":\#(i),"method":"no.such"}"# + "\n" }
        let r = try runBinary(serve, input: Data(text.utf8))
        #expect(r.status == 0)
        let lines = r.stdoutText.split(separator: "\n")
        #expect(lines.count == count)
        var inOrder = true
        for (i, line) in lines.enumerated() where !line.hasPrefix(#"{"jsonrpc":"2.0","id":\#(i),"#) {
            inOrder = false
            break
        }
        #expect(inOrder)
    }

    @Test func sigtermFinishesPromptlyWithExitZero() throws {
        let k = try LiveKernel(serve)
        // Wait for the answer, so the kernel is idle in its read loop when the signal comes.
        #expect(k.call("kernel.info")?["result"] != nil)
        k.process.terminate()
        #expect(k.finish(seconds: 10) == 0, "the kernel ignored SIGTERM or did not exit 0")
    }

    @Test func vanishedHostDoesNotCrashTheKernel() throws {
        let k = try LiveKernel(serve)
        close(k.output)  // the host stops reading
        k.send(Array(repeating: info, count: 2000))
        k.closeInput()
        #expect(waitForExit(k.process, seconds: 30))
        #expect(k.process.terminationReason == .exit)  // EPIPE, not SIGPIPE
    }

    @Test func callPrintsTheResultOrFailsWithExitOne() throws {
        let ok = try runBinary(["call", "kernel.info", "{}", "--memory-only"])
        #expect(ok.status == 0)
        #expect(try JSON.parse(ok.stdoutText)["name"] == "healthkernel")
        let bad = try runBinary(["call", "kernel.info", #"{"nope":1}"#, "--memory-only"])
        #expect(bad.status == 1)
        #expect(bad.stdoutText.isEmpty)
        #expect(bad.stderrText.contains("unknown_field"))
        let missing = try runBinary(["call", "no.such", "--memory-only"])
        #expect(missing.status == 1)
        #expect(missing.stderrText.contains("-32601"))
        let notObject = try runBinary(["call", "kernel.info", "[1]", "--memory-only"])
        #expect(notObject.status == 2)
    }

    @Test func versionCommand() throws {
        let r = try runBinary(["version"])
        #expect(r.status == 0)
        #expect(r.stdoutText.hasPrefix("healthkernel "))
    }

    @Test func configErrorsStopStartUpNamingTheKey() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("hk-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("config.json")
        try Data(#"{"kernel":{"maxLineBytes":100,"colour":"blue"}}"#.utf8).write(to: file)
        let r = try runBinary(["serve", "--memory-only", "--config", file.path], input: stream([info]))
        #expect(r.status == 2)
        #expect(r.stdoutText.isEmpty)
        #expect(r.stderrText.contains("kernel.colour"))
        let env = try runBinary(["serve", "--memory-only"], input: stream([info]), environment: ["HEALTHKERNEL_FSYNC": "sometimes"])
        #expect(env.status == 2)
        #expect(env.stderrText.contains("HEALTHKERNEL_FSYNC"))
    }

    @Test func configFileEnvironmentAndFlagsLayerInOrder() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("hk-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("config.json")
        try Data(#"{"kernel":{"maxLineBytes":40}}"#.utf8).write(to: file)
        let line = #"{"jsonrpc":"2.0","id":1,"method":"kernel.info","params":{}}"#  // 59 bytes
        let fromFile = try runBinary(["serve", "--memory-only", "--config", file.path], input: stream([line]))
        #expect(try fromFile.responses().first?["error"]?["data"]?["reason"] == "line_too_long")
        let fromEnv = try runBinary(["serve", "--memory-only"], input: stream([line]),
                                    environment: ["HEALTHKERNEL_CONFIG": file.path, "HEALTHKERNEL_MAX_LINE_BYTES": "100"])
        #expect(try fromEnv.responses().first?["result"] != nil)
        let fromFlag = try runBinary(["serve", "--memory-only", "--max-line-bytes", "50"], input: stream([line]),
                                     environment: ["HEALTHKERNEL_CONFIG": file.path, "HEALTHKERNEL_MAX_LINE_BYTES": "100"])
        #expect(try fromFlag.responses().first?["error"]?["data"]?["reason"] == "line_too_long")
    }
}

/// `healthkernel token` in a shell-style pipeline against a data dir.
/// #51 item 12: `healthkernel mcp` reads lines with the kernel's limit: a line past it is answered once
/// and skipped to its newline (an unfinished 256 MiB line was held whole), and the next line is served.
@Suite(.oneStoreOnly) struct MCPBinaryTests {
    @Test func aLineLongerThanTheLimitIsAnsweredAndSkipped() throws {
        let secret = ["--jwt-secret", testSecret, "--log-level", "error"]
        let token = try #require(runBinary(["token", "--user", testUser] + secret).stdoutText.split(separator: "\n").first).description
        var input = Data("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"".utf8)
        input.append(Data(repeating: 0x61, count: 200_000))
        input.append(Data("\"}}\n".utf8))
        input.append(Data(#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#.utf8 + [0x0A]))
        let r = try runBinary(["mcp", "--memory-only", "--token", token, "--max-line-bytes", "65536"] + secret, input: input)
        let lines = try r.stdoutText.split(separator: "\n").map { try JSON.parse(String($0)) }
        #expect(lines.count == 2, "\(r.stdoutText.prefix(500)) \(r.stderrText)")
        #expect(lines.first?["error"]?["code"] == -32600 && lines.first?["error"]?["message"]?.stringValue?.contains("65536") == true)
        #expect(lines.last?["id"] == 2 && lines.last?["result"]?["protocolVersion"] == "2025-11-25")
    }
}

@Suite(.oneStoreOnly) struct TokenCommandTests {
    @Test func mintedTokensWorkAgainstTheKernel() throws {
        let dir = temporaryDirectory("token")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let user = "12345678-1234-4234-8234-123456789abc"
        let minted = try runBinary(["token", "--user", user, "--data-dir", dir])
        #expect(minted.status == 0)
        let token = minted.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let me = try runBinary(["call", "auth.user", "--token", token, "--data-dir", dir])
        #expect(me.status == 0)
        #expect(try JSON.parse(me.stdoutText)["id"] == .string(user))
        let service = try runBinary(["token", "--role", "service_role", "--data-dir", dir]).stdoutText
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let snapshot = try runBinary(["call", "kernel.snapshot", "--token", service, "--data-dir", dir])
        #expect(snapshot.status == 0, "\(snapshot.stderrText)")
        #expect(try JSON.parse(snapshot.stdoutText)["seq"] != nil)
        let forbidden = try runBinary(["call", "kernel.snapshot", "--token", token, "--data-dir", dir])
        #expect(forbidden.status == 1 && forbidden.stderrText.contains("service_role_required"))
        // By email, for an account that exists.
        _ = try runBinary(["call", "auth.signUp", #"{"email":"cli@example.com","password":"long enough"}"#, "--data-dir", dir])
        let byEmail = try runBinary(["token", "--user", "CLI@example.com", "--data-dir", dir])
        #expect(byEmail.status == 0)
        let secretMode = try FileManager.default.attributesOfItem(atPath: dir + "/jwt-secret")[.posixPermissions] as? Int
        #expect(secretMode == 0o600)
        #expect(try runBinary(["token", "--user", user, "--memory-only"]).status == 2)
    }
}
