#!/usr/bin/env python3
"""healthkernel benchmark: the release binary side by side with Redis and SQLite, in one run.

Sections: upload throughput, round-trip latency, start-up, recovery and snapshot. Every figure is the
median of several runs; ratios are computed run by run. Prints a table and writes
Benchmarks/results/latest.json. Usage: python3 Benchmarks/bench.py [--requests N] [--users U] [--runs R]
[--baseline BIN]: with a baseline (another healthkernel binary, say the last release), throughput, restart
from a snapshot and snapshot time are measured for it too, in the same runs, and printed side by side.
"""
import argparse, base64, calendar, hashlib, hmac, json, os, platform, shutil, socket, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "Benchmarks")
SECRET = "benchmark-secret-benchmark-secret-0123456789"
HK = os.path.join(ROOT, ".build", "release", "healthkernel")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def token(claims):
    h = b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    p = b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = hmac.new(SECRET.encode(), (h + "." + p).encode(), hashlib.sha256).digest()
    return h + "." + p + "." + b64(sig)


def user_id(i):
    return "00000000-0000-4000-8000-%012d" % i


def user_token(i):
    return token({"sub": user_id(i), "aud": "authenticated", "role": "authenticated", "iat": int(time.time()), "exp": int(time.time()) + 86400})


SERVICE = token({"role": "service_role", "exp": int(time.time()) + 86400})


def ensure_tools():
    missing = [pkg for cmd, pkg in [("redis-server", "redis-server"), ("sqlite3", "sqlite3"), ("gcc", "gcc")] if shutil.which(cmd) is None]
    if missing:
        log("installing", " ".join(missing))
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, stdout=sys.stderr)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq"] + missing, check=True, stdout=sys.stderr,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    log("building the release binary")
    subprocess.run(["bash", "-c", ". scripts/deps.sh && swift build -c release --static-swift-stdlib"], cwd=ROOT, check=True, stdout=sys.stderr)


def compile_helpers(tmp):
    for name in ["rtt", "echo"]:
        subprocess.run(["gcc", "-O2", "-o", os.path.join(tmp, name), os.path.join(BENCH, name + ".c")], check=True)
    subprocess.run(["gcc", "-O2", "-o", os.path.join(tmp, "jparse"), os.path.join(BENCH, "jparse.c"), "-ljansson"], check=True)


def jansson_ceiling(tmp, runs):
    """jansson alone on the same request lines, one core (median lines/s): what one parsing core can do."""
    rates = [float(subprocess.run([os.path.join(tmp, "jparse"), os.path.join(tmp, "kernel.jsonl")], capture_output=True,
                                  check=True).stdout) for _ in range(runs)]
    return statistics.median(rates)


# ---------------------------------------------------------------- data

