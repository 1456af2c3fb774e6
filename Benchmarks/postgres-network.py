#!/usr/bin/env python3
"""healthkernel on PostgreSQL across a network (#54): the kernel reaches the server through a delay proxy
that holds every chunk DELAY/2 each way and counts the kernel's database round trips exactly (a round trip
starts with each client-to-server chunk that follows server-to-client data on its connection), at 0 ms
(direct TCP, no proxy), 1 ms and 5 ms. Beside each row: its target (the issue's), and the plain libpq
floor of the same statements through the same proxy (Benchmarks/pgfloor.c, 100 uploads a transaction).

Rows: pipelined screentime.upload on one stream; the same from 8 socket connections; one upload at a
time (p50, round trips each); sessions.list one at a time (p50, round trips each); a month of heart rate
in one request (ms, round trips); rewards.earn on the same 100 users from one kernel, then from two kernels
at once (each user's balance checked exact). The server runs with fsync and synchronous_commit on, on TCP at
localhost (scripts/pg-server start-tls, TLS off here: sslmode=disable).

Usage: python3 Benchmarks/postgres-network.py [--requests N] [--delays 0,1,5]
Writes Benchmarks/results/postgres-network-latest.json.
"""
import argparse, json, os, socket, statistics, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import postgres  # noqa: E402  (pipe, line, pg_args)

ROOT, BENCH, HK, SECRET, log = bench.ROOT, bench.BENCH, bench.HK, bench.SECRET, bench.log


class DelayProxy:
    """A TCP proxy on 127.0.0.1 to `target` (host, port): each chunk is forwarded `one_way` seconds after
    it arrived, in order; `round_trips` counts, over every connection, client chunks that follow server
    data (or open the connection)."""

    def __init__(self, target, one_way):
        self.target, self.one_way = target, one_way
        self.lock = threading.Lock()
        self.round_trips = 0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            server = socket.create_connection(self.target)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            last = ["server"]  # which side spoke last on this connection
            for src, dst, side in ((client, server, "client"), (server, client, "server")):
                threading.Thread(target=self.pump, args=(src, dst, side, last), daemon=True).start()

    def pump(self, src, dst, side, last):
        line = []  # (due, bytes), in arrival order
        cv = threading.Condition()
        closed = [False]

        def deliver():
            while True:
                with cv:
                    while not line and not closed[0]:
                        cv.wait()
                    if not line:
                        break
                    due, data = line[0]
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                with cv:
                    line.pop(0)
                try:
                    dst.sendall(data)
                except OSError:
                    break
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        threading.Thread(target=deliver, daemon=True).start()
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                with cv:
                    closed[0] = True
                    cv.notify()
                return
            with self.lock:
                if side == "client" and last[0] == "server":
                    self.round_trips += 1
                last[0] = side
            with cv:
                line.append((time.perf_counter() + self.one_way, data))
                cv.notify()

    def count(self):
        with self.lock:
            return self.round_trips


def kernel_args(tmp, url, schema, *extra):
    return postgres.pg_args(tmp, url, schema) + list(extra)


def uploads_file(tmp, n, users, name):
    tokens = [bench.user_token(u) for u in range(users)]
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        for u in range(users):
            f.write(postgres.line("c%d" % u, "screentime.updateConnection", {"auth": tokens[u], "enabled": True}))
        for i, (u, date, minutes, raw) in enumerate(bench.uploads(n, users)):
            f.write(postgres.line(i, "screentime.upload", {"auth": tokens[u], "date": date, "verifiedMinutes": minutes, "raw": raw}))
    return path, n + users


