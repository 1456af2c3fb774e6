"""healthkernel mcp, driven by the official MCP Python SDK (mcp 2.x), in both protocol eras.

Run by scripts/mcp-test (part of the README's test command) with HEALTHKERNEL_BIN set. It seeds a data
dir through `healthkernel call`, then spawns `healthkernel mcp` and, as 2026-07-28 (server/discover)
and as 2025-11-25 (initialize): lists the tools and checks their schemas are valid JSON Schema, calls
every tool and compares its structuredContent with the method called directly, reads the resources,
and checks that bad arguments, unknown tools and resources, a service token and another user's ids are
refused cleanly.
"""
import asyncio, datetime, json, os, subprocess, sys, tempfile, uuid

import jsonschema
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

BIN = os.environ["HEALTHKERNEL_BIN"]
DIR = tempfile.mkdtemp(prefix="hk-mcp-")
DATA = os.path.join(DIR, "data")
SECRET = "mcp-test-secret-0123456789abcdef0123456789"
BASE = ["--data-dir", DATA, "--jwt-secret", SECRET, "--log-level", "error"]
SOCKET = os.path.join(DIR, "hk.sock")
# While a kernel serves the data dir, everything reaches it through its socket.
VIA = ["--connect", "unix:" + SOCKET, "--jwt-secret", SECRET, "--log-level", "error"]
TODAY = datetime.datetime.now(datetime.timezone.utc).date()