def uploads(n, users):
    """(user index, date, minutes, raw) for each upload: `n / users` days per user."""
    for i in range(n):
        u = i % users
        day = i // users
        date = "2025-%02d-%02d" % (1 + (day // 28) % 12, 1 + day % 28)
        yield u, date, (i * 7) % 1441, {"device": "iPhone15,2", "pickups": i % 97, "apps": [{"b": "com.example.social", "m": (i * 7) % 600}]}


def write_inputs(tmp, n, users):
    tokens = [user_token(u) for u in range(users)]
    kernel, resp, sql = [open(os.path.join(tmp, f), "w") for f in ["kernel.jsonl", "redis.resp", "sqlite.sql"]]
    for u in range(users):
        kernel.write(json.dumps({"jsonrpc": "2.0", "id": "c%d" % u, "method": "screentime.updateConnection",
                                 "params": {"auth": tokens[u], "enabled": True}}, separators=(",", ":")) + "\n")
    sql.write("PRAGMA journal_mode=WAL;\nPRAGMA synchronous=NORMAL;\n"
              "CREATE TABLE days(user TEXT NOT NULL, date TEXT NOT NULL, verified INTEGER NOT NULL, raw TEXT, "
              "uploaded_at INTEGER, PRIMARY KEY(user, date));\nBEGIN;\n")
    for i, (u, date, minutes, raw) in enumerate(uploads(n, users)):
        params = {"auth": tokens[u], "date": date, "verifiedMinutes": minutes, "raw": raw}
        kernel.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "screentime.upload", "params": params}, separators=(",", ":")) + "\n")
        value = json.dumps({"date": date, "verifiedMinutes": minutes, "raw": raw, "uploadedAt": 1760000000000 + i}, separators=(",", ":"))
        key = "st:%s:%s" % (user_id(u), date)
        resp.write("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value.encode()), value))
        sql.write("INSERT INTO days VALUES('%s','%s',%d,'%s',%d) ON CONFLICT(user,date) DO UPDATE SET verified=excluded.verified, "
                  "raw=excluded.raw, uploaded_at=excluded.uploaded_at;\n" % (user_id(u), date, minutes, json.dumps(raw, separators=(",", ":")), 1760000000000 + i))
        if (i + 1) % 10000 == 0:
            sql.write("COMMIT;\nBEGIN;\n")
    sql.write("COMMIT;\n")
    for f in (kernel, resp, sql):
        f.close()
    return tokens


# ---------------------------------------------------------------- helpers

def count_lines_until(stream, expected):
    seen = 0
    while seen < expected:
        chunk = stream.read1(1 << 20) if hasattr(stream, "read1") else stream.read(1 << 20)
        if not chunk:
            break
        seen += chunk.count(b"\n")
    return seen


def serve(data_dir, *extra, binary=None):
    return [binary or HK, "serve", "--data-dir", data_dir, "--jwt-secret", SECRET, "--log-level", "error"] + list(extra)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- 1. throughput

def run_kernel_ingest(tmp, n, users, data_dir, extra=(), binary=None):
    expected = n + users
    cat = subprocess.Popen(["cat", os.path.join(tmp, "kernel.jsonl")], stdout=subprocess.PIPE)
    start = time.perf_counter()
    k = subprocess.Popen(serve(data_dir, "--fsync", "everysec", *extra, binary=binary), stdin=cat.stdout, stdout=subprocess.PIPE)
    cat.stdout.close()
    seen = count_lines_until(k.stdout, expected)
    elapsed = time.perf_counter() - start
    return k, seen, elapsed


def ingest_seconds(tmp, n, users, data_dir, binary=None):
    shutil.rmtree(data_dir, ignore_errors=True)
    k, seen, seconds = run_kernel_ingest(tmp, n, users, data_dir, binary=binary)
    k.stdout.close()
    k.wait()
    assert seen == n + users, f"kernel answered {seen} of {n + users}"
    return seconds


def throughput(tmp, n, users, runs, baseline=None):
    results = []
    for r in range(runs):
        log(f"throughput run {r + 1}/{runs}")
        data_dir = os.path.join(tmp, "hk-data-%d" % r)
        # With a baseline, the two binaries take turns going first, so neither always meets a warmer cache.
        if baseline and r % 2 == 0:
            baseline_s = ingest_seconds(tmp, n, users, os.path.join(tmp, "hk-baseline"), baseline)
        kernel_s = ingest_seconds(tmp, n, users, data_dir)
        if baseline and r % 2 == 1:
            baseline_s = ingest_seconds(tmp, n, users, os.path.join(tmp, "hk-baseline"), baseline)
        # Redis 7, AOF everysec, on its own loopback port and temp dir.
        rdir = os.path.join(tmp, "redis-%d" % r)
        os.makedirs(rdir)
        port = free_port()
        redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", rdir, "--appendonly", "yes",
                                  "--appendfsync", "everysec", "--save", ""], stdout=subprocess.DEVNULL)
        for _ in range(200):
            if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            time.sleep(0.05)
        start = time.perf_counter()
        with open(os.path.join(tmp, "redis.resp"), "rb") as f:
            subprocess.run(["redis-cli", "-p", str(port), "--pipe"], stdin=f, stdout=subprocess.DEVNULL, check=True)
        redis_s = time.perf_counter() - start
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True)
        redis.wait()
        # SQLite, WAL, synchronous=NORMAL, 10,000-row transactions.
        db = os.path.join(tmp, "sqlite-%d.db" % r)
        start = time.perf_counter()
        with open(os.path.join(tmp, "sqlite.sql"), "rb") as f:
            subprocess.run(["sqlite3", db], stdin=f, stdout=subprocess.DEVNULL, check=True)
        sqlite_s = time.perf_counter() - start
        results.append({"kernel_rps": (n + users) / kernel_s, "redis_rps": n / redis_s, "sqlite_rps": n / sqlite_s,
                        "vs_redis": ((n + users) / kernel_s) / (n / redis_s), "vs_sqlite": ((n + users) / kernel_s) / (n / sqlite_s)})
        if baseline:
            results[-1] |= {"baseline_rps": (n + users) / baseline_s, "vs_baseline": baseline_s / kernel_s}
        if r < runs - 1:
            shutil.rmtree(data_dir, ignore_errors=True)
    return {k: statistics.median(x[k] for x in results) for k in results[0]} | {"runs": results}, os.path.join(tmp, "hk-data-%d" % (runs - 1))


# ---------------------------------------------------------------- 2. round trips

# ---------------------------------------------------------------- 1b. health ingest

MONTH = 31 * 1440


