#!/usr/bin/env python3
"""Soak: millions of mixed requests across every domain for a pool of users, on one kernel, watching
for what only shows over time: memory that keeps growing, descriptors that leak, latency that drifts.

The mix is a steady state, so a healthy kernel's memory levels off: each user's keys come from a fixed
pool (30 Screen Time days, 50 HealthKit sample UUIDs whose values change, 30 session ids, 30 idempotency
keys), and every write overwrites or replays what an earlier one wrote. Per user, in turn:
screentime.upload, health.ingest (5 samples), sessions.record, rewards.earn, and the reads
subscriptions.status, sync.changes, health.summary, sessions.stats, rewards.balance and kernel.info.
Requests are pipelined with at most --inflight unanswered; each is timed from its send to its answer.
The data dir store snapshots as it does in production (every 100,000 records); PostgreSQL runs with
fsync on.

Every --window requests (default 1,000,000) it prints: requests per second, p50 and p99 latency in the
window, the kernel's resident memory and its open descriptors. The target (issue "Reliability tooling"):
memory within 10% of its value at 2 million requests, descriptors flat, p99 steady.

Usage: python3 Benchmarks/soak.py [--requests N] [--users U] [--store memory|postgres|both] [--window W]
Writes Benchmarks/results/soak-latest.json.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, threading, time, uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import postgres  # noqa: E402

HK, SECRET, log = bench.HK, bench.SECRET, bench.log
USER_CYCLE = ["screentime.upload", "health.ingest", "sessions.record", "rewards.earn", "subscriptions.status",
              "sync.changes", "health.summary", "sessions.stats", "rewards.balance", "kernel.info"]


def request(i, users, tokens):
    """Request i of the mix: its user, then the method in the user's turn."""
    u = i % users
    turn = (i // users) % len(USER_CYCLE)
    lap = i // (users * len(USER_CYCLE))
    method = USER_CYCLE[turn]
    auth = tokens[u]
    day = "2026-10-%02d" % (1 + lap % 30)
    if method == "screentime.upload":
        params = {"auth": auth, "date": day, "verifiedMinutes": 30 + lap % 200}
    elif method == "health.ingest":
        samples = []
        for k in range(5):
            n = (lap * 5 + k) % 50
            samples.append({"uuid": str(uuid.UUID(int=(u << 64) | n, version=4)), "type": "HKQuantityTypeIdentifierStepCount",
                            "value": 100 + lap % 97, "unit": "count", "start": "2026-10-%02dT%02d:00:00Z" % (1 + n % 30, n % 24),
                            "end": "2026-10-%02dT%02d:10:00Z" % (1 + n % 30, n % 24)})
        params = {"auth": auth, "timezone": "UTC", "samples": samples}
    elif method == "sessions.record":
        k = lap % 30
        params = {"auth": auth, "clientSessionId": "soak-%d" % k, "startTime": "2026-10-%02dT07:00:00Z" % (1 + k), "durationSeconds": 600}
    elif method == "rewards.earn":
        k = lap % 30
        params = {"auth": auth, "xp": 10, "key": "soak-%d" % k, "reason": "soak"}
    elif method == "sync.changes":
        params = {"auth": auth, "limit": 50}
    elif method == "health.summary":
        params = {"auth": auth, "from": "2026-10-01", "to": "2026-10-07"}
    elif method == "kernel.info":
        params = {}
    else:
        params = {"auth": auth}
    return method, params


def rss_and_fds(pid):
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return bench.rss_kib(pid), fds


def soak(args_kernel, n, users, window, inflight, label):
    tokens = [bench.user_token(u) for u in range(users)]
    k = subprocess.Popen(args_kernel, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # Enable every user's Screen Time connection first (not timed).
    for u in range(users):
        k.stdin.write(postgres.line("c%d" % u, "screentime.updateConnection", {"auth": tokens[u], "enabled": True}).encode())
    k.stdin.flush()
    for _ in range(users):
        k.stdout.readline()
    sent = {}
    lock = threading.Condition()
    state = {"outstanding": 0, "errors": 0, "error_sample": None}
    windows = []

    def writer():
        for i in range(n):
            method, params = request(i, users, tokens)
            data = postgres.line(i, method, params).encode()
            with lock:
                while state["outstanding"] >= inflight:
                    lock.wait()
                state["outstanding"] += 1
                sent[i] = time.perf_counter()
            k.stdin.write(data)
            if state["outstanding"] >= inflight // 2:
                k.stdin.flush()
        k.stdin.flush()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    latencies = []
    by_method = {}  # method -> latencies over the whole run, to say which requests make the tail
    started = window_started = time.perf_counter()
    answered = 0
    while answered < n:
        line = k.stdout.readline()
        if not line:
            break
        now = time.perf_counter()
        answer = json.loads(line)
        i = answer.get("id")
        with lock:
            at = sent.pop(i, None)
            state["outstanding"] -= 1
            lock.notify()
        if at is not None:
            latencies.append(now - at)
            by_method.setdefault(USER_CYCLE[(i // users) % len(USER_CYCLE)], []).append(now - at)
        if "error" in answer and answer["error"]["code"] in (-32603, -32050):
            state["errors"] += 1
            state["error_sample"] = state["error_sample"] or answer["error"]
        answered += 1
        if answered % window == 0:
            latencies.sort()
            rss, fds = rss_and_fds(k.pid)
            w = {"requests": answered, "rps": round(window / (now - window_started)),
                 "p50Ms": round(latencies[len(latencies) // 2] * 1000, 3), "p99Ms": round(latencies[len(latencies) * 99 // 100] * 1000, 3),
                 "rssMiB": round(rss / 1024, 1), "fds": fds}
            windows.append(w)
            log(f"{label}: {answered:>10,} requests  {w['rps']:>7,}/s  p50 {w['p50Ms']:.2f} ms  p99 {w['p99Ms']:.2f} ms  "
                f"RSS {w['rssMiB']:.0f} MiB  fds {fds}")
            latencies = []
            window_started = now
    t.join()
    k.stdin.close()
    k.wait()
    total = time.perf_counter() - started
    methods = {}
    for method, values in sorted(by_method.items()):
        values.sort()
        methods[method] = {"p50Ms": round(values[len(values) // 2] * 1000, 3), "p99Ms": round(values[len(values) * 99 // 100] * 1000, 3)}
    log(f"{label}: p50 / p99 by method: " + ", ".join(f"{m} {v['p50Ms']:.1f}/{v['p99Ms']:.1f} ms" for m, v in methods.items()))
    result = {"store": label, "requests": answered, "seconds": round(total, 1), "windows": windows, "byMethod": methods,
              "internalOrStorageErrors": state["errors"], "errorSample": state["error_sample"]}
    at2m = next((w for w in windows if w["requests"] >= 2 * window and w["requests"] >= min(2_000_000, n)), windows[min(1, len(windows) - 1)] if windows else None)
    if windows and at2m:
        growth = windows[-1]["rssMiB"] / at2m["rssMiB"] - 1
        result["rssGrowthAfterWarmup"] = round(growth, 3)
        result["fdsGrowth"] = windows[-1]["fds"] - windows[0]["fds"]
        log(f"{label}: memory {at2m['rssMiB']:.0f} MiB at {at2m['requests']:,} -> {windows[-1]['rssMiB']:.0f} MiB at the end "
            f"({growth:+.1%}; target within 10%), descriptors {windows[0]['fds']} -> {windows[-1]['fds']}, "
            f"p99 {min(w['p99Ms'] for w in windows):.2f}..{max(w['p99Ms'] for w in windows):.2f} ms, "
            f"{state['errors']} internal or storage errors")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--store", choices=["memory", "postgres", "both"], default="both")
    ap.add_argument("--window", type=int, default=1_000_000)
    ap.add_argument("--inflight", type=int, default=200)
    ap.add_argument("--ordering", choices=["read", "completion"], default="read",
                    help="the kernel's answer order (serve --ordering): read keeps request order, so one slow request holds up the answers behind it")
    args = ap.parse_args()
    bench.ensure_tools()
    tmp = tempfile.mkdtemp(prefix="hk-soak-")
    results = []
    try:
        if args.store in ("memory", "both"):
            data = os.path.join(tmp, "data")
            results.append(soak([HK, "serve", "--data-dir", data, "--fsync", "everysec", "--jwt-secret", SECRET, "--log-level", "error",
                                 "--ordering", args.ordering],
                                args.requests, args.users, args.window, args.inflight, "data dir"))
        if args.store in ("postgres", "both"):
            pg_dir, url = postgres.start_server(tmp)
            try:
                results.append(soak(postgres.pg_args(tmp, url, "soak") + ["--ordering", args.ordering], args.requests, args.users,
                                    args.window, args.inflight, "PostgreSQL"))
            finally:
                subprocess.run([os.path.join(bench.ROOT, "scripts", "pg-server"), "stop", pg_dir], check=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": bench.machine(), "params": vars(args), "results": results}
    os.makedirs(os.path.join(bench.BENCH, "results"), exist_ok=True)
    with open(os.path.join(bench.BENCH, "results", "soak-latest.json"), "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