def hours_ago(hours):
    """An instant `hours` before now: sessions never start in the future (06:00 today did, before 06:00 UTC)."""
    return (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


def call(method, params=None, token=None):
    args = [BIN, "call", method, json.dumps(params or {})] + VIA + (["--token", token] if token else [])
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{method}: {out.stderr}")
    return json.loads(out.stdout)


def seed():
    ann = call("auth.signUp", {"email": "ann@example.com", "password": "password-ann"})
    bob = call("auth.signUp", {"email": "bob@example.com", "password": "password-bob"})
    token = ann["accessToken"]
    days = [(TODAY - datetime.timedelta(days=i)).isoformat() for i in range(3)]
    samples = [{"uuid": str(uuid.uuid4()), "type": "HKQuantityTypeIdentifierStepCount", "value": 1000 * (i + 1), "unit": "count",
                "start": f"{d}T10:00:00Z", "end": f"{d}T10:30:00Z"} for i, d in enumerate(days)]
    sleep = [{"uuid": str(uuid.uuid4()), "stage": "asleepCore", "start": f"{days[0]}T01:00:00Z", "end": f"{days[0]}T07:30:00Z"}]
    workouts = [{"uuid": str(uuid.uuid4()), "activityType": "running", "start": f"{days[1]}T07:00:00Z", "end": f"{days[1]}T07:40:00Z",
                 "durationSeconds": 2400, "energyKcal": 350}]
    call("health.ingest", {"timezone": "UTC", "samples": samples, "sleep": sleep, "workouts": workouts}, token)
    call("sessions.record", {"startTime": f"{days[1]}T06:00:00Z", "durationSeconds": 600}, token)
    bob_session = call("sessions.record", {"startTime": f"{days[1]}T06:00:00Z", "durationSeconds": 900}, bob["accessToken"])
    call("rewards.earn", {"xp": 50, "reason": "walk", "key": "k1"}, token)
    return token, bob_session["sessionId"]


ARGS = {
    "health_daily_summary": {"from": (TODAY - datetime.timedelta(days=6)).isoformat(), "to": TODAY.isoformat()},
    "health_weekly_summary": {"from": (TODAY - datetime.timedelta(days=13)).isoformat(), "to": TODAY.isoformat()},
    "health_workouts": {"from": (TODAY - datetime.timedelta(days=6)).isoformat(), "to": TODAY.isoformat()},
    "meditation_stats": {},
    "meditation_sessions": {"limit": 10},
    "screen_time_history": {"from": (TODAY - datetime.timedelta(days=6)).isoformat(), "to": TODAY.isoformat()},
    "screen_time_penalties": {},
    "rewards_balance": {},
    "subscription_status": {},
    "changes_since": {"limit": 100},
}
METHODS = {"health_daily_summary": "health.summary", "health_weekly_summary": "health.weekly", "health_workouts": "health.workouts",
           "meditation_stats": "sessions.stats", "meditation_sessions": "sessions.list", "screen_time_history": "screentime.history",
           "screen_time_penalties": "screentime.penalties", "rewards_balance": "rewards.balance",
           "subscription_status": "subscriptions.status", "changes_since": "sync.changes"}


async def session_run(token, era, bob_session, extra_args=()):
    params = StdioServerParameters(command=BIN, args=["mcp", "--token", token] + list(extra_args))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            if era == "2026-07-28":
                found = await session.discover()
                assert found.supported_versions == ["2026-07-28"], found
                assert found.cache_scope == "private"
            else:
                init = await session.initialize()
                assert init.protocol_version == "2025-11-25", init
            listed = await session.list_tools()
            names = sorted(t.name for t in listed.tools)
            assert names == sorted(ARGS), names
            for tool in listed.tools:
                jsonschema.Draft202012Validator.check_schema(tool.input_schema)
                assert tool.input_schema["type"] == "object"
                assert "auth" not in tool.input_schema.get("properties", {})
                if tool.output_schema is not None:
                    jsonschema.Draft202012Validator.check_schema(tool.output_schema)
                assert tool.annotations.read_only_hint is True
                assert all(c.isalnum() or c in "_-." for c in tool.name) and len(tool.name) <= 128
            for name, args in ARGS.items():
                result = await session.call_tool(name, args)
                assert not result.is_error, (name, result.content)
                direct = call(METHODS[name], args, token)
                if name == "changes_since":
                    # The cursor is sealed afresh on every call: compare the entries.
                    assert result.structured_content["changes"] == direct["changes"], name
                elif name == "meditation_sessions":
                    assert result.structured_content["sessions"] == direct["sessions"], name
                else:
                    assert result.structured_content == direct, (name, result.structured_content, direct)
                assert result.content[0].type == "text" and result.content[0].text
                assert json.loads(result.content[1].text) == result.structured_content
            summary = await session.call_tool("health_daily_summary", ARGS["health_daily_summary"])
            assert "StepCount 1000" in summary.content[0].text, summary.content[0].text
            # Bad arguments are tool results naming the argument, never protocol errors.
            bad = await session.call_tool("health_daily_summary", {"from": "2026-02-30", "to": TODAY.isoformat()})
            assert bad.is_error and "from" in bad.content[0].text, bad.content
            missing = await session.call_tool("health_workouts", {"to": TODAY.isoformat()})
            assert missing.is_error and "from" in missing.content[0].text
            # Another user's data is never in an answer: bob's session is not among ann's.
            mine = await session.call_tool("meditation_sessions", {"limit": 100})
            assert bob_session not in json.dumps(mine.structured_content)
            try:
                await session.call_tool("meditation_sessions", {"cursor": "forged"})
            except MCPError:
                raise AssertionError("a bad cursor must be a tool result")
            try:
                await session.call_tool("no_such_tool", {})
                raise AssertionError("an unknown tool must be a protocol error")
            except MCPError as e:
                assert e.error.code == -32602
            resources = await session.list_resources()
            uris = sorted(str(r.uri) for r in resources.resources)
            assert uris == sorted(["healthkernel://summary/last-7-days", "healthkernel://summary/last-30-days",
                                   "healthkernel://meditation/stats", "healthkernel://subscription"]), uris
            week = await session.read_resource("healthkernel://summary/last-7-days")
            assert json.loads(week.contents[0].text) == call("health.summary", ARGS["health_daily_summary"], token)
            try:
                await session.read_resource("healthkernel://nothing")
                raise AssertionError("an unknown resource must be an error")
            except MCPError as e:
                assert e.error.code == (-32602 if era == "2026-07-28" else -32002), e.error.code
    return True


async def main():
    kernel = subprocess.Popen([BIN, "serve", "--no-stdin", "--listen", "unix:" + SOCKET] + BASE, stderr=subprocess.DEVNULL)
    try:
        await with_kernel()
    finally:
        kernel.terminate()
        kernel.wait(timeout=30)
    # With no kernel serving, mcp opens the data dir itself.
    token = call_direct("auth.signIn", {"email": "ann@example.com", "password": "password-ann"})["accessToken"]
    params = StdioServerParameters(command=BIN, args=["mcp", "--token", token] + BASE)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            balance = await session.call_tool("rewards_balance", {})
            assert balance.structured_content == {"xp": 50, "minutes": 0}, balance.structured_content
    print("ok: the data dir opened by mcp itself")
    # A service token is refused at start, with exit status 2.
    service = subprocess.run([BIN, "token", "--role", "service_role"] + BASE, capture_output=True, text=True).stdout.strip()
    refused = subprocess.run([BIN, "mcp", "--token", service] + BASE, input="", capture_output=True, text=True)
    assert refused.returncode == 2 and "not a user's access token" in refused.stderr, (refused.returncode, refused.stderr)
    print("ok: service token refused")


def call_direct(method, params):
    out = subprocess.run([BIN, "call", method, json.dumps(params)] + BASE, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


async def with_kernel():
    token, bob_session = seed()
    for era in ("2026-07-28", "2025-11-25"):
        await session_run(token, era, bob_session, VIA)
        print(f"ok: {era}")
    # Writes only when allowed, and marked as writes.
    params = StdioServerParameters(command=BIN, args=["mcp", "--token", token, "--allow-writes"] + VIA)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.discover()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert tools["record_meditation_session"].annotations.read_only_hint is False
            wrote = await session.call_tool("record_meditation_session", {"startTime": hours_ago(1), "durationSeconds": 300})
            assert not wrote.is_error and wrote.structured_content["durationSeconds"] == 300, (wrote.is_error, wrote.content)
            claimed = await session.call_tool("claim_screen_time", {"date": TODAY.isoformat(), "minutes": 45})
            assert not claimed.is_error and claimed.structured_content["status"] == "unverified", claimed.structured_content
            assert call("screentime.day", {"date": TODAY.isoformat()}, token)["claimedMinutes"] == 45
    print("ok: writes")
    await subscriptions(token)
    await expired_token()
    await kept_alive()


async def kept_alive():
    """--refresh-token: the server starts from the refresh token saved in a file, refreshes, saves the
    rotated token there at once (0600), and serves with the new access token; a file that holds no valid
    refresh token stops it at start with a message."""
    signed = call("auth.signIn", {"email": "ann@example.com", "password": "password-ann"})
    path = os.path.join(DIR, "mcp-refresh-token")
    with open(path, "w") as f:
        f.write(signed["refreshToken"] + "\n")
    server = subprocess.Popen([BIN, "mcp", "--refresh-token", "--refresh-token-file", path] + VIA, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": meta, "name": "rewards_balance", "arguments": {}}}
    out, err = server.communicate(json.dumps(request) + "\n", timeout=30)
    answer = json.loads(out.splitlines()[0])
    assert answer["result"]["isError"] is False and answer["result"]["structuredContent"]["xp"] == 50, (answer, err)
    rotated = open(path).read().strip()
    assert rotated and rotated != signed["refreshToken"], "the rotated refresh token is saved"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with open(path, "w") as f:
        f.write("not-a-refresh-token\n")
    refused = subprocess.run([BIN, "mcp", "--refresh-token", "--refresh-token-file", path] + VIA, input="", capture_output=True, text=True)
    assert refused.returncode == 2 and "refresh token was refused" in refused.stderr, (refused.returncode, refused.stderr)
    print("ok: --refresh-token keeps the session and saves each rotation")


async def expired_token():
    """A token that stops being accepted while the server runs (its session signed out) ends it with a
    clear message on stderr."""
    token = call("auth.signIn", {"email": "ann@example.com", "password": "password-ann"})["accessToken"]
    server = subprocess.Popen([BIN, "mcp", "--token", token] + VIA, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": meta, "name": "rewards_balance", "arguments": {}}}
    server.stdin.write(json.dumps(request) + "\n")
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["result"]["isError"] is False
    call("auth.signOut", {}, token)
    request["id"] = 2
    out, err = server.communicate(json.dumps(request) + "\n", timeout=30)
    assert server.returncode == 1 and "no longer accepted" in err, (server.returncode, err)
    print("ok: a token no longer accepted ends the server")


async def subscriptions(token):
    """A resource update reaches a listening client when another host writes through the kernel."""
    from mcp.client.subscriptions import listen
    params = StdioServerParameters(command=BIN, args=["mcp", "--token", token] + VIA)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.discover()
            async with listen(session, resource_subscriptions=["healthkernel://meditation/stats"]) as subscription:
                assert list(subscription.honored.resource_subscriptions) == ["healthkernel://meditation/stats"]
                call("sessions.record", {"startTime": hours_ago(2), "durationSeconds": 120}, token)
                with anyio_timeout(20):
                    event = await subscription.__anext__()
                assert event.uri == "healthkernel://meditation/stats", event
    print("ok: 2026-07-28 listen")
    updates = []

    async def handler(message):
        if getattr(message, "method", None) == "notifications/resources/updated":
            updates.append(str(message.params.uri))

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=handler) as session:
            await session.initialize()
            await session.subscribe_resource("healthkernel://summary/last-7-days")
            day = TODAY.isoformat()
            call("health.ingest", {"timezone": "UTC", "samples": [{"uuid": str(uuid.uuid4()), "type": "HKQuantityTypeIdentifierStepCount",
                                                                    "value": 5, "unit": "count", "start": f"{day}T11:00:00Z", "end": f"{day}T11:05:00Z"}]}, token)
            for _ in range(80):
                if updates:
                    break
                await asyncio.sleep(0.25)
            assert updates == ["healthkernel://summary/last-7-days"], updates
    print("ok: 2025-11-25 subscribe")


def anyio_timeout(seconds):
    import anyio
    return anyio.fail_after(seconds)


asyncio.run(main())