def health_month(user, month):
    """One health.ingest of a month of minute-level heart rate from a watch (44,640 samples), as a first sync sends it."""
    base = calendar.timegm((2026, month, 1, 0, 0, 0))
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    samples = [{"uuid": "%08x-%04x-4000-8000-%012x" % (user, month, i), "type": "HKQuantityTypeIdentifierHeartRate",
                "value": 55 + i % 40, "unit": "count/min", "start": stamp(base + 60 * i), "end": stamp(base + 60 * i),
                "source": {"name": "Apple Watch", "bundleId": "com.apple.health.0A1B2C3D"}, "device": {"model": "Watch", "name": "Apple Watch"}}
               for i in range(MONTH)]
    return json.dumps({"jsonrpc": "2.0", "id": month, "method": "health.ingest",
                       "params": {"auth": user_token(user), "timezone": "Europe/Berlin", "samples": samples}}, separators=(",", ":"))


def health_ingest(tmp, runs, months=6):
    """A month of minute heart rate in one request (time to its answer, the kernel already running), and
    `months` such requests pipelined, in samples/s beside jansson's parse rate of the same lines."""
    path = os.path.join(tmp, "health.jsonl")
    with open(path, "w") as f:
        for m in range(months):
            f.write(health_month(m + 1, m + 1) + "\n")
    lines = open(path, "rb").read().splitlines(keepends=True)
    single, rates = [], []
    for r in range(runs):
        log(f"health ingest run {r + 1}/{runs}")
        data_dir = os.path.join(tmp, "hk-health-%d" % r)
        shutil.rmtree(data_dir, ignore_errors=True)
        k = subprocess.Popen(serve(data_dir, "--fsync", "always"), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        k.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"kernel.info"}\n')
        k.stdin.flush()
        k.stdout.readline()
        start = time.perf_counter()
        k.stdin.write(lines[0])
        k.stdin.flush()
        answer = json.loads(k.stdout.readline())
        single.append((time.perf_counter() - start) * 1000)
        assert answer["result"]["accepted"]["samples"] == MONTH, answer
        k.stdin.close()
        k.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
        cat = subprocess.Popen(["cat", path], stdout=subprocess.PIPE)
        start = time.perf_counter()
        k = subprocess.Popen(serve(data_dir, "--fsync", "everysec"), stdin=cat.stdout, stdout=subprocess.PIPE)
        cat.stdout.close()
        seen = count_lines_until(k.stdout, months)
        rates.append(months * MONTH / (time.perf_counter() - start))
        k.stdout.close()
        k.wait()
        assert seen == months
    jansson = statistics.median(float(subprocess.run([os.path.join(tmp, "jparse"), path], capture_output=True, check=True).stdout)
                                for _ in range(runs)) * MONTH
    return {"monthRequestMs": statistics.median(single), "samplesPerSecond": statistics.median(rates),
            "janssonSamplesPerSecond": jansson, "vsJansson": statistics.median(rates) / jansson,
            "requestBytes": len(lines[0])}


def median_of(results):
    """The median of each figure over runs, with the runs kept (ratios inside a run are computed first)."""
    keys = [k for k, v in results[0].items() if isinstance(v, (int, float)) and v is not None]
    return {k: statistics.median(r[k] for r in results) for k in keys} | {"runs": results}