def sockets_rate(tmp, url, schema, path, expected, connections=8):
    """The lines of `path` spread over `connections` socket connections of one kernel; requests a second."""
    sock = os.path.join(tmp, "hk-%s.sock" % schema)
    k = subprocess.Popen(kernel_args(tmp, url, schema, "--listen", "unix:" + sock, "--no-stdin"))
    try:
        deadline = time.time() + 30
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.05)
        with open(path, "rb") as f:
            lines = f.read().splitlines(keepends=True)
        # A user's lines stay on one connection (so each user's order holds): by the user's token.
        shares = [[] for _ in range(connections)]
        for l in lines:
            auth = json.loads(l)["params"]["auth"]
            shares[hash(auth) % connections].append(l)
        conns = []
        for _ in range(connections):
            c = socket.socket(socket.AF_UNIX)
            c.connect(sock)
            conns.append(c)
        done = [0] * connections

        def run(i):
            c = conns[i]
            threading.Thread(target=lambda: c.sendall(b"".join(shares[i])), daemon=True).start()
            seen = 0
            while seen < len(shares[i]):
                data = c.recv(1 << 20)
                if not data:
                    break
                seen += data.count(b"\n")
            done[i] = seen
        start = time.perf_counter()
        threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        assert sum(done) == expected, f"answered {sum(done)} of {expected}"
        return expected / elapsed
    finally:
        k.terminate()
        k.wait()


