#!/usr/bin/env python3
"""healthkernel on PostgreSQL: the same uploads into the in-memory store and into PostgreSQL, beside two
floors measured on the same throwaway server in the same run, then two kernels on one database.

  F1  a plain libpq program (Benchmarks/pgfloor.c) sending the same writes an upload makes (the user's
      lock, its feed counter, one row upsert) in pipeline mode, one transaction per request;
  F2  the same with one transaction per 100 requests: what the server can do at best on this machine.

Rows: one kernel (memory with --fsync always, and PostgreSQL) against F1 and F2; two kernels on disjoint
users against one; two kernels on the same 100 users (rewards.earn, exact totals checked, retries from
kernel.info); health.ingest of a month in memory and on PostgreSQL. The server runs with fsync and
synchronous_commit on: every answered write is durable in both stores. Medians of --runs runs.

Usage: python3 Benchmarks/postgres.py [--requests N] [--users U] [--runs R]
Writes Benchmarks/results/postgres-latest.json.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the shared helpers: tokens, inputs, the release build)

ROOT, BENCH, HK, SECRET, log = bench.ROOT, bench.BENCH, bench.HK, bench.SECRET, bench.log


def start_server(tmp):
    d = os.path.join(tmp, "pg")
    os.chmod(tmp, 0o755)  # the server runs as the postgres user, which must reach its folder
    url = subprocess.run([os.path.join(ROOT, "scripts", "pg-server"), "start", d], check=True, capture_output=True, text=True,
                         env=dict(os.environ, HK_PG_FSYNC="on")).stdout.strip()
    return d, url


def pg_args(tmp, url, schema):
    cfg = os.path.join(tmp, "config-%s.json" % schema)
    with open(cfg, "w") as f:
        json.dump({"store": {"url": url, "schema": schema}}, f)
    return [HK, "serve", "--config", cfg, "--jwt-secret", SECRET, "--log-level", "error"]


def memory_args(data_dir):
    shutil.rmtree(data_dir, ignore_errors=True)
    return [HK, "serve", "--data-dir", data_dir, "--fsync", "always", "--jwt-secret", SECRET, "--log-level", "error"]


def pipe(args, path, expected):
    """Starts a kernel, waits for its first answer (start-up and migrations are not timed), then streams
    the lines of `path` into it; returns (seconds until `expected` answers, the last line)."""
    k = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    k.stdin.write(b'{"jsonrpc":"2.0","id":"ready","method":"kernel.info"}\n')
    k.stdin.flush()
    k.stdout.readline()

    def feed():
        with open(path, "rb") as f:
            shutil.copyfileobj(f, k.stdin, 1 << 20)
        k.stdin.close()
    start = time.perf_counter()
    writer = threading.Thread(target=feed)
    writer.start()
    data = b""
    seen = 0
    while seen < expected:
        chunk = k.stdout.read1(1 << 20)
        if not chunk:
            break
        seen += chunk.count(b"\n")
        data = (data + chunk)[-65536:]
    elapsed = time.perf_counter() - start
    writer.join()
    k.stdout.close()
    k.wait()
    assert seen == expected, f"{args[1:3]} answered {seen} of {expected}"
    return elapsed, data.rstrip(b"\n").rsplit(b"\n", 1)[-1]


def together(jobs):
    """Runs each (args, path, expected) at once; returns their (seconds, last line)."""
    out = [None] * len(jobs)

    def one(i):
        out[i] = pipe(*jobs[i])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def line(id, method, params):
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}, separators=(",", ":")) + "\n"


def write_split(tmp, n, users):
    """The uploads of even users and of odd users, each with its users' connections."""
    tokens = [bench.user_token(u) for u in range(users)]
    paths = [os.path.join(tmp, "half-%d.jsonl" % h) for h in (0, 1)]
    files = [open(p, "w") for p in paths]
    counts = [0, 0]
    for u in range(users):
        files[u % 2].write(line("c%d" % u, "screentime.updateConnection", {"auth": tokens[u], "enabled": True}))
        counts[u % 2] += 1
    for i, (u, date, minutes, raw) in enumerate(bench.uploads(n, users)):
        files[u % 2].write(line(i, "screentime.upload", {"auth": tokens[u], "date": date, "verifiedMinutes": minutes, "raw": raw}))
        counts[u % 2] += 1
    for f in files:
        f.close()
    return paths, counts