def round_trips(tmp, count, runs):
    info = os.path.join(tmp, "rtt-info.jsonl")
    with open(info, "w") as f:
        for i in range(count):
            f.write('{"jsonrpc":"2.0","id":%d,"method":"kernel.info"}\n' % i)
    # Requests go round 50 users, so no user passes the default per-user limit (1,000/s, bursts of 10,000)
    # however fast the kernel answers.
    toks = [user_token(u) for u in range(50)]
    up = os.path.join(tmp, "rtt-upload.jsonl")
    with open(up, "w") as f:
        for u, tok in enumerate(toks):
            f.write(json.dumps({"jsonrpc": "2.0", "id": "c%d" % u, "method": "screentime.updateConnection", "params": {"auth": tok, "enabled": True}}) + "\n")
        for i in range(count):
            f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "screentime.upload",
                                "params": {"auth": toks[i % len(toks)], "date": "2025-01-%02d" % (1 + i % 28), "verifiedMinutes": i % 1441}},
                               separators=(",", ":")) + "\n")
    rtt = os.path.join(tmp, "rtt")

    def measure_once(requests, cmd, data_dir):
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        out = subprocess.run([rtt, requests, str(count // 10), "--"] + cmd, capture_output=True, check=True).stdout
        ns = [int(x) for x in out.split()]
        return {"p50Micros": percentile(ns, 0.5) / 1000, "p99Micros": percentile(ns, 0.99) / 1000, "p999Micros": percentile(ns, 0.999) / 1000}

    def measure(requests, cmd, data_dir=None):
        return median_of([measure_once(requests, cmd, data_dir) for _ in range(runs)])

    d1, d2 = os.path.join(tmp, "rtt-data-1"), os.path.join(tmp, "rtt-data-2")
    return {
        "kernel.info": measure(info, serve(d1, "--fsync", "never"), d1),
        "screentime.upload (fsync never)": measure(up, serve(d2, "--fsync", "never"), d2),
        "C echo (floor)": measure(info, [os.path.join(tmp, "echo")]),
    }


# ---------------------------------------------------------------- 3. start-up

def startup(tmp, runs):
    line = b'{"jsonrpc":"2.0","id":1,"method":"kernel.info"}\n'

    def timed(cmd, stdin=None, fresh=None):
        times = []
        for i in range(runs):
            if fresh:
                shutil.rmtree(fresh, ignore_errors=True)
            start = time.perf_counter()
            subprocess.run(cmd, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    empty = os.path.join(tmp, "startup-data")
    return {
        "healthkernel (empty data dir)": timed(serve(empty), line, fresh=empty),
        "healthkernel --memory-only": timed([HK, "serve", "--memory-only", "--jwt-secret", SECRET], line),
        "healthkernel version": timed([HK, "version"]),
        "sqlite3 :memory: 'select 1;'": timed(["sqlite3", ":memory:", "select 1;"]),
        "/bin/true": timed(["/bin/true"]),
    }


def libraries(tmp):
    """What a data-dir kernel has mapped once it answered, and what the binary names as NEEDED."""
    data = os.path.join(tmp, "libs-data")
    k = subprocess.Popen(serve(data), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    k.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"kernel.info"}\n')
    k.stdin.flush()
    k.stdout.readline()
    with open("/proc/%d/maps" % k.pid) as f:
        mapped = sorted({os.path.basename(l.split()[-1]) for l in f if ".so" in l.split()[-1]})
    peak = 0
    with open("/proc/%d/status" % k.pid) as f:
        peak = next((int(l.split()[1]) for l in f if l.startswith("VmHWM:")), 0)
    k.stdin.close()
    k.wait()
    needed = [l.split("[")[1].rstrip("]\n") for l in subprocess.run(["readelf", "-d", HK], capture_output=True, text=True).stdout.splitlines()
              if "(NEEDED)" in l]
    return {"mapped": mapped, "mappedCount": len(mapped), "needed": needed, "peakKiB": peak,
            "libpqOrLibcurlMapped": any(m.startswith(("libpq", "libcurl")) for m in mapped)}


def binary_size(tmp):
    """The release binary as built, and stripped as the Debian package ships it (objcopy --strip-all)."""
    stripped = os.path.join(tmp, "healthkernel-stripped")
    subprocess.run(["objcopy", "--strip-all", HK, stripped], check=True)
    return {"builtBytes": os.path.getsize(HK), "strippedBytes": os.path.getsize(stripped)}


# ---------------------------------------------------------------- 4. recovery and snapshot

def first_response_ms(data_dir, binary=None):
    start = time.perf_counter()
    k = subprocess.Popen(serve(data_dir, binary=binary), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    k.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"kernel.info"}\n')
    k.stdin.flush()
    k.stdout.readline()
    elapsed = (time.perf_counter() - start) * 1000
    return k, elapsed


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def recovery(tmp, n, users, snapshot_dir, runs):
    return median_of([recovery_once(tmp, n, users, snapshot_dir) for _ in range(runs)])


def restart_and_snapshot(data_dir, binary=None):
    """Restart from the snapshot a clean shutdown left, then one kernel.snapshot of everything."""
    k, restart_ms = first_response_ms(data_dir, binary)
    k.stdin.write(('{"jsonrpc":"2.0","id":2,"method":"kernel.snapshot","params":{"auth":"%s"}}\n' % SERVICE).encode())
    k.stdin.flush()
    reply = json.loads(k.stdout.readline())
    k.stdin.close()
    k.wait()
    return restart_ms, reply.get("result", {}).get("durationMs")


def baseline_comparison(tmp, snapshot_dir, baseline, runs):
    """Restart and snapshot times of this build and the baseline, alternating, on data each one wrote."""
    results = []
    for r in range(runs):
        mine = restart_and_snapshot(snapshot_dir)
        theirs = restart_and_snapshot(os.path.join(tmp, "hk-baseline"), baseline)
        results.append({"restartMs": mine[0], "baselineRestartMs": theirs[0], "snapshotMs": mine[1], "baselineSnapshotMs": theirs[1]})
    return median_of(results)


def recovery_once(tmp, n, users, snapshot_dir):
    out = {}
    # a. From the snapshot the clean shutdown of the throughput run wrote.
    k, out["restartFromSnapshotMs"] = first_response_ms(snapshot_dir)
    out["residentKiB"] = rss_kib(k.pid)
    snaps = [f for f in os.listdir(snapshot_dir) if f.startswith("snapshot-")]
    out["snapshotBytes"] = os.path.getsize(os.path.join(snapshot_dir, snaps[0])) if snaps else 0
    out["memoryToSnapshotRatio"] = out["residentKiB"] * 1024 / out["snapshotBytes"] if out["snapshotBytes"] else None
    # b. An explicit snapshot of everything, and latency while an automatic one runs in the background.
    k.stdin.write(('{"jsonrpc":"2.0","id":2,"method":"kernel.snapshot","params":{"auth":"%s"}}\n' % SERVICE).encode())
    k.stdin.flush()
    start = time.perf_counter()
    reply = json.loads(k.stdout.readline())
    out["snapshotWallMs"] = (time.perf_counter() - start) * 1000
    out["snapshotDurationMs"] = reply.get("result", {}).get("durationMs")
    k.stdin.close()
    k.wait()
    # Round trips with the C driver: kernel.info as usual, then the same right after an upload that
    # starts an automatic snapshot of every row in the background (--snapshot-every-records 1).
    count = 5000
    info = '{"jsonrpc":"2.0","id":%d,"method":"kernel.info"}\n'
    upload = json.dumps({"jsonrpc": "2.0", "id": "w", "method": "screentime.upload",
                         "params": {"auth": user_token(0), "date": "2025-06-01", "verifiedMinutes": 5}}) + "\n"
    normal_file, during_file = os.path.join(tmp, "snap-normal.jsonl"), os.path.join(tmp, "snap-during.jsonl")
    with open(normal_file, "w") as f:
        f.writelines([info % 0] + [info % i for i in range(count)])
    with open(during_file, "w") as f:
        f.writelines([upload] + [info % i for i in range(count)])

    def rtt_micros(requests, *extra):
        # The first request waits for recovery (and, in the second run, starts the snapshot): not counted.
        out = subprocess.run([os.path.join(tmp, "rtt"), requests, "1", "--"] + serve(snapshot_dir, *extra),
                             capture_output=True, check=True).stdout
        return [int(x) / 1000 for x in out.split()]

    base = rtt_micros(normal_file)
    during = rtt_micros(during_file, "--snapshot-every-records", "1")
    out["p99MicrosNormal"] = percentile(base, 0.99)
    out["p99MicrosDuringSnapshot"] = percentile(during, 0.99)
    out["p99Ratio"] = out["p99MicrosDuringSnapshot"] / out["p99MicrosNormal"]
    # c. From the log alone: ingest without snapshots, kill -9, restart.
    log_dir = os.path.join(tmp, "hk-log-only")
    shutil.rmtree(log_dir, ignore_errors=True)
    k, seen, _ = run_kernel_ingest(tmp, n, users, log_dir, ("--snapshot-every-records", "2000000000", "--snapshot-every-seconds", "0"))
    k.kill()
    k.wait()
    k, out["restartFromLogMs"] = first_response_ms(log_dir)
    out["logRecords"] = seen
    k.stdin.close()
    k.wait()
    return out


# ---------------------------------------------------------------- report

# ---------------------------------------------------------------- 6. mixed load

class Stream:
    """One JSON-RPC stream over a Unix socket: send lines, read answers by id."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")

    def send(self, messages):
        self.sock.sendall(b"".join(json.dumps(dict(jsonrpc="2.0", **m), separators=(",", ":")).encode() + b"\n" for m in messages))

    def answer(self):
        return json.loads(self.file.readline())

    def close(self):
        self.file.close()
        self.sock.close()


def sign_ins(prefix, count):
    return [{"id": "%s%d" % (prefix, i), "method": "auth.signIn", "params": {"email": "u%d@example.com" % i, "password": "password-%d" % i}}
            for i in range(count)]


UPLOAD_INTERVAL = 0.001  # seconds between uploads during a burst: a steady 1,000 uploads/s


def mixed_once(tmp, binary, accounts):
    """Sign-ins per second, and upload latency during a sign-in burst on the same stream (completion order)
    and on a second connection; `accounts` users sign in, each once per burst."""
    data_dir = os.path.join(tmp, "hk-mixed")
    shutil.rmtree(data_dir, ignore_errors=True)
    path = os.path.join(tmp, "mixed.sock")
    k = subprocess.Popen(serve(data_dir, "--fsync", "everysec", "--listen", "unix:" + path, binary=binary),
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        while not os.path.exists(path):
            time.sleep(0.01)
        a, b = Stream(path), Stream(path)
        # Completion order where the kernel has it (an older one answers -32601 and stays in read order).
        a.send([{"id": "o", "method": "kernel.setOrdering", "params": {"mode": "completion"}}])
        a.answer()
        a.send([{"id": "s%d" % i, "method": "auth.signUp", "params": {"email": "u%d@example.com" % i, "password": "password-%d" % i}}
                for i in range(accounts)])
        for _ in range(accounts):
            a.answer()
        upload_token = user_token(0)
        b.send([{"id": "c", "method": "screentime.updateConnection", "params": {"auth": upload_token, "enabled": True}}])
        b.answer()

        def pace(start, n):
            """Waits for upload n's turn (a steady UPLOAD_INTERVAL apart); returns the time it is sent."""
            due = start + n * UPLOAD_INTERVAL
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            return time.perf_counter()

        def burst_alone(stream):
            """Sign-ins per second with nothing else to do."""
            start = time.perf_counter()
            stream.send(sign_ins("k", accounts))
            for _ in range(accounts):
                stream.answer()
            return accounts / (time.perf_counter() - start)

        def upload(n):
            return [{"id": "u%d" % n, "method": "screentime.upload",
                     "params": {"auth": upload_token, "date": "2025-01-%02d" % (1 + n % 28), "verifiedMinutes": n % 600}}]

        def burst_same_stream(stream):
            """Pipelines a burst of sign-ins on `stream` and meanwhile uploads one at a time on it (send,
            read until its answer) until the last sign-in is answered: (sign-ins/s, latencies in us)."""
            start = time.perf_counter()
            stream.send(sign_ins("i", accounts))
            signed, latencies, n, elapsed = 0, [], 0, None
            while signed < accounts:
                n += 1
                sent = pace(start, n)
                stream.send(upload(n))
                while True:
                    reply = stream.answer()
                    if reply.get("id") == "u%d" % n:
                        break
                    signed += 1
                    if signed == accounts:
                        elapsed = time.perf_counter() - start
                latencies.append((time.perf_counter() - sent) * 1e6)
            return accounts / (elapsed or time.perf_counter() - start), latencies

        def burst_two_connections(stream, other):
            """The same with the uploads on another connection; a thread reads the sign-ins' answers."""
            finished, elapsed = threading.Event(), [0.0]
            start = time.perf_counter()
            stream.send(sign_ins("j", accounts))

            def read_sign_ins():
                for _ in range(accounts):
                    stream.answer()
                elapsed[0] = time.perf_counter() - start
                finished.set()

            reader = threading.Thread(target=read_sign_ins, daemon=True)
            reader.start()
            latencies, n = [], 0
            while not finished.is_set():
                n += 1
                sent = pace(start, n)
                other.send(upload(n))
                other.answer()
                latencies.append((time.perf_counter() - sent) * 1e6)
            reader.join()
            return accounts / elapsed[0], latencies

        alone_rate = burst_alone(a)
        same_rate, same_lat = burst_same_stream(a)
        two_rate, two_lat = burst_two_connections(a, b)
        a.close()
        b.close()
        return {"signInsPerSecond": alone_rate, "signInsPerSecondBesideUploads": min(same_rate, two_rate),
                "sameStreamUploadP99Micros": percentile(same_lat, 0.99), "sameStreamUploads": len(same_lat),
                "otherConnectionUploadP99Micros": percentile(two_lat, 0.99), "otherConnectionUploads": len(two_lat)}
    finally:
        k.stdin.close()
        k.wait()


def mixed_load(tmp, runs, baseline=None, accounts=100):
    """Sign-ins beside uploads, for this build and the baseline (median of `runs`)."""
    out = {}
    for name, binary in [("kernel", HK)] + ([("baseline", baseline)] if baseline else []):
        results = [mixed_once(tmp, binary, accounts) for _ in range(runs)]
        out[name] = {key: statistics.median([r[key] for r in results]) for key in results[0]}
    if baseline:
        out["signInsVsBaseline"] = out["kernel"]["signInsPerSecond"] / out["baseline"]["signInsPerSecond"]
    return out


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    mem = next((int(l.split()[1]) // 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    return {"cpu": cpu, "cores": os.cpu_count(), "memoryMiB": mem, "kernel": platform.release(),
            "redis": subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2],
            "sqlite": subprocess.run(["sqlite3", "--version"], capture_output=True, text=True).stdout.split()[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rtt", type=int, default=20_000)
    ap.add_argument("--baseline", help="another healthkernel binary to measure beside this build")
    args = ap.parse_args()
    ensure_tools()
    tmp = tempfile.mkdtemp(prefix="hk-bench-")
    try:
        compile_helpers(tmp)
        log(f"generating {args.requests} uploads for {args.users} users")
        write_inputs(tmp, args.requests, args.users)
        tp, snapshot_dir = throughput(tmp, args.requests, args.users, args.runs, args.baseline)
        tp["jansson_parse_only_lps"] = jansson_ceiling(tmp, args.runs)
        log("health ingest")
        health = health_ingest(tmp, args.runs)
        log("round trips")
        rt = round_trips(tmp, args.rtt, args.runs)
        log("start-up")
        st = startup(tmp, 20)
        log("libraries and size")
        libs, size = libraries(tmp), binary_size(tmp)
        log("recovery and snapshot")
        rc = recovery(tmp, args.requests, args.users, snapshot_dir, args.runs)
        log("mixed load: sign-ins beside uploads")
        mixed = mixed_load(tmp, args.runs, args.baseline)
        result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
                  "params": vars(args), "throughput": tp, "health": health, "roundTrip": rt, "startupMs": st, "recovery": rc, "mixed": mixed,
                  "libraries": libs, "binary": size}
        if args.baseline:
            log("baseline: restart and snapshot")
            result["baseline"] = baseline_comparison(tmp, snapshot_dir, args.baseline, args.runs)
        os.makedirs(os.path.join(BENCH, "results"), exist_ok=True)
        with open(os.path.join(BENCH, "results", "latest.json"), "w") as f:
            json.dump(result, f, indent=2)
        report(result)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(r):
    tp, rt, st, rc = r["throughput"], r["roundTrip"], r["startupMs"], r["recovery"]
    n = r["params"]["requests"]
    print(f"healthkernel benchmark, {r['date']}, {r['machine']['cores']} cores, {r['machine']['cpu']}")
    print(f"\n1. Upload throughput ({n:,} uploads, {r['params']['users']:,} users; median of {r['params']['runs']} runs)")
    print(f"   healthkernel (--fsync everysec)      {tp['kernel_rps']:>12,.0f} req/s")
    print(f"   redis {r['machine']['redis']} (AOF everysec, --pipe)  {tp['redis_rps']:>12,.0f} req/s   kernel/redis  {tp['vs_redis']:.2f}x  (target >= 1x)")
    print(f"   sqlite3 {r['machine']['sqlite']} (WAL, NORMAL)    {tp['sqlite_rps']:>12,.0f} req/s   kernel/sqlite {tp['vs_sqlite']:.2f}x  (target >= 4x)")
    if "jansson_parse_only_lps" in tp:
        print(f"   (jansson alone, parse only, one core: {tp['jansson_parse_only_lps']:,.0f} lines/s; the kernel parses on one core)")
    if "health" in r:
        h = r["health"]
        print(f"\n1b. HealthKit ingest (a month of minute heart rate per request: 44,640 samples, {h['requestBytes'] / 2**20:.1f} MiB)")
        print(f"   one month in one request (--fsync always)  {h['monthRequestMs']:>8.0f} ms   (target < 500)")
        print(f"   pipelined months (--fsync everysec)   {h['samplesPerSecond']:>12,.0f} samples/s   jansson alone {h['janssonSamplesPerSecond']:,.0f}/s = {h['vsJansson']:.2f}x (target >= 0.5x)")
    print(f"\n2. Round trip (one request, wait, next; median of {r['params']['runs']} runs)  p50 us    p99 us   p999 us")
    for name, v in rt.items():
        print(f"   {name:<40} {v['p50Micros']:>8.1f} {v['p99Micros']:>9.1f} {v['p999Micros']:>9.1f}")
    print("   (targets: p50 < 30 us, p99 < 100 us)")
    print("\n3. Start-up to first response (median of 20)")
    for name, v in st.items():
        print(f"   {name:<40} {v:>8.1f} ms")
    print("   (target: < 20 ms)")
    print(f"\n4. Recovery and snapshot ({n:,} uploads; median of {r['params']['runs']} runs, ratios computed run by run)")
    print(f"   restart from snapshot, first response    {rc['restartFromSnapshotMs']:>8.0f} ms   (target < 2000)")
    print(f"   restart from the log alone ({int(rc['logRecords']):,} records) {rc['restartFromLogMs']:>8.0f} ms")
    print(f"   snapshot (kernel.snapshot)               {rc['snapshotDurationMs']:>8} ms   (target < 2000)")
    print(f"   p99 kernel.info, normal / during snapshot {rc['p99MicrosNormal']:>7.0f} / {rc['p99MicrosDuringSnapshot']:.0f} us = {rc['p99Ratio']:.1f}x (target <= 3x)")
    ratio = rc["memoryToSnapshotRatio"]
    print(f"   resident memory / snapshot size          {rc['residentKiB'] / 1024:>8.0f} MiB / {rc['snapshotBytes'] / 2**20:.0f} MiB = {ratio:.1f}x (target <= 2x)")
    if "baseline" in r:
        b = r["baseline"]
        print(f"\n5. Against the baseline {r['params']['baseline']} (same runs; median)")
        print(f"   pipelined uploads     {tp['kernel_rps']:>10,.0f} req/s vs {tp['baseline_rps']:>10,.0f} req/s = {tp['vs_baseline']:.2f}x")
        print(f"   restart from snapshot {b['restartMs']:>10.0f} ms    vs {b['baselineRestartMs']:>10.0f} ms")
        print(f"   snapshot              {b['snapshotMs']:>10.0f} ms    vs {b['baselineSnapshotMs']:>10.0f} ms")
    if "mixed" in r:
        m = r["mixed"]
        k = m["kernel"]
        print("\n6. Mixed load: bursts of sign-ins (one scrypt hash each) beside a steady 1,000 uploads/s, each upload")
        print("   sent on its schedule and timed to its answer (median)")
        print(f"   sign-ins per second, a burst alone         {k['signInsPerSecond']:>8.1f}" +
              (f"   baseline {m['baseline']['signInsPerSecond']:.1f} = {m['signInsVsBaseline']:.2f}x (target >= 1.7x)" if "baseline" in m else ""))
        print(f"   sign-ins per second beside 1,000 uploads/s {k['signInsPerSecondBesideUploads']:>8.1f}" +
              (f"   baseline {m['baseline']['signInsPerSecondBesideUploads']:.1f}" if "baseline" in m else ""))
        print(f"   upload p99 during the burst, same stream   {k['sameStreamUploadP99Micros'] / 1000:>8.2f} ms ({k['sameStreamUploads']} uploads)" +
              (f"   baseline {m['baseline']['sameStreamUploadP99Micros'] / 1000:.1f} ms" if "baseline" in m else "") + "   (target < 5 ms)")
        print(f"   upload p99 during the burst, other socket  {k['otherConnectionUploadP99Micros'] / 1000:>8.2f} ms ({k['otherConnectionUploads']} uploads)" +
              (f"   baseline {m['baseline']['otherConnectionUploadP99Micros'] / 1000:.1f} ms" if "baseline" in m else "") + "   (target < 5 ms)")
    targets(r)
    print("\nwritten to Benchmarks/results/latest.json")


def targets(r):
    """Every target of issue "Performance, round 2", each beside its measure and ratio (ratios in this run)."""
    tp, st, rc, h, libs, size = r["throughput"], r["startupMs"], r["recovery"], r.get("health", {}), r["libraries"], r["binary"]
    rows = []

    def row(name, value, target, ok):
        rows.append((name, value, target, "met" if ok else "MISSED"))

    jansson = tp.get("jansson_parse_only_lps") or 0
    if jansson:
        v = tp["kernel_rps"] / jansson
        row("pipelined uploads / jansson one core", f"{tp['kernel_rps']:,.0f} / {jansson:,.0f} = {v:.2f}x", ">= 1.2x", v >= 1.2)
    row("pipelined uploads / sqlite3", f"{tp['kernel_rps']:,.0f} / {tp['sqlite_rps']:,.0f} = {tp['vs_sqlite']:.2f}x", ">= 2x", tp["vs_sqlite"] >= 2)
    sq, tr = st["sqlite3 :memory: 'select 1;'"], st["/bin/true"]
    v = st["healthkernel (empty data dir)"] / sq
    row("start-up, empty data dir / sqlite3 :memory:", f"{st['healthkernel (empty data dir)']:.1f} / {sq:.1f} ms = {v:.1f}x", "<= 3x", v <= 3)
    v = st["healthkernel version"] / tr
    row("healthkernel version / /bin/true", f"{st['healthkernel version']:.1f} / {tr:.1f} ms = {v:.1f}x", "<= 5x", v <= 5)
    row("libraries a data-dir kernel maps", f"{libs['mappedCount']} ({len(libs['needed'])} NEEDED); libpq/libcurl: "
        + ("mapped" if libs["libpqOrLibcurlMapped"] else "not mapped (dlopen on first use)"), "neither libpq nor libcurl", not libs["libpqOrLibcurlMapped"])
    if h:
        row("one month of minute heart rate, one request", f"{h['monthRequestMs']:.0f} ms", "< 500 ms", h["monthRequestMs"] < 500)
    records = int(rc["logRecords"])
    row(f"restart from the log alone ({records:,} records)", f"{rc['restartFromLogMs']:.0f} ms", "< 2000 ms" + ("" if records >= 1_000_000 else " at 1,000,000"),
        rc["restartFromLogMs"] < 2000)
    ratio = rc["residentKiB"] * 1024 / max(rc["snapshotBytes"], 1)
    row("resident memory / snapshot, uploads", f"{ratio:.1f}x", "<= 2x", ratio <= 2)
    history = os.path.join(BENCH, "results", "history-latest.json")
    if os.path.exists(history):
        with open(history) as f:
            hist = json.load(f)
        b = hist.get("residentBytesPerSample")
        if b is not None:
            row(f"resident bytes per sample, {hist.get('months', '?')} months (history.py, {hist.get('date', '?')[:10]})", f"{b:.0f} B", "<= 200 B", b <= 200)
    mb = size["strippedBytes"] / 1e6
    row("binary, stripped as the package ships it", f"{mb:.1f} MB (as built {size['builtBytes'] / 1e6:.1f} MB)", "< 30 MB", mb < 30)
    print("\n7. Targets of \"Performance, round 2\" (this run)")
    for name, value, target, verdict in rows:
        print(f"   {name:<52} {value:<44} {target:<26} {verdict}")


if __name__ == "__main__":
    main()