def one_at_a_time(tmp, url, schema, proxy, count, method):
    """p50 ms and round trips each of `count` requests sent one at a time (each after the last answer)."""
    k = subprocess.Popen(kernel_args(tmp, url, schema), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    token = bench.user_token(7)
    k.stdin.write(postgres.line("c", "screentime.updateConnection", {"auth": token, "enabled": True}).encode())
    k.stdin.flush()
    k.stdout.readline()
    times = []
    before = proxy.count() if proxy else 0
    for i, (_, date, minutes, raw) in enumerate(bench.uploads(count, 1)):
        params = {"auth": token, "date": date, "verifiedMinutes": minutes, "raw": raw} if method == "screentime.upload" else {"auth": token}
        start = time.perf_counter()
        k.stdin.write(postgres.line(i, method, params).encode())
        k.stdin.flush()
        answer = json.loads(k.stdout.readline())
        times.append((time.perf_counter() - start) * 1000)
        assert "result" in answer, answer
    trips = ((proxy.count() - before) / count) if proxy else None
    k.stdin.close()
    k.wait()
    return statistics.median(times), trips


def month(tmp, url, schema, proxy):
    if proxy:
        return postgres.month_ms(kernel_args(tmp, url, schema), counter=proxy.count)
    return postgres.month_ms(kernel_args(tmp, url, schema)), None


def two_kernels(tmp, url, tag, m):
    """`rewards.earn` on the same 100 users: one kernel alone takes 2m, then two kernels m each at once;
    every user's balance must come out exact (each earn has its own idempotency key)."""
    earn_dir = os.path.join(tmp, "earn-" + tag)
    os.makedirs(earn_dir)
    paths, tokens = postgres.write_earns(earn_dir, m)
    alone, _ = postgres.pipe(kernel_args(tmp, url, "earnone" + tag), paths[2], 2 * m)
    args = kernel_args(tmp, url, "earntwo" + tag)
    pair = postgres.together([(args, paths[k], m + 1) for k in (0, 1)])
    errors = sum(json.loads(last)["result"]["requests"]["errors"] for _, last in pair)
    got = postgres.balances(args, tokens)
    want = [2 * (m // 100 + (1 if u < m % 100 else 0)) for u in range(100)]
    two = 2 * m / max(s for s, _ in pair)
    return {"oneKernelEarnsPerSec": 2 * m / alone, "twoKernelsEarnsPerSec": two, "twoKernelsVsOne": two / (2 * m / alone),
            "twoKernelsExactTotals": got == want and errors == 0}


def at_delay(tmp, port, delay_ms, n, users, floor):
    proxy = DelayProxy(("127.0.0.1", port), delay_ms / 2000) if delay_ms > 0 else None
    url = "postgresql://hk@127.0.0.1:%d/hk?sslmode=disable" % (proxy.port if proxy else port)
    tag = "d%d" % delay_ms
    res = {"delayMs": delay_ms}
    path, expected = uploads_file(tmp, n, users, "up-%s.jsonl" % tag)
    before = proxy.count() if proxy else 0
    seconds, _ = postgres.pipe(kernel_args(tmp, url, "up" + tag), path, expected + 0)
    res["pipelinedUploadsPerSec"] = expected / seconds
    # Round trips include the kernel's start (connect, migrate): a fixed few, against thousands of uploads.
    res["roundTripsPerUpload"] = ((proxy.count() - before) / expected) if proxy else None
    res["eightSocketsUploadsPerSec"] = sockets_rate(tmp, url, "sock" + tag, path, expected)
    res["oneUploadP50Ms"], res["oneUploadRoundTrips"] = one_at_a_time(tmp, url, "one" + tag, proxy, 100, "screentime.upload")
    res["sessionsListP50Ms"], res["sessionsListRoundTrips"] = one_at_a_time(tmp, url, "list" + tag, proxy, 100, "sessions.list")
    res["monthMs"], res["monthRoundTrips"] = month(tmp, url, "month" + tag, proxy)
    res.update(two_kernels(tmp, url, tag, max(200, n // 3)))
    seconds = float(subprocess.run([floor, url, str(n), str(users), "100"], check=True, capture_output=True, text=True).stdout)
    res["floorUploadsPerSec"] = n / seconds
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--delays", default="0,1,5")
    a = ap.parse_args()
    bench.ensure_tools()
    tmp = tempfile.mkdtemp(prefix="hk-pgnet-")
    os.chmod(tmp, 0o755)
    floor = os.path.join(tmp, "pgfloor")
    subprocess.run(["gcc", "-O2", "-o", floor, os.path.join(BENCH, "pgfloor.c"), "-I/usr/include/postgresql", "-lpq"], check=True)
    pg_dir = os.path.join(tmp, "pg")
    subprocess.run([os.path.join(ROOT, "scripts", "pg-server"), "start-tls", pg_dir], check=True, capture_output=True,
                   env=dict(os.environ, HK_PG_FSYNC="on"))
    port = int(open(os.path.join(pg_dir, "port")).read())
    try:
        rows = []
        for d in [int(x) for x in a.delays.split(",")]:
            n = a.requests if d <= 1 else max(300, a.requests // 5)
            rows.append(at_delay(tmp, port, d, n, a.users, floor))
            log(json.dumps(rows[-1]))
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "pg-server"), "stop", pg_dir])
    by = {r["delayMs"]: r for r in rows}
    direct = by.get(0, {}).get("pipelinedUploadsPerSec")
    targets = [
        ("pipelined uploads, one stream (/s)", "pipelinedUploadsPerSec", ">= 3,700 and >= 0.8x direct TCP"),
        ("round trips per pipelined upload", "roundTripsPerUpload", "<= 0.05"),
        ("8 socket connections (/s)", "eightSocketsUploadsPerSec", ">= one stream's rate"),
        ("one upload at a time, p50 ms", "oneUploadP50Ms", ""),
        ("one upload at a time, round trips", "oneUploadRoundTrips", "<= 2"),
        ("sessions.list one at a time, p50 ms", "sessionsListP50Ms", ""),
        ("sessions.list one at a time, round trips", "sessionsListRoundTrips", "1"),
        ("a month in one request, ms", "monthMs", "<= 1.2x direct TCP"),
        ("a month in one request, round trips", "monthRoundTrips", "<= 25"),
        ("plain libpq floor, 100 uploads a transaction (/s)", "floorUploadsPerSec", ""),
        ("rewards.earn, one kernel (/s)", "oneKernelEarnsPerSec", ""),
        ("two kernels on the same 100 users (/s)", "twoKernelsEarnsPerSec", ""),
        ("two kernels / one kernel", "twoKernelsVsOne", ">= 1x"),
        ("two kernels: exact totals (1 = yes)", "twoKernelsExactTotals", "exact"),
    ]
    print("%-52s %s  target at 1 ms" % ("measure", "  ".join("%10s" % ("%d ms" % r["delayMs"]) for r in rows)))
    for label, key, target in targets:
        cells = ["%10s" % ("-" if r.get(key) is None else "%.2f" % r[key] if r[key] < 100 else "%.0f" % r[key]) for r in rows]
        print("%-52s %s  %s" % (label, "  ".join(cells), target))
    if direct and 1 in by:
        print("pipelined uploads at 1 ms / direct TCP: %.2fx" % (by[1]["pipelinedUploadsPerSec"] / direct))
    out = os.path.join(BENCH, "results", "postgres-network-latest.json")
    with open(out, "w") as f:
        json.dump({"requests": a.requests, "users": a.users, "rows": rows}, f, indent=1)
    log("wrote " + out)


if __name__ == "__main__":
    main()