def write_earns(tmp, n, users=100):
    """`n` rewards.earn per kernel over the same `users`, keys unique, 1 XP each; and all 2n for one kernel."""
    tokens = [bench.user_token(u) for u in range(users)]
    paths = [os.path.join(tmp, "earn-%s.jsonl" % k) for k in ("a", "b", "all")]
    files = [open(p, "w") for p in paths]
    for k, f in enumerate(files[:2]):
        for i in range(n):
            f.write(line(i, "rewards.earn", {"auth": tokens[i % users], "xp": 1, "reason": "bench", "key": "%d-%d" % (k, i)}))
        f.write(line("info", "kernel.info", {}))
    for i in range(2 * n):
        files[2].write(line(i, "rewards.earn", {"auth": tokens[i % users], "xp": 1, "reason": "bench", "key": "%d-%d" % (i % 2, i // 2)}))
    for f in files:
        f.close()
    return paths, tokens


def balances(args, tokens):
    k = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out, _ = k.communicate("".join(line(u, "rewards.balance", {"auth": t}) for u, t in enumerate(tokens)).encode())
    return [json.loads(l)["result"]["xp"] for l in out.splitlines()]


def month_ms(args, counter=None):
    """Milliseconds a month of heart rate takes in one request (the kernel started first); with `counter`
    (a function), also how much it moved during the request."""
    k = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    k.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"kernel.info"}\n')
    k.stdin.flush()
    k.stdout.readline()
    counted = counter() if counter else 0
    start = time.perf_counter()
    k.stdin.write(bench.health_month(1, 1).encode() + b"\n")
    k.stdin.flush()
    answer = json.loads(k.stdout.readline())
    ms = (time.perf_counter() - start) * 1000
    assert answer["result"]["accepted"]["samples"] == bench.MONTH, answer
    if counter:
        counted = counter() - counted
    k.stdin.close()
    k.wait()
    return (ms, counted) if counter else ms


def one_run(tmp, url, n, users, r):
    res = {}
    expected = n + users
    uploads = os.path.join(tmp, "kernel.jsonl")
    res["memoryReqPerSec"] = expected / pipe(memory_args(os.path.join(tmp, "mem-%d" % r)), uploads, expected)[0]
    res["postgresReqPerSec"] = expected / pipe(pg_args(tmp, url, "up%d" % r), uploads, expected)[0]
    floor = os.path.join(tmp, "pgfloor")
    res["f1ReqPerSec"] = n / float(subprocess.run([floor, url, str(n), str(users), "1"], check=True, capture_output=True, text=True).stdout)
    res["f2ReqPerSec"] = n / float(subprocess.run([floor, url, str(n), str(users), "100"], check=True, capture_output=True, text=True).stdout)
    res["vsF1"] = res["postgresReqPerSec"] / res["f1ReqPerSec"]
    res["vsF2"] = res["postgresReqPerSec"] / res["f2ReqPerSec"]

    paths, counts = write_split(tmp, n, users)
    pair = together([(pg_args(tmp, url, "disjoint%d" % r), paths[h], counts[h]) for h in (0, 1)])
    res["twoDisjointReqPerSec"] = expected / max(s for s, _ in pair)
    res["twoDisjointVsOne"] = res["twoDisjointReqPerSec"] / res["postgresReqPerSec"]

    m = n // 2
    earn_paths, tokens = write_earns(tmp, m)
    alone, _ = pipe(pg_args(tmp, url, "earnone%d" % r), earn_paths[2], 2 * m)
    res["oneKernelEarnsPerSec"] = 2 * m / alone
    args = pg_args(tmp, url, "same%d" % r)
    pair = together([(args, earn_paths[k], m + 1) for k in (0, 1)])
    res["twoSameUsersEarnsPerSec"] = 2 * m / max(s for s, _ in pair)
    res["twoSameUsersVsOne"] = res["twoSameUsersEarnsPerSec"] / res["oneKernelEarnsPerSec"]
    res["retries"] = sum(json.loads(last)["result"]["requests"]["retries"] for _, last in pair)
    errors = sum(json.loads(last)["result"]["requests"]["errors"] for _, last in pair)
    got = balances(args, tokens)
    want = [2 * (m // 100 + (1 if u < m % 100 else 0)) for u in range(100)]
    res["exactTotals"] = got == want and errors == 0
    assert res["exactTotals"], f"balances off: {sum(got)} of {2 * m}, {errors} errors"

    res["monthMemoryMs"] = month_ms(memory_args(os.path.join(tmp, "month-%d" % r)))
    res["monthPostgresMs"] = month_ms(pg_args(tmp, url, "month%d" % r))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    bench.ensure_tools()
    tmp = tempfile.mkdtemp(prefix="hk-pgbench-")
    subprocess.run(["gcc", "-O2", "-o", os.path.join(tmp, "pgfloor"), os.path.join(BENCH, "pgfloor.c"),
                    "-I/usr/include/postgresql", "-lpq"], check=True)
    bench.write_inputs(tmp, a.requests, a.users)
    pg_dir, url = start_server(tmp)
    try:
        runs = []
        for r in range(a.runs):
            log(f"run {r + 1}/{a.runs}")
            runs.append(one_run(tmp, url, a.requests, a.users, r))
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "pg-server"), "stop", pg_dir])
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if not isinstance(runs[0][k], bool)}
    med["exactTotals"] = all(r["exactTotals"] for r in runs)
    out = {"machine": bench.machine(), "requests": a.requests, "users": a.users, "median": med, "runs": runs}
    with open(os.path.join(BENCH, "results", "postgres-latest.json"), "w") as f:
        json.dump(out, f, indent=1)
    rows = [
        ("uploads, in memory (--fsync always)", "%.0f req/s" % med["memoryReqPerSec"], ""),
        ("uploads, one kernel on PostgreSQL", "%.0f req/s" % med["postgresReqPerSec"], ""),
        ("F1: libpq, a transaction per request", "%.0f req/s" % med["f1ReqPerSec"], "kernel %.2fx (target >= 1x)" % med["vsF1"]),
        ("F2: libpq, a transaction per 100", "%.0f req/s" % med["f2ReqPerSec"], "kernel %.2fx (target >= 0.5x)" % med["vsF2"]),
        ("two kernels, disjoint users", "%.0f req/s" % med["twoDisjointReqPerSec"], "%.2fx one kernel (target >= 0.9x)" % med["twoDisjointVsOne"]),
        ("rewards.earn, one kernel, 100 users", "%.0f req/s" % med["oneKernelEarnsPerSec"], ""),
        ("two kernels, the same 100 users", "%.0f req/s" % med["twoSameUsersEarnsPerSec"],
         "%.2fx one kernel (target >= 0.5x), %d retries, totals %s" % (med["twoSameUsersVsOne"], med["retries"],
                                                                         "exact" if med["exactTotals"] else "WRONG")),
        ("health.ingest of a month, in memory", "%.0f ms" % med["monthMemoryMs"], ""),
        ("health.ingest of a month, PostgreSQL", "%.0f ms" % med["monthPostgresMs"], "%.1fx memory" % (med["monthPostgresMs"] / med["monthMemoryMs"])),
    ]
    print("%-42s %14s  %s" % ("", "median", ""))
    for name, value, note in rows:
        print("%-42s %14s  %s" % (name, value, note))


if __name__ == "__main__":
    main()
